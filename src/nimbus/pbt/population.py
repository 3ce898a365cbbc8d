"""Several named policies over one pool of workers (``policies:``), and population-based training (``pbt:``).

Each policy is a member: an onpolicy workflow over a System of its own (``OnPolicyWorkflow.build``): its weights and
optimizer versions under ``weights/<name>/`` in the shared Store, its buffer, replay strategy, triggers,
actor-scaling controller, function specs, metrics and checkpoints in ``<run_dir>/policies/<name>/``. The run
loop (run/loop.py, run/members.py) builds the members this controller plans, moves every member's events in one
driver loop and calls the controller's hooks: ``attach`` (a member's workflow, with PBT's ``adopt_version``),
``after_round`` (the hyperparameter log; PBT's ranking), ``on_failure`` (replace a member) and ``finish``
(population.json, the best member's summary).

PBT (Jaderberg et al. 2017; XingTian 5.1): every ``pbt.interval_rounds`` of a member's rounds it is
ranked against the population by its recent mean return; in the bottom fraction it *exploits*: its next
version is a copy of a top member's newest weights and optimizer state (published as a new version, so
no worker's cache holds it), and it *explores* (pbt/explore.py). With ``pbt.synchronous`` the population is
the driver's Gate (run/members.py): a member that ended a ranking round waits until every member still training
has ended it, and the generation is ranked at once. ``lineage.jsonl`` records every exploit
and failure with the weights' SHA-256 of both sides; ``hyperparameters.jsonl`` every member's values per
round.

``--resume`` continues every member from its own newest checkpoint (``policies/<name>/checkpoints``: weights,
optimizer state, counters and recent returns, and under PBT its current (explored) hyperparameters). PBT's
random generator restarts from the seed and the rounds done, so the resumed exploit and explore draws are the
same for two resumes of one run, but not the draws the uninterrupted run would have made (docs/pbt.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nimbus.config import NimbusConfig
from nimbus.data.buffer import Buffer
from nimbus.data.codec import Message
from nimbus.data.replay import FullBatch
from nimbus.data.resume import load_resume_state
from nimbus.errors import CheckpointError, FunctionFailed
from nimbus.models.weights import optim_key, weights_key
from nimbus.onpolicy.workflow import OnPolicyWorkflow
from nimbus.pbt.explore import exploit_source, explore, initial_values, ranked
from nimbus.policy.lifecycle import prewarm_round_zero
from nimbus.schema.bounds import RANK_STRIDE  # member i's actor ranks start at i·RANK_STRIDE (own env slots, seeds)
from nimbus.types import RoundMetrics

if TYPE_CHECKING:
    from nimbus.types import Shared

log = logging.getLogger(__name__)


def weights_sha256(*, message: Message) -> str:
    """A hash of every array of a weights message (name, dtype, shape, bytes), in name order."""
    digest = hashlib.sha256()
    for name in sorted(message.arrays):
        array = np.ascontiguousarray(message.arrays[name])
        digest.update(f"{name}|{array.dtype.str}|{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def member_configs(*, config: NimbusConfig) -> list[tuple[str, NimbusConfig]]:
    """Each policy's name and its own config: the run's, with its hyperparameters and seed (run seed + i)."""
    if config.pbt is not None:
        draws = initial_values(space=config.pbt.hyperparameters, members=config.pbt.members, seed=config.seed)
        named = [(f"member{i}", values) for i, values in enumerate(draws)]
    else:
        named = [(policy.name, dict(policy.algo)) for policy in config.policies]
    return [(name, with_algo(config=config, values=values, seed=config.seed + i))
            for i, (name, values) in enumerate(named)]


def with_algo(*, config: NimbusConfig, values: dict[str, Any], seed: int | None = None) -> NimbusConfig:
    """``config`` with some algo hyperparameters replaced (validated; integer fields rounded)."""
    algo = config.algo.model_dump()
    for key, value in values.items():
        algo[key] = int(round(value)) if isinstance(algo.get(key), int) and not isinstance(algo[key], bool) else value
    update: dict[str, Any] = {"algo": type(config.algo).model_validate(algo)}
    if seed is not None:
        update["seed"] = seed
    return config.model_copy(update=update)


@dataclass(frozen=True)
class Exploit:
    member: str
    source: str
    source_version: int
    version: int
    values_before: dict[str, Any]
    values_after: dict[str, Any]


@dataclass(frozen=True)
class MemberPlan:
    """One member as the run loop builds it."""

    name: str
    config: NimbusConfig
    run_dir: Path
    resume_from: Path | None   # its own checkpoints (``policies/<name>``) when the run resumes
    rank_base: int


class Population:
    """The controller over a run's members (``policies:`` or ``pbt:``): their plan, PBT's exploit and explore,
    member replacement, and the files only a population writes (lineage.jsonl, hyperparameters.jsonl,
    population.json)."""

    def __init__(self, *, config: NimbusConfig, run_dir: Path, resume_from: Path | None) -> None:
        if resume_from is not None and not (Path(resume_from) / "policies").is_dir():
            raise CheckpointError(f"cannot resume {resume_from} as a run of several policies: it has no policies/ "
                                  "directory (was it trained with policies: or pbt:?)")
        self.config, self.run_dir, self.resume_from = config, run_dir, resume_from
        self.plans: list[MemberPlan] = []
        for i, (name, member_config) in enumerate(member_configs(config=config)):
            member_dir = run_dir / "policies" / name
            member_dir.mkdir(parents=True, exist_ok=True)
            member_resume = Path(resume_from) / "policies" / name if resume_from is not None else None
            if member_resume is not None and config.pbt is not None:   # its explored values, not its first draw
                state = load_resume_state(path=member_resume)
                member_config = with_algo(config=member_config, values={
                    key: state.config["algo"][key] for key in config.pbt.hyperparameters})
            self.plans.append(MemberPlan(name=name, config=member_config, run_dir=member_dir,
                                         resume_from=member_resume, rank_base=i * RANK_STRIDE))
        self.names = [plan.name for plan in self.plans]
        self.workflows: list[OnPolicyWorkflow] = []
        self.pending: dict[int, tuple[str, dict[str, Any]]] = {}   # member → (its source, its explored values)
        self.held: set[int] = set()       # synchronous: members that ended a ranking round and wait for the others
        self.finished: set[int] = set()   # members whose stop rule held: ranked, never waited for
        self.released: list[int] = []     # held members the last ranking let go, for the driver to start
        self.lineage: Any = None      # lineage.jsonl and hyperparameters.jsonl, open from ``begin`` on
        self.hyper_log: Any = None

    def begin(self, *, workflows: list[OnPolicyWorkflow]) -> None:
        """The members are built: PBT's generator (re-seeded by the rounds done on a resume), the logs."""
        self.workflows = workflows
        rounds_done = sum(workflow.progress.rounds for workflow in workflows)
        seed = self.config.seed + 7919
        self.rng = np.random.default_rng(seed if self.resume_from is None else [seed, rounds_done])
        self.exploits, self.failures = lineage_counts(path=self.run_dir / "lineage.jsonl") \
            if self.resume_from is not None else (0, 0)
        self.lineage = (self.run_dir / "lineage.jsonl").open("a")
        self.hyper_log = (self.run_dir / "hyperparameters.jsonl").open("a")

    @property
    def store(self) -> Any:
        """The Store every member shares (one pool)."""
        return self.workflows[0].system.store

    def attach(self, i: int, workflow: OnPolicyWorkflow) -> None:
        """Member ``i``'s (new) workflow: its next version may be an exploit's copy."""
        self.workflows[i] = workflow
        workflow.adopt_version = lambda version: self._adopt(i, version)

    def prewarm(self, *, shared: Shared) -> None:
        """A learner for each member and every member's peak actors, ready before round 0 (``runtime.prewarm``):
        the members run their rounds side by side, so with one warm learner the second member's first round
        waited for a cold start (on Ray, ~6 s against 0.05 s rounds: the first member ended before the second
        began, and PBT's ranking saw one member at a time)."""
        if self.config.runtime.prewarm:
            first, members = self.workflows[0], len(self.workflows)
            prewarm_round_zero(runtime=shared.runtime, learner_spec=first.system.learner_spec, learners=members,
                               actor_spec=first.system.actor_spec, actors=first.peak_actors() * members)

    def values(self, i: int) -> dict[str, Any]:
        keys = self.config.pbt.hyperparameters if self.config.pbt is not None else {}
        algo = self.workflows[i].system.config.algo
        return {key: getattr(algo, key) for key in sorted(keys)}

    def scores(self) -> dict[str, float]:
        return {name: float(np.mean(w.progress.recent_returns)) for name, w in zip(self.names, self.workflows)
                if w.progress.recent_returns}

    # ------------------------------------------------------------------------------ per round
    def after_round(self, i: int, row: RoundMetrics) -> None:
        """The member's hyperparameters this round; under PBT, every ``interval_rounds``, whether it exploits."""
        self._log(self.hyper_log, {"member": self.names[i], "round": row.round, "env_steps": row.env_steps,
                                   "return_mean": row.return_mean, "policy_version": row.policy_version,
                                   "hyperparameters": self.values(i), **evaluation(row=row)})
        pbt = self.config.pbt
        if pbt is None or row.round % pbt.interval_rounds != pbt.interval_rounds - 1:
            return
        if not pbt.synchronous:
            self._rank(members=[i], current=i)
            return
        self.held.add(i)
        self._rank_complete_generations(current=i)

    # -------------------------------------------------------------- synchronous PBT (run/members.py's Gate)
    def holds(self, i: int) -> bool:
        return i in self.held

    def on_stopped(self, i: int) -> None:
        """Nobody waits for member ``i`` any more; if it waits itself (its last round was a ranking round) it is
        still ranked with that round's generation, so which member exploits there does not depend on which ended
        last (an exploit then only changes its final weights, as one at a last round does without the wait)."""
        self.finished.add(i)
        self._rank_complete_generations(current=None)

    def take_released(self) -> list[int]:
        released, self.released = self.released, []
        return released

    def _rank_complete_generations(self, *, current: int | None) -> None:
        """Rank the held members of the oldest generation (their rounds) once every member still training has
        ended it, and release them; ``current``: the member whose round is ending now (its exploit is its
        learner's next version, through ``adopt_version``)."""
        while self.held:
            generation = min(self.workflows[j].progress.rounds for j in self.held)
            if any(self.workflows[j].progress.rounds < generation
                   for j in range(len(self.workflows)) if j not in self.finished):
                return
            waiting = sorted(j for j in self.held if self.workflows[j].progress.rounds == generation)
            self.held.difference_update(waiting)
            self._rank(members=waiting, current=current)
            self.released += [j for j in waiting if j != current]

    def _rank(self, *, members: list[int], current: int | None) -> None:
        """Each of ``members`` (in order) in the bottom fraction copies a top member and explores; ``current``'s
        copy waits for its learner's version (``_adopt``), the others' (held between rounds) are made now."""
        scores, pbt = self.scores(), self.config.pbt
        if pbt is None or len(scores) < len(self.names):   # PBT ranks; every member needs returns to be ranked by
            return
        for i in members:
            source = exploit_source(member=self.names[i], scores=scores, fraction=pbt.fraction, rng=self.rng)
            if source is None or source == self.names[i]:
                continue
            self.pending[i] = (source, explore(values=self.values(i), space=pbt.hyperparameters,
                                               factors=pbt.perturb_factors,
                                               resample_probability=pbt.resample_probability, rng=self.rng))
            if i != current:
                workflow = self.workflows[i]
                version = self._adopt(i, workflow.progress.policy_version)
                if version != workflow.progress.policy_version:
                    workflow.switch_version(version=version)

    def _adopt(self, i: int, version: int) -> int:
        """The member's next version: its learner's, or (exploit) a copy of the source's newest weights."""
        source_name, after = self.pending.pop(i, (None, {}))
        if source_name is None:
            return version
        source = self.workflows[self.names.index(source_name)]
        if source.progress.policy_version == 0:
            return version
        new_version = version + 1
        before = self.values(i)
        self._copy(source=source_name, source_version=source.progress.policy_version,
                   member=self.names[i], version=new_version)
        system = self.workflows[i].system
        system.config = with_algo(config=system.config, values=after)
        self.exploits += 1
        self._record(Exploit(member=self.names[i], source=source_name, source_version=source.progress.policy_version,
                             version=new_version, values_before=before, values_after=after),
                     round_index=self.workflows[i].progress.rounds - 1)
        return new_version

    def _copy(self, *, source: str, source_version: int, member: str, version: int) -> None:
        store = self.store
        weights = store.get(key=weights_key(policy=source, version=source_version))
        store.put(key=weights_key(policy=member, version=version),
                  message=Message(header={**weights.header, "policy_version": version}, arrays=dict(weights.arrays)))
        optim = store.get(key=optim_key(policy=source, version=source_version))
        store.put(key=optim_key(policy=member, version=version),
                  message=Message(header={**optim.header, "policy_version": version}, arrays=dict(optim.arrays)))

    def _record(self, event: Exploit, *, round_index: int) -> None:
        store = self.store
        copied = store.get(key=weights_key(policy=event.member, version=event.version))
        original = store.get(key=weights_key(policy=event.source, version=event.source_version))
        self._log(self.lineage, {"event": "exploit", "round": round_index, **asdict(event),
                                 "weights_sha256": weights_sha256(message=copied),
                                 "source_weights_sha256": weights_sha256(message=original)})

    @staticmethod
    def _log(handle: Any, record: dict[str, Any]) -> None:
        handle.write(json.dumps(record) + "\n")
        handle.flush()

    # ------------------------------------------------------------------------------- failures
    def on_failure(self, i: int, error: FunctionFailed) -> bool:
        """A member failed past its retries: False (the run stops with the error) unless ``pbt.on_member_failure:
        replace``, which drops the member's round and re-seeds it from a top member (True: the loop gives the
        member a new workflow, whose events are a new generation's)."""
        if self.config.pbt is None or self.config.pbt.on_member_failure == "stop":
            return False
        system, progress = self.workflows[i].system, self.workflows[i].progress
        self.failures += 1
        capacity_rows = system.buffer.capacity_rows
        system.buffer.close(unlink=True)
        system.buffer = Buffer.create(spec=system.algo.buffer_spec(spaces=system.spaces), capacity_rows=capacity_rows)
        system.replay = FullBatch()
        donors = [name for name in ranked(scores=self.scores()) if name != self.names[i]
                  and self.workflows[self.names.index(name)].progress.policy_version > 0]
        version = progress.policy_version
        if donors:
            donor = self.workflows[self.names.index(donors[0])]
            version += 1
            self._copy(source=donors[0], source_version=donor.progress.policy_version, member=self.names[i],
                       version=version)
        progress.policy_version = version
        self._log(self.lineage, {"event": "failure", "member": self.names[i], "round": progress.rounds,
                                 "source": donors[0] if donors else None, "version": version, "error": str(error)})
        log.warning("member %s failed past its retries; re-seeded from %s", self.names[i],
                    donors[0] if donors else "itself")
        return True

    def finish(self, *, summaries: dict[str, Any]) -> str:
        """population.json and the best member's summary.json; the best member's name."""
        best = max(summaries, key=lambda name: summaries[name].final_return or float("-inf"))
        (self.run_dir / "population.json").write_text(json.dumps(
            {"best": best, "exploits": self.exploits, "failures": self.failures,
             "members": {name: asdict(summary) for name, summary in summaries.items()}}, indent=1))
        (self.run_dir / "summary.json").write_text(json.dumps(asdict(summaries[best]), indent=1))
        return best

    def report(self) -> None:
        if self.config.output.report:
            from nimbus.pbt.report import render_population
            render_population(run_dir=self.run_dir)

    def close(self) -> None:
        for handle in (self.lineage, self.hyper_log):
            if handle is not None:
                handle.close()


def evaluation(*, row: RoundMetrics) -> dict[str, float]:
    """A round's periodic evaluation (``train.eval_every_env_steps``, run/periodic_eval.py) for
    hyperparameters.jsonl: ``eval_return_mean`` and ``eval_policy_version``; {} when the round had none."""
    if "eval/return_mean" not in row.extras:
        return {}
    return {"eval_return_mean": row.extras["eval/return_mean"],
            "eval_policy_version": int(row.extras["eval/policy_version"])}


def lineage_counts(*, path: Path) -> tuple[int, int]:
    """(exploits, failures) recorded in a lineage file so far; (0, 0) when there is none."""
    if not path.exists():
        return 0, 0
    events = [json.loads(line)["event"] for line in path.read_text().splitlines() if line.strip()]
    return events.count("exploit"), events.count("failure")


__all__ = ["Population", "MemberPlan", "member_configs", "weights_sha256"]
