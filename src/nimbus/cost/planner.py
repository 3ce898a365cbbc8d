"""The what-if planner: time per round and cost at another scale, from runs' ledgers, by simulating rounds.

``nimbus plan RUN_DIR [RUN_DIR ...] --actors 1000 --learners 16 [--capacity-cpus C] [--pricing FILE]``

Profile (``profile_runs``), from each run's ledger.jsonl and metrics.jsonl (onpolicy workflow rounds):

* actor attempt durations (accepted ones, warm) and cold-start init times, pooled: an empirical distribution;
  the cold fraction of actor attempts after round 0 (keep-alive reclaims, retries);
* learner durations against the rows a round collected: ``learner_s = c + d * rows`` (least squares over the
  profiled rounds; with one distinct size, proportional through the origin);
* the driver's per-round overhead (round wall time minus the slowest actor minus the learner) against the
  number of actors: ``overhead_s = a + b * actors`` (least squares; constant with one actor count).

Simulation (``simulate``): a discrete-event simulation of ``rounds`` rounds with a seeded generator. Each
round's ``actors`` attempts draw a duration (plus an init time with the cold fraction's probability; in
round 0 every actor's and learner's init is billed but off the round's path, as a pre-warm) and
take the earliest free of ``capacity_cpus / actor cpus`` slots (unbounded: serverless); the actor phase ends
with the last of them; ``learners`` data-parallel learners split the round's rows (the fixed part ``c`` is
paid once); then the overhead. Cost: every simulated attempt becomes a ledger record and goes through the
pricing model, as a real run's would (serverless); serverful = the pricing model's instances reserved for
the simulated wall time at peak actors (``serverful_cost_usd``).

What it does not model: contention on a shared machine beyond the slot count, stragglers that a larger
fleet would add beyond the profiled tail, network bandwidth at scale, and learning (no return). For those,
``nimbus plan --simulate --config X --set ...`` trains the config on the simulated backend once per seed
(run/plan.py, docs/simulated.md): time, cost and return, with intervals over seeds, in minutes instead of seconds.
This timing-only model stays the default: it needs only ledgers and answers at once.

Bad input is a ConfigError (exit 2) naming what is wrong: a count below 1 (``--actors``, ``--learners``,
``--rounds``, ``--capacity-cpus``), a run directory without its files, a file that is not JSON lines or YAML (read by
the configs' guarded loader), or a run with no onpolicy round to profile (an empty ledger; a Stellaris, MARLess
or off-policy run, whose functions are not one actor phase and one learner: plan those with ``--simulate``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nimbus.config.yaml_loader import parse_yaml
from nimbus.cost.ledger import LedgerRecord
from nimbus.cost.pricing import PricingModel
from nimbus.data.jsonl import read_jsonl
from nimbus.errors import ConfigError


@dataclass(frozen=True)
class Line:
    """``intercept + slope * x``."""

    intercept: float
    slope: float

    def at(self, x: float) -> float:
        return self.intercept + self.slope * x


@dataclass(frozen=True)
class Profile:
    actor_s: np.ndarray          # warm actor attempt durations
    init_s: np.ndarray           # cold-start init times (may be empty)
    cold_fraction: float         # of actor attempts after round 0
    rows_per_actor: int
    learner: Line                # seconds against rows
    overhead: Line               # seconds against actors
    actor_cpus: float
    actor_memory_mb: int
    learner_cpus: float
    learner_gpus: float
    learner_memory_mb: int
    learner_init_s: float        # a learner worker's start (billed once, by its pre-warm)


@dataclass(frozen=True)
class Plan:
    actors: int
    learners: int
    rounds: int
    round_s_mean: float
    round_s_p90: float
    wall_s: float
    serverless_usd: float
    serverful_usd: float


def _fit(xs: list[float], ys: list[float]) -> Line:
    if len(set(xs)) >= 2:
        slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
        return Line(intercept=float(intercept), slope=float(slope))
    return Line(intercept=0.0, slope=float(np.mean(ys) / max(xs[0], 1e-9)))


def _run_rounds(run_dir: Path) -> tuple[list[dict], list[LedgerRecord], dict]:
    """A run's metrics rows, ledger records and config; ConfigError naming the file that is missing or unreadable."""
    for name in ("metrics.jsonl", "ledger.jsonl", "config.yaml"):
        if not (run_dir / name).is_file():
            raise ConfigError(f"plan: {run_dir} has no {name} (is it a nimbus run directory?)")
    try:
        metrics = [row for row in read_jsonl(path=run_dir / "metrics.jsonl") if isinstance(row, dict)]
        ledger = [LedgerRecord.from_dict(row) for row in read_jsonl(path=run_dir / "ledger.jsonl")
                  if isinstance(row, dict)]
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"plan: {run_dir}/ledger.jsonl holds a row that is not a ledger record: {exc}") from None
    config = parse_yaml(text=(run_dir / "config.yaml").read_text(), source=str(run_dir / "config.yaml"))
    return metrics, ledger, config if isinstance(config, dict) else {}


