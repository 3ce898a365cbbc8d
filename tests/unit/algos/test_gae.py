"""GAE over flat rows: hand-computed termination, truncation and fragment-cut cases, and CleanRL parity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nimbus.algos.gae import compute_gae

GAMMA, LAMBDA = 0.9, 0.8  # γλ = 0.72


def gae(**columns: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    tensors = {key: torch.tensor(value, dtype=torch.float32) for key, value in columns.items()}
    return compute_gae(**tensors, gamma=GAMMA, gae_lambda=LAMBDA)


@pytest.mark.parametrize(("columns", "expected_advantages", "expected_returns"), [
    # termination does not bootstrap:
    # δ2 = 1 − 0.7 = 0.3; δ1 = 1 + 0.9·0.7 − 0.6 = 1.03; δ0 = 1 + 0.9·0.6 − 0.5 = 1.04
    # A2 = 0.3; A1 = 1.03 + 0.72·0.3 = 1.246; A0 = 1.04 + 0.72·1.246 = 1.93712
    (dict(next_values=[0.6, 0.7, 9.0], terminated=[0, 0, 1], cut=[0, 0, 1]),
     [1.93712, 1.246, 0.3], [2.43712, 1.846, 1.0]),
    # truncation bootstraps from the final observation's value:
    # row 1 truncated, V(final obs) = 2.0; row 2 starts a new episode and ends the fragment (V(next) = 0.8)
    # δ2 = 1 + 0.72 − 0.7 = 1.02; δ1 = 1 + 1.8 − 0.6 = 2.2; δ0 = 1.04
    # A2 = 1.02; A1 = 2.2 (cut: no A2 leaks in); A0 = 1.04 + 0.72·2.2 = 2.624
    (dict(next_values=[0.6, 2.0, 0.8], terminated=[0, 0, 0], cut=[0, 1, 1]),
     [2.624, 2.2, 1.02], [3.124, 2.8, 1.72]),
], ids=["termination-does-not-bootstrap", "truncation-bootstraps-from-the-final-observation"])
def test_episode_ends_by_hand(columns: dict, expected_advantages: list[float], expected_returns: list[float]) -> None:
    advantages, returns = gae(rewards=[1, 1, 1], values=[0.5, 0.6, 0.7], **columns)
    torch.testing.assert_close(advantages, torch.tensor(expected_advantages))
    torch.testing.assert_close(returns, torch.tensor(expected_returns))


def test_fragment_cut_separates_runs_of_different_envs() -> None:
    # rows 0-1: env A's fragment (ends at row 1, V(next) = 5.0); rows 2-3: env B's fragment
    # A3 = 4 + 0.45 − 0.4 = 4.05; A2 = 3.06 + 0.72·4.05 = 5.976; A1 = 2 + 4.5 − 0.2 = 6.3; A0 = 1.08 + 0.72·6.3 = 5.616
    columns = dict(
        rewards=[1, 2, 3, 4], values=[0.1, 0.2, 0.3, 0.4], next_values=[0.2, 5.0, 0.4, 0.5], terminated=[0, 0, 0, 0],
    )
    advantages, _ = gae(**columns, cut=[0, 1, 0, 1])
    torch.testing.assert_close(advantages, torch.tensor([5.616, 6.3, 5.976, 4.05]))
    leaked, _ = gae(**columns, cut=[0, 0, 0, 1])
    assert not torch.allclose(leaked[1], advantages[1])


def cleanrl_gae(*, rewards, values, dones, next_value, next_done, gamma, gae_lambda):  # type: ignore[no-untyped-def]
    """CleanRL ppo.py's GAE, verbatim apart from names: arrays are (time, env)."""
    num_steps = rewards.shape[0]
    advantages = np.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def test_equals_cleanrl_without_truncations() -> None:
    rng = np.random.default_rng(0)
    num_steps, num_envs = 32, 3
    rewards = rng.normal(size=(num_steps, num_envs))
    values = rng.normal(size=(num_steps, num_envs))
    dones = (rng.random((num_steps, num_envs)) < 0.15).astype(np.float64)  # CleanRL: obs at t starts an episode
    next_value, next_done = rng.normal(size=num_envs), (rng.random(num_envs) < 0.5).astype(np.float64)
    expected_adv, expected_ret = cleanrl_gae(
        rewards=rewards, values=values, dones=dones, next_value=next_value, next_done=next_done, gamma=0.99,
        gae_lambda=0.95
    )
    # nimbus rows: each env's run contiguous; terminated_t = CleanRL's done at t+1
    terminated = np.concatenate([dones[1:], next_done[None]])
    next_values = np.concatenate([values[1:], next_value[None]])
    cut = terminated.copy()
    cut[-1] = 1.0
    as_rows = lambda a: torch.tensor(a.T.reshape(-1))  # noqa: E731  (time, env) → env-major rows
    advantages, returns = compute_gae(
        rewards=as_rows(rewards), values=as_rows(values), next_values=as_rows(next_values),
        terminated=as_rows(terminated).bool(), cut=as_rows(cut).bool(), gamma=0.99, gae_lambda=0.95,
    )
    torch.testing.assert_close(advantages, as_rows(expected_adv))
    torch.testing.assert_close(returns, as_rows(expected_ret))


