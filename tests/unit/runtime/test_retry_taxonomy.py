"""Which failures are retried (runtime/faults.py ``failure_kind``, runtime/attempts.py ``retry_allowed``), the same
on the inline, local, simulated and Ray backends: a dead worker, a timeout, a lost store key and an injected fault
up to ``max_retries``; an exception of the function's own code at most ``retry_exceptions`` times (default 0), the
failure then naming that first traceback; a fatal error never."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nimbus.config.simulation import DurationModel, SimulationConfig
from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.data.store import KeyNotFound
from nimbus.errors import EnvContractError, FunctionFailed, StoreUnavailable
from nimbus.runtime.base import FunctionSpec, Resources
from nimbus.runtime.faults import APPLICATION, FATAL, INFRASTRUCTURE, InjectedFault, failure_kind

SCRIPTED = "nimbus.runtime.builtin:scripted"


def scripted(*, max_retries: int = 3, retry_exceptions: int = 0) -> FunctionSpec:
    return FunctionSpec(name="scripted", entrypoint=SCRIPTED, resources=Resources(cpus=0.5, memory_mb=256),
                        timeout_s=30.0, max_retries=max_retries, retry_exceptions=retry_exceptions)


def make_inline(ledger: Ledger):
    from nimbus.runtime.inline import InlineRuntime
    return InlineRuntime(ledger=ledger)


def make_local(ledger: Ledger):
    from nimbus.runtime.local import LocalRuntime
    return LocalRuntime(ledger=ledger, capacity_cpus=2)


def make_simulated(ledger: Ledger):
    from nimbus.runtime.simulated import SimulatedRuntime
    config = SimulationConfig(default=DurationModel(median_s=1.0, cold_start_s=0.0))
    return SimulatedRuntime(ledger=ledger, simulation=config, capacity_cpus=None, max_workers=None,
                            keep_alive_s=600.0, seed=0)


def make_ray(ledger: Ledger):
    from nimbus.runtime.ray_backend import RayRuntime
    return RayRuntime(ledger=ledger, address="local")


BACKENDS = [pytest.param(make_inline, id="inline"), pytest.param(make_local, id="local"),
            pytest.param(make_simulated, id="simulated"), pytest.param(make_ray, id="ray", marks=pytest.mark.ray)]


@pytest.fixture(params=BACKENDS)
def runtime(request, tmp_path: Path) -> Iterator[tuple[object, Ledger]]:
    if request.param is make_ray:
        request.getfixturevalue("ray_local")
    ledger = Ledger(path=tmp_path / "ledger.jsonl")
    backend = request.param(ledger)
    yield backend, ledger
    backend.shutdown()


def run(runtime, spec: FunctionSpec, script: list[str]) -> Message:
    return runtime.invoke(spec=spec, request=Message(header={"script": script})).result(timeout=120)


def attempts(ledger: Ledger) -> list[tuple[str, str | None]]:
    return [(r.outcome, r.error_type) for r in ledger.records() if r.outcome != "prewarm"]


def test_an_exception_of_the_function_s_code_is_not_retried_and_names_its_first_traceback(runtime) -> None:
    backend, ledger = runtime
    with pytest.raises(FunctionFailed) as info:
        run(backend, scripted(max_retries=3), ["raise", "ok"])
    assert info.value.attempts == 1 and info.value.error_type == "RuntimeError" and info.value.kind == APPLICATION
    message = str(info.value)
    assert message.splitlines()[0].endswith("RuntimeError: scripted exception of the function's code on attempt 1")
    assert "builtin.py" in message.splitlines()[1]                    # where it was raised
    assert "retry_exceptions=0" in message
    assert attempts(ledger) == [("error", "RuntimeError")]


def test_retry_exceptions_allows_that_many_and_the_failure_shows_the_first(runtime) -> None:
    backend, ledger = runtime
    assert run(backend, scripted(retry_exceptions=1), ["raise", "ok"]).header["_attempt"] == 2
    with pytest.raises(FunctionFailed) as info:
        run(backend, scripted(retry_exceptions=1), ["raise", "raise", "ok"])
    assert info.value.attempts == 2 and "on attempt 1" in info.value.traceback_text
    assert "on attempt 2" not in info.value.traceback_text


def test_injected_faults_and_lost_keys_are_retried_up_to_max_retries(runtime) -> None:
    backend, ledger = runtime
    result = run(backend, scripted(max_retries=3), ["error", "lost", "error", "ok"])
    assert result.header["_attempt"] == 4
    assert attempts(ledger) == [("error", "InjectedFault"), ("error", "KeyNotFound"), ("error", "InjectedFault"),
                                ("ok", None)]
    with pytest.raises(FunctionFailed) as info:
        run(backend, scripted(max_retries=1), ["error", "error", "ok"])
    assert info.value.attempts == 2 and info.value.kind == INFRASTRUCTURE and "max_retries=1" in str(info.value)


def test_platform_failures_do_not_spend_the_code_s_retries(runtime) -> None:
    """An injected fault, then the code's exception: the fault was retried, the exception is not."""
    backend, ledger = runtime
    with pytest.raises(FunctionFailed) as info:
        run(backend, scripted(max_retries=3), ["error", "raise", "ok"])
    assert info.value.attempts == 2 and info.value.error_type == "RuntimeError"
    assert attempts(ledger) == [("error", "InjectedFault"), ("error", "RuntimeError")]


def test_a_fatal_error_is_never_retried(runtime) -> None:
    backend, _ = runtime
    with pytest.raises(FunctionFailed) as info:
        run(backend, scripted(max_retries=3, retry_exceptions=3), ["fatal", "ok"])
    assert info.value.attempts == 1 and info.value.kind == FATAL


def test_a_killed_worker_is_retried_but_the_code_s_exception_is_not(tmp_path: Path) -> None:
    ledger = Ledger(path=tmp_path / "ledger.jsonl")
    backend = make_local(ledger)
    try:
        assert run(backend, scripted(max_retries=2), ["crash", "crash", "ok"]).header["_attempt"] == 3
        with pytest.raises(FunctionFailed):
            run(backend, scripted(max_retries=2), ["crash", "raise", "ok"])
        assert [o for o, _ in attempts(ledger)] == ["worker_died", "worker_died", "ok", "worker_died", "error"]
    finally:
        backend.shutdown()


class RayLikeError(Exception):
    pass


RayLikeError.__module__ = "ray.exceptions"


class RaylibError(Exception):
    """From a package whose name only starts with "ray": the function's own dependency, not Ray."""


RaylibError.__module__ = "raylib.core"


@pytest.mark.parametrize(("exc", "kind"), [
    (InjectedFault("x"), INFRASTRUCTURE), (KeyNotFound("weights/main/3"), INFRASTRUCTURE),
    (RayLikeError("object lost"), INFRASTRUCTURE), (RaylibError("x"), APPLICATION), (ValueError("x"), APPLICATION),
    (TimeoutError("rows did not arrive"), INFRASTRUCTURE), (ConnectionResetError("peer"), INFRASTRUCTURE),
    (FileNotFoundError("x"), APPLICATION), (KeyError("x"), APPLICATION),
    (RuntimeError("x"), APPLICATION), (EnvContractError("x"), FATAL), (StoreUnavailable("x"), FATAL)])
def test_failure_kinds(exc: BaseException, kind: str) -> None:
    assert failure_kind(exc) == kind
