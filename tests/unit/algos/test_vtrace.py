"""V-trace: a hand-computed 3-step example and a naive per-step reference on random inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nimbus.algos.impala.vtrace import vtrace


def _hand_example():
    """Three columns (B = 3), T = 3, ρ̄ = c̄ = 1; numbers worked out by hand below.

    Column 0 (γ = 0.5, no episode end), ρ = [2, 0.5, 1] → clipped ρ = c = [1, 0.5, 1]
      V = [1, 2, 3], V(x_3) = 4, r = [1, 0, 2]
      δ = [1·(1 + .5·2 − 1), .5·(0 + .5·3 − 2), 1·(2 + .5·4 − 3)] = [1, −0.25, 1]
      v_2 = 3 + 1 = 4;  v_1 = 2 + (−0.25 + .5·.5·1) = 2;  v_0 = 1 + (1 + .5·1·0) = 2
      A = [1·(1 + .5·2 − 1), .5·(0 + .5·4 − 2), 1·(2 + .5·4 − 3)] = [1, 0, 1]
    Column 1 (γ = 0.9, terminated at t = 1 → discounts [.9, 0, .9]), ρ = [.8, 1.5, .25] → [.8, 1, .25]
      V = [.5, −1, 2], V(x_3) = 1, r = [0, 1, −1]
      δ = [.8·(0 + .9·(−1) − .5), 1·(1 + 0 + 1), .25·(−1 + .9·1 − 2)] = [−1.12, 2, −0.525]
      v_2 = 2 − .525 = 1.475;  v_1 = −1 + 2 = 1;  v_0 = .5 + (−1.12 + .9·.8·2) = .82
      A = [.8·(0 + .9·1 − .5), 1·(1 + 0 + 1), .25·(−1 + .9·1 − 2)] = [.32, 2, −.525]
    Column 2 (γ = 0.9, truncated at t = 0 with V(final obs) = 5; ρ = 1): the trace is cut at t = 0
      V = [1, 1, 1], V(x_3) = 1, r = [1, 1, 1]
      δ = [1 + .9·5 − 1, 1 + .9 − 1, 1 + .9 − 1] = [4.5, .9, .9]
      v_2 = 1 + .9 = 1.9;  v_1 = 1 + (.9 + .9·.9) = 2.71;  v_0 = 1 + 4.5 (no flow from t = 1) = 5.5
      A = [1 + .9·5 − 1, 1 + .9·1.9 − 1, 1 + .9·1 − 1] = [4.5, 1.71, .9]
    """
    t = lambda rows: torch.tensor(rows, dtype=torch.float64)  # noqa: E731
    rhos = t([[2.0, 0.8, 1.0], [0.5, 1.5, 1.0], [1.0, 0.25, 1.0]])
    inputs = dict(
        behaviour_log_prob=torch.zeros(3, 3, dtype=torch.float64),
        target_log_prob=rhos.log(),
        rewards=t([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [2.0, -1.0, 1.0]]),
        values=t([[1.0, 0.5, 1.0], [2.0, -1.0, 1.0], [3.0, 2.0, 1.0]]),
        bootstrap_value=t([4.0, 1.0, 1.0]),
        discounts=t([[0.5, 0.9, 0.9], [0.5, 0.0, 0.9], [0.5, 0.9, 0.9]]),
        truncated=torch.tensor([[False, False, True], [False, False, False], [False, False, False]]),
        next_values=t([[0.0, 0.0, 5.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
    )
    vs = t([[2.0, 0.82, 5.5], [2.0, 1.0, 2.71], [4.0, 1.475, 1.9]])
    adv = t([[1.0, 0.32, 4.5], [0.0, 2.0, 1.71], [1.0, -0.525, 0.9]])
    return inputs, vs, adv


def test_hand_computed_three_step_example():
    inputs, vs, adv = _hand_example()
    out = vtrace(**inputs, rho_bar=1.0, c_bar=1.0)
    torch.testing.assert_close(out.vs, vs)
    torch.testing.assert_close(out.pg_advantages, adv)


def naive_vtrace(*, log_rhos, rewards, values, bootstrap_value, discounts, rho_bar, c_bar, truncated, next_values):
    """The paper's sum form, one (s, b) at a time with python floats:
    v_s = V(x_s) + Σ_{t≥s} (Π_{i=s}^{t−1} γ_i c_i) δ_t, the product stopping at a truncation."""
    T, B = len(rewards), len(rewards[0])
    vs = [[0.0] * B for _ in range(T)]
    adv = [[0.0] * B for _ in range(T)]

    def v_next(t, b):
        if truncated[t][b]:
            return next_values[t][b]
        return values[t + 1][b] if t + 1 < T else bootstrap_value[b]

    for b in range(B):
        rho = [math.exp(log_rhos[t][b]) for t in range(T)]
        delta = [min(rho_bar, rho[t]) * (rewards[t][b] + discounts[t][b] * v_next(t, b) - values[t][b])
                 for t in range(T)]
        for s in range(T):
            total, coef = 0.0, 1.0
            for t in range(s, T):
                total += coef * delta[t]
                if truncated[t][b]:
                    break
                coef *= discounts[t][b] * min(c_bar, rho[t])
            vs[s][b] = values[s][b] + total
        for s in range(T):
            vs_next = v_next(s, b) if (truncated[s][b] or s + 1 == T) else vs[s + 1][b]
            adv[s][b] = min(rho_bar, rho[s]) * (rewards[s][b] + discounts[s][b] * vs_next - values[s][b])
    return np.array(vs), np.array(adv)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rho_bar,c_bar", [(1.0, 1.0), (2.0, 0.7), (0.5, 0.5)])
def test_matches_the_naive_reference_on_random_inputs(seed, rho_bar, c_bar):
    g = torch.Generator().manual_seed(seed)
    T, B = 7, 5
    log_rhos = torch.randn(T, B, generator=g, dtype=torch.float64)
    behaviour = torch.randn(T, B, generator=g, dtype=torch.float64)
    terminated = torch.rand(T, B, generator=g) < 0.15
    truncated = (torch.rand(T, B, generator=g) < 0.15) & ~terminated
    inputs = dict(
        behaviour_log_prob=behaviour, target_log_prob=behaviour + log_rhos,
        rewards=torch.randn(T, B, generator=g, dtype=torch.float64),
        values=torch.randn(T, B, generator=g, dtype=torch.float64),
        bootstrap_value=torch.randn(B, generator=g, dtype=torch.float64),
        discounts=0.95 * (~terminated).double(),
        truncated=truncated, next_values=torch.randn(T, B, generator=g, dtype=torch.float64),
    )
    out = vtrace(**inputs, rho_bar=rho_bar, c_bar=c_bar)
    ref_vs, ref_adv = naive_vtrace(
        log_rhos=log_rhos.tolist(), rewards=inputs["rewards"].tolist(), values=inputs["values"].tolist(),
        bootstrap_value=inputs["bootstrap_value"].tolist(), discounts=inputs["discounts"].tolist(),
        rho_bar=rho_bar, c_bar=c_bar, truncated=truncated.tolist(), next_values=inputs["next_values"].tolist())
    np.testing.assert_allclose(out.vs.numpy(), ref_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out.pg_advantages.numpy(), ref_adv, rtol=1e-10, atol=1e-10)


def test_on_policy_without_clipping_gives_n_step_returns():
    """π = μ, no episode ends: v_s is the discounted return bootstrapped from V(x_T) (the paper's remark)."""
    T, B, gamma = 4, 2, 0.9
    g = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(T, B, generator=g), torch.randn(T, B, generator=g)
    bootstrap = torch.randn(B, generator=g)
    out = vtrace(behaviour_log_prob=torch.zeros(T, B), target_log_prob=torch.zeros(T, B), rewards=rewards,
                 values=values, bootstrap_value=bootstrap, discounts=torch.full((T, B), gamma))
    expected = torch.stack([sum(gamma ** (t - s) * rewards[t] for t in range(s, T)) + gamma ** (T - s) * bootstrap
                            for s in range(T)])
    torch.testing.assert_close(out.vs, expected)


def test_defaults_assume_rows_continue_and_outputs_carry_no_grad():
    values = torch.randn(3, 2, requires_grad=True)
    out = vtrace(behaviour_log_prob=torch.zeros(3, 2), target_log_prob=torch.zeros(3, 2, requires_grad=True),
                 rewards=torch.zeros(3, 2), values=values, bootstrap_value=torch.zeros(2),
                 discounts=torch.ones(3, 2))
    assert not out.vs.requires_grad and not out.pg_advantages.requires_grad
    with pytest.raises(ValueError, match="together"):
        vtrace(behaviour_log_prob=torch.zeros(3, 2), target_log_prob=torch.zeros(3, 2), rewards=torch.zeros(3, 2),
               values=torch.zeros(3, 2), bootstrap_value=torch.zeros(2), discounts=torch.ones(3, 2),
               truncated=torch.zeros(3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="rewards"):
        vtrace(behaviour_log_prob=torch.zeros(3, 2), target_log_prob=torch.zeros(3, 2), rewards=torch.zeros(2, 2),
               values=torch.zeros(3, 2), bootstrap_value=torch.zeros(2), discounts=torch.ones(3, 2))
