"""VDN's joint update (issue 27 item 5, marless/team_learner.py): one optimizer step on the summed Q over all the
team's policies, however many policies the agents map to. Before, each policy's function stepped its own
parameters against the others' round-start networks (a block-coordinate step), exact only under full sharing."""

from __future__ import annotations

import copy
import zlib

import numpy as np
import pytest
import torch
from torch import nn

from nimbus.algos.multiagent.config import VDNConfig
from nimbus.algos.multiagent.vdn import VDN
from nimbus.data.store import ShmStore
from nimbus.marless.team_learner import team_value_function
from nimbus.marless.value_learner import team_post_key
from nimbus.models.weights import load_model, weights_key
from nimbus.roles.actor import derive_seed
from tests.unit.function_helpers import ctx, on_store
from tests.unit.marless.test_marless_value_learner import (
    AGENTS,
    OWN,
    SPACES,
    game_rows,
    load_policies,
    put_round,
    setup_policies,
    small,
    team_request,
)

SHARED = {"agent_0": "red", "agent_1": "red"}   # a policy_mapping name: one policy for both agents
STEPS = 3


@pytest.fixture(autouse=True)
def one_torch_thread() -> None:
    torch.set_num_threads(1)


def joint_rows(store: ShmStore) -> dict[str, torch.Tensor]:
    arrays = store.get(key=team_post_key(round=0)).arrays
    return {name: torch.as_tensor(np.array(value)) for name, value in arrays.items()}


def summed_loss(*, nets: dict[str, nn.Module], targets: dict[str, nn.Module], agent_policy: dict[str, str],
                batch: dict[str, torch.Tensor], config: VDNConfig) -> torch.Tensor:
    """VDN written out: Q_tot = Σ_a Q_a(o_a, u_a), y = R + γ Σ_a (1 − d_a) max_u Q̄_a(o'_a, u), Huber(Q_tot, y)."""
    q_tot = sum(nets[agent_policy[a]].q(batch[f"{a}/obs"]).gather(1, batch[f"{a}/actions"].long()[:, None])[:, 0]
                for a in AGENTS)
    with torch.no_grad():
        y = batch["rewards"] + config.gamma * sum(
            (1.0 - batch[f"{a}/terminated"].float()) * targets[agent_policy[a]].q(batch[f"{a}/next_obs"]).max(1).values
            for a in AGENTS)
    return nn.functional.huber_loss(q_tot, y, delta=config.huber_delta)


def by_hand(*, store: ShmStore, algo: VDN, agent_policy: dict[str, str], joint: bool) -> dict[str, nn.Module]:
    """STEPS steps on the summed loss from version 0, on the rows the function samples. ``joint``: one Adam step of
    all the policies' parameters per step (VDN); else each policy alone against the others at version 0 (what
    nimbus did before: one function per policy)."""
    nets = load_policies(store=store, algo=algo, agent_policy={p: p for p in set(agent_policy.values())},
                         versions={p: 0 for p in agent_policy.values()})
    batch_all, config = joint_rows(store), algo.config
    generator = torch.Generator().manual_seed(derive_seed(7, zlib.crc32(b"team"), 0))
    indices = [torch.randint(batch_all["rewards"].shape[0], (config.batch_size,), generator=generator)
               for _ in range(STEPS)]
    groups = [sorted(nets)] if joint else [[p] for p in sorted(nets)]
    out = {}
    for trained in groups:
        current = {p: copy.deepcopy(net) for p, net in nets.items()}
        targets = {p: copy.deepcopy(net) for p, net in nets.items()}
        params = [param for p in trained for param in current[p].q.parameters()]
        optimizer = torch.optim.Adam(params, lr=config.lr)
        for index in indices:
            loss = summed_loss(nets=current, targets=targets, agent_policy=agent_policy, config=config,
                               batch={name: value[index] for name, value in batch_all.items()})
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
        out.update({p: current[p] for p in trained})
    return out


def published(*, store: ShmStore, algo: VDN, policy: str) -> nn.Module:
    model = algo.make_policy(spaces=SPACES)
    load_model(model=model, message=store.get(key=weights_key(policy=policy, version=1)))
    return model


def first_round(*, store: ShmStore, algo: VDN, agent_policy: dict[str, str], num_envs: int,
                seed: int) -> dict[str, int]:
    """Version 0 of every policy in the Store and round 0's game rows post-processed; returns the versions."""
    setup_policies(store=store, algo=algo, agent_policy=agent_policy)
    versions = {p: 0 for p in agent_policy.values()}
    policies = load_policies(store=store, algo=algo, agent_policy=agent_policy, versions=versions)
    put_round(store=store, algo=algo, round=0, agent_policy=agent_policy,
              rows=game_rows(policies=policies, algo=algo, num_envs=num_envs, rng=np.random.default_rng(seed)))
    return versions


def max_gap(a: nn.Module, b: nn.Module) -> float:
    return max(float((x - y).detach().abs().max()) for x, y in zip(a.q.parameters(), b.q.parameters(), strict=True))


