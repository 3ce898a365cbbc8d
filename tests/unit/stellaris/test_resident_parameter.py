"""The resident parameter function (issue 26 Build, stellaris/resident.py, resident_log.py): called in-process on
real ShmStores with real PPO gradients. What it reads and writes per aggregation, and a lost state rebuilt."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest
import torch

from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.data.codec import Message, encoded_size
from nimbus.data.store import ShmStore
from nimbus.models.weights import optim_key, weights_key
from nimbus.runtime.base import FunctionContext
from nimbus.stellaris import parameter as parameter_module
from nimbus.stellaris.learner import GradientRequest, gradient_learner_function
from nimbus.stellaris.parameter import ParameterRequest, parameter_function
from nimbus.stellaris.resident_log import ResidentLog
from tests.unit.function_helpers import cartpole_spaces, ctx, on_store, publish
from tests.unit.stellaris.test_stellaris_functions import ROWS, batch

AGGREGATIONS = 5


def algo() -> PPO:
    """Two hidden layers: 12 parameter tensors, so a loaded optimizer's key order ("0", "1", "10", ...) differs
    from the parameter order."""
    return PPO(config=PPOConfig(hidden_sizes=(8, 8), minibatch_size=ROWS, lr=0.01))


def grad_request(store: ShmStore, *, version: int, key: str) -> Message:
    request = GradientRequest(**{**model_fields(), "policy_version": version, "batch_key": "batch/main/r0",
                                 "grad_key": key, "truncation": "paper"})
    return on_store(request.to_task_message(positions=np.arange(ROWS)), store)


class CountingStore:
    """The function's store, counting the bytes of what it gets and puts (a unit-test wrapper)."""

    def __init__(self, inner: ShmStore) -> None:
        self.inner, self.read_bytes, self.written_bytes = inner, 0, 0

    def get(self, *, key: str) -> Message:
        message = self.inner.get(key=key)
        self.read_bytes += encoded_size(message)
        return message

    def put(self, *, key: str, message: Message, writer: str | None = None) -> None:
        self.written_bytes += encoded_size(message)
        self.inner.put(key=key, message=message, writer=writer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def fresh_store() -> Iterator[ShmStore]:
    store = ShmStore(namespace=uuid.uuid4().hex[:8], owner=True)
    torch.manual_seed(0)
    model = algo().make_model(spaces=cartpole_spaces())
    publish(store, model=model, version=0)
    batch(store, model)
    return store


@pytest.fixture
def stores():
    made = []
    yield lambda: made.append(fresh_store()) or made[-1]
    for store in made:
        store.close()


def model_fields() -> dict[str, Any]:
    return dict(vars(GradientRequest(
        env_id="CartPole-v1", env_kwargs={}, algo=algo().config.model_dump(mode="json"), policy="main",
        policy_version=0, batch_key="", grad_key="", peer_versions=(), truncation="none", rho=1.0, progress=0.0,
        device="cpu", torch_threads=1)))


def run(store: ShmStore, *, resident: bool, lose_at: tuple[int, ...] = (), monkeypatch=None) -> list[dict]:
    """AGGREGATIONS aggregations of two gradients each (computed at the newest version), on one warm worker
    (one cache); at the versions in ``lose_at`` the worker's cache is dropped first (an evicted worker).
    Per aggregation: the parameter function's header and the bytes it read and wrote."""
    counting = CountingStore(store)
    if monkeypatch is not None:
        monkeypatch.setattr(parameter_module, "function_store", lambda *, header: counting)
    log, cache, rows = ResidentLog(run_key="run", anchor=0), {}, []
    for version in range(AGGREGATIONS):
        keys = [f"grad/main/{version}.{i}" for i in range(2)]
        for key in keys:
            gradient_learner_function(context=ctx("g"), request=grad_request(store, version=version, key=key))
        if version in lose_at:
            cache = {}
        fields = log.request_fields(version=version) if resident else {"has_optimizer_state": version > 0}
        request = ParameterRequest(model=model_fields(), policy_version=version, keys=keys, scales=[1.0, 0.5],
                                   separate_steps=False, progress=0.0, **fields)
        counting.read_bytes = counting.written_bytes = 0
        context = FunctionContext(worker_id="w0", function="parameter", invocation_id=uuid.uuid4().hex, attempt=1,
                                  cache=cache)
        header = parameter_function(context=context, request=on_store(request.to_message(), store)).header
        rows.append({**header, "read": counting.read_bytes, "written": counting.written_bytes})
        if resident:
            log.done_with(request=request, published=header["published"])
    return rows


def weights_bytes(store: ShmStore, version: int) -> dict[str, bytes]:
    arrays = store.get(key=weights_key(policy="main", version=version)).arrays
    return {k: np.asarray(v).tobytes() for k, v in arrays.items()}


def test_a_resident_aggregation_reads_only_gradients_and_writes_only_weights(stores, monkeypatch):
    """Per aggregation after the first, resident: the bytes read are the two gradients' and the bytes written the
    weights' (no optimizer state, which for Adam is twice the weights); not resident (the code before), every
    aggregation wrote weights and optimizer state. Fails on the code before: no resident request existed."""
    plain = run(stores(), resident=False, monkeypatch=monkeypatch)
    store = stores()
    resident = run(store, resident=True, monkeypatch=monkeypatch)
    gradient_bytes = 2 * encoded_size(store.get(key="grad/main/0.0"))
    weights = encoded_size(store.get(key=weights_key(policy="main", version=1)))
    for before, after in zip(plain[1:], resident[1:]):
        assert after["published"] and not after["rebuilt"]
        assert after["written"] == weights, after
        assert before["written"] > 2.5 * weights, before   # weights + Adam's two moments
        assert after["read"] == gradient_bytes, after
    assert optim_key(policy="main", version=3) not in store.keys(prefix="optim/")


def test_a_lost_resident_state_is_rebuilt_and_the_weights_are_the_same_bits(stores):
    """The worker's cache dropped before aggregations 2 and 4 (an evicted worker, a retry elsewhere): it rebuilds
    from version 0 (the anchor) and the replay log, and every version it publishes is bitwise the version the
    uninterrupted run and the non-resident run (full state from the Store) publish."""
    kept, lost, plain = stores(), stores(), stores()
    run(kept, resident=True)
    rows = run(lost, resident=True, lose_at=(2, 4))
    run(plain, resident=False)
    assert [row["rebuilt"] for row in rows] == [True, False, True, False, True]   # the first call is cold too
    for version in range(1, AGGREGATIONS + 1):
        assert weights_bytes(lost, version) == weights_bytes(kept, version) == weights_bytes(plain, version), version


def test_an_export_puts_the_optimizer_state_the_non_resident_run_published(stores):
    """A checkpoint's export (resident_log.ResidentLog.export) puts the optimizer state of version 3, then of
    version 5, each rebuilt on a cold worker (the second from version 3's exported state, in the key order a
    loaded optimizer has): the same bytes, key order included, as the state every non-resident aggregation
    published."""
    resident, plain = stores(), stores()
    log = ResidentLog(run_key="run", anchor=0)
    run(resident, resident=True)
    for version in range(AGGREGATIONS):   # the driver's log of that run
        log.published(keys=[f"grad/main/{version}.{i}" for i in range(2)], recompute=[], scales=[1.0, 0.5],
                      separate_steps=False, progress=0.0, full_state=False)
    run(plain, resident=False)
    headers = []

    def invoke(message: Message) -> Future:
        result = parameter_function(context=ctx("parameter"), request=on_store(message, resident))
        headers.append(result.header)
        future: Future = Future()
        future.set_result(result)
        return future

    log.entries = log.entries[:3]
    assert len(log.export(version=3, model=model_fields(), store=resident, invoke=invoke, parameter_busy=False)) == 6
    for version in (3, 4):
        log.published(keys=[f"grad/main/{version}.{i}" for i in range(2)], recompute=[], scales=[1.0, 0.5],
                      separate_steps=False, progress=0.0, full_state=False)
    assert len(log.export(version=5, model=model_fields(), store=resident, invoke=invoke, parameter_busy=True)) == 0
    assert [h["rebuilt"] for h in headers] == [True, True] and log.anchor == 3   # a call in flight: anchor stays
    assert log.export(version=5, model=model_fields(), store=resident, invoke=invoke, parameter_busy=False) == [] \
        and len(headers) == 2   # its optimizer state is in the Store now: nothing to export
    for version in (3, 5):
        got = resident.get(key=optim_key(policy="main", version=version))
        want = plain.get(key=optim_key(policy="main", version=version))
        assert got.header == want.header
        assert list(got.header["scalars"]) == list(want.header["scalars"])   # the order goes into a checkpoint's bytes
        assert {k: np.asarray(v).tobytes() for k, v in got.arrays.items()} == \
            {k: np.asarray(v).tobytes() for k, v in want.arrays.items()}
