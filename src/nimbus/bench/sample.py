"""``nimbus bench sample``: env steps/s of N actor functions with policy inference, against N × the
single-process rate of the same env, policy and code.

* single process: ``actor_function`` called in this process (one warm-up call, then ``fragments``
  calls), i.e. the actor's own loop — env stepping, policy inference, rows — without any runtime;
* N actor functions: the same function in N warm LocalRuntime workers (capacity N, prewarmed), each
  rank re-invoked as soon as its previous fragment came back, ``fragments`` times; wall time from the
  first invoke to the last result, results through the Channel as in training.

Both run in every repeat, one after the other, so a load change hits both; the ratio is
rate(N) / (N · rate(1)). The default N is the number of cores. PPO's default MLP (64×64, tanh).
Also reported: env steps per CPU second of the workers over that of the single process — the
runtime's CPU overhead per step, independent of how much CPU the machine gives (on a shared machine
the kernel's autogroup scheduling caps one session's share, whatever N).

Example::

    report = run_sample(spec=SampleSpec(env_ids=("CartPole-v1",), num_actors=2))
"""

from __future__ import annotations

import json
import os
import statistics
import time
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from nimbus.algos.ppo.config import PPOConfig
from nimbus.algos.registry import make_algorithm
from nimbus.bench.transfer import environment
from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.data.shm import run_prefix
from nimbus.data.store import ShmStore
from nimbus.envs.make import make_env
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.weights import model_to_message, weights_key
from nimbus.onpolicy.actor import actor_function
from nimbus.roles.actor import ActorRequest
from nimbus.runtime.base import FunctionContext, FunctionSpec, Resources
from nimbus.runtime.local import LocalRuntime

ACTOR_ENTRYPOINT = "nimbus.onpolicy.actor:actor_function"


@dataclass(frozen=True)
class SampleSpec:
    env_ids: tuple[str, ...] = ("CartPole-v1", "Hopper-v5")
    num_actors: int | None = None  # None: os.cpu_count()
    num_envs_per_actor: int = 4
    fragment_steps: int = 256
    fragments: int = 6
    repeats: int = 3
    seed: int = 0


@dataclass(frozen=True)
class SampleResult:
    env_id: str
    num_actors: int
    single_steps_s: list[float]
    parallel_steps_s: list[float]
    ratios: list[float]  # per repeat: parallel / (N · single)
    ratio_median: float = 0.0
    cpu_efficiency: list[float] = field(default_factory=list)  # per repeat: steps per CPU s, workers / single


@dataclass(frozen=True)
class SampleReport:
    spec: dict[str, Any]
    results: tuple[SampleResult, ...]
    environment: dict[str, Any] = field(default_factory=dict)


def _requests(*, spec: SampleSpec, env_id: str, ranks: int) -> list[ActorRequest]:
    algo = PPOConfig().model_dump(mode="json")
    return [ActorRequest(env_id=env_id, env_kwargs={}, num_envs=spec.num_envs_per_actor,
                         fragment_steps=spec.fragment_steps, seed=spec.seed, actor_rank=rank, slot_seq=0,
                         policy_version=0, weights_key=weights_key(policy="bench", version=0), algo=algo)
            for rank in range(ranks)]


def _publish_weights(*, store: ShmStore, env_id: str) -> None:
    env = make_env(env_id=env_id, seed=0, kwargs={})
    algo = make_algorithm(config=PPOConfig())
    torch.manual_seed(0)
    model = algo.make_model(spaces=EnvSpaces(observation=env.observation_space, action=env.action_space))
    env.close()
    key = weights_key(policy="bench", version=0)
    store.delete(key=key)
    store.put(key=key, message=model_to_message(model=model, version=0))


def _with_seq(request: ActorRequest, seq: int) -> Message:
    return ActorRequest(**{**asdict(request), "slot_seq": seq}).to_message()


def _descendants_cpu_s() -> float:
    """User + system CPU seconds of this process's live descendants (the runtime's workers: forked by the fork
    server, so grandchildren), from /proc."""
    stats: dict[int, tuple[int, int]] = {}   # pid -> (parent pid, utime + stime in ticks)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(stat.parent.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))  # ppid; utime, stime
    descendants, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, (parent, _) in stats.items() if parent in frontier} - descendants
        descendants |= frontier
    return sum(stats[pid][1] for pid in descendants) / os.sysconf("SC_CLK_TCK")


