"""DQN: hand-made loss checks, ε-greedy act and learner sanity. That DQN learns CartPole:
tests/integration/test_offpolicy.py (its greedy policy reaches 475 within 50k steps)."""

from __future__ import annotations

from dataclasses import asdict

import gymnasium as gym
import numpy as np
import pytest
import torch
from pydantic import ValidationError

from nimbus.algos.dqn import DQN, DQNConfig, dqn_update
from nimbus.algos.dqn.loss import double_q_target, epsilon_greedy, linear_schedule, td_loss
from nimbus.envs.spaces import EnvSpaces

SPACES = EnvSpaces(observation=gym.spaces.Box(-1.0, 1.0, (4,), np.float32), action=gym.spaces.Discrete(3))


def test_double_q_target_evaluates_the_online_argmax_with_the_target_net():
    q_next_online = torch.tensor([[1.0, 5.0, 2.0]])   # online argmax: action 1
    q_next_target = torch.tensor([[10.0, 3.0, 7.0]])  # target's own argmax would be action 0
    kw = dict(q_next_online=q_next_online, q_next_target=q_next_target,
              returns_n=torch.tensor([1.0]), discount_n=torch.tensor([0.9]))
    assert double_q_target(**kw, double_q=True).item() == pytest.approx(1.0 + 0.9 * 3.0)
    assert double_q_target(**kw, double_q=False).item() == pytest.approx(1.0 + 0.9 * 10.0)


def test_n_step_target_uses_returns_n_and_discount_n_and_stops_at_termination():
    q = torch.tensor([[2.0, 4.0], [2.0, 4.0]])
    # row 0: 3-step return 1 + .9·1 + .81·1 = 2.71, discount γ³ = .729; row 1: terminated after 2 steps
    y = double_q_target(q_next_online=q, q_next_target=q, returns_n=torch.tensor([2.71, 1.9]),
                        discount_n=torch.tensor([0.729, 0.0]), double_q=True)
    torch.testing.assert_close(y, torch.tensor([2.71 + 0.729 * 4.0, 1.9]))


def test_td_loss_is_weighted_huber_and_returns_per_sample_td_errors():
    q_values = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    out = td_loss(q_values=q_values, actions=torch.tensor([1, 0]), targets=torch.tensor([2.5, 6.0]),
                  weights=torch.tensor([1.0, 0.5]), huber_delta=1.0)
    # |δ| = 0.5 (quadratic: 0.125) and 3.0 (linear: 2.5); weighted mean = (0.125 + 0.5·2.5) / 2
    assert out.loss.item() == pytest.approx(0.6875)
    torch.testing.assert_close(out.td_errors, torch.tensor([0.5, 3.0]))
    out.loss.backward()
    # only the taken actions get gradient; the linear branch has slope δ/|δ| · weight / B
    torch.testing.assert_close(q_values.grad, torch.tensor([[0.0, -0.25], [-0.25, 0.0]]))


def test_zero_importance_weight_removes_a_sample_from_the_gradient():
    q_values = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    td_loss(q_values=q_values, actions=torch.tensor([0, 1]), targets=torch.tensor([0.0, 0.0]),
            weights=torch.tensor([0.0, 1.0])).loss.backward()
    assert q_values.grad[0].abs().sum() == 0 and q_values.grad[1].abs().sum() > 0


