"""MARLess's ablation (issue 27; paper 001, Fig. 13) against the baselines a MARL reader expects.

IPPO on mpe2 simple_spread with N = 3 and N = 6 agents (configs/marless-ippo-spread.yaml with
``env.kwargs.N``), the same number of rounds in every arm, ≥ 5 seeds; ``--env adversary``: mpe2 simple_adversary
(heterogeneous agents: one adversary that sees 8 numbers, N good agents that see 10; ``--agents`` is its ``N``,
default 2, so 3 agents). Arms:

    marless        marless.sharing=marless, marless.scaling=marless   (both techniques)
    sharing-only   marless.sharing=marless, marless.scaling=fixed     (I_max actors every round)
    scaling-only   marless.sharing=none,    marless.scaling=marless
    per-agent      marless.sharing=none,    marless.scaling=fixed     (one policy per agent: the plain arm)
    full           marless.sharing=full,    marless.scaling=fixed     (one policy, agent id in the input)
    static         marless.sharing=static,  marless.scaling=fixed     (one policy per space class from round 0)

Shared policies read the agent's one-hot (``marless.agent_id``, on whenever agents may share). I_max = 12 actor
functions (the paper's 50 scaled to 2 cores), I_min = I_max / N, β 0.5, 2 envs per actor. Per run: the final
evaluation return (mean per-agent return of ``--eval-episodes`` greedy episodes of the final policies), the
learner cost (postprocess + critic + policy functions), the actor cost and the **total** cost (every ledger
row: the run's cost_usd), the mean actors and policies per round, and the detector's toggles. Per arm and N:
IQM with a 95 % stratified bootstrap interval (nimbus.analysis.stats). Then, claim by claim, MARLess against
each baseline: learner cost ratio (paper −49 %), actor cost ratio (paper −33 %), return gap (paper: within 5 %),
and the plain arm against uniform-random play (−27.0 at N = 3, −38.6 at N = 6, docs/marless.md; simple_adversary
N = 2: ``UNIFORM_RANDOM["adversary"]``, measured by ``--measure-random``: 300 seeded episodes).

Heterogeneous agents: sharing only ever groups agents of identical spaces (``static`` puts the adversary on one
policy and the good agents on another; ``marless`` clusters within each class), but ``full`` needs one space for
every agent (no padding in nimbus): on simple_adversary it exits 2, and the arm is recorded under ``skipped`` with
that reason instead of crashing the ablation.

Run:  python benchmarks/marless_ablation.py                  (6 arms × N 3, 6 × seeds 0-4; writes
                                                              benchmarks/results/marless_ablation.json)
      python benchmarks/marless_ablation.py --smoke          (2 arms, N = 3, 1 seed, 3 rounds: a minute)
      python benchmarks/marless_ablation.py --env adversary --output benchmarks/results/marless_ablation_adversary.json
                                                             (6 arms, full skipped, N = 2 × seeds 0-4)
      python benchmarks/marless_ablation.py --env adversary --measure-random   (uniform-random return, 300 episodes)
      python benchmarks/marless_ablation.py --merge a.json b.json --output all.json   (arms split across invocations)
      python benchmarks/marless_ablation.py --agents 6 --arms marless --env-steps 90000   (an arm at equal env steps:
                                                             the scaling arms sample ~22 % of I_max's steps a round)

At the paper's actor counts, simulated (issue 30): ``--profile P`` runs every arm on ``runtime.backend: simulated``
(docs/simulated.md) with the durations of a profile fitted on a real run of this setting (``--take-profile``), no
worker cap and no capacity limit (a CPU per actor function, as Lambda gives), ``--i-max`` actors (the paper's 50)
of ``--envs-per-actor`` envs. The learning is real; times and costs are the simulated ledger's.

      python benchmarks/marless_ablation.py --agents 6 --i-max 50 --envs-per-actor 1 --take-profile
                                            (a real 4-round run at 50 actors, alone → benchmarks/results/
                                             marless_n6_profile.yaml; its real durations are this machine's)
      python benchmarks/marless_ablation.py --agents 6 --i-max 50 --envs-per-actor 1 \
          --profile benchmarks/results/marless_n6_profile.yaml --arms marless per-agent --output ...
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from nimbus.analysis.stats import aggregate
from nimbus.config import load_config
from nimbus.errors import ConfigError
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "marless-ippo-spread.yaml"
ARMS = {"marless": ["marless.sharing=marless", "marless.scaling=marless"],
        "sharing-only": ["marless.sharing=marless", "marless.scaling=fixed"],
        "scaling-only": ["marless.sharing=none", "marless.scaling=marless"],
        "per-agent": ["marless.sharing=none", "marless.scaling=fixed"],
        "full": ["marless.sharing=full", "marless.scaling=fixed"],
        "static": ["marless.sharing=static", "marless.scaling=fixed"]}
ENVS = {"spread": "mpe2:simple_spread_v3", "adversary": "mpe2:simple_adversary_v3"}
DEFAULT_AGENTS = {"spread": [3, 6], "adversary": [2]}
# per-agent return of uniform-random play, 300 episodes (docs/marless.md); adversary N = 2: `--measure-random`,
# seed 0, -5.1998 (the same function gives -27.75 and -39.21 for spread N = 3 and 6)
UNIFORM_RANDOM = {"spread": {3: -27.0, 6: -38.6}, "adversary": {2: -5.20}}
METRICS = ("eval_return", "learner_cost_usd", "actor_cost_usd", "total_cost_usd", "mean_actors", "mean_policies",
           "toggles", "wall_s")
I_MAX, ENVS_PER_ACTOR = 12, 2
log = logging.getLogger("marless_ablation")


@dataclass(frozen=True)
class Run:
    arm: str
    agents: int               # env.kwargs.N (simple_adversary: the good agents, plus one adversary)
    seed: int
    eval_return: float        # mean per-agent return, greedy episodes of the final policies
    learner_cost_usd: float
    actor_cost_usd: float
    total_cost_usd: float     # every ledger row of the run
    mean_actors: float
    mean_policies: float
    toggles: int              # rounds at which the number of policies changed
    env_steps: int
    wall_s: float             # real seconds; simulated runs: the simulated clock's
    env: str = "spread"


def label(*, env: str, agents: int) -> str:
    """The summary's key prefix: ``N3`` for simple_spread (as before), ``adversary-N2`` otherwise."""
    return f"N{agents}" if env == "spread" else f"{env}-N{agents}"