def test_rejects_mismatched_columns() -> None:
    with pytest.raises(ValueError, match="1-D columns"):
        compute_gae(
            rewards=torch.zeros(3), values=torch.zeros(3), next_values=torch.zeros(2),
            terminated=torch.zeros(3), cut=torch.ones(3), gamma=0.99, gae_lambda=0.95,
        )


def _loop_gae(*, rewards: torch.Tensor, values: torch.Tensor, next_values: torch.Tensor, terminated: torch.Tensor,
              cut: torch.Tensor, gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The sequential reference: the backward loop over Python floats that compute_gae ran before its scan."""
    deltas = (rewards.double() + gamma * next_values.double() * (1.0 - terminated.double()) - values.double()).tolist()
    decay = (gamma * gae_lambda * (1.0 - cut.double())).tolist()
    out, running = [0.0] * len(deltas), 0.0
    for i in range(len(deltas) - 1, -1, -1):
        running = deltas[i] + decay[i] * running
        out[i] = running
    advantages = torch.tensor(out, dtype=torch.float64)
    return advantages.float(), (advantages + values.double()).float()


@pytest.mark.parametrize(("rows", "gamma", "gae_lambda", "cut_rate"), [
    (2048, 0.99, 0.95, 0.0),        # one long run
    (2048, 0.9999, 0.9999, 0.0),    # γλ ≈ 1: nothing decays over 2048 rows
    (2048, 0.999, 1.0, 0.01),       # Monte-Carlo returns with episode ends
    (4099, 0.99, 0.95, 0.002),      # not a power of two
    (1, 0.99, 0.95, 0.0),
])
def test_the_scan_equals_the_sequential_loop(rows: int, gamma: float, gae_lambda: float, cut_rate: float) -> None:
    gen = torch.Generator().manual_seed(rows)
    ends = torch.rand(rows, generator=gen) < cut_rate
    columns = dict(rewards=torch.randn(rows, generator=gen), values=torch.randn(rows, generator=gen) * 10,
                   next_values=torch.randn(rows, generator=gen) * 10, terminated=ends & (torch.rand(rows) < 0.5),
                   cut=ends.clone())
    columns["cut"][-1] = True
    got = compute_gae(**columns, gamma=gamma, gae_lambda=gae_lambda)
    expected = _loop_gae(**columns, gamma=gamma, gae_lambda=gae_lambda)
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_gae_makes_no_host_read() -> None:
    from tests.host_reads import count_host_reads

    columns = {key: torch.rand(512) for key in ("rewards", "values", "next_values")}
    columns.update(terminated=torch.rand(512) < 0.01, cut=torch.rand(512) < 0.02)
    with count_host_reads() as reads:
        compute_gae(**columns, gamma=0.99, gae_lambda=0.95)
    assert reads.total == 0, reads.by_kind
