"""Agents that finish early (issue 27 fix 1): the actor's padding rows for an agent whose episode ended are masked
out of every loss and target, and reported per agent. The env (tests/unit/marless/early_env.py): ``short``
terminates at step 3 of 10, so 70 % of its rows are padding (last observation, action 0, log-prob 0, reward 0)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nimbus.algos.multiagent.config import IPPOConfig, MAPPOConfig, VDNConfig
from nimbus.algos.multiagent.vdn import VDN, vdn_q_tot
from nimbus.envs.spaces import EnvSpaces
from nimbus.marless.actor import marless_actor_function
from nimbus.marless.learner import critic_function, policy_function, postprocess_function
from nimbus.marless.team_learner import TeamObjective, TrainedNet
from nimbus.marless.team_rows import align_team_rows
from nimbus.marless.value_learner import join_replay
from tests.unit.marless.early_env import make_env
from tests.unit.marless.marless_harness import actor_request, assemble_batch, ctx, learner_request, put_version_zero

EARLY = "tests.unit.marless.early_env:make_env"
AGENTS = ["long", "short"]
OWN = {agent: f"p_{agent}" for agent in AGENTS}
SMALL = {"hidden_sizes": (16,), "critic_hidden_sizes": (16,), "num_epochs": 4, "num_minibatches": 2}
LIVE_PER_EPISODE = 3   # of 10
REPO = Path(__file__).resolve().parents[3]


def fragment(store, *, algo, num_envs=2, steps=10):
    put_version_zero(store=store, algo=algo, env_id=EARLY, env_kwargs={}, agent_policy=OWN)
    return marless_actor_function(context=ctx("marless_actor"), request=actor_request(
        store=store, algo=algo, agent_policy=OWN, versions=dict.fromkeys(OWN.values(), 0), num_envs=num_envs,
        steps=steps, env_id=EARLY, env_kwargs={}))


@pytest.mark.parametrize("config", [IPPOConfig, MAPPOConfig])
def test_ppo_learners_train_on_the_live_rows_only(store, config) -> None:
    """Without the mask the surrogate saw 14 filler rows of 20 whose log-prob 0 is no policy's (ratio ≈ 0.5):
    most of them clipped (clip fraction ≈ 0.7), and the critic fit their zero returns."""
    algo = config(**SMALL).model_dump(mode="json")
    result = fragment(store, algo=algo)
    alive = result.arrays["short/alive"].reshape(2, 10)
    assert alive[:, :LIVE_PER_EPISODE].all() and not alive[:, LIVE_PER_EPISODE:].any()
    assert result.arrays["long/alive"].all()
    batch = assemble_batch(results=[result], agents=["short"], all_agents=AGENTS, centralised=config is MAPPOConfig)
    store.put(key="batch/p_short/r0", message=batch)
    req = learner_request(store=store, algo=algo, policy="p_short", round_=0, agents={"short": 1},
                          all_agents=AGENTS, weights_version=0, critic_version=0, env_id=EARLY, env_kwargs={})
    if config is MAPPOConfig:
        postprocess_function(context=ctx("postprocess"), request=req)
    critic = critic_function(context=ctx("critic"), request=req).header
    adv = store.get(key="adv/p_short/r0").arrays
    policy = policy_function(context=ctx("policy"), request=req).header
    assert policy["clip_fraction"] < 0.3 and abs(policy["approx_kl"]) < 0.2, policy
    assert (critic["rows"], critic["dead_rows"]) == (6, 14)
    dead = ~batch.arrays["alive"]
    assert (adv["advantages"][dead] == 0).all() and (adv["returns"][dead] == 0).all()
    assert (policy["rows"], policy["dead_rows"]) == (6, 14)


def test_the_iql_replay_drops_padding_rows() -> None:
    """IQL trains on the replay join_replay builds: a padding row there is a TD target of reward 0 for action 0."""
    part = {"obs": np.arange(10, dtype=np.float32)[:, None], "rewards": np.ones(10, np.float32),
            "alive": np.array([True] * 3 + [False] * 7)}
    joined = join_replay(parts=[part, part], capacity=100)
    assert joined["obs"][:, 0].tolist() == [0, 1, 2, 0, 1, 2]
    assert join_replay(parts=[part, part], capacity=4)["obs"][:, 0].tolist() == [2, 0, 1, 2]


def test_vdn_q_tot_leaves_out_a_finished_agent() -> None:
    q = torch.tensor([[1.0, 2.0], [10.0, 20.0]])
    assert vdn_q_tot(q_taken_per_agent=q).tolist() == [11.0, 22.0]
    assert vdn_q_tot(q_taken_per_agent=q, alive_per_agent=torch.tensor([[True, True], [True, False]])).tolist() \
        == [11.0, 2.0]


def test_vdn_gives_a_finished_agent_no_gradient_from_its_padding_rows(store) -> None:
    """The joint rows after ``short`` finished: ``short``'s network gets no gradient from them (it fit Q(last obs,
    action 0) to the team's TD target before)."""
    algo = VDNConfig(hidden_sizes=(16,)).model_dump(mode="json")
    result = fragment(store, algo=algo)
    rows = {column: np.concatenate([np.asarray(result.arrays[f"{agent}/{column}"]) for agent in AGENTS])
            for column in ("obs", "next_obs", "actions", "terminated", "truncated", "rewards", "alive")}
    rows["agent_index"] = np.repeat([0, 1], 20)
    joint = align_team_rows(parts=[rows], all_agents=AGENTS)
    padding = ~joint["short/alive"]
    assert padding.sum() == 14 and joint["long/alive"].all()
    vdn = VDN(config=VDNConfig(hidden_sizes=(16,)))
    env = make_env()
    spaces = EnvSpaces(observation=env.observation_space("short"), action=env.action_space("short"))
    torch.manual_seed(0)
    short, long_ = vdn.make_policy(spaces=spaces), vdn.make_policy(spaces=spaces)
    nets = {f"p_{agent}": TrainedNet(online=net, target=net, optimizer=vdn.make_optimizer(model=net), grad_steps=0)
            for agent, net in (("long", long_), ("short", short))}
    objective = TeamObjective(config=vdn.config, agent_policy={a: f"p_{a}" for a in AGENTS}, agents=AGENTS,
                              nets=nets, mixer=None)
    batch = {name: torch.as_tensor(value[padding]) for name, value in joint.items()}
    objective.loss(batch=batch).loss.backward()
    assert all(p.grad is None or not p.grad.any() for p in short.parameters())
    live = {name: torch.as_tensor(value[~padding]) for name, value in joint.items()}
    short.zero_grad()
    objective.loss(batch=live).loss.backward()
    assert any(p.grad is not None and p.grad.any() for p in short.parameters())




def test_a_run_reports_each_agents_share_of_padding_rows(tmp_path) -> None:
    """Two IPPO rounds on the inline runtime: ``marless/dead_rows/<agent>`` per round, and the learners' rows."""
    from nimbus.config import apply_overrides, load_config, parse_config
    from nimbus.run.loop import train

    base = load_config(path=REPO / "configs" / "marless-ippo-spread.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    config = parse_config(data=apply_overrides(data=base, overrides=[
        "runtime.backend=inline", f"env.id={EARLY}", "env.kwargs={}", "actors.restore_slots=false",
        "env.num_envs_per_actor=2", "actors.scaling={kind: fixed, num_actors: 1}", "actors.fragment_steps=10",
        "algo.num_epochs=2", "train.max_rounds=2"]))
    rows = train(config=config).rows
    assert [r.extras["marless/dead_rows/short"] for r in rows] == [0.7, 0.7]
    assert [r.extras["marless/dead_rows/long"] for r in rows] == [0.0, 0.0]
