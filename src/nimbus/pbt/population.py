"""Several named policies over one pool of workers (``policies:``), and population-based training (``pbt:``).

Each policy is a System of its own (run/build.py ``build_policy``): its weights and optimizer versions
under ``weights/<name>/`` in the shared Store, its buffer, replay strategy, triggers, actor-scaling
controller, function specs (``actor/<name>``, ``learner/<name>`` in the ledger), metrics and checkpoints
in ``<run_dir>/policies/<name>/``. One driver loop moves every member's events; each member's rounds run
as in the sync workflow, concurrently with the others'.

PBT (Jaderberg et al. 2017; XingTian 5.1): every ``pbt.interval_rounds`` of a member's rounds it is
ranked against the population by its recent mean return; in the bottom fraction it *exploits*: its next
version is a copy of a top member's newest weights and optimizer state (published as a new version, so
no worker's cache holds it), and it *explores* (pbt/explore.py). ``lineage.jsonl`` records every exploit
and failure with the weights' SHA-256 of both sides; ``hyperparameters.jsonl`` every member's values per
round.

``--resume`` continues every member from its own newest checkpoint (``train_population(resume_from=...)``;
docs/pbt.md says what is and is not restored).
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from nimbus.config import NimbusConfig
from nimbus.config.bounds import RANK_STRIDE  # member i's actor ranks start at i·RANK_STRIDE (own env slots, seeds)
from nimbus.data.buffer import Buffer
from nimbus.data.checkpoint import CheckpointState
from nimbus.data.codec import Message
from nimbus.data.replay import FullBatch
from nimbus.errors import CheckpointError, FunctionFailed
from nimbus.models.weights import optim_key, weights_key
from nimbus.onpolicy.sync import SyncWorkflow
from nimbus.onpolicy.system import System
from nimbus.pbt.explore import exploit_source, explore, initial_values, ranked
from nimbus.run.build import build_policy, build_shared, make_run_dir, peak_actors
from nimbus.run.loop import (PREWARM_WAIT_S, RunSummary, TrainResult, _publish_initial, _should_stop,
                                  _summarise, save_checkpoint)
from nimbus.run.resume import check_compatible, load_resume_state, progress_from, publish_checkpoint
from nimbus.types import Progress, RoundMetrics, Shared

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


class _Tagged:
    """A member's event queue: tags each event with (member index, generation) on the shared queue."""

    def __init__(self, *, shared: "queue.Queue[Any]", tag: tuple[int, int]) -> None:
        self.shared, self.tag = shared, tag

    def put(self, item: Any) -> None:
        self.shared.put((self.tag, item))


