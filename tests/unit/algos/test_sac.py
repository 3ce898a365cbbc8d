"""SAC: hand-made loss checks (min of twin Qs, α direction), gradient isolation, act bounds, learner sanity."""

from __future__ import annotations

from dataclasses import asdict

import gymnasium as gym
import numpy as np
import pytest
import torch

from nimbus.algos.sac import SAC, SACConfig, sac_update
from nimbus.algos.sac.loss import actor_loss, alpha_loss, batch_losses, critic_loss, soft_q_target
from nimbus.envs.spaces import EnvSpaces

SPACES = EnvSpaces(observation=gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
                   action=gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32)))


def test_soft_q_target_takes_the_min_of_twin_qs_minus_alpha_log_pi():
    y = soft_q_target(rewards=torch.tensor([1.0, 0.0, 1.0]), discounts=torch.tensor([0.9, 0.0, 0.9]),
                      next_q1=torch.tensor([2.0, 5.0, 3.0]), next_q2=torch.tensor([3.0, 1.0, 2.0]),
                      next_log_prob=torch.tensor([-1.0, 0.5, -1.0]), alpha=0.5)
    # row 0: 1 + .9·(min(2, 3) + .5); row 1: terminated → r; row 2: the min is now the second critic
    torch.testing.assert_close(y, torch.tensor([1 + 0.9 * 2.5, 0.0, 1 + 0.9 * 2.5]))


def test_critic_and_actor_losses_on_hand_made_tensors():
    q1, q2 = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 2.0])
    assert critic_loss(q1=q1, q2=q2, targets=torch.tensor([1.0, 0.0])).item() == pytest.approx(0.5 * (2.0 + 2.5))
    assert actor_loss(log_prob=torch.tensor([-1.0, 1.0]), q_pi=torch.tensor([3.0, 1.0]), alpha=0.2).item() == \
        pytest.approx(((0.2 * -1 - 3) + (0.2 * 1 - 1)) / 2)


@pytest.mark.parametrize("log_prob,direction", [(2.0, +1), (-3.0, -1)])
def test_entropy_tuning_moves_alpha_the_right_way(log_prob, direction):
    """Target entropy −1: entropy −log π = −2 is too low → α grows; entropy 3 is too high → α shrinks."""
    log_alpha = torch.zeros((), requires_grad=True)
    opt = torch.optim.SGD([log_alpha], lr=0.1)
    alpha_loss(log_alpha=log_alpha, log_prob=torch.tensor([log_prob]), target_entropy=-1.0).backward()
    opt.step()
    assert np.sign(log_alpha.item()) == direction


def _batch(n: int, *, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    low, high = torch.as_tensor(SPACES.action.low), torch.as_tensor(SPACES.action.high)
    return {"obs": torch.randn(n, 3, generator=g), "actions": low + (high - low) * torch.rand(n, 2, generator=g),
            "rewards": torch.randn(n, generator=g), "next_obs": torch.randn(n, 3, generator=g),
            "terminated": torch.rand(n, generator=g) < 0.1, "truncated": torch.zeros(n, dtype=torch.bool)}


def _grads(module: torch.nn.Module) -> bool:
    return any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())


def test_each_loss_only_reaches_its_own_parameters():
    algo = SAC(config=SACConfig(hidden_sizes=(16,)))
    model = algo.make_model(spaces=SPACES)
    batch = _batch(8, seed=0)
    for name, expect in (("critic_loss", "critic"), ("actor_loss", "actor"), ("alpha_loss", "log_alpha")):
        model.zero_grad(set_to_none=True)
        getattr(batch_losses(model=model, batch=batch, config=algo.config), name).backward()
        touched = {"critic": _grads(model.critic), "actor": _grads(model.actor),
                   "log_alpha": model.log_alpha.grad is not None and model.log_alpha.grad != 0,
                   "critic_target": _grads(model.critic_target)}
        assert touched == {k: k == expect for k in touched}, name


def test_optimizer_groups_are_critic_actor_alpha_and_fixed_alpha_has_none():
    algo = SAC(config=SACConfig(hidden_sizes=(16,)))
    model = algo.make_model(spaces=SPACES)
    groups = {g["name"]: g["params"] for g in algo.make_optimizer(model=model).param_groups}
    assert list(groups) == ["critic", "actor", "alpha"] and groups["alpha"] == [model.log_alpha]
    cfg = SACConfig(hidden_sizes=(16,), autotune_alpha=False, init_alpha=0.2)
    model = SAC(config=cfg).make_model(spaces=SPACES)
    out = batch_losses(model=model, batch=_batch(4, seed=0), config=cfg)
    assert out.alpha_loss.item() == 0 and out.stats["losses/alpha"] == pytest.approx(0.2)
    names = [g["name"] for g in SAC(config=cfg).make_optimizer(model=model).param_groups]
    assert names == ["critic", "actor"] and not model.log_alpha.requires_grad


