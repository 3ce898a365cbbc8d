"""ARTOS's on-policy pipelines (ARTOS §3.4, §4.4): the PPO update starts before every actor's rows are in.

A round's batch is a sequence of *blocks*, one per actor in rank order (FullBatch's order in sync
mode), each env-major, so GAE never crosses a block. ``StreamingPPOUpdate`` takes each block in up
to two *stages* (``TransferTrigger`` keys in order) as it arrives:

* **dual-stage** (``dual_stage``): stage 1 carries only what GAE needs (``GAE_KEYS``: rewards, values,
  V(s_{t+1}), terminated, cut) and the block's advantages are computed at once; stage 2 carries
  observations, actions and log-probs, which GAE never reads.
* **mini-batch** (``minibatch``): epoch 1's minibatches are drawn block-contiguously — a permutation
  *within* each block, blocks in rank order — so minibatch k needs only the blocks it covers, and it
  runs (its gradient step taken) as soon as they are in. Epochs 2..K permute the whole batch, as
  unpipelined PPO does.

Exactness: the update is a pure function of (weights, batch, generator state, options). Feeding the
blocks one by one as they arrive, or all at once, runs the same operations in the same order, so the
pipelined update *equals* the unpipelined one with the same options (tests/unit/onpolicy/test_pipeline.py);
with ``minibatch`` off the schedule is ``ppo_update``'s own (one ``randperm`` of the batch per epoch
from the same generator), and per-block GAE equals whole-batch GAE (blocks end with cut = True), so
it equals ``algo.postprocess`` + ``ppo_update`` too. With ``minibatch`` on, epoch 1's shuffle is
within blocks — a different (still random, ARTOS's argument) minibatch composition than a full
shuffle; the equality tests compare it with the same schedule run unpipelined.

No host read per minibatch: a step's non-finite guard is decided on the device (`guarded_step`, the step
skipped and the weights kept) and the statistics are summed there (`DeviceStats`); ``finish`` reads them
once, and approx_kl once per epoch when ``target_kl`` is set.

Example::

    update = StreamingPPOUpdate(algo=algo, model=model, optimizer=opt, block_rows=[1024, 1024],
                                options=PipelineOptions(minibatch=True, dual_stage=True),
                                progress=0.3, generator=torch.Generator().manual_seed(7))
    update.add_stage(block=0, arrays=stage1_of_actor0)   # GAE of block 0 now
    update.add_stage(block=0, arrays=stage2_of_actor0)   # epoch-1 minibatches inside block 0 run now
    ...
    batch, stats = update.finish()                        # the rest of epoch 1, then epochs 2..K
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from nimbus.algos.gae import compute_gae
from nimbus.algos.ppo.learner import REQUIRED_KEYS, UpdateStats, minibatch_terms, scheduled
from nimbus.algos.ppo.loss import LOSS_STATS, explained_variance_tensor
from nimbus.algos.step import DeviceStats, guarded_step, param_device
from nimbus.models.mlp import PolicyValueModel
from nimbus.onpolicy.loader import DeviceLoader

log = logging.getLogger(__name__)
GAE_KEYS = ("rewards", "values", "next_values", "terminated", "cut")
TRAIN_KEYS = ("obs", "actions", "log_prob")
STAGES = (GAE_KEYS, TRAIN_KEYS)  # the dual-stage TransferTrigger's keys, in order


@dataclass(frozen=True)
class PipelineOptions:
    minibatch: bool = False   # ARTOS mini-batch pipeline: epoch 1 starts on the first block that arrives
    dual_stage: bool = False  # ARTOS dual-stage pipeline: GAE keys first, GAE while the rest arrives
    loader: bool = False      # Stellaris device loader: the next minibatch is staged by a background thread


def epoch_orders(*, block_rows: list[int], num_epochs: int, minibatch: bool,
                 generator: torch.Generator) -> list[torch.Tensor]:
    """Row orders of every epoch: epoch 1 block-contiguous when ``minibatch``, the rest full permutations."""
    num_rows = sum(block_rows)
    orders = []
    for epoch in range(num_epochs):
        if epoch == 0 and minibatch:
            offsets = [sum(block_rows[:block]) for block in range(len(block_rows))]
            orders.append(torch.cat([offset + torch.randperm(rows, generator=generator)
                                     for offset, rows in zip(offsets, block_rows)]))
        else:
            orders.append(torch.randperm(num_rows, generator=generator))
    return orders


class StreamingPPOUpdate:
    """One PPO update over a batch that arrives block by block (see the module docstring)."""

    def __init__(self, *, algo, model: PolicyValueModel, optimizer: torch.optim.Optimizer, block_rows: list[int],
                 options: PipelineOptions, progress: float, generator: torch.Generator, eager: bool = True) -> None:
        """``eager=False`` takes no step before ``finish`` (the unpipelined reference of the same schedule)."""
        cfg = algo.config
        self.eager = eager
        self.algo, self.model, self.optimizer, self.options, self.cfg = algo, model, optimizer, options, cfg
        self.block_rows = list(block_rows)
        self.starts = [sum(block_rows[:i]) for i in range(len(block_rows))]
        self.num_rows = sum(block_rows)
        self.minibatch_size = min(cfg.minibatch_size, self.num_rows)
        self.lr = scheduled(value=cfg.lr, schedule=cfg.lr_schedule, progress=progress)
        self.clip_coef = scheduled(value=cfg.clip_coef, schedule=cfg.clip_schedule, progress=progress)
        for group in optimizer.param_groups:
            group["lr"] = self.lr
        self.orders = epoch_orders(block_rows=self.block_rows, num_epochs=cfg.num_epochs, minibatch=options.minibatch,
                                   generator=generator)
        self.batch: dict[str, torch.Tensor] = {}
        self.keys_in: list[set[str]] = [set() for _ in block_rows]
        self.gae_done = [False] * len(block_rows)
        self.next_minibatch = 0  # of epoch 1, when pipelined
        self.params = list(model.parameters())
        # statistics and the last applied step's approx_kl stay on the device: `finish` reads them
        self.stats = DeviceStats(keys=(*LOSS_STATS, "grad_norm"), device=param_device(model))
        self.last_kl = torch.zeros((), device=param_device(model))
        self.attempts = 0  # minibatches stepped, skipped ones included
        self.lock = threading.Lock()

    # ------------------------------------------------------------------------------------ arrivals
    def add_stage(self, *, block: int, arrays: dict[str, torch.Tensor]) -> None:
        """Block ``block``'s columns ``arrays`` arrived (a stage, or the whole block)."""
        with self.lock:
            rows = self.block_rows[block]
            start = self.starts[block]
            for key, value in arrays.items():
                if value.shape[0] != rows:
                    raise ValueError(f"block {block} key {key!r}: {value.shape[0]} rows, expected {rows}")
                if key not in self.batch:
                    self.batch[key] = torch.empty((self.num_rows, *value.shape[1:]), dtype=value.dtype)
                self.batch[key][start:start + rows] = value
                self.keys_in[block].add(key)
            if not self.gae_done[block] and self.keys_in[block].issuperset(GAE_KEYS):
                self._gae(block=block)
            if self.options.minibatch and self.eager:
                self._run_ready_minibatches()

    def _gae(self, *, block: int) -> None:
        start, stop = self.starts[block], self.starts[block] + self.block_rows[block]
        cols = {key: self.batch[key][start:stop] for key in GAE_KEYS}
        advantages, returns = compute_gae(rewards=cols["rewards"], values=cols["values"].float(),
                                          next_values=cols["next_values"], terminated=cols["terminated"],
                                          cut=cols["cut"], gamma=self.cfg.gamma, gae_lambda=self.cfg.gae_lambda)
        for key, value in (("advantages", advantages), ("returns", returns)):
            if key not in self.batch:
                self.batch[key] = torch.empty(self.num_rows, dtype=value.dtype)
            self.batch[key][start:stop] = value
        self.gae_done[block] = True

    def _ready_rows(self) -> int:
        """Rows of the leading blocks (rank order) that have every key and their GAE."""
        ready = 0
        for block, rows in enumerate(self.block_rows):
            if not (self.gae_done[block] and self.keys_in[block].issuperset(TRAIN_KEYS)):
                break
            ready += rows
        return ready

    def _run_ready_minibatches(self) -> None:
        ready = self._ready_rows()
        order = self.orders[0]
        while (self.next_minibatch + 1) * self.minibatch_size <= ready or \
                (ready == self.num_rows and self.next_minibatch * self.minibatch_size < self.num_rows):
            start = self.next_minibatch * self.minibatch_size
            self._step(rows=order[start:start + self.minibatch_size])
            self.next_minibatch += 1

    # -------------------------------------------------------------------------------------- update
    def _step(self, *, rows: torch.Tensor | None = None, minibatch: dict[str, torch.Tensor] | None = None) -> None:
        if minibatch is None:
            minibatch = {key: self.batch[key][rows] for key in REQUIRED_KEYS}
        loss, parts = minibatch_terms(model=self.model, batch=minibatch, config=self.cfg, clip_coef=self.clip_coef)
        outcome = guarded_step(optimizer=self.optimizer, params=self.params, loss=loss,
                               max_grad_norm=self.cfg.max_grad_norm)
        self.stats.add(row=torch.cat([parts, outcome.grad_norm.reshape(1).to(parts.dtype)]), where=outcome.finite)
        self.last_kl = torch.where(outcome.finite, parts[LOSS_STATS.index("approx_kl")], self.last_kl)
        self.attempts += 1

    def _minibatches(self, *, order: torch.Tensor, skip: int) -> Iterator[dict[str, torch.Tensor]]:
        starts = range(skip * self.minibatch_size, self.num_rows, self.minibatch_size)
        chunks = [order[start:start + self.minibatch_size] for start in starts]
        if not self.options.loader:
            return ({key: self.batch[key][rows] for key in REQUIRED_KEYS} for rows in chunks)
        return iter(DeviceLoader(batch={key: self.batch[key] for key in REQUIRED_KEYS}, index_batches=chunks,
                                 device=param_device(self.model)))

    def finish(self) -> tuple[dict[str, torch.Tensor], UpdateStats]:
        """Every block is in: the rest of epoch 1, then epochs 2..K (target_kl may stop early)."""
        with self.lock:
            missing = [b for b, keys in enumerate(self.keys_in) if not keys.issuperset((*GAE_KEYS, *TRAIN_KEYS))]
            if missing:
                raise ValueError(f"finish() before blocks {missing} arrived complete")
            epochs_done = 0
            for epoch, order in enumerate(self.orders):
                skip = self.next_minibatch if epoch == 0 else 0
                for minibatch in self._minibatches(order=order, skip=skip):
                    self._step(minibatch=minibatch)
                epochs_done += 1
                if self.cfg.target_kl is not None and float(self.last_kl) > self.cfg.target_kl:  # one read an epoch
                    break
            return self.batch, self._stats(epochs_done=epochs_done)

    def _stats(self, *, epochs_done: int) -> UpdateStats:
        """The invocation's one host read: the means over the applied steps (NaN when none) and the explained
        variance."""
        ev = explained_variance_tensor(values=self.batch["values"], returns=self.batch["returns"])
        means, steps, (explained,) = self.stats.read(extra=[ev])
        if steps < self.attempts:
            log.warning("skipped %d of %d PPO minibatches: non-finite loss or gradient norm", self.attempts - steps,
                        self.attempts)
        return UpdateStats(**means, explained_variance=explained, num_gradient_steps=steps, lr=self.lr,
                           clip_coef=self.clip_coef, num_epochs_done=epochs_done,
                           num_skipped_steps=self.attempts - steps)


def run_unpipelined(*, algo, model: PolicyValueModel, optimizer: torch.optim.Optimizer,
                    blocks: Iterable[dict[str, torch.Tensor]], options: PipelineOptions, progress: float,
                    generator: torch.Generator) -> tuple[dict[str, torch.Tensor], UpdateStats]:
    """The same update with every block present before it starts (the reference the pipelines must equal)."""
    blocks = list(blocks)
    update = StreamingPPOUpdate(algo=algo, model=model, optimizer=optimizer,
                                block_rows=[len(block["rewards"]) for block in blocks],
                                options=PipelineOptions(minibatch=options.minibatch, loader=options.loader),
                                progress=progress, generator=generator, eager=False)
    for index, block in enumerate(blocks):
        update.add_stage(block=index, arrays=block)
    return update.finish()
