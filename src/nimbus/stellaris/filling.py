"""The filling buffer in the ``stellaris`` workflow (Stellaris §IV step ②, §V-B): each actor's rows, post-processed
once by the driver (PPO: GAE), are cut into slices as they arrive (stellaris/slices.py); each full slice is put under
its own Store key and its learners (one per pass) may start at once, before the round's last actor delivers.

A slice's passes never share a version: a pass waits for a version no other pass of its slice read (two passes at
one version compute the same gradient bit for bit, and both would be applied), ``next_task``; when no newer version
can come the watchdog drops such passes, ``drop_repeated_passes``.

``SliceFilling`` is a part that stellaris/workflow.py's StellarisWorkflow holds: it keeps the sampling round's
batch (``filling``), the cutter and which version each slice's last pass read, and appends each new batch to the
workflow's open ``batches``.

Example::

    slices = SliceFilling(system=system, batch_rows=actors.rows(4), batches=batches, meter=meter, clock=clock)
    rows = slices.arrived_rows()                        # after an actor's rows were ingested; None: a duplicate
    batch = slices.filling_batch(state=actors.round, in_flight=0)
    for arrays in slices.cut(rows=rows, batch=batch, round_index=actors.round.index):
        slices.add(batch=batch, arrays=arrays)
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import torch

from nimbus.algos.registry import make_algorithm
from nimbus.data.codec import Message
from nimbus.onpolicy.actor_round import RoundState
from nimbus.policy.system import System
from nimbus.stellaris.gradients import gradient_algo_for
from nimbus.stellaris.round_stats import Batch, FlightMeter
from nimbus.stellaris.slices import Slice, SliceCutter, postprocess_rows

log = logging.getLogger(__name__)


class SliceFilling:
    """The sampling round's filling batch and the slices cut from it."""

    def __init__(self, *, system: System, batch_rows: int, batches: list[Batch], meter: FlightMeter,
                 clock: Callable[[], float]) -> None:
        self.system, self.cfg, self.batches, self.meter, self.clock = (system, system.config.stellaris, batches,
                                                                       meter, clock)
        self.filling: Batch | None = None         # the sampling round's batch while its actors deliver
        self.slice_read: dict[str, int] = {}      # slice key → the version its last launched pass read
        self.gradient_algo = gradient_algo_for(name=system.config.algo.name)
        self.algorithm = make_algorithm(config=system.config.algo)   # the driver's post-processing (PPO: GAE)
        self.cutter = SliceCutter(slice_rows=self._slice_rows(batch_rows=batch_rows),
                                  unit_rows=self.gradient_algo.unit_rows(config=system.config.algo))

    def _slice_rows(self, *, batch_rows: int) -> int:
        """``stellaris.slice_rows``, or the algorithm's default for the first round's batch (gradients.py)."""
        if self.cfg.slice_rows is not None:
            return self.cfg.slice_rows
        return self.gradient_algo.default_slice_rows(config=self.system.config.algo, learners=self.cfg.learners,
                                                     batch_rows=batch_rows)

    def arrived_rows(self) -> dict[str, np.ndarray] | None:
        """An actor's rows (just ingested), post-processed once (PPO: GAE); None for a duplicate delivery (the buffer
        dropped it)."""
        indices = self.system.replay.select(buffer=self.system.buffer)
        if indices is None:
            return None
        self.system.replay.consumed(indices=indices)
        return postprocess_rows(algorithm=self.algorithm, rows=self.system.buffer.read(indices=indices),
                                needed=self.gradient_algo.driver_postprocess)

    def cut(self, *, rows: dict[str, np.ndarray], batch: Batch, round_index: int) -> list[dict[str, np.ndarray]]:
        """Every full slice ``rows`` complete, shuffled by a generator seeded from the round and the slices so far."""
        generator = torch.Generator().manual_seed(self.system.config.seed * 1_000_003 + round_index * 1009
                                                  + len(batch.slice_keys))
        return self.cutter.add(rows=rows, generator=generator)

    def filling_batch(self, *, state: RoundState, in_flight: int) -> Batch:
        """The sampling round's batch, opened (and appended to the open batches) by its first rows."""
        if self.filling is None:
            now_s = self.clock()
            self.filling = Batch(round=state, key=f"batch/{self.system.policy}/r{state.index}", tasks=[],
                                 outstanding=0, learning_started_s=now_s,
                                 flight_integral_start=self.meter.integral(now_s=now_s), max_in_flight=in_flight)
            self.batches.append(self.filling)
        return self.filling

    def add(self, *, batch: Batch, arrays: dict[str, np.ndarray]) -> None:
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

    def complete(self, *, batch: Batch) -> None:
        """Every actor of ``batch``'s round delivered: no slice is added to it, and the next rows open a new batch."""
        batch.complete, self.filling = True, None

    def record_read(self, *, piece: Slice, version: int) -> None:
        """A pass of ``piece`` launched at ``version``: the next pass of that slice waits for a newer one."""
        self.slice_read[piece.key] = version

    def next_task(self, *, batch: Batch, version: int) -> int | None:
        """The first of ``batch``'s tasks whose slice no pass read at ``version`` (the newest): another pass of that
        slice at that version would compute the same gradient bit for bit, and both would be applied. It waits for a
        newer version (the watchdog drops it when none can come, ``drop_repeated_passes``)."""
        return next((i for i, (_, _, piece) in enumerate(batch.tasks) if self.slice_read.get(piece.key) != version),
                    None)

    def forget(self, *, keys: list[str]) -> None:
        """Slices whose batch is settled: no pass of theirs launches again."""
        for key in keys:
            self.slice_read.pop(key, None)

    def drop_repeated_passes(self, *, version: int) -> None:
        """Nothing can publish a newer version than ``version``, and the tasks left would repeat a pass of their slice
        at it: they are dropped (a repeated pass adds the same gradient again, no information)."""
        for batch in self.batches:
            repeated = [t for t in batch.tasks if self.slice_read.get(t[2].key) == version]
            if repeated:
                log.warning("stellaris: %d passes of round %d dropped: they would repeat a gradient at version %d",
                            len(repeated), batch.round.index, version)
            batch.tasks = [t for t in batch.tasks if t not in repeated]
            batch.outstanding -= len(repeated)
