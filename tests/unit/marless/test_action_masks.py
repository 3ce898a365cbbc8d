"""Action masks where the env gives them (issue 27, Build: action masks). The env (tests/unit/marless/masked_env.py)
forbids 2 of 4 actions at every step, in PettingZoo's two conventions (a Dict observation or ``infos``). The actor
samples only legal actions and stores the mask; the PPO loss (log-prob, entropy), the probe and greedy evaluation use
the same masked distribution (models/distributions.py ``mask_logits``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from nimbus.algos.multiagent import multiagent_algo_from_dict
from nimbus.algos.multiagent.config import IPPOConfig, MAPPOConfig
from nimbus.envs.parallel import agent_spaces, make_parallel_env
from nimbus.errors import EnvContractError
from nimbus.marless.actor import marless_actor_function
from nimbus.marless.learner import critic_function, policy_function, postprocess_function
from tests.unit.marless.marless_harness import actor_request, assemble_batch, ctx, learner_request, put_version_zero
from tests.unit.marless.masked_env import ACTIONS, AGENTS, legal

MASKED = "tests.unit.marless.masked_env:make_env"
OWN = {agent: f"p_{agent}" for agent in AGENTS}
REPO = Path(__file__).resolve().parents[3]


def _fragment(store, *, algo, convention, num_envs=4, steps=100):
    kwargs = {"convention": convention}
    put_version_zero(store=store, algo=algo, env_id=MASKED, env_kwargs=kwargs, agent_policy=OWN)
    return marless_actor_function(context=ctx("marless_actor"), request=actor_request(
        store=store, algo=algo, agent_policy=OWN, versions=dict.fromkeys(OWN.values(), 0), num_envs=num_envs,
        steps=steps, env_id=MASKED, env_kwargs=kwargs))


def test_the_masked_log_prob_and_entropy_equal_a_hand_computation() -> None:
    algo = multiagent_algo_from_dict(algo=IPPOConfig(hidden_sizes=(8,)).model_dump(mode="json"))
    spaces = agent_spaces(env=make_parallel_env(env_id=MASKED, seed=0, kwargs={}))
    model = algo.make_policy(spaces=spaces["a"])
    obs = torch.tensor([[3.0, 0.0, 1.0], [4.0, 1.0, 1.0]])
    mask = torch.tensor([[True, False, True, False], [False, True, True, True]])
    actions = torch.tensor([2, 3])
    with torch.no_grad():
        log_prob, entropy = model.evaluate(obs, actions=actions, action_mask=mask)
        logits = model.actor(obs).double()
    for row in range(2):
        allowed = [j for j in range(ACTIONS) if mask[row, j]]
        norm = math.log(sum(math.exp(logits[row, j]) for j in allowed))
        assert log_prob[row].item() == pytest.approx(logits[row, actions[row]].item() - norm, abs=1e-6)
        probs = [math.exp(logits[row, j] - norm) for j in allowed]
        assert entropy[row].item() == pytest.approx(-sum(p * math.log(p) for p in probs), abs=1e-6)
    unmasked, _ = model.evaluate(obs, actions=actions)
    assert (unmasked < log_prob - 0.1).all()            # the mask moves the probability onto the legal actions


@pytest.mark.parametrize("convention", ["obs", "info"])
def test_no_illegal_action_is_ever_taken(store, convention) -> None:
    """800 steps per agent with an untrained policy (near uniform over 4 actions: half its samples would be illegal
    without the mask); the legal set is recomputed from each row's observation, not read from the stored mask."""
    algo = IPPOConfig(hidden_sizes=(16,)).model_dump(mode="json")
    result = _fragment(store, algo=algo, convention=convention)
    for agent in AGENTS:
        obs, actions = result.arrays[f"{agent}/obs"], result.arrays[f"{agent}/actions"]
        stored = result.arrays[f"{agent}/action_mask"]
        assert result.arrays[f"{agent}/alive"].all() and len(actions) == 400
        for row in range(len(actions)):
            options = legal(int(obs[row, 0]), int(obs[row, 1]))
            assert actions[row] in options, (agent, row, obs[row], actions[row])
            assert sorted(np.flatnonzero(stored[row])) == sorted(options)
        assert len(set(actions.tolist())) == ACTIONS                       # every action is legal sometimes
        assert (result.arrays[f"{agent}/logp"] > math.log(0.5) - 0.2).all()  # logp of the 2-action distribution
    assert min(sum(r) for r in result.header["episode_returns"].values()) >= 0   # reward −1 per illegal action


@pytest.mark.parametrize("config", [IPPOConfig, MAPPOConfig])
def test_the_loss_scores_the_distribution_the_actor_sampled(store, config) -> None:
    """One epoch, one minibatch: the surrogate's only step is taken at the actor's weights, so the ratio is 1 on
    every row (approx_kl 0, no clipping). A loss that forgot the mask would see log-probs ~0.7 lower than the stored
    ones (approx_kl ≈ 0.2, most rows clipped)."""
    algo = config(hidden_sizes=(16,), critic_hidden_sizes=(16,), num_epochs=1,
                  num_minibatches=1).model_dump(mode="json")
    result = _fragment(store, algo=algo, convention="obs", num_envs=2, steps=20)
    batch = assemble_batch(results=[result], agents=["a"], all_agents=list(AGENTS), centralised=config is MAPPOConfig)
    assert batch.arrays["action_mask"].shape == (40, ACTIONS)
    store.put(key="batch/p_a/r0", message=batch)
    req = learner_request(store=store, algo=algo, policy="p_a", round_=0, agents={"a": 0}, all_agents=list(AGENTS),
                          weights_version=0, critic_version=0, env_id=MASKED, env_kwargs={"convention": "obs"},
                          probe=True)
    if config is MAPPOConfig:
        postprocess_function(context=ctx("postprocess"), request=req)
    critic_function(context=ctx("critic"), request=req)
    header = policy_function(context=ctx("policy"), request=req).header
    assert abs(header["approx_kl"]) < 1e-5 and header["clip_fraction"] == 0.0, header
    assert header["entropy"] < math.log(2) + 1e-4          # at most the entropy of 2 equally likely actions
    assert math.isfinite(header["convexity"]) and header["probe_rows"] == 40   # the probe's loss is finite


