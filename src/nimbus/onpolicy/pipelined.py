"""The sync workflow with ARTOS's on-policy pipelines switched on (``pipeline:`` in the config).

Bindings (ARTOS Table 3, "Pipeline Training")::

    ObjectKeyTrigger(weights/<policy>/*)            → invoke N actor functions (as SyncWorkflow)
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

import time
from concurrent.futures import Future
from dataclasses import asdict

import numpy as np

from nimbus.onpolicy.pipeline_learner import PIPELINE_KEY, StreamRequest
from nimbus.onpolicy.sync import SyncWorkflow
from nimbus.roles.learner import LearnerRequest
from nimbus.types import schedule_fraction


class PipelinedSyncWorkflow(SyncWorkflow):
    """SyncWorkflow whose learner starts on the first actor's rows (see the module docstring)."""

    def _round_rows(self) -> int:
        cfg = self.system.config
        return cfg.env.num_envs_per_actor * cfg.actors.fragment_steps

    def _invoke_actors(self) -> None:
        from_seq = self.system.buffer.total_rows_ingested
        super()._invoke_actors()
        self.round_stream = {"from_seq": from_seq, "ranks": list(range(self.decision.num_actors)),
                             "learner_invoked": False}
        self.data_trigger.n_actors = 1
        self.data_trigger.size_rows = self._round_rows()
        self.data_trigger.reset()

    def _invoke_learner(self) -> None:
        if self.round_stream["learner_invoked"]:
            return  # the trigger fires again as later actors land; the learner is already streaming them
        self.round_stream["learner_invoked"] = True
        cfg, version = self.system.config, self.progress.policy_version
        progress = schedule_fraction(progress=self.progress, total_env_steps=cfg.train.total_env_steps)
        request = LearnerRequest(env_id=cfg.env.id, env_kwargs=dict(cfg.env.kwargs),
                                 env_imports=list(cfg.env.imports), env_wrappers=list(cfg.env.wrappers),
                                 algo=cfg.algo.model_dump(mode="json"), policy=self.policy, policy_version=version,
                                 has_optimizer_state=version > 0, buffer=self.system.buffer.descriptor(),
                                 progress=progress, seed=cfg.seed, device=cfg.learner.device,
                                 torch_threads=cfg.learner.torch_threads,
                                 probe=self.system.probe.to_header() if self.system.probe else None)
        stream = StreamRequest(ranks=self.round_stream["ranks"], rows_per_actor=self._round_rows(),
                               from_seq=self.round_stream["from_seq"], minibatch=cfg.pipeline.minibatch,
                               dual_stage=cfg.pipeline.dual_stage, loader=cfg.pipeline.loader,
                               wait_s=cfg.learner.function.timeout_s)
        message = request.to_message(indices=np.zeros(0, np.int64), obs_moments=None)
        message.header[PIPELINE_KEY] = asdict(stream)
        future = self.system.runtime.invoke(spec=self.system.learner_spec, request=message)
        self._watch(kind="learner", future=future, meta=version)

    def _on_learner(self, *, future: Future, version: int) -> None:
        indices = self.system.replay.select(buffer=self.system.buffer)  # every actor delivered: the round's rows
        if indices is not None:
            self.system.replay.consumed(indices=indices)
        self.round.actors_done_s = self.round.actors_done_s or time.perf_counter()
        super()._on_learner(future=future, version=version)

