"""Nitro's boosting detector inside the learner function: probe the Hessian after the update.

When the actor scaler needs it (``actors.scaling.kind: nitro``), the driver puts a ``probe`` block in
every learner request (:func:`probe_request`, roles/probe.py). After the update, the learner function calls
:func:`probe_policy`, which evaluates the surrogate *objective* of the updated policy on a random subset
of the round's (post-processed) batch and returns, for the learner result header::

    {"hessian_ratio": R, "hessian_lambda_max": ..., "hessian_lambda_min": ..., "probe_s": ..., ...}

The workflow merges these into ``RoundMetrics.extras``, ``NitroScaler.decide`` reads them, and
:func:`with_decision` writes the decision's signals (R, S, window, budget left) into the same row.

Decisions (paper 002, §4-§6):

* **Which policy.** The *updated* policy θ_{k+1}, probed right after the update and before any actor
  samples with it: the paper's step 2 ("after a new policy is generated, Nitro inspects the new policy
  network", §4), so the score decides how many actors roll out θ_{k+1} (step 3-4).
* **Which data.** The only trajectories that exist at that moment: the round's batch, collected by θ_k
  and post-processed (GAE advantages, or V-trace's time-major layout), a uniform subset of
  ``subset_size`` rows (§6.2, "a subset of trajectories sampled from Nitro's trajectory cache"). For a
  time-major batch ([T, B, ...], IMPALA) the subset is whole fragments (columns), ``ceil(subset/T)`` of
  them, because V-trace runs along time. Its seed derives from the run seed and the policy version.
* **Which objective.** The objective being maximised, i.e. the negated algorithm loss
  (``-algo.loss(model, subset).loss``), differentiated w.r.t. the **policy parameters only**
  (:func:`policy_parameters`: every trainable parameter outside ``critic`` and ``target_net``
  sub-modules). With separate actor and critic networks the value loss is constant in those
  parameters, so this is the policy surrogate (PPO's clipped ratio objective, IMPALA's V-trace policy
  gradient or IMPACT's clipped surrogate) plus the entropy bonus when ``ent_coef > 0``. Probing the loss
  instead would give 1/R and reverse the paper's ordering (``analysis/hessian.py``). PPO's loss uses
  the nominal ``clip_coef`` (not the linear schedule's current value) and normalises advantages over
  the subset, as each minibatch of the update does.
* **``variant: authors_code``** probes as the authors' code does instead (``signal: authors_code`` in the
  request, :func:`probe_policy_authors`, ``nitro/probe_authors.py``): the whole training loss over every
  parameter (critic included) on the whole batch, read off their density grid padded by ±0.01.
* **A failed probe** (non-finite objective or eigenvalues, λmin ≥ 0) still returns its keys with R = NaN;
  the scaler skips such rounds and counts them (``nitro/scaler.py``). ``probe_s`` is timed inside the
  learner function, so its cost is billed with the learner's in the ledger.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch

from nimbus.algos.base import Algorithm
from nimbus.analysis.hessian import (
    HESSIAN_LAMBDA_MAX_KEY,
    HESSIAN_LAMBDA_MIN_KEY,
    HESSIAN_RATIO_KEY,
    extreme_eigenvalues,
    subset_indices,
)
from nimbus.nitro.probe_authors import probe_authors
from nimbus.roles.actor import derive_seed
from nimbus.roles.probe import ProbeRequest
from nimbus.types import PROBE_SECONDS_KEY, RoundMetrics, ScalingDecision

#: Sub-modules whose parameters are not the policy's (separate value network, frozen target copy).
NON_POLICY_MODULES = ("critic", "target_net")


def policy_parameters(*, model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """Trainable parameters outside the ``critic`` / ``target_net`` sub-modules, in registration order."""
    return [param for name, param in model.named_parameters()
            if param.requires_grad and not set(name.split(".")) & set(NON_POLICY_MODULES)]


def select_subset(*, batch: dict[str, torch.Tensor], subset_size: int | None,
                  generator: torch.Generator) -> dict[str, torch.Tensor]:
    """``subset_size`` uniform rows of a flat batch, or ``ceil(subset_size / T)`` whole columns of a
    time-major one (``rewards`` of shape [T, B]); the whole batch when ``subset_size`` is None."""
    if subset_size is None:
        return batch
    time_major = batch["rewards"].dim() == 2
    if time_major:
        length, columns = batch["rewards"].shape
        index = subset_indices(batch_size=columns, subset_size=math.ceil(subset_size / length), generator=generator)
        return {key: value[:, index] for key, value in batch.items()}
    index = subset_indices(batch_size=batch["rewards"].shape[0], subset_size=subset_size, generator=generator)
    return {key: value[index] for key, value in batch.items()}


def probe_policy(*, algo: Algorithm, model: torch.nn.Module, batch: dict[str, torch.Tensor],
                 request: ProbeRequest, seed: int) -> dict[str, float]:
    """Extreme Hessian eigenvalues of the objective ``-algo.loss`` of ``model`` on a subset of ``batch``.

    ``batch`` is post-processed (what ``algo.update`` consumed). Returns ``HessianProbe.to_extras()``
    plus ``probe_s`` (the whole probe: subset, objective graph, Lanczos) and ``probe_rows``.
    """
    started = time.perf_counter()
    generator = torch.Generator().manual_seed(seed)
    subset = select_subset(batch=batch, subset_size=request.subset_size, generator=generator)
    params = policy_parameters(model=model)
    was_training = model.training
    model.eval()   # no dropout/batch-norm in nimbus models today; keeps the objective deterministic anyway
    try:
        probe = extreme_eigenvalues(loss_fn=lambda: -algo.loss(model=model, batch=subset).loss, params=params,
                                    max_iterations=request.max_iterations, tolerance=request.tolerance, seed=seed)
    finally:
        model.train(was_training)
    model.zero_grad(set_to_none=True)
    rows = int(subset["rewards"].numel())
    return {**probe.to_extras(), PROBE_SECONDS_KEY: time.perf_counter() - started, "probe_rows": float(rows)}


def probe_policy_authors(*, algo: Algorithm, model: torch.nn.Module, batch: dict[str, torch.Tensor],
                         request: ProbeRequest, seed: int) -> dict[str, float]:
    """The authors' signal (``nitro/probe_authors.py``): their loss over all parameters on the whole ``batch``,
    read off their padded density grid; plus ``probe_s`` and ``probe_rows`` as :func:`probe_policy`."""
    started = time.perf_counter()
    extras = probe_authors(algo=algo, model=model, batch=batch, max_iterations=request.max_iterations, seed=seed)
    rows = int(batch["rewards"].numel())
    return {**extras, PROBE_SECONDS_KEY: time.perf_counter() - started, "probe_rows": float(rows)}


def probe_after_update(*, algo: Algorithm, model: torch.nn.Module, batch: dict[str, torch.Tensor],
                       probe: dict[str, Any] | None, seed: int, policy_version: int) -> dict[str, float]:
    """What a learner function runs after its update: :func:`probe_policy` of the updated model when its request
    carries a ``probe`` block (:class:`ProbeRequest` header; :func:`probe_policy_authors` when its ``signal`` is
    ``authors_code``), else {}. Seeded from the run ``seed`` and the version
    the update read."""
    request = ProbeRequest.from_header(probe)
    if request is None:
        return {}
    if request.signal == "authors_code":
        return probe_policy_authors(algo=algo, model=model, batch=batch, request=request,
                                    seed=derive_seed(seed, policy_version, 3))
    return probe_policy(algo=algo, model=model, batch=batch, request=request,
                        seed=derive_seed(seed, policy_version, 3))


def probe_not_run() -> dict[str, float]:
    """The probe's keys when it could not run (an off-policy update whose sampled rows were all
    overwritten): R = NaN, so the scaler skips the round and falls back to I_min."""
    nan = math.nan
    return {HESSIAN_RATIO_KEY: nan, HESSIAN_LAMBDA_MAX_KEY: nan, HESSIAN_LAMBDA_MIN_KEY: nan,
            PROBE_SECONDS_KEY: 0.0, "probe_rows": 0.0}


def with_decision(*, row: RoundMetrics, decision: ScalingDecision) -> RoundMetrics:
    """The row plus the signals of the decision taken from it (its R, S, window, budget left) and the
    actor count it chose for the next round (``next_num_actors``).

    Merged after the row's own extras, so the scaler always reads this round's probe, never a
    previous decision's copy of R.
    """
    extras = {**row.extras, **decision.signals, "next_num_actors": float(decision.num_actors)}
    return dataclasses.replace(row, extras=extras)


def round_probe_extras(*, extras: dict[str, float], round_s: float) -> dict[str, float]:
    """A learner result's probe extras plus ``probe_share`` (probe_s / round_s; goal < 5 %, Nitro §8.7)."""
    if PROBE_SECONDS_KEY not in extras:
        return dict(extras)
    return {**extras, "probe_share": extras[PROBE_SECONDS_KEY] / max(round_s, 1e-9)}
