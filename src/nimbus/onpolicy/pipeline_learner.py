"""The learner function in pipelined mode (``pipeline.minibatch`` / ``pipeline.dual_stage``, PPO, onpolicy).

The driver invokes it as soon as the first actor's rows are in the shared ARTOS buffer (a
``DataKeyTrigger`` with n = 1, onpolicy/pipelined.py), with the round's actor ranks and the
buffer's ingest sequence number at the round's start. It then watches the buffer's header: each
actor's fragment becomes a block of ``StreamingPPOUpdate`` (onpolicy/pipeline.py) the moment its rows
are visible — GAE keys first, then observations, actions and log-probs when ``dual_stage`` — so
epoch 1's first minibatches run while the slower actors still sample. It publishes v+1 exactly as
``learner_function`` does (same result header; keep the two tails in step).

Rows of one actor are one ingest (contiguous, in order); a block is accepted only when all of its
``rows_per_actor`` rows are visible with ingest sequence numbers of this round, so a header read
while the driver is mid-ingest is simply retried.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from nimbus.algos.step import all_finite
from nimbus.data.buffer import Buffer
from nimbus.data.codec import Message
from nimbus.data.stores import function_store
from nimbus.envs.obsnorm import merge, pop_moments
from nimbus.nitro.probe import probe_after_update
from nimbus.onpolicy.pipeline import GAE_KEYS, TRAIN_KEYS, PipelineOptions, StreamingPPOUpdate
from nimbus.roles.actor import derive_seed
from nimbus.roles.learner import LearnerRequest, LearnerResult, learner_state, publish_version, restore_state
from nimbus.runtime.base import FunctionContext

PIPELINE_KEY = "pipeline"  # request header key; its presence routes learner_function here
POLL_S = 0.0005


@dataclass(frozen=True)
class StreamRequest:
    """Which rows make up this round: one fragment of ``rows_per_actor`` rows per rank, ingested from
    ``from_seq`` on."""

    ranks: list[int]
    rows_per_actor: int
    from_seq: int
    minibatch: bool
    dual_stage: bool
    loader: bool
    wait_s: float

    def options(self) -> PipelineOptions:
        return PipelineOptions(minibatch=self.minibatch, dual_stage=self.dual_stage, loader=self.loader)


def arrived_blocks(*, buffer: Buffer, stream: StreamRequest, deadline: float) -> Iterator[tuple[int, np.ndarray]]:
    """(block index, the block's row positions in order) as each rank's fragment becomes visible."""
    pending = dict(enumerate(sorted(stream.ranks)))
    while pending:
        positions = buffer.positions_since(seq=stream.from_seq)
        if positions.size:
            meta = buffer.read_meta(indices=positions)
            for block, rank in list(pending.items()):
                mine = meta["actor_rank"] == rank
                seqs = meta["ingest_seq"][mine]
                if seqs.size >= stream.rows_per_actor:
                    order = np.argsort(seqs, kind="stable")[:stream.rows_per_actor]
                    if seqs[order[-1]] - seqs[order[0]] == stream.rows_per_actor - 1:  # one whole, untorn ingest
                        del pending[block]
                        yield block, positions[mine][order]
        if pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"rows of actor ranks {sorted(pending.values())} did not arrive within "
                                   f"{stream.wait_s} s")
            time.sleep(POLL_S)


def _tensors(*, buffer: Buffer, positions: np.ndarray, keys: tuple[str, ...]) -> dict[str, torch.Tensor]:
    return {key: torch.as_tensor(np.ascontiguousarray(value)) for key, value in
            buffer.read(indices=positions, keys=list(keys)).items()}


def _stream_update(*, context: FunctionContext, req: LearnerRequest, stream: StreamRequest,
                   state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], Any, float]:
    """Feed every block into a StreamingPPOUpdate as it arrives; returns (batch, stats, compute seconds)."""
    buffers: dict[str, Buffer] = state["buffers"]
    name = req.buffer["header"]
    if name not in buffers:
        buffers[name] = Buffer.attach(descriptor=req.buffer)
    buffer = buffers[name]
    update = StreamingPPOUpdate(algo=state["algo"], model=state["model"], optimizer=state["optimizer"],
                                block_rows=[stream.rows_per_actor] * len(stream.ranks), options=stream.options(),
                                progress=req.progress,
                                generator=torch.Generator().manual_seed(derive_seed(req.seed, req.policy_version, 2)))
    stages = (GAE_KEYS, TRAIN_KEYS) if stream.dual_stage else (GAE_KEYS + TRAIN_KEYS,)
    busy_s = 0.0
    for block, positions in arrived_blocks(buffer=buffer, stream=stream, deadline=time.monotonic() + stream.wait_s):
        for keys in stages:
            tick = time.perf_counter()
            update.add_stage(block=block, arrays=_tensors(buffer=buffer, positions=positions, keys=keys))
            busy_s += time.perf_counter() - tick
    tick = time.perf_counter()
    batch, stats = update.finish()
    return batch, stats, busy_s + time.perf_counter() - tick


def pipelined_learner_function(*, context: FunctionContext, request: Message) -> Message:
    req = LearnerRequest.from_message(request)
    stream = StreamRequest(**request.header[PIPELINE_KEY])
    started = time.perf_counter()
    # the CPU whatever the lease: the stream's stages are CPU-bound; the lease still serialises learners
    state = learner_state(context=dataclasses.replace(context, device="cpu"), req=req,
                           store=function_store(header=request.header))
    model, optimizer = state["model"], state["optimizer"]
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("the pipelined learner runs on the CPU; use learner.device: cpu (or pipeline off)")
    snapshot = [p.detach().clone() for p in model.parameters()]
    batch, stats, compute_s = _stream_update(context=context, req=req, stream=stream, state=state)
    waited_s = time.perf_counter() - started - compute_s  # state load + waiting for rows
    stats_dict = {k: float(v) for k, v in asdict(stats).items()}
    nonfinite = not all(np.isfinite(v) for v in stats_dict.values()) or \
        not bool(all_finite(tensors=model.parameters()))  # one read for every tensor
    if nonfinite:
        restore_state(model=model, optimizer=optimizer, snapshot=snapshot, context=context, req=req)
    new_version = req.policy_version + 1
    if state.get("obs_rms") is not None:
        state["obs_rms"] = merge(into=state["obs_rms"], other=pop_moments(arrays=dict(request.arrays)))
    publish_version(store=state["store"], state=state, req=req, model=model, optimizer=optimizer,
                    writer=context.invocation_id)
    extras = {**probe_after_update(algo=state["algo"], model=model, batch=batch, probe=req.probe, seed=req.seed,
                                   policy_version=req.policy_version), "pipeline_wait_s": waited_s}
    result = LearnerResult(policy_version=new_version, stats=stats_dict, nonfinite=nonfinite, extras=extras,
                           transfer_s=0.0, learning_s=time.perf_counter() - started, compute_s=compute_s,
                           device="cpu", rows=stream.rows_per_actor * len(stream.ranks))
    return result.wire_message()
