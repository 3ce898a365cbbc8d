"""A driver-side step that raises while a worker's result is recorded (the ledger on a full disk) fails the open
invocations at once with that error: the driver never waits for a result that was lost. The same on Ray, where the
monitor thread that handles Ray's callbacks records the result."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionSpec, Resources
from nimbus.runtime.local import LocalRuntime

FULL = Path("/dev/full")   # every write fails with ENOSPC, as on a full disk


@pytest.mark.skipif(not os.path.exists(FULL), reason="needs /dev/full")
def test_a_ledger_that_cannot_be_written_fails_the_invocation_promptly() -> None:
    runtime = LocalRuntime(ledger=Ledger(path=FULL), capacity_cpus=1, max_workers=1)
    try:
        _both_fail_with_enospc(runtime=runtime, resources=Resources(cpus=1))
    finally:
        runtime.shutdown()


@pytest.mark.ray
@pytest.mark.skipif(not os.path.exists(FULL), reason="needs /dev/full")
def test_on_ray_a_ledger_that_cannot_be_written_fails_the_invocation_promptly(ray_local) -> None:  # noqa: F811
    from nimbus.runtime.ray_backend import RayRuntime

    runtime = RayRuntime(ledger=Ledger(path=FULL), address="local", max_workers=1)
    try:
        _both_fail_with_enospc(runtime=runtime, resources=Resources(cpus=0.5, memory_mb=256))
    finally:
        runtime.shutdown()


def _both_fail_with_enospc(*, runtime, resources: Resources) -> None:
    spec = FunctionSpec(name="counter", entrypoint="nimbus.runtime.builtin:counter", resources=resources,
                        timeout_s=10.0, max_retries=3, kind="actor")
    first = runtime.invoke(spec=spec, request=Message())
    queued = runtime.invoke(spec=spec, request=Message())   # waits for the only worker: never dispatched
    started = time.monotonic()
    for future in (first, queued):
        with pytest.raises(OSError) as raised:
            future.result(timeout=30)
        assert raised.value.errno == errno.ENOSPC
    assert time.monotonic() - started < 30