class Population:
    """The members' Systems and workflows over one Shared pool, and the PBT controller's state."""

    def __init__(self, *, config: NimbusConfig, shared: Shared, run_dir: Path, resume_from: Path | None = None) -> None:
        self.config, self.shared, self.run_dir = config, shared, run_dir
        self.events: queue.Queue[Any] = queue.Queue()
        self.systems: list[System] = []
        self.resumed: list[CheckpointState | None] = []   # per member: the checkpoint it continues from
        for i, (name, member_config) in enumerate(member_configs(config=config)):
            member_dir = run_dir / "policies" / name
            member_dir.mkdir(parents=True, exist_ok=True)
            state = load_resume_state(path=Path(resume_from) / "policies" / name) if resume_from is not None else None
            if state is not None and config.pbt is not None:   # the member's explored values, not its first draw
                member_config = with_algo(config=member_config, values={
                    key: state.config["algo"][key] for key in config.pbt.hyperparameters})
            self.systems.append(build_policy(config=member_config, shared=shared, run_dir=member_dir, policy=name,
                                             owns_shared=False, rank_base=i * RANK_STRIDE))
            self.resumed.append(state)
        self.names = [system.policy for system in self.systems]
        self.generation = [0] * len(self.systems)
        self.workflows: list[SyncWorkflow] = [
            self._workflow(i, Progress() if state is None else progress_from(state=state))
            for i, state in enumerate(self.resumed)]
        rounds_done = sum(workflow.progress.rounds for workflow in self.workflows)
        self.rng = np.random.default_rng(config.seed + 7919 if resume_from is None else [config.seed + 7919, rounds_done])
        self.pending: dict[int, str] = {}
        self.exploits, self.failures = lineage_counts(path=run_dir / "lineage.jsonl") if resume_from is not None \
            else (0, 0)
        self.lineage = (run_dir / "lineage.jsonl").open("a")
        self.hyper_log = (run_dir / "hyperparameters.jsonl").open("a")

    def _workflow(self, i: int, progress: Progress) -> SyncWorkflow:
        workflow = SyncWorkflow(system=self.systems[i], progress=progress,
                                on_round=lambda row, i=i: self._on_round(i, row))
        tag_events(workflow=workflow, events=self.events, tag=(i, self.generation[i]))
        workflow.adopt_version = lambda version, i=i: self._adopt(i, version)
        return workflow

    def values(self, i: int) -> dict[str, Any]:
        keys = self.config.pbt.hyperparameters if self.config.pbt is not None else {}
        algo = self.systems[i].config.algo
        return {key: getattr(algo, key) for key in sorted(keys)}

    def scores(self) -> dict[str, float]:
        return {name: float(np.mean(w.progress.recent_returns)) for name, w in zip(self.names, self.workflows)
                if w.progress.recent_returns}

    # ------------------------------------------------------------------------------ per round
    def _on_round(self, i: int, row: RoundMetrics) -> None:
        system, progress = self.systems[i], self.workflows[i].progress
        system.metrics.write(row=row, runtime={})
        self._log(self.hyper_log, {"member": self.names[i], "round": row.round, "env_steps": row.env_steps,
                                   "return_mean": row.return_mean, "policy_version": row.policy_version,
                                   "hyperparameters": self.values(i)})
        every = self.config.train.checkpoint_every_rounds
        if row.round % every == every - 1:
            save_checkpoint(system=system, progress=progress)
        pbt = self.config.pbt
        if pbt is None or row.round % pbt.interval_rounds != pbt.interval_rounds - 1:
            return
        scores = self.scores()
        if len(scores) == len(self.names):  # every member has returns to be ranked by
            source = exploit_source(member=self.names[i], scores=scores, fraction=pbt.fraction, rng=self.rng)
            if source is not None and source != self.names[i]:
                self.pending[i] = source

    def _adopt(self, i: int, version: int) -> int:
        """The member's next version: its learner's, or (exploit) a copy of the source's newest weights."""
        source_name = self.pending.pop(i, None)
        if source_name is None:
            return version
        source = self.workflows[self.names.index(source_name)]
        if source.progress.policy_version == 0:
            return version
        new_version = version + 1
        before = self.values(i)
        self._copy(source=source_name, source_version=source.progress.policy_version,
                   member=self.names[i], version=new_version)
        pbt = self.config.pbt
        after = explore(values=before, space=pbt.hyperparameters, factors=pbt.perturb_factors,
                        resample_probability=pbt.resample_probability, rng=self.rng)
        self.systems[i].config = with_algo(config=self.systems[i].config, values=after)
        self.exploits += 1
        self._record(Exploit(member=self.names[i], source=source_name, source_version=source.progress.policy_version,
                             version=new_version, values_before=before, values_after=after),
                     round_index=self.workflows[i].progress.rounds - 1)
        return new_version

    def _copy(self, *, source: str, source_version: int, member: str, version: int) -> None:
        store = self.shared.store
        weights = store.get(key=weights_key(policy=source, version=source_version))
        store.put(key=weights_key(policy=member, version=version),
                  message=Message(header={**weights.header, "policy_version": version}, arrays=dict(weights.arrays)))
        optim = store.get(key=optim_key(policy=source, version=source_version))
        store.put(key=optim_key(policy=member, version=version),
                  message=Message(header={**optim.header, "policy_version": version}, arrays=dict(optim.arrays)))

    def _record(self, event: Exploit, *, round_index: int) -> None:
        store = self.shared.store
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
    def replace_member(self, i: int, error: FunctionFailed) -> None:
        """``pbt.on_member_failure: replace``: drop the member's round, re-seed it from a top member."""
        system, progress = self.systems[i], self.workflows[i].progress
        self.failures += 1
        self.generation[i] += 1  # events of the failed round's other functions are ignored from now on
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
        self.workflows[i] = self._workflow(i, progress)
        self.start(i)

    def start(self, i: int) -> None:
        start_workflow(self.workflows[i])

    def run(self) -> None:
        """Every member runs rounds until its stop condition; events of all members share one loop."""
        def on_failure(i: int, error: FunctionFailed) -> None:
            if self.config.pbt is None or self.config.pbt.on_member_failure == "stop":
                raise error
            self.replace_member(i, error)

        drive(workflows=self.workflows, events=self.events, generation=self.generation, start=self.start,
              stop=lambda i: _should_stop(config=self.config, progress=self.workflows[i].progress) is not None,
              on_failure=on_failure)

    def close(self) -> None:
        self.lineage.close()
        self.hyper_log.close()
        for system in self.systems:
            system.close()
        self.shared.close()