def test_act_rescales_to_the_action_bounds_and_buffer_spec():
    torch.manual_seed(0)
    algo = SAC(config=SACConfig(hidden_sizes=(16,)))
    model = algo.make_model(spaces=SPACES)
    with torch.no_grad():
        model.actor.mean.bias.fill_(5.0)  # push tanh towards +1 so the upper bounds are approached
    acts = algo.act(model=model, obs=torch.randn(500, 3), explore=True).actions
    assert acts.dtype == np.float32 and acts.shape == (500, 2)
    assert np.all(acts >= SPACES.action.low) and np.all(acts <= SPACES.action.high)
    assert acts[:, 0].max() > 1.5 and acts[:, 1].max() > 0.9
    greedy = algo.act(model=model, obs=torch.zeros(2, 3), explore=False).actions
    np.testing.assert_array_equal(greedy, algo.act(model=model, obs=torch.zeros(2, 3), explore=False).actions)
    torch.testing.assert_close(model.normalize_actions(model.to_env_actions(torch.tensor([[0.5, -0.5]]))),
                               torch.tensor([[0.5, -0.5]]))
    spec = algo.buffer_spec(spaces=SPACES)
    assert list(spec) == ["obs", "actions", "rewards", "next_obs", "terminated", "truncated"]
    assert spec["actions"].shape == (2,) and spec["actions"].dtype == "float32"
    assert model.target_entropy == -2.0
    with pytest.raises(TypeError):
        algo.make_model(spaces=EnvSpaces(observation=SPACES.observation, action=gym.spaces.Discrete(2)))


def test_updates_on_random_data_are_finite_change_params_and_polyak_the_targets():
    torch.manual_seed(0)
    cfg = SACConfig(hidden_sizes=(32, 32), tau=0.1, batch_size=32)
    algo = SAC(config=cfg)
    model = algo.make_model(spaces=SPACES)
    optimizer = algo.make_optimizer(model=model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    key, target_key = "critic.q1.net.0.weight", "critic_target.q1.net.0.weight"
    stats = sac_update(model=model, optimizer=optimizer, batch=_batch(32, seed=0), config=cfg)
    torch.testing.assert_close(model.state_dict()[target_key],
                               0.1 * model.state_dict()[key] + 0.9 * before[target_key])
    # 96 rows at batch_size 32: three more gradient steps in one call
    stats = algo.update(model=model, optimizer=optimizer, batch=_batch(96, seed=1), progress=0.0,
                        generator=torch.Generator())
    assert (stats.num_gradient_steps, stats.total_gradient_steps) == (3, 4) and int(model.num_grad_steps) == 4
    assert all(np.isfinite(float(v)) for v in asdict(stats).values())
    for name in ("actor.mean.weight", key, "critic.q2.net.0.weight", "log_alpha"):
        assert not torch.equal(before[name], model.state_dict()[name]), name
    out = algo.loss(model=model, batch=_batch(8, seed=9))
    assert np.isfinite(out.loss.item()) and "losses/qf_loss" in out.stats


def test_one_adam_with_groups_equals_three_adams():
    """The claim behind the single optimizer: same trajectory as SB3-style separate optimizers."""
    cfg = SACConfig(hidden_sizes=(16,), batch_size=8)
    algo = SAC(config=cfg)
    torch.manual_seed(0)
    a = algo.make_model(spaces=SPACES)
    b = algo.make_model(spaces=SPACES)
    b.load_state_dict(a.state_dict())
    one = algo.make_optimizer(model=a)
    three = [torch.optim.Adam(m.parameters() if m is not b.log_alpha else [m], lr=cfg.lr)
             for m in (b.critic, b.actor, b.log_alpha)]
    for i in range(3):
        batch = _batch(8, seed=i)
        torch.manual_seed(100 + i)
        sac_update(model=a, optimizer=one, batch=batch, config=cfg)
        torch.manual_seed(100 + i)
        losses = batch_losses(model=b, batch=batch, config=cfg)
        for opt in three:
            opt.zero_grad()
        losses.critic_loss.backward()
        losses.actor_loss.backward()
        losses.alpha_loss.backward()
        for opt in three:
            opt.step()
        with torch.no_grad():
            for p, t in zip(b.critic.parameters(), b.critic_target.parameters()):
                t.lerp_(p, cfg.tau)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        if name != "num_grad_steps":
            torch.testing.assert_close(x, y, msg=name)
