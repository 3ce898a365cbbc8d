"""The filling buffer in the ``async_learners`` workflow (Stellaris §IV step ②, §V-B): each actor's rows, post-processed
once by the driver (PPO: GAE), are cut into slices as they arrive (stellaris/slices.py); each full slice is put under
its own Store key and its learners (one per pass) may start at once, before the round's last actor delivers.

A slice's passes never share a version: a pass waits for a version no other pass of its slice read (two passes at
one version compute the same gradient bit for bit, and both would be applied), ``_next_task``; when no newer version
can come the watchdog drops such passes, ``_drop_repeated_passes``.

Mixed into stellaris/workflow.py's AsyncLearnersWorkflow: uses its ``system``, ``cfg``, ``rule``, ``round``,
``meter``, ``batches``, ``in_flight``, ``clock``, ``policy``, ``decision``, ``progress``, ``slice_read`` and
``_launch_learners``.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from nimbus.algos.registry import make_algorithm
from nimbus.data.codec import Message
from nimbus.stellaris.gradients import gradient_algo_for
from nimbus.stellaris.round_stats import Batch
from nimbus.stellaris.slices import Slice, SliceCutter, postprocess_rows

log = logging.getLogger(__name__)


class SliceFilling:
    """The sampling round's filling batch and the slices cut from it."""

    system: Any
    cfg: Any
    rule: Any
    round: Any
    meter: Any
    batches: list[Batch]
    in_flight: dict
    progress: Any
    slice_read: dict[str, int]

    def _start_filling(self) -> None:
        self.filling: Batch | None = None         # the sampling round's batch while its actors deliver
        self.gradient_algo = gradient_algo_for(name=self.system.config.algo.name)
        self.algorithm = make_algorithm(config=self.system.config.algo)   # the driver's post-processing (PPO: GAE)
        self.cutter = SliceCutter(slice_rows=self._slice_rows(),
                                  unit_rows=self.gradient_algo.unit_rows(config=self.system.config.algo))

    def _slice_rows(self) -> int:
        """``stellaris.slice_rows``, or the algorithm's default for the first round's batch (gradients.py)."""
        if self.cfg.slice_rows is not None:
            return self.cfg.slice_rows
        return self.gradient_algo.default_slice_rows(config=self.system.config.algo, learners=self.cfg.learners,
                                                     batch_rows=self._rows(self.decision.num_actors))

    def _on_rows(self) -> None:
        """An actor delivered: its rows, post-processed once (PPO: GAE), go to the round's filling buffer; every
        full slice is put in the Store and its learners may start at once (stellaris/slices.py)."""
        indices = self.system.replay.select(buffer=self.system.buffer)
        if indices is None:   # a duplicate delivery (the buffer dropped it)
            return
        self.system.replay.consumed(indices=indices)
        rows = postprocess_rows(algorithm=self.algorithm, rows=self.system.buffer.read(indices=indices),
                                needed=self.gradient_algo.driver_postprocess)
        batch = self._filling_batch()
        generator = torch.Generator().manual_seed(self.system.config.seed * 1_000_003 + self.round.index * 1009
                                                  + len(batch.slice_keys))
        for arrays in self.cutter.add(rows=rows, generator=generator):
            self._add_slice(batch=batch, arrays=arrays)
        self._launch_learners()

    def _filling_batch(self) -> Batch:
        if self.filling is None:
            now_s = self.clock()
            self.filling = Batch(round=self.round, key=f"batch/{self.policy}/r{self.round.index}", tasks=[],
                                 outstanding=0, learning_started_s=now_s,
                                 flight_integral_start=self.meter.integral(now_s=now_s),
                                 max_in_flight=len(self.in_flight))
            self.batches.append(self.filling)
        return self.filling

    def _start_learning(self, *, batch: Batch) -> None:
        """Its first learner launches: the rule's training round k starts (β_k, stellaris/rules.py) and the round's
        learning time counts from here. Batches start in order: a batch's tasks launch only once the earlier
        batches' are all launched, so round k starts as it did before slices, when its learning starts."""
        now_s = self.clock()
        self.rule.start_round(index=batch.round.index)
        batch.threshold = self.rule.threshold
        batch.learning_started_s, batch.flight_integral_start = now_s, self.meter.integral(now_s=now_s)

    def _add_slice(self, *, batch: Batch, arrays: dict[str, np.ndarray]) -> None:
        """Put one slice under its own key; one learner task per pass, ordered pass-major over the batch's slices."""
        index, rows = len(batch.slice_keys), len(next(iter(arrays.values())))
        key = f"{batch.key}/s{index}"
        self.system.store.put(key=key, message=Message(
            header={"round": batch.round.index, "slice": index,
                    "postprocessed": self.gradient_algo.driver_postprocess}, arrays=arrays))
        batch.slice_keys.append(key)
        batch.rows += rows
        piece = Slice(key=key, index=index, rows=rows,
                      positions=self.gradient_algo.positions(config=self.system.config.algo, rows=rows))
        passes = self.gradient_algo.passes(config=self.system.config.algo)
        batch.tasks.extend((p, index, piece) for p in range(passes))
        batch.tasks.sort(key=lambda task: (task[0], task[1]))
        batch.outstanding += passes

    def _next_task(self, *, batch: Batch) -> int | None:
        """The first of ``batch``'s tasks whose slice no pass read at the newest version: another pass of that slice
        at that version would compute the same gradient bit for bit, and both would be applied. It waits for a
        newer version (the watchdog drops it when none can come, ``_drop_repeated_passes``)."""
        version = self.progress.policy_version
        return next((i for i, (_, _, piece) in enumerate(batch.tasks) if self.slice_read.get(piece.key) != version),
                    None)

    def _drop_repeated_passes(self) -> None:
        """Nothing can publish a newer version, and the tasks left would repeat a pass of their slice at this one:
        they are dropped (a repeated pass adds the same gradient again, no information)."""
        version = self.progress.policy_version
        for batch in self.batches:
            repeated = [t for t in batch.tasks if self.slice_read.get(t[2].key) == version]
            if repeated:
                log.warning("stellaris: %d passes of round %d dropped: they would repeat a gradient at version %d",
                            len(repeated), batch.round.index, version)
            batch.tasks = [t for t in batch.tasks if t not in repeated]
            batch.outstanding -= len(repeated)