@dataclass(frozen=True)
class Scale:
    """Actor functions and where they run: this machine (the default) or a simulated cluster (``profile``)."""

    i_max: int = I_MAX
    envs_per_actor: int = ENVS_PER_ACTOR
    profile: Path | None = None      # simulated: the fitted durations; None: real runs on the local backend

    def keys(self) -> list[str]:
        if self.profile is None:
            return ["runtime.max_workers=16"]
        return ["runtime.backend=simulated", f"simulation.profile={self.profile}", "runtime.max_workers=null"]


def overrides(*, extra: list[str], agents: int, seed: int, rounds: int, root: Path, eval_episodes: int,
              env: str = "spread", env_steps: int | None = None, scale: Scale = Scale()) -> list[str]:
    stop = [f"train.max_rounds={rounds}", "train.total_env_steps=100000000"] if env_steps is None \
        else ["train.max_rounds=100000", f"train.total_env_steps={env_steps}"]
    return [f"seed={seed}", *stop,
            f"env.id={ENVS[env]}", f"env.kwargs={{N: {agents}, max_cycles: 25}}",
            f"env.num_envs_per_actor={scale.envs_per_actor}",
            f"actors.scaling={{kind: fixed, num_actors: {scale.i_max}}}", f"marless.i_max={scale.i_max}",
            *scale.keys(), f"train.eval_episodes={eval_episodes}", f"output.root_dir={root}",
            "output.status_line=false", "output.loggers=[]", "output.report=false", *extra]


