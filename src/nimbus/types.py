"""Plain data the core protocols name: the per-round metrics row, a scaling decision, a run's progress and the
parts every policy of a run shares. Nothing here imports above this layer (the field types of ``Shared`` are
named under TYPE_CHECKING).

A controller is a small object with ``decide(*, metrics) -> decision``; the trainer calls it once per
round with the row it just emitted. The seeds' baselines are controllers too, so an ablation is one
config line.

Example::

    scaler = FixedScaler(num_actors=4)
    decision = scaler.decide(metrics=row)     # ScalingDecision(num_actors=4, reason="fixed")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nimbus.core import ActorScaler as ActorScaler, Controller as Controller  # the contracts live in core.py
from nimbus.errors import NimbusError

if TYPE_CHECKING:
    from nimbus.cost.ledger import Ledger
    from nimbus.cost.pricing import PricingModel
    from nimbus.data.store import Store
    from nimbus.runtime.base import Runtime

POLICY = "main"  # the policy of a one-policy run (a population names each member: pbt/population.py)
# the seconds of Nitro's Hessian probe in a learner's result header or extras: written by nitro/probe.py, read by
# the simulated runtime, which times the probe on its own model (runtime/simulated_durations.py with_probe)
PROBE_SECONDS_KEY = "probe_s"


@dataclass(frozen=True)
class RoundMetrics:
    """One row of metrics.jsonl: what happened in one round. Env steps are the x-axis."""

    round: int
    env_steps: int                # cumulative
    episodes: int                 # cumulative
    return_mean: float | None     # over episodes finished this round (None if none finished)
    return_min: float | None
    return_max: float | None
    num_actors: int
    num_learners: int
    policy_version: int
    sampling_s: float
    transfer_s: float
    learning_s: float
    round_s: float
    wall_s: float                 # since the run started
    cost_usd: float               # serverless cost so far, from the ledger
    losses: dict[str, float] = field(default_factory=dict)
    extras: dict[str, float] = field(default_factory=dict)  # controller signals: hessian ratio, score...


@dataclass(frozen=True)
class ScalingDecision:
    """How many actor functions to launch next round, and why (shown in the report)."""

    num_actors: int
    reason: str
    signals: dict[str, float] = field(default_factory=dict)


@dataclass
class Progress:
    """How far a run is: what the workflow advances each round and a checkpoint saves (data/resume.py)."""

    rounds: int = 0
    env_steps: int = 0
    episodes: int = 0
    policy_version: int = 0
    recent_returns: list[float] = field(default_factory=list)
    nonfinite_in_a_row: int = 0
    last_row: RoundMetrics | None = None
    wall_s_before: float = 0.0     # a resumed run: wall time and cost of the sessions before this one
    cost_usd_before: float = 0.0
    cost_excl_cold_usd_before: float | None = None   # ditto without cold starts (None: a checkpoint without it)
    slot_seq_base: int = 0         # a resumed run: env slots start here, so its envs reset with fresh seeds
    slot_seq: dict[int, int] = field(default_factory=dict)      # per actor rank, as of the last finished round
    slot_states: dict[int, Any] = field(default_factory=dict)   # train.exact_resume: SlotState per rank, ditto
    restore_slots: dict[int, Any] = field(default_factory=dict)  # exact resume: each rank's first request rebuilds
    restore_replay: Any = None     # train.checkpoint_replay: the replay file's Message (policy/replay_checkpoint.py)
    eval_return: float | None = None   # the last periodic evaluation's mean return (run/periodic_eval.py)
    schedule_env_steps: int | None = None   # a resumed run: its original horizon, which schedules keep (data/resume.py)

    def count_nonfinite(self, *, nonfinite: bool, limit: int, what: str = "learner updates",
                        outcome: str = "produced a non-finite loss or gradient") -> None:
        """``train.max_nonfinite_losses``: one more update that produced a non-finite loss or gradient (its step was
        skipped, the weights kept), or a finite one that ends the streak; ``limit`` in a row stop the run."""
        self.nonfinite_in_a_row = self.nonfinite_in_a_row + 1 if nonfinite else 0
        if self.nonfinite_in_a_row >= limit:
            raise NimbusError(f"{limit} {what} in a row {outcome}; stopping")


def schedule_fraction(*, progress: Progress, total_env_steps: int) -> float:
    """How far the run is along its schedules (learning rate, clip, ε): env steps over the horizon they anneal
    over, ``train.total_env_steps`` of the run as it started — a resume that raises it keeps the original."""
    return min(1.0, progress.env_steps / (progress.schedule_env_steps or total_env_steps))


@dataclass(frozen=True)
class Shared:
    """What every policy of a run shares: one pool of workers, one ledger, one Store (made by run/build.py)."""

    runtime: Runtime
    ledger: Ledger
    store: Store
    pricing: PricingModel
    shm_prefix: str | None = None  # the run's own segment prefix (data/shm.py claim_run_prefix)
    # frees ``shm_prefix`` in close(): data/shm.py release_run_prefix, passed in because types.py imports no data/
    release_prefix: Callable[..., None] | None = None

    def close(self) -> None:
        self.runtime.shutdown()
        self.store.close()
        if self.shm_prefix is not None and self.release_prefix is not None:
            self.release_prefix(prefix=self.shm_prefix)
