"""Bounds that later parts of the system impose on config counts, checked when the config is read.

A count the config accepts must be one the run can carry out: each constant here is the limit of a part
that is built later (a buffer's rank table, a population's rank ranges), and the config models refuse a
larger value with its key path and this bound (exit 2), before any worker starts. The part itself reads
its limit from here, so the two cannot drift apart.
"""

from __future__ import annotations

MAX_ACTORS = 1024
"""Actor ranks a run's buffer keeps per-rank counters for (``Buffer.create(max_actors=...)``, run/build.py):
every actor count (``actors.scaling``'s num/min/max/initial actors, ``actors.preregister``, ``marless.i_max`` and
``marless.i_min``) is at most this."""

RANK_STRIDE = 1000
"""A population's member i has the actor ranks [i · RANK_STRIDE, (i + 1) · RANK_STRIDE) (its own env slots,
affinity keys and env seeds; pbt/population.py): with ``policies`` or ``pbt``, each member's actor count is
at most this."""

MAX_RETRIES = 100
"""Retries of one function attempt (``functions.<role>.max_retries``, ``actors.function.max_retries``,
``learner.function.max_retries``) and of one Redis command (``store.max_retries``). Ray's default is 3; a
fault that 100 retries did not get past is not transient, and a larger number only delays the stop (with
its back-off) by hours."""

MAX_SEED = 2**32 - 1
"""``seed``: the stellaris workflow seeds torch with seed × 1,000,003 + round, which must fit torch's
64-bit seed (a seed above ~9·10¹² overflows it mid-run); 32 bits is also what numpy's legacy generators
and many envs take."""

MAX_INLINE_BYTES = 32 << 20
"""``channel.inline_max_bytes``: a body up to this size travels inside its header frame, and the worker's
Outbox refuses more than half of the transport's frame limit (64 MiB, data/transport.py
DEFAULT_MAX_FRAME_BYTES; data/channel.py): beyond it every worker died at start-up."""

MAX_CONFIG_BYTES = 1 << 20
"""A config file (or one ``--set`` value) is at most 1 MiB of YAML; the shipped ones are under 2 KiB."""

MAX_CONFIG_VALUES = 100_000
"""Values (mappings, lists and scalars) a config file expands to, YAML aliases followed: a 542-byte alias
bomb in ``env.kwargs`` expands to ~4·10⁸ and grew past 1.9 GB before this bound (config/yaml_loader.py)."""
