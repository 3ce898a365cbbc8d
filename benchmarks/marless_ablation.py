"""MARLess's ablation at this machine's scale (issue 13; paper 001, Fig. 13): sharing and scaling, on and off.

IPPO on mpe2 simple_spread with 6 agents (configs/marless-ippo-spread.yaml with ``env.kwargs.N=6``), the
same number of rounds in every arm. Arms:

    marless       marless.sharing=marless, marless.scaling=marless
    no-sharing    marless.sharing=none,    marless.scaling=marless
    no-scaling    marless.sharing=marless, marless.scaling=fixed   (I_max actors every round)
    neither       marless.sharing=none,    marless.scaling=fixed

I_max = 12 actor functions (the paper's 50 scaled to 2 cores), I_min = I_max / N = 2, β 0.5, 2 envs per
actor. Per run: the final global return (the mean per-agent return of ``--eval-episodes`` greedy episodes
of the final policies from a fixed seed, and the training return of the last ``return_window`` episodes),
the learner cost (postprocess + critic + policy functions) and the actor cost (ledger, serverless
prices), the mean number of actors and of policies, and the detector's toggles. ``--gammas`` adds MARLess
arms at other γ (what γ does at this scale).

Run:  python benchmarks/marless_ablation.py                 (writes benchmarks/results/marless_ablation.json)
      python benchmarks/marless_ablation.py --smoke         (2 arms, 1 seed, 3 rounds: seconds)
      python benchmarks/marless_ablation.py --arms marless --gammas 0.0 -0.05 --output gamma.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nitro_ablation import spread  # noqa: E402

from nimbus.config import load_config  # noqa: E402
from nimbus.run.loop import train  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "marless-ippo-spread.yaml"
ARMS = {"marless": ["marless.sharing=marless", "marless.scaling=marless"],
        "no-sharing": ["marless.sharing=none", "marless.scaling=marless"],
        "no-scaling": ["marless.sharing=marless", "marless.scaling=fixed"],
        "neither": ["marless.sharing=none", "marless.scaling=fixed"]}
AGENTS, I_MAX, ENVS_PER_ACTOR = 6, 12, 2
log = logging.getLogger("marless_ablation")


@dataclass(frozen=True)
class Run:
    arm: str
    seed: int
    eval_return: float        # mean per-agent return, greedy episodes of the final policies
    final_return: float       # training return of the last return_window episodes
    learner_cost_usd: float
    actor_cost_usd: float
    mean_actors: float
    mean_policies: float
    toggles: int              # rounds at which the number of policies changed
    env_steps: int
    wall_s: float


def overrides(*, arm_extra: list[str], seed: int, rounds: int, root: Path, eval_episodes: int) -> list[str]:
    return [f"seed={seed}", f"train.max_rounds={rounds}", "train.total_env_steps=100000000",
            f"env.kwargs={{N: {AGENTS}, max_cycles: 25}}", f"env.num_envs_per_actor={ENVS_PER_ACTOR}",
            f"actors.scaling={{kind: fixed, num_actors: {I_MAX}}}", f"marless.i_max={I_MAX}",
            "runtime.max_workers=16", f"train.eval_episodes={eval_episodes}", f"output.root_dir={root}",
            "output.status_line=false", "output.tensorboard=false", "output.report=false", *arm_extra]


def run_arm(*, arm: str, extra: list[str], seed: int, rounds: int, root: Path, eval_episodes: int) -> Run:
    config = load_config(path=CONFIG, overrides=overrides(arm_extra=extra, seed=seed, rounds=rounds, root=root,
                                                           eval_episodes=eval_episodes))
    started = time.perf_counter()
    result = train(config=config, run_dir=root / f"{arm}-s{seed}")
    wall_s = time.perf_counter() - started
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    extras = [row["extras"] for row in rows]
    policies = [int(e["marless/policies"]) for e in extras]
    return Run(arm=arm, seed=seed, eval_return=float(result.summary.eval_return),
               final_return=float(result.summary.final_return),
               learner_cost_usd=float(sum(e["marless/learner_cost_usd"] for e in extras)),
               actor_cost_usd=float(sum(e["marless/actor_cost_usd"] for e in extras)),
               mean_actors=float(np.mean([row["num_actors"] for row in rows])),
               mean_policies=float(np.mean(policies)),
               toggles=int(sum(a != b for a, b in zip(policies, policies[1:]))),
               env_steps=int(result.summary.env_steps), wall_s=wall_s)


def table(runs: list[Run]) -> dict[str, dict]:
    out = {}
    for arm in dict.fromkeys(r.arm for r in runs):
        mine = [r for r in runs if r.arm == arm]
        out[arm] = {key: spread([float(getattr(r, key)) for r in mine]) for key in
                    ("eval_return", "final_return", "learner_cost_usd", "actor_cost_usd", "mean_actors",
                     "mean_policies", "toggles", "env_steps", "wall_s")}
        out[arm]["seeds"] = len(mine)
    return out


def ratios(summary: dict[str, dict]) -> dict[str, float]:
    """The issue's goals as ratios: learner cost with sharing / without, actor cost with scaling / without, and
    the MARLess arm's final return relative to the plain one (returns are negative: |Δ| / |plain|)."""
    mean = {arm: {k: v["mean"] for k, v in s.items() if isinstance(v, dict)} for arm, s in summary.items()}
    if not {"marless", "neither", "no-sharing", "no-scaling"} <= set(mean):
        return {}
    return {"learner_cost_sharing_vs_none": mean["marless"]["learner_cost_usd"] / mean["no-sharing"]["learner_cost_usd"],
            "actor_cost_scaling_vs_fixed": mean["marless"]["actor_cost_usd"] / mean["no-scaling"]["actor_cost_usd"],
            "eval_return_gap_vs_neither": abs(mean["marless"]["eval_return"] - mean["neither"]["eval_return"])
            / abs(mean["neither"]["eval_return"]),
            "final_return_gap_vs_neither": abs(mean["marless"]["final_return"] - mean["neither"]["final_return"])
            / abs(mean["neither"]["final_return"])}