def drive(*, workflows: list[SyncWorkflow], events: "queue.Queue[Any]", generation: list[int],
          start: Callable[[int], None], stop: Callable[[int], bool],
          on_failure: Callable[[int, FunctionFailed], None]) -> None:
    """One driver loop over several sync workflows whose events arrive tagged (index, generation) on
    ``events``: each runs rounds until ``stop(i)`` after one of its rounds; an event of an older
    generation (a replaced member's unfinished round) is dropped."""
    active = set(range(len(workflows)))
    for i in sorted(active):
        start(i)
    while active:
        try:
            (i, gen), (kind, future, meta) = events.get(timeout=0.5)
        except queue.Empty:
            continue
        if i not in active or gen != generation[i]:
            continue
        try:
            ended = workflows[i].handle(kind=kind, future=future, meta=meta)
        except FunctionFailed as exc:
            on_failure(i, exc)
            continue
        if ended and stop(i):
            active.discard(i)
            continue
        workflows[i].table.poll(now_s=time.monotonic())


def tag_events(*, workflow: SyncWorkflow, events: "queue.Queue[Any]", tag: tuple[int, int]) -> SyncWorkflow:
    """Route ``workflow``'s events to the shared queue, tagged."""
    workflow.events = _Tagged(shared=events, tag=tag)  # type: ignore[assignment]
    return workflow


def start_workflow(workflow: SyncWorkflow) -> None:
    """Announce the workflow's current version, so its actors start."""
    workflow.system.store_events.notify(key=weights_key(policy=workflow.policy,
                                                        version=workflow.progress.policy_version))
    workflow.table.poll(now_s=time.monotonic())


def lineage_counts(*, path: Path) -> tuple[int, int]:
    """(exploits, failures) recorded in a lineage file so far; (0, 0) when there is none."""
    if not path.exists():
        return 0, 0
    events = [json.loads(line)["event"] for line in path.read_text().splitlines() if line.strip()]
    return events.count("exploit"), events.count("failure")


def train_population(*, config: NimbusConfig, run_dir: Path | None = None,
                     resume_from: Path | None = None) -> TrainResult:
    """Train every policy of ``config`` over one pool; the summary is the best member's (population.json has all).

    With ``resume_from`` (the run directory) every member continues from its own newest checkpoint
    (``policies/<name>/checkpoints``): weights, optimizer state, counters and recent returns, and under PBT
    its current (explored) hyperparameters. PBT's random generator restarts from the seed and the rounds
    done, so the resumed exploit and explore draws are the same for two resumes of one run, but not the
    draws the uninterrupted run would have made."""
    if resume_from is not None and not (Path(resume_from) / "policies").is_dir():
        raise CheckpointError(f"cannot resume {resume_from} as a run of several policies: it has no policies/ "
                              "directory (was it trained with policies: or pbt:?)")
    run_dir = run_dir or (Path(resume_from) if resume_from is not None else make_run_dir(config=config))
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    population = Population(config=config, shared=build_shared(config=config, run_dir=run_dir), run_dir=run_dir,
                            resume_from=resume_from)
    try:
        for system, state in zip(population.systems, population.resumed):
            if state is None:
                _publish_initial(system=system)
                continue
            check_compatible(state=state, system=system)
            publish_checkpoint(state=state, system=system)
            log.warning("member %s resumes from round %d (policy version %d, %d env steps)", system.policy,
                        state.round, state.policy_version, state.env_steps)
        if config.runtime.prewarm:
            runtime = population.shared.runtime
            runtime.prewarm(spec=population.systems[0].learner_spec, count=1)
            runtime.prewarm(spec=population.systems[0].actor_spec, wait_s=PREWARM_WAIT_S,
                            count=peak_actors(config=config) * len(population.systems))
        population.run()
        wall_s = time.perf_counter() - started
        summaries = {}
        for system, workflow in zip(population.systems, population.workflows):
            save_checkpoint(system=system, progress=workflow.progress)
            summaries[system.policy] = _summarise(system=system, progress=workflow.progress,
                                                  wall_s=wall_s + workflow.progress.wall_s_before,
                                                  stopped_by="done", cost_usd=workflow.cost_usd(),
                                                  peak_actors=workflow.decision.num_actors * len(population.systems))
        exploits, failures = population.exploits, population.failures
    finally:
        population.close()
    best = max(summaries, key=lambda name: summaries[name].final_return or float("-inf"))
    (run_dir / "population.json").write_text(json.dumps(
        {"best": best, "exploits": exploits, "failures": failures,
         "members": {name: asdict(summary) for name, summary in summaries.items()}}, indent=1))
    (run_dir / "summary.json").write_text(json.dumps(asdict(summaries[best]), indent=1))
    if config.output.report:
        from nimbus.pbt.report import render_population
        render_population(run_dir=run_dir)
    return TrainResult(run_dir=run_dir, summary=summaries[best], rows=[])


__all__ = ["Population", "train_population", "member_configs", "weights_sha256", "RunSummary"]
