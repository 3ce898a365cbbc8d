"""Hessian probe: HVP and Lanczos extremes against the explicitly formed Hessian of tiny networks."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import functional_call

from nimbus.analysis.hessian import (
    HESSIAN_LAMBDA_MIN_KEY,
    HESSIAN_RATIO_KEY,
    HessianProbe,
    convexity_ratio,
    extreme_eigenvalues,
    hessian_vector_product,
    measure_probe_overhead,
    subset_indices,
)


def _tiny_problem(*, hidden: int = 4, dtype: torch.dtype = torch.float64, seed: int = 0):
    """A 3-in, 2-out tanh MLP ((3+1)·hidden + (hidden+1)·2 params: 26 for hidden=4) on a fixed batch.

    Returns (loss_fn, params, explicit float64 Hessian over the flattened params).
    """
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(3, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 2)).double()
    x = torch.randn(64, 3, dtype=torch.float64)
    y = torch.randn(64, 2, dtype=torch.float64)
    names = [name for name, _ in net.named_parameters()]
    shapes = [p.shape for p in net.parameters()]

    def flat_loss(theta: torch.Tensor) -> torch.Tensor:
        chunks = theta.split([math.prod(shape) for shape in shapes])
        state = {name: c.view(shape) for name, c, shape in zip(names, chunks, shapes)}
        return ((functional_call(net, state, (x,)) - y) ** 2).mean()

    theta = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    hessian = torch.autograd.functional.hessian(flat_loss, theta)

    net, x, y = net.to(dtype), x.to(dtype), y.to(dtype)

    def loss_fn() -> torch.Tensor:
        return ((net(x) - y) ** 2).mean()

    return loss_fn, list(net.parameters()), hessian


def test_hvp_equals_explicit_hessian_times_vector() -> None:
    loss_fn, params, hessian = _tiny_problem()
    vector = torch.randn(hessian.shape[0], dtype=torch.float64)
    hv = hessian_vector_product(loss_fn=loss_fn, params=params, vector=vector)
    assert hv.shape == vector.shape
    torch.testing.assert_close(hv, hessian @ vector, rtol=1e-10, atol=1e-12)


def test_extreme_eigenvalues_match_explicit_hessian() -> None:
    loss_fn, params, hessian = _tiny_problem()
    eigenvalues = torch.linalg.eigvalsh(hessian)
    lam_min, lam_max = float(eigenvalues[0]), float(eigenvalues[-1])
    assert lam_min < 0 < lam_max                     # an indefinite Hessian: R is defined

    probe = extreme_eigenvalues(loss_fn=loss_fn, params=params, tolerance=1e-8)

    assert probe.num_params == hessian.shape[0] == 26
    assert probe.lambda_max == pytest.approx(lam_max, rel=1e-4)
    assert probe.lambda_min == pytest.approx(lam_min, rel=1e-4)
    assert probe.ratio == pytest.approx(-lam_max / lam_min, rel=1e-4)
    assert probe.converged and probe.ratio_defined
    assert probe.num_hvps <= probe.num_params + 1
    assert probe.seconds > 0


def test_extreme_eigenvalues_float32_model() -> None:
    loss_fn, params, hessian = _tiny_problem(dtype=torch.float32)
    eigenvalues = torch.linalg.eigvalsh(hessian)
    probe = extreme_eigenvalues(loss_fn=loss_fn, params=params, tolerance=1e-6)
    scale = float(eigenvalues.abs().max())
    assert probe.lambda_max == pytest.approx(float(eigenvalues[-1]), abs=1e-4 * scale)
    assert probe.lambda_min == pytest.approx(float(eigenvalues[0]), abs=1e-4 * scale)


def test_iteration_budget_bounds_hvps_and_gives_ritz_estimates_inside_the_spectrum() -> None:
    loss_fn, params, hessian = _tiny_problem(hidden=16)        # 98 params, more than the budget
    eigenvalues = torch.linalg.eigvalsh(hessian)
    probe = extreme_eigenvalues(loss_fn=loss_fn, params=params, max_iterations=6, tolerance=1e-12)
    assert probe.num_hvps <= 7
    assert not probe.converged                                 # flagged, but still an estimate
    # Ritz values of a subspace lie within the spectrum (Cauchy interlacing).
    assert float(eigenvalues[0]) - 1e-9 <= probe.lambda_min <= probe.lambda_max <= float(eigenvalues[-1]) + 1e-9


def test_larger_network_with_default_budget_finds_the_extremes() -> None:
    loss_fn, params, hessian = _tiny_problem(hidden=40)        # 242 params, 100 Lanczos steps
    eigenvalues = torch.linalg.eigvalsh(hessian)
    probe = extreme_eigenvalues(loss_fn=loss_fn, params=params)
    assert probe.num_hvps <= 101
    assert probe.lambda_max == pytest.approx(float(eigenvalues[-1]), rel=1e-3)
    assert probe.lambda_min == pytest.approx(float(eigenvalues[0]), rel=1e-2)


def test_locally_convex_objective_has_no_ratio() -> None:
    # 0.5 Σ a_i p_i² with a ≥ 0, plus a parameter the loss ignores (a zero Hessian block): λmin = 0.
    p = torch.nn.Parameter(torch.randn(6, dtype=torch.float64))
    unused = torch.nn.Parameter(torch.randn(2, dtype=torch.float64))
    a = torch.tensor([0.5, 1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    probe = extreme_eigenvalues(loss_fn=lambda: 0.5 * (a * p**2).sum(), params=[p, unused])
    assert probe.lambda_max == pytest.approx(5.0)
    assert probe.lambda_min == pytest.approx(0.0, abs=1e-9)
    assert math.isnan(probe.ratio) and not probe.ratio_defined


def test_ratio_sign_convention_on_a_known_indefinite_quadratic() -> None:
    p = torch.nn.Parameter(torch.randn(5, dtype=torch.float64))
    a = torch.tensor([-2.0, -1.0, 0.5, 1.0, 3.0], dtype=torch.float64)
    probe = extreme_eigenvalues(loss_fn=lambda: 0.5 * (a * p**2).sum(), params=[p])
    assert (probe.lambda_min, probe.lambda_max) == (pytest.approx(-2.0), pytest.approx(3.0))
    assert probe.ratio == pytest.approx(1.5)                    # −λmax/λmin = −3/−2
    negated = extreme_eigenvalues(loss_fn=lambda: -0.5 * (a * p**2).sum(), params=[p])
    assert negated.ratio == pytest.approx(1 / 1.5)              # the loss's ratio is the objective's 1/R


def test_two_parameter_problem_is_solved_densely() -> None:
    p = torch.nn.Parameter(torch.tensor([0.3, -0.7], dtype=torch.float64))
    probe = extreme_eigenvalues(loss_fn=lambda: p[0] * p[1], params=[p])   # H = [[0, 1], [1, 0]]
    assert (probe.lambda_min, probe.lambda_max, probe.ratio) == (pytest.approx(-1.0), pytest.approx(1.0),
                                                                 pytest.approx(1.0))
    assert probe.num_hvps == 2 and probe.converged


def test_zero_hessian_is_handled() -> None:
    p = torch.nn.Parameter(torch.randn(5, dtype=torch.float64))
    probe = extreme_eigenvalues(loss_fn=lambda: p.sum() * 2.0, params=[p])
    assert probe.lambda_min == probe.lambda_max == 0.0
    assert math.isnan(probe.ratio)


@pytest.mark.parametrize(
    ("lambda_max", "lambda_min", "expected"),
    [(3.0, -2.0, 1.5), (-1.0, -2.0, -0.5), (3.0, 0.0, math.nan), (3.0, 0.5, math.nan),
     (math.nan, -1.0, math.nan), (3.0, -math.inf, math.nan)],
)
def test_convexity_ratio_guards(lambda_max: float, lambda_min: float, expected: float) -> None:
    ratio = convexity_ratio(lambda_max=lambda_max, lambda_min=lambda_min)
    assert (math.isnan(ratio) and math.isnan(expected)) or ratio == pytest.approx(expected)


def test_round_off_sized_negative_lambda_min_counts_as_zero() -> None:
    assert convexity_ratio(lambda_max=5.0, lambda_min=-1e-15) == pytest.approx(5e15)
    assert math.isnan(convexity_ratio(lambda_max=5.0, lambda_min=-1e-15, zero_tolerance=1e-12))
    assert convexity_ratio(lambda_max=5.0, lambda_min=-0.01, zero_tolerance=1e-5) == pytest.approx(500.0)


def test_to_extras_carries_the_keys_the_controller_reads() -> None:
    probe = HessianProbe(lambda_max=2.0, lambda_min=-1.0, ratio=2.0, converged=True, num_hvps=10,
                         num_params=5, seconds=0.1)
    extras = probe.to_extras()
    assert extras[HESSIAN_RATIO_KEY] == 2.0 and extras[HESSIAN_LAMBDA_MIN_KEY] == -1.0
    assert all(isinstance(v, float) for v in extras.values())


def test_non_scalar_loss_and_bad_arguments_are_rejected() -> None:
    p = torch.nn.Parameter(torch.randn(4))
    with pytest.raises(ValueError, match="scalar"):
        extreme_eigenvalues(loss_fn=lambda: p * 2, params=[p])
    with pytest.raises(ValueError, match="max_iterations"):
        extreme_eigenvalues(loss_fn=lambda: (p**2).sum(), params=[p], max_iterations=2)
    with pytest.raises(ValueError, match="entries"):
        hessian_vector_product(loss_fn=lambda: (p**2).sum(), params=[p], vector=torch.ones(3))


def test_subset_indices() -> None:
    idx = subset_indices(batch_size=1000, subset_size=256, generator=torch.Generator().manual_seed(0))
    assert idx.shape == (256,) and len(set(idx.tolist())) == 256
    assert 0 <= int(idx.min()) and int(idx.max()) < 1000
    again = subset_indices(batch_size=1000, subset_size=256, generator=torch.Generator().manual_seed(0))
    assert torch.equal(idx, again)
    assert torch.equal(subset_indices(batch_size=100, subset_size=256, generator=torch.Generator()),
                       torch.arange(100))


def test_measure_probe_overhead() -> None:
    loss_fn, params, _ = _tiny_problem()
    overhead = measure_probe_overhead(loss_fn=loss_fn, params=params, max_iterations=20, repeats=2)
    assert overhead.num_params == 26 and 0 < overhead.num_hvps <= 21
    assert 0 < overhead.probe_min_s <= overhead.probe_s
    assert overhead.backward_s > 0 and overhead.probe_over_backward > 0