def take_profile(*, agents: int, scale: Scale, root: Path, output: Path, rounds: int = 4) -> None:
    """Real runs at ``scale``'s actor counts (``rounds`` rounds each, local backend, alone) fitted into a simulation
    profile (``nimbus simulate fit``): the plain arm gives the actor, critic and policy lines; the MARLess arm held at
    I_max actors (``marless.i_min`` = I_max), which probes every policy's Hessian each round, gives the ``probe``
    kind: its policy calls' median less the plain arm's, at the same rows. The simulated runtime adds a probe draw to
    each policy call that reports ``probe_s`` (runtime/simulated_durations.py ``with_probe``). The probe runs on the
    whole batch, so at fewer actors it is overstated: against MARLess, whose scaler runs fewer."""
    from statistics import median

    from nimbus.config.simulation import DurationModel
    from nimbus.cost.ledger import Ledger
    from nimbus.runtime.simulated_fit import fit_profile, write_profile

    real = Scale(i_max=scale.i_max, envs_per_actor=scale.envs_per_actor)
    dirs = {}
    held = [*ARMS["marless"], f"marless.i_min={scale.i_max}"]   # MARLess at I_max: it probes, at the plain arm's rows
    for arm, extra in (("per-agent", ARMS["per-agent"]), ("marless", held)):
        config = load_config(path=CONFIG, overrides=[*overrides(extra=extra, agents=agents, seed=0, rounds=rounds,
                                                                root=root, eval_episodes=0, scale=real),
                                                     "runtime.max_workers=null"])
        dirs[arm] = train(config=config, run_dir=root / f"profile-n{agents}-i{scale.i_max}-{arm}").run_dir

    def policy_median_s(run_dir: Path) -> float:
        return median(r.duration_s for r in Ledger.load(path=run_dir / "ledger.jsonl")
                      if r.kind == "policy" and r.outcome == "ok" and not r.cold)

    profile = fit_profile(run_dirs=[dirs["per-agent"]])
    probe_s = policy_median_s(dirs["marless"]) - policy_median_s(dirs["per-agent"])
    probe = DurationModel(distribution="lognormal", median_s=max(probe_s, 1e-3),
                          sigma=profile.functions["policy"].sigma, cold_start_s=0.0)
    write_profile(profile=profile.model_copy(update={
        "functions": {**profile.functions, "probe": probe},
        "source": f"{profile.source}; probe: policy median of {dirs['marless']} less the plain arm's"}), path=output)
    log.info("profile written to %s (probe %.3f s a policy call)", output, probe_s)


def run_arm(*, arm: str, agents: int, seed: int, rounds: int, root: Path, eval_episodes: int,
            env: str = "spread", env_steps: int | None = None, scale: Scale = Scale()) -> Run:
    config = load_config(path=CONFIG, overrides=overrides(extra=ARMS[arm], agents=agents, seed=seed, rounds=rounds,
                                                           root=root, eval_episodes=eval_episodes, env=env,
                                                           env_steps=env_steps, scale=scale))
    started = time.perf_counter()
    prefix = "" if env == "spread" else f"{env}-"
    result = train(config=config, run_dir=root / f"{prefix}n{agents}-{arm}-s{seed}")
    wall_s = result.summary.wall_s if scale.profile else time.perf_counter() - started  # simulated: virtual seconds
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    extras = [row["extras"] for row in rows]
    policies = [int(e["marless/policies"]) for e in extras]
    return Run(arm=arm, agents=agents, seed=seed, eval_return=float(result.summary.eval_return),
               learner_cost_usd=float(sum(e["marless/learner_cost_usd"] for e in extras)),
               actor_cost_usd=float(sum(e["marless/actor_cost_usd"] for e in extras)),
               total_cost_usd=float(rows[-1]["cost_usd"]),
               mean_actors=float(np.mean([row["num_actors"] for row in rows])), mean_policies=float(np.mean(policies)),
               toggles=int(sum(a != b for a, b in zip(policies, policies[1:]))),
               env_steps=int(result.summary.env_steps), wall_s=wall_s, env=env)


def uniform_random_return(*, env: str, agents: int, episodes: int = 300, seed: int = 0) -> float:
    """The mean per-agent return (the ablation's eval metric) of uniformly random actions: ``episodes`` episodes
    of max_cycles 25 on seeds ``seed``, ``seed + 1``, ..., each agent's action space seeded alike."""
    from nimbus.envs.parallel import make_parallel_env

    made = make_parallel_env(env_id=ENVS[env], seed=seed, kwargs={"N": agents, "max_cycles": 25})
    totals = []
    try:
        for episode in range(episodes):
            made.reset(seed=seed + episode)
            for i, agent in enumerate(made.possible_agents):
                made.action_space(agent).seed(seed + episode * 1000 + i)
            returns = dict.fromkeys(made.possible_agents, 0.0)
            while made.agents:
                _, rewards, _, _, _ = made.step({agent: made.action_space(agent).sample() for agent in made.agents})
                for agent, reward in rewards.items():
                    returns[agent] += float(reward)
            totals.append(float(np.mean(list(returns.values()))))
    finally:
        made.close()
    return float(np.mean(totals))


