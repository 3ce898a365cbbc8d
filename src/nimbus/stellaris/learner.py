"""Stellaris's learner function: the PPO or IMPACT gradient of one task at the newest weights, put in the Store.

It reads the weights of ``policy_version`` (the newest the driver knew at launch) and only its slice of the
round's rows, from the Store key ``batch_key`` (stellaris/slices.py: PPO's rows arrive with the driver's GAE;
IMPACT's are made time-major here, once per warm worker), computes the loss on the
task ``positions`` (PPO: rows; IMPACT: env columns; stellaris/gradients.py) and puts the
gradient under ``grad_key`` tagged with the version it read. It never steps an optimizer: the
parameter function aggregates (stellaris/parameter.py).

IS truncation (``truncation``: ``paper``, ``paper_ratio`` or ``code``, Stellaris Eq. 2): the ratio is truncated
by ``peer_versions``' policies (their published weights); see algos/truncation.py. The workflow launches
learners with none (the learners aggregated together are not known yet; alone, Eq. 2 is min(r_self, ρ)), and
the parameter function recomputes a gradient aggregated with other versions (``compute_gradient``). The put is
tagged with the invocation id, so a retried attempt replaces its own gradient and the key still holds one
gradient (P1).

Result header: ``grad_key``, ``read_version``, ``stats`` (loss parts, ``truncated_fraction``),
``nonfinite`` (a non-finite loss or gradient: nothing is put), ``compute_s``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import torch

from nimbus.algos.registry import ALGO_CONFIGS, make_algorithm
from nimbus.algos.truncation import Form, Truncation
from nimbus.data.codec import Message
from nimbus.data.request import WireRequest
from nimbus.data.result import WireResult
from nimbus.data.stores import function_store
from nimbus.models.weights import load_model, weights_key
from nimbus.roles.actor import request_spaces
from nimbus.roles.learner import resolve_device
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.devices import place
from nimbus.runtime.faults import fault_point
from nimbus.stellaris.gradients import GradientAlgo, gradient_algo_for

GRAD_PREFIX = "grad."


@dataclass(frozen=True)
class GradientResult(WireResult):
    """What a gradient learner returns (its gradient itself is in the Store under ``grad_key``)."""

    grad_key: str
    read_version: int           # the version it computed at (its staleness counts from it)
    stats: dict[str, float]
    nonfinite: bool             # a non-finite loss or gradient: nothing was put in the Store
    compute_s: float
    device: str
    rows: int


@dataclass(frozen=True)
class GradientRequest(WireRequest, header="gradient", affinity="gradient-{policy}"):
    env_id: str
    env_kwargs: dict[str, Any]
    algo: dict[str, Any]
    policy: str
    policy_version: int            # the weights this gradient is computed at
    batch_key: str                 # the round's rows in the Store
    grad_key: str                  # where the gradient goes (one key per gradient task)
    peer_versions: Sequence[int]   # the other learners' versions, for the IS truncation
    truncation: Form | Literal["none"]   # paper | paper_ratio | code | none
    rho: float
    progress: float
    device: str
    torch_threads: int
    env_imports: Sequence[str] = ()
    env_wrappers: Sequence[str] = ()
    slowdown: float = 1.0          # stellaris.stragglers: sleep (slowdown − 1) × the compute time (a benchmark aid)

    def to_task_message(self, *, positions: np.ndarray) -> Message:
        """The request with its task's ``positions`` (a gradient request never travels without one)."""
        return self.wire_message(arrays={"positions": positions.astype(np.int64)})


def gradient_to_message(*, model: torch.nn.Module, read_version: int) -> Message:
    return Message(header={"read_version": read_version},
                   arrays={GRAD_PREFIX + name: g for name, g in gradient_arrays(model=model).items()})


def gradient_arrays(*, model: torch.nn.Module) -> dict[str, np.ndarray]:
    """``model``'s gradient by parameter name, copied to the host in one read: one flat copy, viewed per parameter
    (a copy per parameter would be a device round trip each)."""
    named = [(name, p.grad.detach()) for name, p in model.named_parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for _, g in named]).cpu().numpy() if named else np.zeros(0, np.float32)
    arrays, start = {}, 0
    for name, grad in named:
        arrays[name] = flat[start:start + grad.numel()].reshape(tuple(grad.shape))
        start += grad.numel()
    return arrays


