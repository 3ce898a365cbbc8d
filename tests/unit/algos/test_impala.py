"""IMPALA / IMPACT: hand-made loss checks, act and buffer spec, learner sanity on random data."""

from __future__ import annotations

import math
from dataclasses import asdict

import gymnasium as gym
import numpy as np
import pytest
import torch

from nimbus.algos.impala import Impala, ImpalaConfig, impala_update
from nimbus.algos.impala.loss import batch_loss, impact_surrogate_loss, pg_loss, value_loss
from nimbus.envs.spaces import EnvSpaces
from nimbus.models import distributions

DISCRETE = EnvSpaces(observation=gym.spaces.Box(-1.0, 1.0, (4,), np.float32), action=gym.spaces.Discrete(3))
BOX = EnvSpaces(observation=gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
                action=gym.spaces.Box(-2.0, 2.0, (2,), np.float32))


def test_pg_loss_gradient_is_minus_advantage_over_batch():
    log_prob = torch.tensor([-1.0, -2.0], requires_grad=True)
    loss = pg_loss(log_prob=log_prob, pg_advantages=torch.tensor([3.0, -1.0]))
    assert loss.item() == pytest.approx(-((-1.0 * 3.0) + (-2.0 * -1.0)) / 2)
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([-1.5, 0.5]))


def test_impact_surrogate_clips_the_ratio_to_the_target_policy():
    # π/μ = 1.5, μ = π_tgt → r = 1.5; clip 0.4 → 1.4
    log_prob = torch.tensor([math.log(1.5), math.log(1.5)], requires_grad=True)
    zeros = torch.zeros(2)
    loss, ratio = impact_surrogate_loss(log_prob=log_prob, behaviour_log_prob=zeros, target_log_prob=zeros,
                                        pg_advantages=torch.tensor([2.0, -2.0]), clip_param=0.4, is_ratio_clip=2.0)
    torch.testing.assert_close(ratio, torch.tensor([1.5, 1.5]))
    # positive advantage: min(3.0, 2.8) = 2.8 (clipped, no grad); negative: min(−3.0, −2.8) = −3.0
    assert loss.item() == pytest.approx(-(2.8 - 3.0) / 2)
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([0.0, -0.5 * -2.0 * 1.5]))


def test_impact_is_ratio_mu_over_target_is_clamped():
    # μ/π_tgt = 3 → clamped to 2; π/μ = 0.5 → r = 1.0
    _, ratio = impact_surrogate_loss(log_prob=torch.tensor([math.log(0.5)]), behaviour_log_prob=torch.tensor([0.0]),
                                     target_log_prob=torch.tensor([-math.log(3.0)]), pg_advantages=torch.tensor([1.0]),
                                     clip_param=0.4, is_ratio_clip=2.0)
    torch.testing.assert_close(ratio, torch.tensor([1.0]))


def test_value_loss_is_half_mse_to_constant_targets():
    values = torch.tensor([1.0, 3.0], requires_grad=True)
    loss = value_loss(values=values, vs=torch.tensor([2.0, 2.0], requires_grad=True))
    assert loss.item() == pytest.approx(0.5)
    loss.backward()
    torch.testing.assert_close(values.grad, torch.tensor([-0.5, 0.5]))


def _rollout(spaces: EnvSpaces, algo: Impala, model, *, T: int = 6, B: int = 4, seed: int = 0):
    """A time-major batch whose behaviour log-probs come from the model's own act()."""
    torch.manual_seed(seed)
    obs_dim = spaces.observation.shape[0]
    obs = torch.randn(T, B, obs_dim)
    steps = [algo.act(model=model, obs=obs[t], explore=True) for t in range(T)]
    next_obs = torch.cat([obs[1:], torch.randn(1, B, obs_dim)])
    terminated = torch.rand(T, B) < 0.1
    truncated = (torch.rand(T, B) < 0.1) & ~terminated
    next_obs[truncated] = torch.randn(int(truncated.sum()), obs_dim)  # final obs differs from the reset obs
    return {
        "obs": obs, "actions": torch.as_tensor(np.stack([s.actions for s in steps])),
        "rewards": torch.randn(T, B), "next_obs": next_obs, "terminated": terminated, "truncated": truncated,
        "behaviour_log_prob": torch.as_tensor(np.stack([s.extras["behaviour_log_prob"] for s in steps])),
    }


