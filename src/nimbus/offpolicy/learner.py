"""The off-policy learner function: read a ``ReplayBatch`` from the shared buffer, update, publish v+1.

Same state rules as the on-policy learner (the helpers of roles/learner.py): the learner's
state lives in the Store (``weights/<policy>/<v>``, ``optim/<policy>/<v>``), a warm worker that holds
version v skips the reload, a non-finite update is undone and reported. What it adds:

* **Row validity.** The driver sampled positions and their ``ingest_seq``; actors keep writing while
  the learner runs, so a position may hold a newer row by the time it is read. Rows whose seq changed
  are dropped (in whole ``row_group``s: one env's T steps for IMPALA) and counted (``stale_rows``).
* **Replay columns.** N-step ``returns_n`` / ``discount_n`` and PER ``weights`` come with the request;
  ``next_obs`` is read at ``next_indices`` (the row that ends each n-step transition).
* **TD errors back.** With ``return_td_errors`` (PER), the result carries ``td_errors`` for the kept
  rows and the ``kept`` mask, from which the driver updates priorities.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from nimbus.algos.step import all_finite
from nimbus.data.buffer import Buffer
from nimbus.data.codec import Message
from nimbus.data.replay import ReplayBatch
from nimbus.data.stores import function_store, put_all
from nimbus.models.weights import version_items
from nimbus.nitro.probe import probe_after_update, probe_not_run
from nimbus.roles.actor import derive_seed
from nimbus.roles.learner import LearnerRequest, LearnerResult, cpu_copy, learner_state, restore_state
from nimbus.runtime.base import FunctionContext
from nimbus.runtime.faults import fault_point

COLUMN_PREFIX = "col."


@dataclass(frozen=True)
class OffPolicyLearnerRequest(LearnerRequest):
    return_td_errors: bool = False   # PER: send back per-row TD errors
    row_group: int = 1               # stale rows are dropped in whole groups of this many rows

    def to_batch_message(self, *, batch: ReplayBatch) -> Message:
        arrays = {"indices": batch.indices.astype(np.int64), "seqs": batch.seqs.astype(np.int64)}
        if batch.next_indices is not None:
            if batch.next_seqs is None:
                raise ValueError("an n-step ReplayBatch names next_indices without their next_seqs")
            arrays["next_indices"] = batch.next_indices.astype(np.int64)
            arrays["next_seqs"] = batch.next_seqs.astype(np.int64)
        arrays.update({COLUMN_PREFIX + key: np.asarray(value) for key, value in batch.columns.items()})
        return self.wire_message(arrays=arrays)


def offpolicy_learner_function(*, context: FunctionContext, request: Message) -> Message:
    req = OffPolicyLearnerRequest.from_message(request)
    started = time.perf_counter()
    state = learner_state(context=context, req=req, store=function_store(header=request.header))
    batch, kept = _read_batch(context=context, req=req, arrays=request.arrays, device=state["device"])
    transfer_s = time.perf_counter() - started
    algo, model, optimizer = state["algo"], state["model"], state["optimizer"]
    generator = torch.Generator().manual_seed(derive_seed(req.seed, req.policy_version, 2))
    snapshot = [p.detach().clone() for p in model.parameters()]
    compute_started = time.perf_counter()
    stats, td_errors = _update(algo=algo, model=model, optimizer=optimizer, batch=batch, req=req,
                               generator=generator, rows=int(kept.sum()))
    compute_s = time.perf_counter() - compute_started
    nonfinite = not all(np.isfinite(v) for v in stats.values()) or \
        not bool(all_finite(tensors=model.parameters()))  # one read for every tensor
    if nonfinite:
        restore_state(model=model, optimizer=optimizer, snapshot=snapshot, context=context, req=req)
    new_version = req.policy_version + 1
    put_all(store=state["store"],  # one round trip where the backend batches
            items=version_items(policy=req.policy, version=new_version, model=cpu_copy(model=model),
                                optimizer=optimizer),
            writer=context.invocation_id)  # a retry of this invocation may redo the puts (data/store.py)
    state["version"] = (req.policy, new_version)
    fault_point(name="learner.published")
    extras = _probe_updated(algo=algo, model=model, batch=batch, kept=kept, req=req)
    result = LearnerResult(policy_version=new_version, stats=stats, nonfinite=nonfinite, extras=extras,
                           transfer_s=transfer_s, learning_s=time.perf_counter() - started - transfer_s,
                           compute_s=compute_s, device=str(state["device"]), rows=int(kept.sum()),
                           stale_rows=int((~kept).sum()))
    arrays = {"kept": kept} if req.return_td_errors else {}
    if td_errors is not None and not nonfinite:
        arrays["td_errors"] = td_errors
    return result.wire_message(arrays=arrays)


def _update(*, algo: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            batch: dict[str, torch.Tensor], req: OffPolicyLearnerRequest, generator: torch.Generator,
            rows: int) -> tuple[dict[str, float], np.ndarray | None]:
    if rows == 0:  # every sampled row was overwritten: nothing to learn from, the version still advances
        return {}, None
    batch = algo.postprocess(batch=batch)
    if req.return_td_errors:
        result = algo.update_with_td_errors(model=model, optimizer=optimizer, batch=batch, progress=req.progress,
                                            generator=generator)
        return {k: float(v) for k, v in asdict(result.stats).items()}, result.td_errors
    stats = algo.update(model=model, optimizer=optimizer, batch=batch, progress=req.progress, generator=generator)
    return {k: float(v) for k, v in asdict(stats).items()}, None


def _probe_updated(*, algo: Any, model: torch.nn.Module, batch: dict[str, torch.Tensor], kept: np.ndarray,
                   req: OffPolicyLearnerRequest) -> dict[str, float]:
    """Nitro, off-policy boosting: probe the updated policy while the actors keep sampling (nitro/probe.py)."""
    if req.probe is None:
        return {}
    if not kept.any():
        return probe_not_run()
    return probe_after_update(algo=algo, model=model, batch=algo.postprocess(batch=batch), probe=req.probe,
                              seed=req.seed, policy_version=req.policy_version)


def _buffer(*, context: FunctionContext, req: OffPolicyLearnerRequest) -> Buffer:
    buffers: dict[str, Buffer] = context.cache["buffers"]
    name = req.buffer["header"]  # the header segment name identifies the buffer
    if name not in buffers:
        buffers[name] = Buffer.attach(descriptor=req.buffer)
    return buffers[name]


def _read_batch(*, context: FunctionContext, req: OffPolicyLearnerRequest, arrays: dict[str, np.ndarray],
                device: torch.device) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """The batch's rows (stale groups dropped) as tensors, and the kept mask over the sampled rows."""
    buffer = _buffer(context=context, req=req)
    indices = arrays["indices"]
    rows = buffer.read(indices=indices)
    if "next_indices" in arrays:
        rows["next_obs"] = buffer.read(indices=arrays["next_indices"], keys=["next_obs"])["next_obs"]
    rows.update({key[len(COLUMN_PREFIX):]: value for key, value in arrays.items() if key.startswith(COLUMN_PREFIX)})
    # checked after the read: a row overwritten meanwhile shows a new ingest_seq
    kept = buffer.read_meta(indices=indices)["ingest_seq"] == arrays["seqs"]
    if "next_indices" in arrays:
        kept &= buffer.read_meta(indices=arrays["next_indices"])["ingest_seq"] == arrays["next_seqs"]
    if not kept.all():
        kept = np.repeat(kept.reshape(-1, req.row_group).all(axis=1), req.row_group)
        rows = {key: value[kept] for key, value in rows.items()}
    return {key: torch.as_tensor(np.ascontiguousarray(value), device=device) for key, value in rows.items()}, kept
