"""Nitro's Hessian signal as the authors' code computes it (``variant: authors_code``; docs/nitro.md).

Followed, file by file (IntelliSys-Lab/Nitro at commit 2c725a94b033848726dbff0fbc958e6df317a444):

* ``Nitro.py``: after ``env.step`` (one round: sample, train) it calls
  ``utils.eval_hessian(env, estimate_batch=info['estimate_batch'])`` on the *updated* policy.
* ``utils.py`` ``eval_hessian``: ``estimate_hessian_density(model=policy.model, criterion=policy.loss, ...)``
  then ``hessian_eigen_ratio = - max(eigenvalue_list) / min(eigenvalue_list)`` where ``eigenvalue_list`` is
  the *grid* that ``density_generate`` returns: ``np.linspace(mean(max Ritz) - 0.01 ... mean(max Ritz) + 0.01)``
  with ``overhead=0.01``. The grid's ends are exactly ``λmin − 0.01`` and ``λmax + 0.01`` (one SLQ run,
  ``n_v=1``), so their R is ``−(θmax + 0.01) / (θmin − 0.01)``: :func:`padded_grid_ratio`.
* ``pyhessian/hessian.py`` ``hessian.__init__``: ``loss = criterion(model, dist_class, batch)``,
  ``loss.backward(create_graph=True)`` and ``get_params_grad(model)``: every ``model.parameters()`` that
  requires grad, the value branch included (RLlib's ``vf_share_layers=False`` model holds both branches).
  ``hessian.density(iter=100, n_v=1)``: Lanczos from a normalised Rademacher vector with full
  re-orthogonalisation, a fresh Gaussian vector on β = 0, then the eigenvalues of the 100 × 100
  tridiagonal T (``torch.linalg.eig``): :func:`lanczos_ritz_values`, transcribed step by step.
* ``pyhessian/utils.py``: ``normalization`` divides by ``‖v‖ + 1e-6``; ``orthnormal`` is sequential
  Gram-Schmidt against every earlier vector, then ``normalization``.

and IntelliSys-Lab/Nitro-ray (their RLlib) at commit 467c17f6a141df8f4764e5e5c05c8c85c5916329:

* ``rllib/algorithms/ppo/ppo_serverless.py`` ``training_step``: ``estimate_batch`` is the concatenation of
  every actor's batch of the round (``process_serverless_batches``), copied *before*
  ``standardize_fields(train_batch, ["advantages"])``: the whole batch, raw GAE advantages.
* ``rllib/algorithms/ppo/ppo_torch_policy.py`` ``PPOTorchPolicy.loss``: the training loss, ``mean(−surrogate
  + vf_loss_coeff · clamp((V − R)², 0, vf_clip_param) − entropy_coeff · H) + kl_coeff · KL``.

nimbus's translation (docs/nitro.md, "variant: authors_code"): the loss is the learner's own training loss
(``algo.loss``: for PPO the clipped surrogate + ``vf_coef`` · value loss − ``ent_coef`` · entropy), with
advantage normalisation off as in their estimate batch; the parameters are every trainable parameter but a
``target_net`` copy (RLlib keeps APPO's target model outside ``policy.model``); the rows are the whole
post-processed round batch. No subset, no convergence test: exactly ``min(max_iterations, #params)`` HVPs.

Example::

    extras = probe_authors(algo=algo, model=model, batch=batch, max_iterations=100, seed=7)
    extras["hessian_ratio"]            # their R: high values score as boostable in scaler_authors.py
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from nimbus.algos.base import Algorithm
from nimbus.analysis.hessian import HESSIAN_LAMBDA_MAX_KEY, HESSIAN_LAMBDA_MIN_KEY, HESSIAN_RATIO_KEY
from nimbus.liveness import beat

#: ``density_generate``'s ``overhead``: the grid reaches this far beyond the extreme Ritz values.
GRID_PADDING = 0.01
#: Set (to GRID_PADDING) only by this probe: ``scaler_authors.py`` refuses a row without it (a paper probe's R
#: is a different quantity, and reading it would reverse the ordering of rounds).
AUTHORS_SIGNAL_KEY = "hessian_grid_padding"
#: Parameters that are not the trained model's (IMPACT's frozen target copy).
TARGET_MODULES = ("target_net",)
_NORMALIZATION_EPS = 1e-6   # pyhessian/utils.py normalization: v / (‖v‖ + 1e-6)


def authors_parameters(*, model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """Every trainable parameter, critic included, outside ``target_net`` sub-modules (registration order)."""
    return [param for name, param in model.named_parameters()
            if param.requires_grad and not set(name.split(".")) & set(TARGET_MODULES)]


def authors_loss_algo(*, algo: Algorithm) -> Algorithm:
    """``algo`` with advantage normalisation off, when its config has the switch: their estimate batch is copied
    before RLlib standardises the advantages, so ``policy.loss`` sees the raw GAE advantages."""
    config = getattr(algo, "config", None)
    if config is None or not getattr(config, "normalize_advantages", False):
        return algo
    return type(algo)(config=config.model_copy(update={"normalize_advantages": False}))  # type: ignore[call-arg]


def _normalization(vector: torch.Tensor) -> torch.Tensor:
    return vector / (float(torch.dot(vector, vector)) ** 0.5 + _NORMALIZATION_EPS)


def _orthnormal(vector: torch.Tensor, basis: list[torch.Tensor]) -> torch.Tensor:
    for previous in basis:                               # sequential: each projection on the updated vector
        vector = vector - torch.dot(vector, previous) * previous
    return _normalization(vector)


def lanczos_ritz_values(*, hvp: Callable[[torch.Tensor], torch.Tensor], num_params: int, iterations: int,
                        generator: torch.Generator, dtype: torch.dtype, device: torch.device | str = "cpu"
                        ) -> np.ndarray:
    """``hessian.density(iter=iterations, n_v=1)``'s eigenvalues: ``iterations`` Lanczos steps, T's eigenvalues.

    ``hvp`` maps a flat vector of ``num_params`` entries to H·v. The start vector is Rademacher from
    ``generator`` (theirs: ``torch.randint_like`` on the global RNG), normalised as theirs.
    """
    def draw(kind: str) -> torch.Tensor:
        if kind == "rademacher":
            bits = torch.randint(0, 2, (num_params,), generator=generator).to(dtype)
            return (2.0 * bits - 1.0).to(device)
        return torch.randn(num_params, generator=generator, dtype=dtype).to(device)

    v = _normalization(draw("rademacher"))
    v_list, alpha_list, beta_list = [v], [], []
    w = torch.zeros_like(v)
    for i in range(iterations):
        if i > 0:
            beta = torch.sqrt(torch.dot(w, w))
            beta_list.append(beta.item())
            v = _orthnormal(w if beta_list[-1] != 0.0 else draw("gaussian"), v_list)
            v_list.append(v)
        w_prime = hvp(v)
        alpha = torch.dot(w_prime, v)
        alpha_list.append(alpha.item())
        w = w_prime - alpha * v
        if i > 0:
            w = w - beta * v_list[-2]
    if not all(map(math.isfinite, alpha_list + beta_list)):
        return np.full(iterations, math.nan)               # a non-finite loss: no signal (their eig would fail)
    tridiagonal = torch.zeros(iterations, iterations)     # float32, as theirs
    for i, alpha_value in enumerate(alpha_list):
        tridiagonal[i, i] = alpha_value
        if i < len(alpha_list) - 1:
            tridiagonal[i + 1, i] = tridiagonal[i, i + 1] = beta_list[i]
    return np.real(torch.linalg.eig(tridiagonal)[0].numpy()).astype(np.float64)


def padded_grid_ratio(*, ritz_values: np.ndarray) -> tuple[float, float, float]:
    """(grid min, grid max, their R): the density grid spans [θmin − 0.01, θmax + 0.01] and
    ``eval_hessian`` returns −max(grid)/min(grid). NaN where that is not a finite number."""
    values = np.asarray(ritz_values, dtype=np.float64)
    grid_max = float(np.max(values)) + GRID_PADDING
    grid_min = float(np.min(values)) - GRID_PADDING
    if not (math.isfinite(grid_max) and math.isfinite(grid_min)) or grid_min == 0.0:
        return grid_min, grid_max, math.nan
    return grid_min, grid_max, -grid_max / grid_min


def _hvp_operator(*, loss: torch.Tensor, params: list[torch.nn.Parameter]) -> Callable[[torch.Tensor], torch.Tensor]:
    """H·v of ``loss`` over ``params`` by double backward; a parameter the gradient does not depend on gives zeros
    (theirs: ``param - param`` stands in for a missing gradient)."""
    grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
    beat()   # progress (P5, docs/reliability.md): the forward and the create_graph backward
    live = [i for i, g in enumerate(grads) if g is not None and g.requires_grad]
    numels = [p.numel() for p in params]

    def hvp(vector: torch.Tensor) -> torch.Tensor:
        if not live:
            return torch.zeros_like(vector)
        chunks = [c.view_as(p) for c, p in zip(vector.split(numels), params)]
        products = torch.autograd.grad([grads[i] for i in live], [params[i] for i in live],
                                       grad_outputs=[chunks[i] for i in live], retain_graph=True, allow_unused=True)
        beat()   # progress: one HVP
        out = [torch.zeros_like(p) for p in params]
        for i, product in zip(live, products):
            if product is not None:
                out[i] = product
        return torch.cat([o.reshape(-1) for o in out]).detach()
    return hvp


def probe_authors(*, algo: Algorithm, model: torch.nn.Module, batch: dict[str, torch.Tensor], max_iterations: int,
                  seed: int) -> dict[str, float]:
    """Their signal for ``model`` on the whole post-processed ``batch`` (module docstring); extras for the row."""
    started = time.perf_counter()
    params = authors_parameters(model=model)
    loss_algo = authors_loss_algo(algo=algo)
    was_training = model.training
    model.eval()   # theirs: hessian.__init__ puts the model in eval mode
    try:
        with torch.enable_grad():
            hvp = _hvp_operator(loss=loss_algo.loss(model=model, batch=batch).loss, params=params)
            num_params = sum(p.numel() for p in params)
            steps = min(max_iterations, num_params)   # beyond #params the Krylov space is exhausted (nimbus)
            ritz = lanczos_ritz_values(hvp=hvp, num_params=num_params, iterations=steps,
                                       generator=torch.Generator().manual_seed(seed), dtype=params[0].dtype,
                                       device=params[0].device)
    finally:
        model.train(was_training)
    model.zero_grad(set_to_none=True)
    grid_min, grid_max, ratio = padded_grid_ratio(ritz_values=ritz)
    return {HESSIAN_RATIO_KEY: ratio, HESSIAN_LAMBDA_MAX_KEY: grid_max, HESSIAN_LAMBDA_MIN_KEY: grid_min,
            "hessian_ritz_max": float(np.max(ritz)), "hessian_ritz_min": float(np.min(ritz)),
            "hessian_num_hvps": float(steps), "hessian_probe_s": time.perf_counter() - started,
            AUTHORS_SIGNAL_KEY: GRID_PADDING}
