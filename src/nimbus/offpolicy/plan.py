"""What the ``offpolicy`` workflow needs to know about an off-policy algorithm, read from its config once.

``plan_for(config)`` turns the algorithm's own hyperparameters (SB3-style ``train_freq`` /
``gradient_steps`` / ``batch_size`` / ``learning_starts`` for DQN and SAC, ``rollout_length`` for
IMPALA) and the ``offpolicy`` section into a frozen ``ReplayPlan``; ``make_replay(plan=...)``
builds the matching replay strategy (Uniform, Prioritized, NStep over either, or FIFO). This is the
one place that dispatches on the algorithm's config type, so the workflow itself has no
algorithm-specific code. The config rules of the two workflows are ``config.rules.check_workflow``.

Example::

    plan = plan_for(config=config)
    replay = make_replay(plan=plan, seed=config.seed)
    batch = replay.sample(buffer=buffer, rows=plan.batch_size * 32)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from nimbus.algos.dqn.config import DQNConfig
from nimbus.algos.impala.config import ImpalaConfig
from nimbus.algos.sac.config import SACConfig
from nimbus.config.rules import OFF_POLICY
from nimbus.data.fragment_replay import FIFO, Circular
from nimbus.data.replay import NStep, Prioritized, Uniform
from nimbus.errors import ConfigError

if TYPE_CHECKING:
    from nimbus.config import NimbusConfig



@dataclass(frozen=True)
class ReplayPlan:
    """How the offpolicy workflow feeds one off-policy learner."""

    kind: Literal["replay", "fifo"]
    capacity_rows: int           # buffer rows
    fragment_rows: int           # rows one actor invocation ingests (envs × fragment_steps)
    fragment_steps: int          # rows per env inside a fragment (n-step segments, IMPALA's T)
    batch_size: int              # rows per gradient step (replay) / per batch (FIFO)
    updates_per_row: float       # gradient steps owed per ingested row (replay: gradient_steps / train_freq)
    fixed_gradient_steps: int    # gradient steps per call when the learner fires on a TimeTrigger
    train_rows: int              # DataKeyTrigger size
    learning_starts: int         # rows held before the first update
    random_warmup: bool          # uniform random actions until learning_starts rows (SAC)
    prioritized: bool = False
    per_alpha: float = 0.6
    per_beta0: float = 0.4
    per_eps: float = 1e-6
    n_step: int = 1
    gamma: float = 0.99
    beta_anneal_rows: int = 1
    fragments_per_batch: int = 1
    row_group: int = 1           # the learner drops stale rows in whole groups (IMPALA: one env's T steps)
    circular_batches: int = 0    # IMPACT: FIFO batches its circular buffer holds (0: plain FIFO, IMPALA)
    circular_replays: int = 1    # IMPACT: uses of each held batch (K)


def plan_for(*, config: NimbusConfig) -> ReplayPlan:
    """The ReplayPlan of the configured off-policy algorithm (ConfigError for any other)."""
    algo, wf = config.algo, config.offpolicy
    steps = config.actors.fragment_steps
    fragment_rows = config.env.num_envs_per_actor * steps
    if isinstance(algo, (DQNConfig, SACConfig)):
        extra: dict[str, Any] = {}   # DQN's PER and n-step fields
        if isinstance(algo, DQNConfig):
            extra = dict(prioritized=algo.prioritized, per_alpha=algo.per_alpha, per_beta0=algo.per_beta0,
                         per_eps=algo.per_eps, n_step=algo.n_step)
        return ReplayPlan(kind="replay", capacity_rows=algo.buffer_capacity, fragment_rows=fragment_rows,
                          fragment_steps=steps, batch_size=algo.batch_size,
                          updates_per_row=algo.gradient_steps / algo.train_freq,
                          fixed_gradient_steps=algo.gradient_steps, train_rows=wf.train_rows or algo.train_freq,
                          learning_starts=max(algo.learning_starts, algo.batch_size),
                          random_warmup=isinstance(algo, SACConfig), gamma=algo.gamma,
                          beta_anneal_rows=config.train.total_env_steps, **extra)
    if isinstance(algo, ImpalaConfig):
        batch_rows = wf.fragments_per_batch * fragment_rows
        actors = _max_actors(config=config)
        held = algo.circular_buffer_batches if algo.variant == "impact" else 0   # IMPACT's batches stay readable
        return ReplayPlan(kind="fifo", capacity_rows=max(4 * actors, 2 * wf.fragments_per_batch + 2) * fragment_rows
                          + held * batch_rows, circular_batches=held, circular_replays=algo.circular_buffer_replays,
                          fragment_rows=fragment_rows, fragment_steps=steps, batch_size=batch_rows,
                          updates_per_row=0.0, fixed_gradient_steps=1, train_rows=wf.train_rows or batch_rows,
                          learning_starts=batch_rows, random_warmup=False, gamma=algo.gamma,
                          fragments_per_batch=wf.fragments_per_batch, row_group=algo.rollout_length)
    raise ConfigError(f"train.workflow: offpolicy runs {', '.join(OFF_POLICY)}; got algo.name: {algo.name}")


def make_replay(*, plan: ReplayPlan, seed: int, guard_rows: int = 0) -> Uniform | NStep | FIFO | Circular:
    """The replay strategy of a plan: FIFO (in IMPACT's Circular buffer); or Uniform / Prioritized, wrapped
    in NStep when n > 1.

    ``guard_rows``: rows actors may ingest while a learner reads (Uniform and Prioritized do not draw the
    oldest rows they would overwrite; the learner drops any row overwritten anyway).
    """
    if plan.kind == "fifo":
        fifo = FIFO(fragment_rows=plan.fragment_rows, fragments_per_batch=plan.fragments_per_batch)
        if plan.circular_batches:
            return Circular(inner=fifo, batches=plan.circular_batches, replays=plan.circular_replays)
        return fifo
    batch_rows = plan.batch_size * plan.fixed_gradient_steps
    if plan.prioritized:
        sampler: Uniform = Prioritized(capacity_rows=plan.capacity_rows, batch_rows=batch_rows, alpha=plan.per_alpha,
                                       beta0=plan.per_beta0, beta_anneal_rows=plan.beta_anneal_rows,
                                       eps=plan.per_eps, min_rows=plan.learning_starts, seed=seed,
                                       guard_rows=guard_rows)
    else:
        sampler = Uniform(batch_rows=batch_rows, min_rows=plan.learning_starts, seed=seed, guard_rows=guard_rows)
    if plan.n_step > 1:
        return NStep(inner=sampler, n=plan.n_step, gamma=plan.gamma, segment_rows=plan.fragment_steps)
    return sampler


def _max_actors(*, config: NimbusConfig) -> int:
    scaling = config.actors.scaling
    return int(max(getattr(scaling, name, 1) for name in ("num_actors", "max_actors", "initial_actors")))


class Pacer:
    """The offpolicy workflow's bookkeeping in rows: what the learner owes and how far actors may run ahead.

    Replay (DQN, SAC): gradient steps owed = (rows ingested − learning_starts) × updates_per_row − steps
    already started, as SB3's ``train_freq`` / ``gradient_steps`` would do them; a call takes at most
    ``max_steps_per_call`` of them. The learner has *consumed* learning_starts + started / updates_per_row
    rows (FIFO: the rows it took). Back-pressure lets actors hold at most ``max_steps_ahead`` rows more
    than that (collected + in flight) at ``base_actors`` actors, and proportionally more when a scaler runs
    more (``may_collect(actors=...)``): a boosted round's extra actors get room to run instead of the
    first rank taking every slot. ``None`` never holds them back. With PER a call takes at most
    ``prioritized_steps_per_call`` steps, so each draw is at most that many steps older than the priorities.

    Example::

        pacer = Pacer(plan=plan, max_steps_ahead=2048, max_steps_per_call=256, base_actors=2)
        pacer.rows_ingested += 512
        pacer.owed_steps()                     # gradient steps the next call may take
        pacer.may_collect(rows=256, actors=4)  # may one more actor fragment start, with 4 actors decided?
    """

    def __init__(self, *, plan: ReplayPlan, max_steps_ahead: int | None, max_steps_per_call: int,
                 base_actors: int = 1, prioritized_steps_per_call: int | None = None) -> None:
        if base_actors < 1:
            raise ValueError(f"base_actors must be >= 1, got {base_actors}")
        self.plan = plan
        self.max_steps_ahead = max_steps_ahead
        self.max_steps_per_call = max_steps_per_call
        if plan.prioritized and prioritized_steps_per_call is not None:
            self.max_steps_per_call = min(max_steps_per_call, prioritized_steps_per_call)
        self.base_actors = base_actors
        self.rows_ingested = 0
        self.rows_in_flight = 0
        self.steps_started = 0
        self.rows_taken = 0

    def owed_steps(self) -> int:
        """Whole gradient steps the next replay call may take (0: nothing owed yet)."""
        owed = (self.rows_ingested - self.plan.learning_starts) * self.plan.updates_per_row - self.steps_started
        return int(min(self.max_steps_per_call, max(0.0, owed)))

    def consumed_rows(self) -> float:
        if self.plan.kind == "fifo":
            return float(self.rows_taken)
        return self.plan.learning_starts + self.steps_started / max(self.plan.updates_per_row, 1e-12)

    def may_collect(self, *, rows: int, actors: int | None = None) -> bool:
        if self.max_steps_ahead is None:
            return True
        allowance = self.max_steps_ahead * max(actors or self.base_actors, self.base_actors) / self.base_actors
        return self.rows_ingested + self.rows_in_flight + rows <= self.consumed_rows() + allowance