@pytest.mark.parametrize("agent_policy", [OWN, SHARED], ids=["one-policy-per-agent", "one-shared-policy"])
def test_one_team_invocation_takes_joint_steps_on_the_summed_q(store: ShmStore, agent_policy: dict[str, str]) -> None:
    """Fails before the fix: each policy's function stepped alone (and there was no team function)."""
    algo = VDN(config=small(VDNConfig, gradient_steps=STEPS, batch_size=32, double_q=False, max_grad_norm=0.5,
                            target_update_period=100))
    versions = first_round(store=store, algo=algo, agent_policy=agent_policy, num_envs=8, seed=4)
    request = team_request(algo=algo, round=0, agent_policy=agent_policy, versions=versions,
                           replay_keys=[team_post_key(round=0)])
    result = team_value_function(context=ctx("policy"), request=on_store(request.to_message(), store))
    stats = result.header["policies"]
    assert sorted(stats) == sorted(versions) and {s["gradient_steps_run"] for s in stats.values()} == {STEPS}
    joint = by_hand(store=store, algo=algo, agent_policy=agent_policy, joint=True)
    for policy in versions:
        assert stats[policy]["policy_version"] == 1 and stats[policy]["grad_steps"] == STEPS
        assert max_gap(published(store=store, algo=algo, policy=policy), joint[policy]) < 1e-6
    if len(versions) > 1:   # the per-policy (block-coordinate) steps of before end elsewhere
        apart = by_hand(store=store, algo=algo, agent_policy=agent_policy, joint=False)
        assert max(max_gap(published(store=store, algo=algo, policy=p), apart[p]) for p in versions) > 1e-4


def test_the_first_step_is_the_gradient_of_the_summed_loss(store: ShmStore) -> None:
    """One step of plain SGD-sized Adam is hard to read; check the value and the gradient the step uses: the
    function's loss of step 1 is the summed loss at version 0, and its parameters moved along −sign(∂loss/∂θ)
    (Adam's first step) for every policy."""
    algo = VDN(config=small(VDNConfig, gradient_steps=1, batch_size=32, double_q=False, max_grad_norm=None,
                            lr=1e-3))
    versions = first_round(store=store, algo=algo, agent_policy=OWN, num_envs=8, seed=5)
    request = team_request(algo=algo, round=0, agent_policy=OWN, versions=versions,
                           replay_keys=[team_post_key(round=0)])
    result = team_value_function(context=ctx("policy"), request=on_store(request.to_message(), store))
    nets = load_policies(store=store, algo=algo, agent_policy={p: p for p in versions}, versions=versions)
    batch_all = joint_rows(store)
    generator = torch.Generator().manual_seed(derive_seed(7, zlib.crc32(b"team"), 0))
    index = torch.randint(batch_all["rewards"].shape[0], (32,), generator=generator)
    loss = summed_loss(nets=nets, targets=copy.deepcopy(nets), agent_policy=OWN, config=algo.config,
                       batch={name: value[index] for name, value in batch_all.items()})
    loss.backward()
    assert result.header["policies"]["p_agent_0"]["policy_loss"] == pytest.approx(float(loss.detach()), rel=1e-6)
    for policy, net in nets.items():
        after = published(store=store, algo=algo, policy=policy)
        for before, moved in zip(net.q.parameters(), after.q.parameters(), strict=True):
            step = (moved - before).detach()
            big = before.grad.abs() > 1e-5
            assert torch.allclose(step[big], -1e-3 * before.grad[big].sign(), atol=1e-5)


def test_the_probe_is_per_policy_on_the_joint_objective_only_when_asked(store: ShmStore) -> None:
    """Each policy's convexity is the Hessian of the joint TD objective w.r.t. its own parameters: two policies give
    two probes (different networks, different curvatures); none without ``probe``."""
    algo = VDN(config=small(VDNConfig, gradient_steps=2, batch_size=16))
    versions = first_round(store=store, algo=algo, agent_policy=OWN, num_envs=4, seed=6)
    plain = team_request(algo=algo, round=0, agent_policy=OWN, versions=versions, replay_keys=[team_post_key(round=0)])
    unprobed = team_value_function(context=ctx("policy"), request=on_store(plain.to_message(), store))
    assert all(np.isnan(s["convexity"]) and s["probe_rows"] == 0 for s in unprobed.header["policies"].values())
    probed_request = team_request(algo=algo, round=1, agent_policy=OWN, versions={p: 1 for p in versions},
                                  replay_keys=[team_post_key(round=0)])
    probed_request = type(probed_request)(**{**vars(probed_request), "probe": True})
    probed = team_value_function(context=ctx("policy"), request=on_store(probed_request.to_message(), store))
    stats = probed.header["policies"]
    assert all(s["probe_rows"] == 20 and np.isfinite(s["convexity"]) for s in stats.values())   # 4 envs × 5 steps
    assert stats["p_agent_0"]["extras"]["hessian_lambda_max"] != stats["p_agent_1"]["extras"]["hessian_lambda_max"]