def _rows_per_actor(*, run_dir: Path, config: dict) -> int:
    try:
        return int(config["env"]["num_envs_per_actor"]) * int(config["actors"]["fragment_steps"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"plan: {run_dir}/config.yaml lacks env.num_envs_per_actor or actors.fragment_steps "
                          "(the timing-only model profiles onpolicy runs; plan others with --simulate)") from None


def _first_of(*, records: list[LedgerRecord], kind: str, run_dir: Path) -> LedgerRecord:
    found = next((r for r in records if r.kind == kind and r.outcome == "ok"), None)
    if found is None:
        raise ConfigError(f"plan: {run_dir}/ledger.jsonl has no finished {kind} attempt: the timing-only model "
                          "profiles onpolicy runs (one actor phase, one learner a round); an empty ledger, a "
                          "Stellaris, MARLess or off-policy run: plan it with --simulate --config")
    return found


def check_scale(*, actors: int, learners: int, rounds: int, capacity_cpus: float | None) -> None:
    """The target scale is at least one of each (ConfigError naming the argument)."""
    for name, value in (("--actors", actors), ("--learners", learners), ("--rounds", rounds)):
        if value < 1:
            raise ConfigError(f"plan: {name} must be at least 1, got {value}")
    if capacity_cpus is not None and not capacity_cpus > 0:
        raise ConfigError(f"plan: --capacity-cpus must be above 0, got {capacity_cpus}")


def profile_runs(*, run_dirs: list[Path]) -> Profile:
    """Pool the runs' per-attempt distributions and fit the learner and overhead lines (module docstring)."""
    actor_s, init_s, cold, later = [], [], 0, 0
    rows_xs, learner_ys, actors_xs, overhead_ys = [], [], [], []
    for run_dir in run_dirs:
        metrics, ledger, config = _run_rounds(run_dir)
        rows_per_actor = _rows_per_actor(run_dir=run_dir, config=config)
        _first_of(records=ledger, kind="actor", run_dir=run_dir)
        _first_of(records=ledger, kind="learner", run_dir=run_dir)
        actors = sorted((r for r in ledger if r.kind == "actor" and r.outcome == "ok"), key=lambda r: r.start_at)
        learners = sorted((r for r in ledger if r.kind == "learner" and r.outcome == "ok"), key=lambda r: r.start_at)
        actor_s += [r.duration_s for r in actors]
        init_s += [r.init_s for r in ledger if r.kind == "actor" and r.init_s > 0]
        at = 0
        for i, row in enumerate(metrics[:len(learners)]):
            batch = actors[at:at + row["num_actors"]]
            at += row["num_actors"]
            if len(batch) < row["num_actors"]:
                break
            if i > 0:
                cold, later = cold + sum(r.cold for r in batch), later + len(batch)
            rows_xs.append(row["num_actors"] * rows_per_actor)
            learner_ys.append(learners[i].duration_s)
            actors_xs.append(row["num_actors"])
            overhead_ys.append(max(0.0, row["round_s"] - max(r.duration_s for r in batch) - learners[i].duration_s))
    if not rows_xs:
        raise ConfigError(f"plan: no complete round to profile in {', '.join(map(str, run_dirs))} (metrics.jsonl "
                          "and ledger.jsonl hold no round with all its actors and its learner)")
    first = _run_rounds(run_dirs[0])[1]
    actor_rec = _first_of(records=first, kind="actor", run_dir=run_dirs[0])
    learner_rec = _first_of(records=first, kind="learner", run_dir=run_dirs[0])
    learner_inits = [r.init_s for r in first if r.kind == "learner" and r.init_s > 0] or [0.0]
    return Profile(actor_s=np.asarray(actor_s), init_s=np.asarray(init_s), cold_fraction=cold / max(later, 1),
                   rows_per_actor=rows_per_actor, learner=_fit(rows_xs, learner_ys),
                   overhead=_fit(actors_xs, overhead_ys), actor_cpus=actor_rec.cpus,
                   actor_memory_mb=actor_rec.memory_mb, learner_cpus=learner_rec.cpus, learner_gpus=learner_rec.gpus,
                   learner_memory_mb=learner_rec.memory_mb, learner_init_s=float(np.mean(learner_inits)))


def _record(*, kind: str, cpus: float, gpus: float, memory_mb: int, duration_s: float, init_s: float) -> LedgerRecord:
    return LedgerRecord(invocation_id="plan", attempt=1, function=kind, kind=kind, worker_id="plan", cold=init_s > 0,
                        init_s=init_s, queued_at=0.0, start_at=0.0, end_at=duration_s, duration_s=duration_s,
                        billed_s=duration_s + init_s, cpus=cpus, gpus=gpus, memory_mb=memory_mb, outcome="ok")


def _actor_phase(*, durations: np.ndarray, slots: int) -> float:
    """Attempts in order, each on the earliest free slot; the phase ends with the last one."""
    free = [0.0] * min(slots, len(durations))
    heapq.heapify(free)
    end = 0.0
    for duration in durations:
        start = heapq.heappop(free)
        end = max(end, start + duration)
        heapq.heappush(free, start + duration)
    return end


def simulate(*, profile: Profile, actors: int, learners: int, rounds: int, pricing: PricingModel,
             capacity_cpus: float | None = None, seed: int = 0) -> Plan:
    """Time per round and cost of ``rounds`` rounds at ``actors`` x ``learners`` (module docstring)."""
    check_scale(actors=actors, learners=learners, rounds=rounds, capacity_cpus=capacity_cpus)
    rng = np.random.default_rng(seed)
    slots = actors if capacity_cpus is None else max(1, int(capacity_cpus // profile.actor_cpus))
    rows = actors * profile.rows_per_actor
    learner_s = max(0.0, profile.learner.intercept) + profile.learner.slope * rows / learners
    round_s, serverless = [], 0.0
    for r in range(rounds):
        work = rng.choice(profile.actor_s, size=actors)
        cold_p = 1.0 if r == 0 else profile.cold_fraction
        inits = np.where(rng.random(actors) < cold_p, rng.choice(profile.init_s, size=actors), 0.0) \
            if profile.init_s.size else np.zeros(actors)
        on_path = inits if r > 0 else 0.0  # round 0's workers were pre-warmed: billed, but before the round
        round_s.append(_actor_phase(durations=work + on_path, slots=slots) + learner_s
                       + max(0.0, profile.overhead.at(actors)))
        serverless += sum(pricing.cost_usd(record=_record(kind="actor", cpus=profile.actor_cpus, gpus=0.0,
                                                          memory_mb=profile.actor_memory_mb, duration_s=float(d),
                                                          init_s=float(i))) for d, i in zip(work, inits))
        serverless += learners * pricing.cost_usd(record=_record(
            kind="learner", cpus=profile.learner_cpus, gpus=profile.learner_gpus,
            memory_mb=profile.learner_memory_mb, duration_s=learner_s, init_s=0.0))
    serverless += learners * pricing.cost_usd(record=_record(
        kind="learner", cpus=profile.learner_cpus, gpus=profile.learner_gpus, memory_mb=profile.learner_memory_mb,
        duration_s=0.0, init_s=profile.learner_init_s))  # the learners' pre-warm
    wall_s = float(np.sum(round_s))
    serverful = pricing.serverful_cost_usd(wall_s=wall_s, peak_actor_cpus=actors * profile.actor_cpus,
                                           peak_learner_gpus=learners * profile.learner_gpus)
    return Plan(actors=actors, learners=learners, rounds=rounds, round_s_mean=float(np.mean(round_s)),
                round_s_p90=float(np.percentile(round_s, 90)), wall_s=wall_s, serverless_usd=serverless,
                serverful_usd=serverful)
