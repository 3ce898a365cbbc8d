"""Upper bounds of config values that have no natural one, in one place (the models cite them).
"""

from __future__ import annotations

MAX_RETRIES = 100
"""Retries of one function attempt (``functions.<role>.max_retries``, ``actors.function.max_retries``,
``learner.function.max_retries``) and of one Redis command (``store.max_retries``). Ray's default is 3; a
fault that 100 retries did not get past is not transient, and a larger number only delays the stop (with
its back-off) by hours."""