class Sources(Protocol):
    """Where a gradient's inputs come from: the learner's warm worker (``WorkerSources``) or the parameter
    function's caches (stellaris/recompute.py)."""

    def model(self, *, version: int) -> torch.nn.Module: ...

    def rows(self, *, key: str) -> dict[str, torch.Tensor]: ...

    def peer_log_prob(self, *, version: int, index: int, key: str, positions: np.ndarray,
                      minibatch: dict[str, torch.Tensor]) -> torch.Tensor: ...


@dataclass(frozen=True)
class WorkerSources:
    """A learner's: its models by slot (loaded when they hold another version) and the slice it read last."""

    state: dict[str, Any]
    store: Any
    policy: str

    def model(self, *, version: int) -> torch.nn.Module:
        return model_at(state=self.state, store=self.store, policy=self.policy, version=version, slot="self")

    def rows(self, *, key: str) -> dict[str, torch.Tensor]:
        return _batch(state=self.state, store=self.store, key=key)

    def peer_log_prob(self, *, version: int, index: int, key: str, positions: np.ndarray,
                      minibatch: dict[str, torch.Tensor]) -> torch.Tensor:
        peer = model_at(state=self.state, store=self.store, policy=self.policy, version=version, slot=f"peer{index}")
        with torch.no_grad():
            return gradient_algo_for(name=self.state["algo"].config.name).log_prob(model=peer, batch=minibatch)


@dataclass(frozen=True)
class Computed:
    """One task's gradient, left in ``model``'s ``.grad`` (finite: nothing non-finite in the loss or gradient)."""

    model: torch.nn.Module
    stats: dict[str, float]
    finite: bool
    rows: int


def compute_gradient(*, state: dict[str, Any], store: Any, req: GradientRequest, positions: np.ndarray,
                     sources: Sources | None = None) -> Computed:
    """The loss of the task ``positions`` at ``req.policy_version``, truncated by ``req.peer_versions``, and its
    gradient (the learner function's work; the parameter function redoes it for a member whose co-members'
    versions are its truncation peers, stellaris/parameter.py, with its own ``sources``). One host read decides
    finiteness (the loss and every gradient element, on the device); the loss's statistics are read once by the
    loss itself."""
    sources = sources if sources is not None else WorkerSources(state=state, store=store, policy=req.policy)
    batch = sources.rows(key=req.batch_key)
    gradient_algo = gradient_algo_for(name=req.algo["name"])
    minibatch = gradient_algo.select(batch=batch, positions=torch.as_tensor(positions, device=state["device"]))
    truncation = _truncation(req=req, minibatch=minibatch, gradient_algo=gradient_algo, sources=sources,
                             positions=positions)
    model = sources.model(version=req.policy_version)   # after the peers': a cache may reuse a peer's model object
    model.zero_grad(set_to_none=True)
    out = gradient_algo.loss(model=model, batch=minibatch, config=state["algo"].config, progress=req.progress,
                             truncation=truncation)
    out.loss.backward()   # a non-finite loss is refused below, its gradient with it
    grads = [p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]
    finite = bool(torch.isfinite(torch.cat([out.loss.detach().reshape(1), *grads])).all())
    return Computed(model=model, stats=out.stats, finite=finite,
                    rows=int(minibatch[gradient_algo.behaviour_key].numel()))


