"""A pre-warm asking for more workers than the pool has room for (a scaler's 8 actors on a 2-core machine, whose
default pool holds 4 workers) starts what fits and says so once, at info level: a shipped config gives no warning."""

from __future__ import annotations

import logging

import pytest

from nimbus.runtime.base import FunctionSpec, Resources

ECHO = FunctionSpec(name="echo", entrypoint="nimbus.runtime.builtin:echo", resources=Resources(cpus=1), kind="actor")


def _said(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and "workers started" in r.getMessage()]


def test_a_local_prewarm_past_max_workers_starts_what_fits_and_says_so_once(make_runtime, caplog) -> None:
    runtime, ledger = make_runtime(capacity_cpus=1, max_workers=2)
    with caplog.at_level(logging.DEBUG):
        runtime.prewarm(spec=ECHO, count=7, wait_s=30)
        runtime.prewarm(spec=ECHO, count=3, wait_s=30)   # the trigger fires again next round
    assert [r.levelname for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert _said(caplog, logging.INFO) == ["prewarm echo: 2 of 7 workers started, no room for more (max_workers=2); "
                                           "the others start cold when invoked"]
    assert len(_said(caplog, logging.DEBUG)) == 1
    assert [r.outcome for r in ledger.records()] == ["prewarm", "prewarm"]

