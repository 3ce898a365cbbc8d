"""Sticky routing: a request's ``_affinity`` key returns to the worker that served it last."""

from __future__ import annotations

from nimbus.data.codec import Message
from nimbus.runtime.base import FunctionSpec, Resources

SPEC = FunctionSpec(name="who", entrypoint="nimbus.runtime.builtin:introspect", resources=Resources(cpus=1),
                    timeout_s=30, max_retries=0)


def test_affinity_keys_stick_to_their_workers(make_runtime) -> None:
    runtime, _ = make_runtime(capacity_cpus=2)
    runtime.prewarm(spec=SPEC, count=2, wait_s=30)
    served: dict[str, set[str]] = {"a": set(), "b": set()}
    for _ in range(6):
        futures = {key: runtime.invoke(spec=SPEC, request=Message(header={"_affinity": key})) for key in ("b", "a")}
        for key, future in futures.items():
            served[key].add(future.result(timeout=30).header["worker_id"])
    assert len(served["a"]) == 1 and len(served["b"]) == 1 and served["a"] != served["b"]


def test_accepted_results_name_their_invocation_and_attempt(make_runtime) -> None:
    runtime, ledger = make_runtime(capacity_cpus=1)
    result = runtime.invoke(spec=SPEC, request=Message()).result(timeout=30)
    assert result.header["_attempt"] == 1
    assert result.header["_invocation_id"] in {r.invocation_id for r in ledger.records()}
