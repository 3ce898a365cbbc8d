"""Extreme Hessian eigenvalues of a scalar objective, for Nitro's convexity ratio (paper 002, §5.1-5.2, §6.2).

The Hessian is never formed. A Hessian-vector product (HVP) is one double backward pass
(``H v = ∇θ (∇θ L · v)``); Lanczos (``scipy.sparse.linalg.eigsh`` over a ``LinearOperator`` that wraps
the HVP, float64 on the scipy side) finds the largest and smallest eigenvalues from a few dozen HVPs.
The caller evaluates the objective on a subset of the round's batch (:func:`subset_indices`), which the
paper shows cuts the probe's cost ~10x (§8.7).

Example::

    idx = subset_indices(batch_size=4096, subset_size=256, generator=torch.Generator().manual_seed(0))
    sub = {key: value[idx] for key, value in batch.items()}
    probe = extreme_eigenvalues(loss_fn=lambda: -surrogate(model, sub), params=list(model.parameters()))
    metrics_extras.update(probe.to_extras())     # {"hessian_ratio": R, "hessian_lambda_min": ..., ...}

Sign convention. Nitro's R = −λmax/λmin is defined on the Hessian of the surrogate *objective*, the
quantity being maximised (§5.2, Eq. 2). ``loss_fn`` is whatever scalar you pass: pass the objective
(e.g. ``-ppo_loss``) to get the paper's R. The Hessian of the loss is the negated Hessian, so its
ratio is the reciprocal, 1/R: the ordering of rounds is reversed. This module does not guess.

Liveness (P5, docs/reliability.md). A probe is one long stretch without optimizer steps (25.7 s at paper
scale): it reports progress (``nimbus.liveness.beat``) after the objective's gradient graph is built
and after every HVP, so a worker with ``heartbeat_s`` is stalled only if a single HVP takes 3 intervals.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

try:  # ships with scikit-learn, a nimbus dependency
    from threadpoolctl import ThreadpoolController
except ImportError:  # pragma: no cover
    ThreadpoolController = None

from nimbus.liveness import beat

#: Keys of :meth:`HessianProbe.to_extras`, read by ``nimbus.nitro.scaler`` from ``RoundMetrics.extras``.
HESSIAN_RATIO_KEY = "hessian_ratio"
HESSIAN_LAMBDA_MAX_KEY = "hessian_lambda_max"
HESSIAN_LAMBDA_MIN_KEY = "hessian_lambda_min"

_DENSE_BELOW = 3  # eigsh(k=2) needs at least 3 dimensions; smaller problems are solved densely


@dataclass(frozen=True)
class HessianProbe:
    """Result of one probe.

    ``ratio`` is −λmax/λmin, or NaN where it is not defined (λmin ≥ 0, up to the round-off of the
    params' dtype: a locally convex objective, the ratio would change sign or divide by zero; or a
    non-finite eigenvalue); see :func:`convexity_ratio`. ``converged`` is False when
    Lanczos did not reach ``tolerance`` within the iteration budget: the eigenvalues are then the best
    Ritz estimates from every Krylov vector computed (usable, but flagged). ``num_hvps`` counts the
    Hessian-vector products, the probe's unit of cost.
    """

    lambda_max: float
    lambda_min: float
    ratio: float
    converged: bool
    num_hvps: int
    num_params: int
    seconds: float

    @property
    def ratio_defined(self) -> bool:
        return math.isfinite(self.ratio)

    def to_extras(self) -> dict[str, float]:
        """The probe as ``RoundMetrics.extras`` entries (floats only)."""
        return {
            HESSIAN_RATIO_KEY: self.ratio,
            HESSIAN_LAMBDA_MAX_KEY: self.lambda_max,
            HESSIAN_LAMBDA_MIN_KEY: self.lambda_min,
            "hessian_converged": float(self.converged),
            "hessian_num_hvps": float(self.num_hvps),
            "hessian_probe_s": self.seconds,
        }


def convexity_ratio(*, lambda_max: float, lambda_min: float, zero_tolerance: float = 0.0) -> float:
    """Nitro's R = −λmax/λmin (Eq. 2); NaN where it is not defined.

    Not defined: an eigenvalue not finite, or λmin ≥ 0 (a locally convex objective: dividing by a
    positive or zero λmin flips or breaks the ordering). λmin counts as zero when
    |λmin| <= zero_tolerance · max(|λmax|, |λmin|): a round-off-sized negative λmin would give an
    astronomically large R that swamps the scaler's min-max window for n rounds.
    """
    if not (math.isfinite(lambda_max) and math.isfinite(lambda_min)):
        return math.nan
    if lambda_min >= -zero_tolerance * max(abs(lambda_max), abs(lambda_min)):
        return math.nan
    return -lambda_max / lambda_min


def subset_indices(*, batch_size: int, subset_size: int, generator: torch.Generator) -> torch.Tensor:
    """``subset_size`` distinct row indices of a batch, drawn uniformly (all rows if the batch is smaller)."""
    if batch_size < 1 or subset_size < 1:
        raise ValueError(f"batch_size and subset_size must be >= 1, got {batch_size}, {subset_size}")
    if subset_size >= batch_size:
        return torch.arange(batch_size)
    return torch.randperm(batch_size, generator=generator)[:subset_size]


class _HessianOperator:
    """H·v for a fixed objective: one forward and one create_graph backward, then one backward per HVP."""

    def __init__(self, *, loss_fn: Callable[[], torch.Tensor], params: Sequence[torch.Tensor]) -> None:
        if not params:
            raise ValueError("params is empty")
        self.params = params
        self.numels = [p.numel() for p in params]
        self.num_params = sum(self.numels)
        self.dtype = params[0].dtype
        loss = loss_fn()
        if loss.ndim != 0:
            raise ValueError(f"loss_fn must return a scalar, got shape {tuple(loss.shape)}")
        grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
        beat()  # progress (P5): the forward and the create_graph backward, often the probe's longest step
        # A gradient that is None or constant in θ contributes a zero block row: skip it.
        self._live = [i for i, g in enumerate(grads) if g is not None and g.requires_grad]
        self._grads = [grads[i] for i in self._live]
        self.num_hvps = 0

    def __call__(self, vector: torch.Tensor) -> torch.Tensor:
        """H·vector for a flat ``vector`` of ``num_params`` entries; returns a flat tensor (params' dtype)."""
        if vector.numel() != self.num_params:
            raise ValueError(f"vector has {vector.numel()} entries, params have {self.num_params}")
        self.num_hvps += 1
        flat = vector.reshape(-1).to(device=self.params[0].device, dtype=self.dtype)
        if not self._grads:
            return torch.zeros_like(flat)
        chunks = [c.view_as(p) for c, p in zip(flat.split(self.numels), self.params)]
        hv = torch.autograd.grad(
            self._grads, self.params, grad_outputs=[chunks[i] for i in self._live],
            retain_graph=True, allow_unused=True,
        )
        beat()  # progress (P5): one HVP (a Lanczos step, or a column of the dense Hessian)
        return torch.cat([(h if h is not None else torch.zeros_like(p)).reshape(-1) for h, p in zip(hv, self.params)])


def hessian_vector_product(
    *, loss_fn: Callable[[], torch.Tensor], params: Sequence[torch.Tensor], vector: torch.Tensor
) -> torch.Tensor:
    """H·v by double backward, H = ∇²θ loss_fn() over the concatenation of ``params`` (flattened, in order).

    ``vector`` is flat with as many entries as the params in total; the result is flat, in the params'
    dtype, and detached.
    """
    with torch.enable_grad():
        return _HessianOperator(loss_fn=loss_fn, params=params)(vector).detach()


def extreme_eigenvalues(
    *,
    loss_fn: Callable[[], torch.Tensor],
    params: Sequence[torch.Tensor],
    max_iterations: int = 100,
    tolerance: float = 1e-3,
    seed: int = 0,
) -> HessianProbe:
    """Largest and smallest Hessian eigenvalues of ``loss_fn()`` w.r.t. ``params``, by Lanczos.

    One unrestarted Lanczos pass of ``max_iterations`` steps (``eigsh(which="BE", k=2,
    ncv=max_iterations, maxiter=1)``) from a seeded Gaussian start vector (§6.2): both ends of the
    spectrum come from the same Krylov space, and the probe costs at most ``max_iterations`` + 1 HVPs
    (``num_params`` + 1 for a smaller network, where the result is exact). ``tolerance`` is ARPACK's
    relative accuracy. If it is not met after that pass, ARPACK is stopped before it restarts, the
    eigenvalues are the Ritz values over every Krylov vector computed (no extra HVP), and ``converged``
    says whether their residuals meet ``tolerance``. ~100 steps on a subset of the batch is the Nitro
    authors' setting.

    Cost: the objective is evaluated once and its gradient graph kept; each HVP is one backward pass
    through it. Memory: that graph plus 2 · (max_iterations + 1) vectors of ``num_params`` (the Krylov
    vectors and their products, kept for the Ritz fallback).
    """
    if max_iterations < 3:
        raise ValueError(f"max_iterations must be >= 3, got {max_iterations}")
    start = time.perf_counter()
    with torch.enable_grad():
        operator = _HessianOperator(loss_fn=loss_fn, params=params)
        if operator.num_params < _DENSE_BELOW:
            lam_min, lam_max, converged = _dense_extremes(operator)
        else:
            lam_min, lam_max, converged = _lanczos_extremes(operator, max_iterations, tolerance, seed)
    ratio = convexity_ratio(lambda_max=lam_max, lambda_min=lam_min, zero_tolerance=_zero_tolerance(operator.dtype))
    return HessianProbe(
        lambda_max=lam_max,
        lambda_min=lam_min,
        ratio=ratio,
        converged=converged,
        num_hvps=operator.num_hvps,
        num_params=operator.num_params,
        seconds=time.perf_counter() - start,
    )


def _zero_tolerance(dtype: torch.dtype) -> float:
    """Relative size below which λmin is round-off of the HVP's dtype (≈1e-5 float32, ≈2e-14 float64)."""
    return 100.0 * torch.finfo(dtype).eps


def _dense_extremes(operator: _HessianOperator) -> tuple[float, float, bool]:
    eye = torch.eye(operator.num_params, dtype=operator.dtype, device=operator.params[0].device)
    hessian = torch.stack([operator(column) for column in eye]).detach().double().cpu().numpy()
    eigenvalues = np.linalg.eigvalsh((hessian + hessian.T) / 2.0)
    return float(eigenvalues[0]), float(eigenvalues[-1]), True


_THREADPOOLS = None


def _single_threaded_blas() -> contextlib.AbstractContextManager:
    """One BLAS thread while ARPACK runs: its BLAS calls interleave with torch's HVPs, and a threaded
    OpenBLAS spinning beside torch's OpenMP threads slowed a 100-step probe from ~80 ms to 300-450 ms on a
    2-core machine (measured with OPENBLAS_NUM_THREADS=1 vs unset). ARPACK's own BLAS work is small."""
    global _THREADPOOLS
    if ThreadpoolController is None:  # pragma: no cover
        return contextlib.nullcontext()
    if _THREADPOOLS is None:          # scanning the loaded libraries costs ~3 ms: do it once
        _THREADPOOLS = ThreadpoolController()
    return _THREADPOOLS.limit(limits=1, user_api="blas")


class _BudgetSpent(Exception):
    """Raised from inside the matvec to stop ARPACK once the HVP budget is used."""


def _lanczos_extremes(
    operator: _HessianOperator, max_iterations: int, tolerance: float, seed: int
) -> tuple[float, float, bool]:
    # imported here, not at the top: every driver imports this module for its metric keys, ~0.2 s of scipy
    from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, LinearOperator, eigsh

    n = operator.num_params
    ncv = min(n, max_iterations)
    budget = ncv + 1                  # ARPACK's first Lanczos pass of ncv steps uses ncv + 1 products
    inputs: list[torch.Tensor] = []   # every vector ARPACK multiplied, and its product: the Ritz fallback
    outputs: list[torch.Tensor] = []

    def matvec(v: np.ndarray) -> np.ndarray:
        if len(inputs) >= budget:     # ARPACK wants to restart: stop and use what we have
            raise _BudgetSpent
        vec = torch.tensor(np.asarray(v, dtype=np.float64).reshape(-1))   # a copy: ARPACK reuses its buffer
        hv = operator(vec).detach().cpu()   # one transfer per product: ARPACK drives the iteration from the host
        inputs.append(vec.to(operator.dtype))
        outputs.append(hv)
        return hv.double().numpy()

    linear_operator = LinearOperator((n, n), matvec=matvec, dtype=np.float64)
    v0 = np.random.default_rng(seed).standard_normal(n)
    try:
        with _single_threaded_blas():
            eigenvalues = eigsh(
                linear_operator, k=2, which="BE", ncv=ncv, maxiter=1,
                tol=tolerance, v0=v0 / np.linalg.norm(v0), return_eigenvectors=False,
            )
        return float(np.min(eigenvalues)), float(np.max(eigenvalues)), True
    except (ArpackNoConvergence, ArpackError, _BudgetSpent):
        # Not converged within the budget, or an ARPACK breakdown (e.g. H·v0 = 0, an invariant subspace):
        # the Krylov vectors computed so far still give the best available estimates.
        if not inputs:
            return math.nan, math.nan, False
        return _ritz_extremes(torch.stack(inputs), torch.stack(outputs), tolerance)


def _ritz_extremes(inputs: torch.Tensor, outputs: torch.Tensor, tolerance: float) -> tuple[float, float, bool]:
    """Rayleigh–Ritz over span(inputs), given outputs = H·inputs row by row; costs no extra HVP.

    Returns (θ_min, θ_max, converged), converged meaning both Ritz pairs have ARPACK's residual
    ‖H y − θ y‖ <= tolerance · |θ| (true, for example, when the vectors span an invariant subspace).
    """
    v = inputs.double().T                                   # n × m
    w = outputs.double().T                                  # n × m, = H v
    basis, singular, right = torch.linalg.svd(v, full_matrices=False)
    keep = singular > singular[0] * 1e-10
    basis, singular, right = basis[:, keep], singular[keep], right[keep]
    h_basis = w @ right.T / singular                        # H · basis
    projected = basis.T @ h_basis
    ritz, coefficients = torch.linalg.eigh((projected + projected.T) / 2.0)
    converged = True
    for index in (0, -1):
        theta, y = ritz[index], coefficients[:, index]
        residual = torch.linalg.vector_norm(h_basis @ y - theta * (basis @ y))
        converged = converged and bool(residual <= tolerance * max(abs(float(theta)), 1e-12))
    return float(ritz[0]), float(ritz[-1]), converged


@dataclass(frozen=True)
class ProbeOverhead:
    """Cost of one probe, and of one plain forward+backward of the same objective for scale."""

    probe_s: float            # median over repeats
    probe_min_s: float        # fastest repeat (least disturbed by other load on the machine)
    num_hvps: int
    hvp_s: float              # probe_s / num_hvps
    backward_s: float         # median forward + backward of loss_fn
    num_params: int

    @property
    def probe_over_backward(self) -> float:
        return self.probe_s / self.backward_s if self.backward_s > 0 else math.inf


def measure_probe_overhead(
    *,
    loss_fn: Callable[[], torch.Tensor],
    params: Sequence[torch.Tensor],
    max_iterations: int = 100,
    tolerance: float = 1e-3,
    repeats: int = 3,
) -> ProbeOverhead:
    """Time :func:`extreme_eigenvalues` (median of ``repeats``) against one forward+backward pass."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    probes = [
        extreme_eigenvalues(loss_fn=loss_fn, params=params, max_iterations=max_iterations, tolerance=tolerance)
        for _ in range(repeats)
    ]
    backward = []
    for _ in range(repeats):
        start = time.perf_counter()
        with torch.enable_grad():
            torch.autograd.grad(loss_fn(), params, allow_unused=True)
        backward.append(time.perf_counter() - start)
    seconds = [p.seconds for p in probes]
    probe_s = float(np.median(seconds))
    num_hvps = probes[-1].num_hvps
    return ProbeOverhead(
        probe_s=probe_s, probe_min_s=min(seconds), num_hvps=num_hvps, hvp_s=probe_s / max(num_hvps, 1),
        backward_s=float(np.median(backward)), num_params=probes[-1].num_params,
    )