def markdown(summary: dict[str, dict]) -> str:
    def cell(s: dict, fmt: str) -> str:
        return f"{s['mean']:{fmt}} ({s['min']:{fmt}}..{s['max']:{fmt}})"
    lines = ["| arm | eval return | training return | learner cost (USD) | actor cost (USD) | actors | policies | "
             "toggles | wall (s) |", "|" + " --- |" * 9]
    for arm, s in summary.items():
        lines.append(f"| {arm} | {cell(s['eval_return'], '.2f')} | {cell(s['final_return'], '.2f')} | "
                     f"{cell(s['learner_cost_usd'], '.5f')} | {cell(s['actor_cost_usd'], '.5f')} | "
                     f"{s['mean_actors']['mean']:.1f} | {s['mean_policies']['mean']:.2f} | "
                     f"{s['toggles']['mean']:.1f} | {cell(s['wall_s'], '.0f')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--gammas", nargs="*", type=float, default=[], help="extra MARLess arms at these γ")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "marless-ablation")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "marless_ablation.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    arms = {arm: ARMS[arm] for arm in (["marless", "neither"] if args.smoke else args.arms)}
    arms.update({f"marless-gamma{g:g}": [*ARMS["marless"], f"marless.gamma={g}"] for g in args.gammas})
    seeds, rounds = ([0], 3) if args.smoke else (args.seeds, args.rounds)
    load_before = os.getloadavg()[0]
    runs = []
    for seed in seeds:                       # seed-major: the arms of one seed run back to back
        for arm, extra in arms.items():
            run = run_arm(arm=arm, extra=extra, seed=seed, rounds=rounds, root=args.root,
                          eval_episodes=2 if args.smoke else args.eval_episodes)
            log.info("%s seed %d: eval %.2f, learner $%.5f, actor $%.5f, %.1f actors, %.2f policies, %.0f s",
                     arm, seed, run.eval_return, run.learner_cost_usd, run.actor_cost_usd, run.mean_actors,
                     run.mean_policies, run.wall_s)
            runs.append(run)
    summary = table(runs)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                    "load_1m_before": load_before, "load_1m_after": os.getloadavg()[0]},
        "rounds": rounds, "runs": [asdict(r) for r in runs], "summary": summary, "ratios": ratios(summary)},
        indent=2))
    print(markdown(summary))
    print(json.dumps(ratios(summary), indent=2))


if __name__ == "__main__":
    main()