@pytest.mark.parametrize("spaces", [DISCRETE, BOX], ids=["discrete", "box"])
def test_act_records_the_behaviour_log_prob_and_buffer_spec_lists_it(spaces):
    algo = Impala(config=ImpalaConfig(hidden_sizes=(16,)))
    model = algo.make_model(spaces=spaces)
    obs = torch.randn(5, spaces.observation.shape[0])
    out = algo.act(model=model, obs=obs, explore=True)
    dist = model.net.distribution(obs)
    expected = distributions.log_prob(dist=dist, actions=torch.as_tensor(out.actions)).detach().numpy()
    np.testing.assert_allclose(out.extras["behaviour_log_prob"], expected, rtol=1e-5)
    assert out.actions.shape == (5, *spaces.action.shape)
    spec = algo.buffer_spec(spaces=spaces)
    assert list(spec) == ["obs", "actions", "rewards", "next_obs", "terminated", "truncated", "behaviour_log_prob"]
    assert spec["actions"].shape == tuple(spaces.action.shape)
    greedy = algo.act(model=model, obs=obs, explore=False).actions
    np.testing.assert_array_equal(greedy, algo.act(model=model, obs=obs, explore=False).actions)


def test_truncation_bootstraps_from_next_obs_only_where_truncated():
    algo = Impala(config=ImpalaConfig(hidden_sizes=(16,)))
    model = algo.make_model(spaces=DISCRETE)
    batch = _rollout(DISCRETE, algo, model)
    base = algo.loss(model=model, batch=batch).loss.item()
    cont = ~batch["truncated"]
    cont[-1] = False  # the last row's next_obs is the bootstrap
    moved = {**batch, "next_obs": batch["next_obs"].clone()}
    moved["next_obs"][cont] += 10.0   # not read: row t+1's obs is the next state there
    assert algo.loss(model=model, batch=moved).loss.item() == pytest.approx(base)
    assert batch["truncated"].any()
    moved["next_obs"][batch["truncated"]] += 10.0
    assert algo.loss(model=model, batch=moved).loss.item() != pytest.approx(base)


def test_entropy_bonus_lowers_the_loss_by_ent_coef_times_entropy():
    spaces = DISCRETE
    a0 = Impala(config=ImpalaConfig(hidden_sizes=(16,), ent_coef=0.0))
    a1 = Impala(config=ImpalaConfig(hidden_sizes=(16,), ent_coef=0.5))
    model = a0.make_model(spaces=spaces)
    batch = _rollout(spaces, a0, model)
    out0 = batch_loss(model=model, batch=batch, config=a0.config)
    out1 = batch_loss(model=model, batch=batch, config=a1.config)
    assert out1.loss.item() == pytest.approx(out0.loss.item() - 0.5 * out0.stats["losses/entropy"], rel=1e-5)


def test_fresh_impact_target_equals_the_policy_so_vtrace_targets_match_impala():
    """Before any update π_tgt = π, so V-trace under the target network gives IMPALA's value targets."""
    torch.manual_seed(0)
    impact = Impala(config=ImpalaConfig(variant="impact", hidden_sizes=(16,)))
    model = impact.make_model(spaces=DISCRETE)
    batch = _rollout(DISCRETE, impact, model)
    s_impact = impact.loss(model=model, batch=batch).stats
    s_impala = Impala(config=ImpalaConfig(hidden_sizes=(16,))).loss(model=model, batch=batch).stats
    assert s_impact["losses/value_loss"] == pytest.approx(s_impala["losses/value_loss"])
    assert s_impact["losses/vtrace_rho_mean"] == pytest.approx(1.0)  # behaviour = current policy here