def summarise(runs: list[Run]) -> dict[str, dict[str, dict]]:
    """Per ``<label>/<arm>`` (label: ``N<agents>``, or ``<env>-N<agents>`` off simple_spread): each metric's IQM and
    95 % bootstrap interval over the seeds."""
    out: dict[str, dict[str, dict]] = {}
    def key_of(r: Run) -> str:
        return f"{label(env=r.env, agents=r.agents)}/{r.arm}"
    for key in dict.fromkeys(key_of(r) for r in runs):
        mine = [r for r in runs if key_of(r) == key]
        out[key] = {name: asdict(aggregate(scores_by_task=[np.array([getattr(r, name) for r in mine], float)],
                                           statistic="iqm")) for name in METRICS}
        out[key]["seeds"] = {"point": len(mine), "low": None, "high": None}
    return out


def claims(summary: dict[str, dict[str, dict]]) -> dict[str, dict[str, float]]:
    """MARLess against each baseline at each N: learner, actor and total cost ratios (IQMs) and the return gap
    |Δ| / |baseline|; and each arm's return above uniform random."""
    out: dict[str, dict[str, float]] = {}
    for key, arm in summary.items():
        agents, name = key.split("/")
        point = {m: arm[m]["point"] for m in METRICS}
        env, _, n = agents.rpartition("-N") if "-N" in agents else ("spread", "", agents[1:])
        random_return = UNIFORM_RANDOM[env].get(int(n))
        if random_return is not None:
            out.setdefault(f"{agents}/above_random", {})[name] = point["eval_return"] - random_return
        ours = summary.get(f"{agents}/marless")
        if name == "marless" or ours is None:
            continue
        out[f"{agents}/marless_vs_{name}"] = {
            "learner_cost_ratio": ours["learner_cost_usd"]["point"] / point["learner_cost_usd"],
            "actor_cost_ratio": ours["actor_cost_usd"]["point"] / point["actor_cost_usd"],
            "total_cost_ratio": ours["total_cost_usd"]["point"] / point["total_cost_usd"],
            "return_gap": abs(ours["eval_return"]["point"] - point["eval_return"]) / abs(point["eval_return"])}
    return out


def markdown(summary: dict[str, dict[str, dict]]) -> str:
    def cell(s: dict, fmt: str) -> str:
        if s["low"] is None:
            return f"{s['point']:{fmt}}"
        return f"{s['point']:{fmt}} [{s['low']:{fmt}}, {s['high']:{fmt}}]"
    lines = ["| N / arm | eval return | learner USD | actor USD | total USD | actors | policies | toggles | wall s |",
             "|" + " --- |" * 9]
    for key, s in summary.items():
        lines.append(f"| {key} | {cell(s['eval_return'], '.2f')} | {cell(s['learner_cost_usd'], '.5f')} | "
                     f"{cell(s['actor_cost_usd'], '.5f')} | {cell(s['total_cost_usd'], '.5f')} | "
                     f"{s['mean_actors']['point']:.1f} | {s['mean_policies']['point']:.2f} | "
                     f"{s['toggles']['point']:.1f} | {s['wall_s']['point']:.0f} |")
    return "\n".join(lines)


def write(*, output: Path, runs: list[Run], skipped: dict[str, str], machine: dict, env: str, rounds: int,
          sources: list[str] | None = None) -> None:
    """The results file: the runs, each arm's IQM summary and the claims; prints the table and the claims."""
    summary = summarise(runs)
    output.parent.mkdir(parents=True, exist_ok=True)
    record = {"machine": machine, "env": ENVS[env], "uniform_random": UNIFORM_RANDOM[env], "rounds": rounds,
              "runs": [asdict(r) for r in runs], "skipped": skipped, "summary": summary, "claims": claims(summary)}
    if sources:
        record["merged_from"] = sources
    output.write_text(json.dumps(record, indent=2))
    print(markdown(summary))
    print(json.dumps(claims(summary), indent=2))


