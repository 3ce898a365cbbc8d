"""No host read inside the multi-agent learners' gradient loops (IPPO/MAPPO's critic and policy, IQL, VDN and QMIX):
the rows are drawn on the learner's device, the non-finite guard is decided there (algos/step.py) and the statistics
are read once per update (marless/device_loop.py). Counted on the CPU with tests/host_reads.py: a learner function
makes the same number of host reads however many minibatches (or gradient steps) its update takes, and the loop
itself makes one."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from nimbus.algos.multiagent.config import IPPOConfig, IQLConfig, MAPPOConfig, QMIXConfig, VDNConfig
from nimbus.algos.multiagent.iql import IQL
from nimbus.algos.multiagent.qmix import QMIX
from nimbus.algos.multiagent.vdn import VDN
from nimbus.data.store import ShmStore
from nimbus.marless.actor import marless_actor_function
from nimbus.marless.learner import critic_function, policy_function, postprocess_function
from nimbus.marless.team_learner import team_value_function
from nimbus.marless.value_learner import team_post_key, value_policy_function
from tests.host_reads import count_host_reads, decide_on_the_device
from tests.unit.function_helpers import on_store
from tests.unit.marless.marless_harness import actor_request, assemble_batch, ctx, learner_request, put_version_zero
from tests.unit.marless.test_marless_value_learner import (
    OWN,
    game_rows,
    learner_request as value_request,
    load_policies,
    put_round,
    setup_policies,
    small,
    team_request,
)


@pytest.fixture(autouse=True)
def _deciding_on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted as an accelerator runs the update: the guard decided on the device (on the CPU it reads its flag)."""
    decide_on_the_device(monkeypatch)


SPREAD_AGENTS = ["agent_0", "agent_1", "agent_2"]


@pytest.fixture(autouse=True)
def one_torch_thread() -> None:
    torch.set_num_threads(1)


class _EveryAdam:
    """Stands for every Adam built while the fixture is active, for ``count_host_reads(optimizers=...)``: the
    learner functions build their optimizers inside, and a CPU Adam's reads of its host-side step counts (which
    never wait for a device) are counted apart from the host reads."""

    def __init__(self) -> None:
        self.built: list[torch.optim.Optimizer] = []

    @property
    def state(self) -> dict:
        return {id(p): s for optimizer in self.built for p, s in optimizer.state.items()}