def single_rate(*, spec: SampleSpec, env_id: str) -> tuple[float, float]:
    """(env steps/s, env steps per CPU second) of the actor function called in this process."""
    request = _requests(spec=spec, env_id=env_id, ranks=1)[0]
    context = FunctionContext(worker_id="bench", function="actor", invocation_id="warm", attempt=1)
    actor_function(context=context, request=_with_seq(request, 0))
    started, cpu = time.perf_counter(), time.process_time()
    for seq in range(1, spec.fragments + 1):
        actor_function(context=context, request=_with_seq(request, seq))
    steps = spec.fragments * spec.num_envs_per_actor * spec.fragment_steps
    return steps / (time.perf_counter() - started), steps / (time.process_time() - cpu)


def parallel_rate(*, spec: SampleSpec, env_id: str, runtime: LocalRuntime, actor: FunctionSpec,
                  n: int) -> tuple[float, float]:
    """(env steps/s, env steps per worker CPU second) of ``n`` actor functions, each rank re-invoked
    when its fragment returns."""
    requests = _requests(spec=spec, env_id=env_id, ranks=n)
    for request in requests:  # warm every worker's envs and weights
        runtime.invoke(spec=actor, request=_with_seq(request, 0)).result()
    done = {rank: 0 for rank in range(n)}
    started, cpu = time.perf_counter(), _descendants_cpu_s()
    futures = {runtime.invoke(spec=actor, request=_with_seq(requests[rank], 1)): rank for rank in range(n)}
    while futures:
        finished, _ = wait(list(futures), return_when=FIRST_COMPLETED)  # blocks: no polling on a busy machine
        for future in finished:
            future.result()
            rank = futures.pop(future)
            done[rank] += 1
            if done[rank] < spec.fragments:
                futures[runtime.invoke(spec=actor, request=_with_seq(requests[rank], done[rank] + 1))] = rank
    steps = sum(done.values()) * spec.num_envs_per_actor * spec.fragment_steps
    return steps / (time.perf_counter() - started), steps / max(_descendants_cpu_s() - cpu, 1e-9)


def run_sample(*, spec: SampleSpec) -> SampleReport:
    n = spec.num_actors or os.cpu_count() or 1
    run_prefix()
    store = ShmStore(owner=True)
    runtime = LocalRuntime(ledger=Ledger(), capacity_cpus=n, max_workers=n + 1)
    actor = FunctionSpec(name="actor", entrypoint=ACTOR_ENTRYPOINT, kind="actor", resources=Resources(cpus=1.0),
                         timeout_s=600.0)
    results = []
    try:
        runtime.prewarm(spec=actor, count=n, wait_s=120)
        for env_id in spec.env_ids:
            _publish_weights(store=store, env_id=env_id)
            single, parallel = [], []
            for _ in range(spec.repeats):
                single.append(single_rate(spec=spec, env_id=env_id))
                parallel.append(parallel_rate(spec=spec, env_id=env_id, runtime=runtime, actor=actor, n=n))
            ratios = [p[0] / (n * s[0]) for p, s in zip(parallel, single)]
            results.append(SampleResult(
                env_id=env_id, num_actors=n, single_steps_s=[s[0] for s in single],
                parallel_steps_s=[p[0] for p in parallel], ratios=ratios, ratio_median=statistics.median(ratios),
                cpu_efficiency=[p[1] / s[1] for p, s in zip(parallel, single)]))
    finally:
        runtime.shutdown()
        store.close()
    return SampleReport(spec=asdict(spec), results=tuple(results), environment=environment())


def print_sample_table(*, report: SampleReport, console: Any) -> None:
    from rich.table import Table

    table = Table(title="sampling: env steps/s, min/median/max over repeats")
    for column in ("env", "actors", "1 process", "N actor functions", "N × 1 process", "ratio (goal ≥ 0.85)",
                   "steps/CPU-s vs 1 process"):
        table.add_column(column, justify="left" if column == "env" else "right")

    def mmm(values: list[float], fmt: str = "{:,.0f}") -> str:
        return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"

    for r in report.results:
        table.add_row(r.env_id, str(r.num_actors), mmm(r.single_steps_s), mmm(r.parallel_steps_s),
                      f"{r.num_actors * statistics.median(r.single_steps_s):,.0f}", mmm(r.ratios, "{:.2f}"),
                      mmm(r.cpu_efficiency, "{:.2f}"))
    console.print(table)


def write_sample_json(*, report: SampleReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(report), indent=1))