def merge(*, paths: list[Path], output: Path) -> None:
    """One results file from several (one env and round count; arms or N split across invocations). Each source's
    machine record (its loads) is kept under ``machine.sources``."""
    records = [json.loads(path.read_text()) for path in paths]
    if len({(r["env"], r["rounds"]) for r in records}) != 1:
        raise SystemExit("--merge: the files differ in env or rounds; merge only runs of one setting")
    env = next(name for name, env_id in ENVS.items() if env_id == records[0]["env"])
    runs = [Run(**row) for record in records for row in record["runs"]]
    keys = [(r.env, r.agents, r.arm, r.seed) for r in runs]
    if len(keys) != len(set(keys)):
        raise SystemExit("--merge: a run (arm, N, seed) appears in two files")
    skipped = {k: v for record in records for k, v in record["skipped"].items()}
    machine = {"sources": {str(path): record["machine"] for path, record in zip(paths, records)}}
    write(output=output, runs=runs, skipped=skipped, machine=machine, env=env, rounds=records[0]["rounds"],
          sources=[str(path) for path in paths])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--env", default="spread", choices=list(ENVS),
                        help="spread: simple_spread; adversary: simple_adversary (heterogeneous agents)")
    parser.add_argument("--agents", nargs="+", type=int, default=None,
                        help="env.kwargs.N per run (default: 3 6 for spread, 2 for adversary)")
    parser.add_argument("--measure-random", action="store_true",
                        help="print the uniform-random return (300 seeded episodes) for --env and --agents, then stop")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--rounds", type=int, default=150, help="rounds per run (600 env steps each)")
    parser.add_argument("--env-steps", type=int, default=None,
                        help="stop each run at this many env steps instead of --rounds (arms at equal samples; "
                             "the results file records rounds 0)")
    parser.add_argument("--eval-episodes", type=int, default=40)
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "marless-ablation")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "marless_ablation.json")
    parser.add_argument("--merge", nargs="+", type=Path, default=None,
                        help="combine the runs of earlier --output files (arms split across invocations) into --output")
    parser.add_argument("--i-max", type=int, default=I_MAX, help="actor functions (the paper's 50; 12 fit 2 cores)")
    parser.add_argument("--envs-per-actor", type=int, default=ENVS_PER_ACTOR)
    parser.add_argument("--profile", type=Path, default=None,
                        help="run the arms simulated, on this fitted profile (--take-profile writes one)")
    parser.add_argument("--take-profile", type=Path, nargs="?", const=REPO / "benchmarks" / "results" /
                        "marless_n6_profile.yaml", default=None,
                        help="a real 4-round run at --i-max actors (alone), fitted into this profile, then stop")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.merge:
        merge(paths=args.merge, output=args.output)
        return
    agents = args.agents or DEFAULT_AGENTS[args.env]
    scale = Scale(i_max=args.i_max, envs_per_actor=args.envs_per_actor, profile=args.profile)
    if args.take_profile:
        take_profile(agents=agents[0], scale=scale, root=args.root, output=args.take_profile)
        return
    if args.measure_random:
        for n in agents:
            print(json.dumps({"env": ENVS[args.env], "N": n, "episodes": 300, "seed": 0,
                              "uniform_random_return": uniform_random_return(env=args.env, agents=n)}))
        return
    arms = (["marless", "full"] if args.env == "spread" else ["marless", "static", "full"]) if args.smoke \
        else args.arms
    agents = agents[:1] if args.smoke else agents
    seeds, rounds = ([0], 3) if args.smoke else (args.seeds, args.rounds)
    load_before = os.getloadavg()[0]
    runs, skipped = [], {}
    for n in agents:
        for seed in seeds:                   # seed-major: the arms of one seed run back to back
            for arm in arms:
                try:
                    run = run_arm(arm=arm, agents=n, seed=seed, rounds=rounds, root=args.root, env=args.env,
                                  eval_episodes=2 if args.smoke else args.eval_episodes, env_steps=args.env_steps,
                                  scale=scale)
                except ConfigError as err:   # an arm that cannot apply here (full sharing across spaces): said why
                    skipped[f"{label(env=args.env, agents=n)}/{arm}"] = str(err)
                    log.warning("N=%d %s skipped: %s", n, arm, err)
                    continue
                log.info("N=%d %s seed %d: eval %.2f, learner $%.5f, actor $%.5f, total $%.5f, %.1f actors, "
                         "%.2f policies, %.0f s", n, arm, seed, run.eval_return, run.learner_cost_usd,
                         run.actor_cost_usd, run.total_cost_usd, run.mean_actors, run.mean_policies, run.wall_s)
                runs.append(run)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
               "load_1m_before": load_before, "load_1m_after": os.getloadavg()[0], "i_max": scale.i_max,
               "envs_per_actor": scale.envs_per_actor,
               "simulated_profile": str(scale.profile) if scale.profile else None}
    write(output=args.output, runs=runs, skipped=skipped, machine=machine, env=args.env,
          rounds=0 if args.env_steps else rounds)


if __name__ == "__main__":
    main()