def test_postprocess_fills_one_step_targets_and_refuses_n_step_without_replay():
    algo = DQN(config=DQNConfig(gamma=0.9))
    out = algo.postprocess(batch={"rewards": torch.tensor([1.0, 2.0]), "terminated": torch.tensor([False, True])})
    torch.testing.assert_close(out["returns_n"], torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(out["discount_n"], torch.tensor([0.9, 0.0]))
    with pytest.raises(ValueError, match="n-step"):
        DQN(config=DQNConfig(n_step=3)).postprocess(batch={"rewards": torch.zeros(1), "terminated": torch.zeros(1)})


def test_epsilon_schedule_and_per_beta_are_linear_then_flat():
    algo = DQN(config=DQNConfig(exploration_fraction=0.5, exploration_initial_eps=1.0, exploration_final_eps=0.1))
    assert algo.epsilon_at(progress=0.0) == pytest.approx(1.0)
    assert algo.epsilon_at(progress=0.25) == pytest.approx(0.55)
    assert algo.epsilon_at(progress=0.9) == pytest.approx(0.1)
    assert algo.per_beta_at(progress=0.5) == pytest.approx(0.7)
    assert linear_schedule(start=1.0, end=0.0, fraction=0.0, progress=0.0) == 0.0


def test_act_is_greedy_without_exploration_and_uniform_at_eps_one():
    torch.manual_seed(0)
    algo = DQN(config=DQNConfig())
    model = algo.make_model(spaces=SPACES)
    obs = torch.randn(4000, 4)
    greedy = model.q(obs).argmax(dim=1).numpy()
    assert algo.set_exploration(model=model, progress=1.0) == pytest.approx(0.04)  # final eps
    model.epsilon.fill_(0.0)
    np.testing.assert_array_equal(algo.act(model=model, obs=obs, explore=True).actions, greedy)
    model.epsilon.fill_(1.0)
    np.testing.assert_array_equal(algo.act(model=model, obs=obs, explore=False).actions, greedy)
    explored = algo.act(model=model, obs=obs, explore=True).actions
    assert explored.dtype == np.int64
    np.testing.assert_allclose(np.bincount(explored, minlength=3) / len(explored), [1 / 3] * 3, atol=0.04)
    assert "epsilon" in model.state_dict()  # travels with the broadcast weights


def test_epsilon_greedy_draws_the_random_actions_then_the_coin_flips():
    """DQN and IQL/VDN act through one ε-greedy; its draws (randint, then rand) keep seeded runs as recorded."""
    q_values = torch.randn(64, 5)
    torch.manual_seed(3)
    actions = epsilon_greedy(q_values=q_values, epsilon=0.3)
    torch.manual_seed(3)
    random_actions = torch.randint(5, (64,))
    expected = torch.where(torch.rand(64) < 0.3, random_actions, q_values.argmax(dim=1))
    torch.testing.assert_close(actions, expected)
    assert 0 < int((actions != q_values.argmax(dim=1)).sum()) < 64


def test_buffer_spec_lists_the_transition_keys():
    spec = DQN(config=DQNConfig()).buffer_spec(spaces=SPACES)
    assert list(spec) == ["obs", "actions", "rewards", "next_obs", "terminated", "truncated"]
    assert spec["obs"].shape == (4,) and spec["actions"].dtype == "int64"


def test_config_is_frozen_and_rejects_unknown_keys():
    with pytest.raises(ValidationError, match="lerning_rate"):
        DQNConfig(lerning_rate=1e-3)
    with pytest.raises(ValidationError):
        DQNConfig().lr = 1.0
    with pytest.raises(ValidationError):
        DQNConfig(batch_size=10, buffer_capacity=5)


def _random_batch(n: int, *, gen: torch.Generator) -> dict[str, torch.Tensor]:
    return {
        "obs": torch.randn(n, 4, generator=gen), "actions": torch.randint(0, 3, (n,), generator=gen),
        "rewards": torch.randn(n, generator=gen), "next_obs": torch.randn(n, 4, generator=gen),
        "terminated": torch.rand(n, generator=gen) < 0.1, "truncated": torch.zeros(n, dtype=torch.bool),
        "weights": torch.rand(n, generator=gen),
    }


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_updates_on_random_data_are_finite_change_params_and_update_the_target(tau):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    cfg = DQNConfig(target_update_interval=3, tau=tau, hidden_sizes=(32, 32), batch_size=16)
    algo = DQN(config=cfg)
    model = algo.make_model(spaces=SPACES)
    optimizer = algo.make_optimizer(model=model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    # 40 rows at batch_size 16: three gradient steps (16, 16, 8 rows); the third copies the target
    result = dqn_update(model=model, optimizer=optimizer, batch=algo.postprocess(batch=_random_batch(40, gen=gen)),
                        config=cfg)
    s = result.stats
    assert (s.num_gradient_steps, s.total_gradient_steps, s.num_target_updates) == (3, 3, 1)
    assert all(np.isfinite(v) for v in asdict(s).values())
    assert result.td_errors.shape == (40,) and np.isfinite(result.td_errors).all()
    assert not torch.equal(before["q.head.weight"], model.q.head.weight)
    online, target = model.q.head.weight, model.q_target.head.weight
    if tau == 1.0:
        assert torch.equal(online, target)
    else:
        torch.testing.assert_close(target, 0.5 * online + 0.5 * before["q_target.head.weight"])
    assert not any(p.requires_grad for p in model.q_target.parameters())
    assert int(model.state_dict()["num_grad_steps"]) == 3  # travels with checkpoints
    # the protocol's update: stats only, sets ε from progress; loss agrees in form
    stats = algo.update(model=model, optimizer=optimizer, batch=algo.postprocess(batch=_random_batch(16, gen=gen)),
                        progress=0.08, generator=torch.Generator())
    assert stats.total_gradient_steps == 4 and float(model.epsilon) == pytest.approx(algo.epsilon_at(progress=0.08))
    out = algo.loss(model=model, batch=algo.postprocess(batch=_random_batch(8, gen=gen)))
    assert np.isfinite(out.loss.item()) and set(out.stats) >= {"losses/td_loss"}
    pri = algo.priorities(td_errors=np.array([0.0, -2.0]))
    np.testing.assert_allclose(pri, [(1e-6) ** 0.6, (2 + 1e-6) ** 0.6])