def test_greedy_evaluation_picks_the_best_legal_action(tmp_path) -> None:
    """A policy whose head prefers action 0 whatever it sees: greedy, it would take action 0 at every step (illegal
    on half of them: −1 each); masked, it takes the legal action it rates highest, so no step is punished."""
    from nimbus.config import load_config
    from nimbus.marless.evaluate import evaluate_agents

    config = load_config(path=REPO / "configs" / "marless-ippo-spread.yaml",
                         overrides=[f"env.id={MASKED}", "env.kwargs={convention: info}", "algo.hidden_sizes=[8]"])
    algo = multiagent_algo_from_dict(algo=config.algo.model_dump(mode="json"))
    spaces = agent_spaces(env=make_parallel_env(env_id=MASKED, seed=0, kwargs={"convention": "info"}))
    model = algo.make_policy(spaces=spaces["a"])
    with torch.no_grad():
        model.actor[-1].bias.copy_(torch.tensor([5.0, 0.0, 0.0, 0.0]))
    from nimbus.models.weights import model_to_message
    weights = {"p_a": model_to_message(model=model, version=1), "p_b": model_to_message(model=model, version=1)}
    result = evaluate_agents(config=config, algo=algo, weights=weights, agent_policy=OWN, episodes=3, seed=0)
    assert min(result.returns) >= 0, result.returns
    mask = torch.tensor([[False, True, True, False]])
    action = algo.act(model=model, obs=torch.tensor([[1.0, 0.0, 1.0]]), explore=False, action_mask=mask).actions
    assert int(action[0]) in (1, 2)


def test_a_mask_that_allows_nothing_breaks_the_env_contract() -> None:
    from tests.unit.marless import masked_env

    env = make_parallel_env(env_id=MASKED, seed=0, kwargs={"convention": "info"})
    env.reset()
    assert env.mask_agents == frozenset(AGENTS)
    original = masked_env.mask_of
    masked_env.mask_of = lambda t, index: np.zeros(ACTIONS, np.int8)
    try:
        with pytest.raises(EnvContractError, match=r"at step 1 of episode 0, agent 'a': action_mask allows no action"):
            env.step({"a": 0, "b": 1})
    finally:
        masked_env.mask_of = original


def test_an_ippo_run_trains_and_evaluates_on_a_masked_env(tmp_path) -> None:
    """Two inline IPPO rounds on the Dict-observation env, with an evaluation at the end: every policy trains, every
    episode (training and evaluation) is free of illegal actions (reward −1 each)."""
    from nimbus.config import apply_overrides, load_config, parse_config
    from nimbus.run.loop import train

    base = load_config(path=REPO / "configs" / "marless-ippo-spread.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(tmp_path), "loggers": [], "report": False, "status_line": False}
    config = parse_config(data=apply_overrides(data=base, overrides=[
        "runtime.backend=inline", f"env.id={MASKED}", "env.kwargs={convention: obs}", "actors.restore_slots=false",
        "env.num_envs_per_actor=2", "actors.scaling={kind: fixed, num_actors: 1}", "actors.fragment_steps=10",
        "algo.num_epochs=2", "train.max_rounds=2", "train.eval_episodes=2"]))
    run = train(config=config)
    assert [row.policy_version for row in run.rows] == [2, 4]
    assert all(row.return_min is not None and row.return_min >= 0 for row in run.rows)


@pytest.mark.parametrize("convention", ["obs", "info"])
def test_a_restored_slot_carries_the_masks(store, convention) -> None:
    """actors.restore_slots with a masked env (get_state/set_state): a worker that never served the rank goes on
    mid-episode with the masks of the step it resumes at (not those of a fresh reset), as the warm worker does."""
    from nimbus.data.codec import decode, encode
    from nimbus.envs.slot_state import pop_slot_state

    algo = IPPOConfig(hidden_sizes=(16,)).model_dump(mode="json")
    kwargs = {"convention": convention}
    put_version_zero(store=store, algo=algo, env_id=MASKED, env_kwargs=kwargs, agent_policy=OWN)

    def run(cache, slot_seq, restore=None):
        return marless_actor_function(context=ctx("marless_actor", cache=cache), request=actor_request(
            store=store, algo=algo, agent_policy=OWN, versions=dict.fromkeys(OWN.values(), 0), num_envs=2, steps=5,
            env_id=MASKED, env_kwargs=kwargs, slot_seq=slot_seq, snapshot=True, restore=restore))

    warm_cache: dict = {}
    carried = decode(encode(run(warm_cache, 0)))                     # 5 of 10 steps
    state = pop_slot_state(header=carried.header, arrays=carried.arrays)
    warm, moved = run(warm_cache, 1), run({}, 1, restore=state)
    for name, value in warm.arrays.items():
        np.testing.assert_array_equal(moved.arrays[name], value, err_msg=name)
    assert (moved.arrays["a/obs"][:, 0] >= 5).all()                  # the episodes went on from step 5
    for agent in AGENTS:
        obs, stored = moved.arrays[f"{agent}/obs"], moved.arrays[f"{agent}/action_mask"]
        assert all(sorted(np.flatnonzero(stored[row])) == sorted(legal(int(obs[row, 0]), int(obs[row, 1])))
                   for row in range(len(obs)))