def test_postprocess_turns_flat_fragments_into_time_major_columns():
    algo = Impala(config=ImpalaConfig(rollout_length=3))
    # two env fragments of 3 steps, env-major as the buffer stores them: rows 0-2 env 0, rows 3-5 env 1
    rows = {"rewards": torch.arange(6.0), "obs": torch.arange(12.0).view(6, 2)}
    out = algo.postprocess(batch=rows)
    torch.testing.assert_close(out["rewards"], torch.tensor([[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]))
    assert out["obs"].shape == (3, 2, 2) and out["obs"][1, 1].tolist() == [8.0, 9.0]
    assert algo.postprocess(batch=out) is out  # already time-major
    with pytest.raises(ValueError, match="rollout_length"):
        algo.postprocess(batch={"rewards": torch.zeros(5)})


@pytest.mark.parametrize("variant", ["impala", "impact"])
@pytest.mark.parametrize("spaces", [DISCRETE, BOX], ids=["discrete", "box"])
def test_updates_on_random_data_are_finite_and_change_params(variant, spaces):
    cfg = ImpalaConfig(variant=variant, hidden_sizes=(32, 32), target_update_interval=2, kl_coeff=0.1)
    algo = Impala(config=cfg)
    model = algo.make_model(spaces=spaces)
    optimizer = algo.make_optimizer(model=model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    head = "net.actor.4.weight"  # the policy head of the (32, 32) ActorCritic
    kls, clips = [], []
    for i in range(3):
        batch = algo.postprocess(batch=_rollout(spaces, algo, model, seed=i))
        stats = algo.update(model=model, optimizer=optimizer, batch=batch, progress=0.0, generator=torch.Generator())
        assert all(np.isfinite(float(v)) for v in asdict(stats).values()), stats
        steps = stats.total_gradient_steps
        kls.append(stats.kl)
        clips.append(stats.clip_fraction)
        if variant == "impact" and steps == 1:  # target lags the policy until the interval
            assert torch.equal(model.state_dict()["target_" + head], before["target_" + head])
        if variant == "impact" and steps == 2:
            assert stats.target_updated and torch.equal(model.target_net.actor[4].weight, model.net.actor[4].weight)
    assert steps == 3 and int(model.num_grad_steps) == 3
    assert not torch.equal(before[head], model.state_dict()[head])
    assert not torch.equal(before["net.critic.0.weight"], model.net.critic[0].weight)
    assert (model.target_net is not None) == (variant == "impact")
    if variant == "impact":
        # step 2 reads the target of step 0 (one policy step behind): KL > 0; step 3 reads a fresh copy
        assert kls[0] == 0.0 and kls[1] > 0 and kls[2] == 0.0
        assert clips[0] == 0.0 and clips[2] == 0.0  # target == policy: every ratio is 1, nothing is clipped
    # impala_update is what update calls
    stats = impala_update(model=model, optimizer=optimizer, batch=batch, config=cfg)
    assert stats.num_gradient_steps == 1 and stats.total_gradient_steps == 4


def test_image_observations_get_the_cnn_actor_critic():
    spaces = EnvSpaces(observation=gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), action=gym.spaces.Discrete(6))
    algo = Impala(config=ImpalaConfig(variant="impact"))
    model = algo.make_model(spaces=spaces)
    obs = torch.randint(0, 256, (2, 84, 84, 4), dtype=torch.uint8)
    out = algo.act(model=model, obs=obs.float(), explore=True)  # the actor function sends float32
    assert out.actions.shape == (2,) and out.extras["behaviour_log_prob"].shape == (2,)
    assert algo.buffer_spec(spaces=spaces)["obs"].dtype == "uint8"


def test_impact_target_lags_the_policy_during_circular_replay_and_clips():
    """Issue 15: with the circular buffer (each batch twice) and a target refreshed every 4 steps, the
    loss sees π_target ≠ π and clips; with the refresh every step (refused in configs) it never would."""
    cfg = ImpalaConfig(variant="impact", hidden_sizes=(32, 32), lr=0.02, target_update_interval=4)
    algo = Impala(config=cfg)
    model = algo.make_model(spaces=DISCRETE)
    optimizer = algo.make_optimizer(model=model)
    batches = [algo.postprocess(batch=_rollout(DISCRETE, algo, model, seed=i)) for i in range(4)]
    stats = [impala_update(model=model, optimizer=optimizer, batch=batches[step % 4], config=cfg)
             for step in range(12)]                                   # 4 held batches, round-robin, ×3
    assert stats[0].target_log_ratio_max == 0.0                       # the fresh copy
    assert max(s.target_log_ratio_max for s in stats) > 0.05
    assert max(s.clip_fraction for s in stats) > 0.0
    assert [s.target_updated for s in stats].count(True) == 3         # steps 4, 8, 12


def test_impact_config_identical_to_impala_is_refused():
    with pytest.raises(ValueError, match="algo.target_update_interval"):
        ImpalaConfig(variant="impact", target_update_interval=1)
    ImpalaConfig(variant="impact", target_update_interval=1, target_tau=0.5)   # a lagging polyak target is not
    ImpalaConfig(variant="impala", target_update_interval=1)                    # IMPALA has no target to refuse