def gradient_learner_function(*, context: FunctionContext, request: Message) -> Message:
    req = GradientRequest.from_message(request)
    store = function_store(header=request.header)
    state = gradient_state(context=context, req=req)
    started = time.perf_counter()
    computed = compute_gradient(state=state, store=store, req=req, positions=request.arrays["positions"])
    model, finite = computed.model, computed.finite
    if req.slowdown > 1.0:   # a straggler (stellaris.stragglers): as if it computed slowdown times slower
        time.sleep((req.slowdown - 1.0) * (time.perf_counter() - started))
    if finite and _poison_if_armed(model=model, point="gradient.nonfinite"):   # tests: it reports non-finite
        finite = False
    if finite:
        _poison_if_armed(model=model, point="gradient.poisoned")    # tests: the parameter function refuses it
        store.put(key=req.grad_key, message=gradient_to_message(model=model, read_version=req.policy_version),
                  writer=context.invocation_id)
        fault_point(name="gradient.published")
    return GradientResult(grad_key=req.grad_key, read_version=req.policy_version, stats=computed.stats,
                          nonfinite=not finite, compute_s=time.perf_counter() - started, device=str(state["device"]),
                          rows=computed.rows).wire_message()


def _poison_if_armed(*, model: torch.nn.Module, point: str) -> bool:
    """Fault injection (runtime/faults.py, action ``nan``): the gradient becomes NaN at ``point`` (True)."""
    if not fault_point(name=point):
        return False
    for param in model.parameters():
        if param.grad is not None:
            param.grad.fill_(float("nan"))
    return True


def gradient_state(*, context: FunctionContext, req: GradientRequest) -> dict[str, Any]:
    """The warm worker's state for ``req``'s algorithm and env (``context.cache``: algo, spaces, models by slot, the
    batch), placed on the request's device (shared with the parameter function, stellaris/parameter.py)."""
    cache = context.cache
    if cache.get("gradient_algo") != req.algo or cache.get("gradient_env") != (req.env_id, list(req.env_wrappers)):
        torch.set_num_threads(req.torch_threads)
        config = ALGO_CONFIGS[req.algo["name"]].model_validate(req.algo)
        spaces = request_spaces(req=req)
        cache.clear()
        cache.update(gradient_algo=req.algo, gradient_env=(req.env_id, list(req.env_wrappers)),
                     algo=make_algorithm(config=config), spaces=spaces, models={}, batch=None)
    cache["device"] = resolve_device(requested=req.device, leased=context.device)
    place(cache=cache, device=cache["device"])  # the warm models left the device at the last lease's end
    return cache


def model_at(*, state: dict[str, Any], store: Any, policy: str, version: int, slot: str) -> torch.nn.Module:
    """The model of ``slot`` ("self", "param" or a peer) holding ``version``; loaded only when it holds another."""
    models: dict[str, tuple[tuple[str, int], torch.nn.Module]] = state["models"]
    held = models.get(slot)
    if held is None:
        held = ((policy, -1), state["algo"].make_model(spaces=state["spaces"]).to(state["device"]))
    if held[0] != (policy, version):
        load_model(model=held[1], message=store.get(key=weights_key(policy=policy, version=version)))
        held = ((policy, version), held[1])
    models[slot] = held
    return held[1]


def _batch(*, state: dict[str, Any], store: Any, key: str) -> dict[str, torch.Tensor]:
    """The rows under ``key`` (the workflow's slice) on the device; post-processed here only when the driver has
    not (``postprocessed`` in its header: PPO's GAE is the driver's, once per row; IMPACT's layout is the learner's)."""
    if state["batch"] is None or state["batch"][0] != key:
        message = store.get(key=key)
        rows = {name: torch.as_tensor(np.array(value), device=state["device"])
                for name, value in message.arrays.items()}
        state["batch"] = (key, rows if message.header.get("postprocessed") else state["algo"].postprocess(batch=rows))
    return state["batch"][1]


def _truncation(*, req: GradientRequest, minibatch: dict[str, torch.Tensor], gradient_algo: GradientAlgo,
                sources: Sources, positions: np.ndarray) -> Truncation | None:
    if req.truncation == "none":
        return None
    peer_min = torch.full_like(minibatch[gradient_algo.behaviour_key], float("inf"))
    for index, version in enumerate(sorted(set(req.peer_versions))):
        log_prob = sources.peer_log_prob(version=version, index=index, key=req.batch_key, positions=positions,
                                         minibatch=minibatch)
        peer_min = torch.minimum(peer_min, log_prob)
    return Truncation(peer_log_prob_min=peer_min, rho=req.rho, form=req.truncation)