@pytest.fixture
def adams(monkeypatch) -> _EveryAdam:
    every, original = _EveryAdam(), torch.optim.Adam.__init__

    def recording(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        every.built.append(self)

    monkeypatch.setattr(torch.optim.Adam, "__init__", recording)
    return every


def _fresh_store() -> ShmStore:
    return ShmStore(namespace=uuid.uuid4().hex[:8], owner=True)


def _ppo_reads(*, config: Any, minibatches: int, adams: _EveryAdam) -> dict[str, int]:
    """Host reads of one critic and one policy invocation of p_agent_0 on a simple_spread fragment."""
    algo = config(hidden_sizes=(16,), critic_hidden_sizes=(16,), num_epochs=2,
                  num_minibatches=minibatches).model_dump(mode="json")
    own = {agent: f"p_{agent}" for agent in SPREAD_AGENTS}
    store = _fresh_store()
    try:
        put_version_zero(store=store, algo=algo, env_id="mpe2:simple_spread_v3",
                         env_kwargs={"N": 3, "max_cycles": 25}, agent_policy=own)
        result = marless_actor_function(context=ctx("marless_actor"), request=actor_request(
            store=store, algo=algo, agent_policy=own, versions=dict.fromkeys(own.values(), 0), num_envs=2, steps=32))
        store.put(key="batch/p_agent_0/r0", message=assemble_batch(
            results=[result], agents=["agent_0"], all_agents=SPREAD_AGENTS, centralised=config is MAPPOConfig))
        request = learner_request(store=store, algo=algo, policy="p_agent_0", round_=0, agents={"agent_0": 0},
                                  all_agents=SPREAD_AGENTS, weights_version=0, critic_version=0)
        if config is MAPPOConfig:
            postprocess_function(context=ctx("postprocess"), request=request)
        cache: dict = {}
        counts = {}
        for name, function in (("critic", critic_function), ("policy", policy_function)):
            with count_host_reads(optimizers=[adams]) as reads:
                header = function(context=ctx(name, cache=cache), request=request).header
            counts[name] = reads.total
            assert header.get("nonfinite_steps", 0) == 0 and header.get("critic_nonfinite_steps", 0) == 0
        return counts
    finally:
        store.close()


@pytest.mark.parametrize("config", [IPPOConfig, MAPPOConfig])
def test_ppo_learners_read_the_host_as_often_for_8_minibatches_as_for_1(config, adams) -> None:
    few, many = (_ppo_reads(config=config, minibatches=n, adams=adams) for n in (1, 8))
    assert many == few, (few, many)


def _value_reads(*, algo_cls: Any, config_cls: Any, steps: int, adams: _EveryAdam) -> int:
    """Host reads of one IQL policy function (p_agent_0) or one VDN/QMIX team function on a round of the game."""
    algo = algo_cls(config=small(config_cls, gradient_steps=steps, batch_size=16, hidden_sizes=(8,),
                                 **({"mixing_embed_dim": 8, "hypernet_embed": 8} if config_cls is QMIXConfig else {})))
    store = _fresh_store()
    try:
        setup_policies(store=store, algo=algo, agent_policy=OWN)
        versions = {"p_agent_0": 0, "p_agent_1": 0}
        put_round(store=store, algo=algo, round=0, agent_policy=OWN, rows=game_rows(
            policies=load_policies(store=store, algo=algo, agent_policy=OWN, versions=versions), algo=algo,
            num_envs=8, rng=np.random.default_rng(0)))
        if algo.joint:
            request = team_request(algo=algo, round=0, agent_policy=OWN, versions=versions,
                                   replay_keys=[team_post_key(round=0)])
            function: Callable = team_value_function
        else:
            request = value_request(algo=algo, policy="p_agent_0", round=0, agent_policy=OWN, versions=versions,
                                    replay_keys=["batch/p_agent_0/r0"])
            function = value_policy_function
        with count_host_reads(optimizers=[adams]) as reads:
            header = function(context=ctx("policy"), request=on_store(request.to_message(), store)).header
        stats = header["policies"]["p_agent_0"] if algo.joint else header
        assert stats["gradient_steps_run"] == steps and stats["nonfinite_steps"] == 0
        return reads.total
    finally:
        store.close()


@pytest.mark.parametrize(("algo_cls", "config_cls"), [(IQL, IQLConfig), (VDN, VDNConfig), (QMIX, QMIXConfig)])
def test_value_learners_read_the_host_as_often_for_16_gradient_steps_as_for_2(algo_cls, config_cls, adams) -> None:
    few, many = (_value_reads(algo_cls=algo_cls, config_cls=config_cls, steps=n, adams=adams) for n in (2, 16))
    assert many == few, (few, many)


def test_the_loops_themselves_read_once(adams) -> None:
    """The gradient loop alone (statistics and guard), apart from loading and publishing: one read per update."""
    from nimbus.algos.step import guarded_step
    from nimbus.marless.device_loop import StepRows, host_draws

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    data, generator = torch.randn(64, 4), torch.Generator().manual_seed(0)
    with count_host_reads(optimizers=[adams]) as reads:
        rows = StepRows(keys=("loss",))
        for index in host_draws(draw=lambda: torch.randint(64, (8,), generator=generator), count=12,
                                device=data.device):
            loss = model(data[index]).pow(2).mean()
            outcome = guarded_step(optimizer=optimizer, params=list(model.parameters()), loss=loss, max_grad_norm=1.0)
            rows.add(row=loss.detach(), applied=outcome.finite)
        means, skipped = rows.read()
    assert reads.total == 1, reads.by_kind
    assert skipped == 0 and np.isfinite(means["loss"])
