"""ARTOS's on-policy pipelines (``pipeline:`` in the config): the onpolicy workflow's learner launch that starts the
learner on the first actor's rows (onpolicy/workflow.py holds it in place of ``FullBatch``; the run registry names the
onpolicy workflow with a pipeline flag on ``pipelined``).

Bindings (ARTOS Table 3, "Pipeline Training")::

    ObjectKeyTrigger(weights/<policy>/*)            → invoke N actor functions (as the onpolicy round)
    DataKeyTrigger(n=1, size=one actor's rows)      → invoke the learner once per round, at the FIRST
                                                      actor's rows; it streams the rest from the buffer
    learner result                                  → consume the round's rows, end of round

The learner function sees ``pipeline`` in its request header and runs onpolicy/pipeline_learner.py. Every
actor function must still deliver (retries included) before the learner can finish, exactly as in
the unpipelined round; only the learner's start moves earlier.

Example (config)::

    pipeline: {minibatch: true, dual_stage: true, loader: false}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

import numpy as np

from nimbus.onpolicy.actor_round import LearnerBatch, RoundState
from nimbus.onpolicy.pipeline_learner import PIPELINE_KEY, StreamRequest
from nimbus.policy.system import System


class Streaming:
    """The learner starts on the first actor's rows and streams the round's other ranks from the Buffer."""

    def __init__(self, *, system: System, clock: Callable[[], float]) -> None:
        self.system, self.clock = system, clock
        self.from_seq = 0              # the Buffer's row count when the round's actors started
        self.ranks: list[int] = []     # the round's actor ranks, the rows the learner waits for
        self.learner_invoked = False

    def _rows_per_actor(self) -> int:
        cfg = self.system.config
        return cfg.env.num_envs_per_actor * cfg.actors.fragment_steps

    def trigger_actors(self, *, num_actors: int) -> int:
        return 1

    def actors_started(self, *, num_actors: int) -> None:
        # no row lands before the loop hands an actor's event back, so the count read now is where the round begins
        self.from_seq = self.system.buffer.total_rows_ingested
        self.ranks, self.learner_invoked = list(range(num_actors)), False

    def take(self, *, state: RoundState, version: int) -> LearnerBatch | None:
        if self.learner_invoked:
            return None  # the trigger fires again as later actors land; the learner is already streaming them
        self.learner_invoked = True
        cfg = self.system.config
        stream = StreamRequest(ranks=self.ranks, rows_per_actor=self._rows_per_actor(), from_seq=self.from_seq,
                               minibatch=cfg.pipeline.minibatch, dual_stage=cfg.pipeline.dual_stage,
                               loader=cfg.pipeline.loader, wait_s=cfg.learner.function.timeout_s)
        return LearnerBatch(indices=np.zeros(0, np.int64), header={PIPELINE_KEY: asdict(stream)})

    def learner_done(self, *, state: RoundState) -> None:
        indices = self.system.replay.select(buffer=self.system.buffer)  # every actor delivered: the round's rows
        if indices is not None:
            self.system.replay.consumed(indices=indices)
        state.actors_done_s = state.actors_done_s or self.clock()
