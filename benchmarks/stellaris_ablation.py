"""Stellaris's ablation at this machine's scale (issue 12): aggregation rules, IS truncation on/off, a sweep of d.

PPO on CartPole-v1 (configs/stellaris-cartpole.yaml) with 4 learner functions in flight, the same number
of rounds for every arm. Hopper-v5 PPO with 4 learners and a parameter function per aggregation does not
finish ≥ 3 seeds × 6 arms in ~10 minutes on 2 cores; CartPole does, and its 500 ceiling still separates
rules that learn from rules that stall. Arms: stellaris (paper), stellaris without truncation, sync,
softsync (k 2), ssp (s 1), async; ``--decays`` adds stellaris at other d. Per run: the return of
``--eval-episodes`` deterministic evaluation episodes of the final policy from a fixed seed, wall time,
serverless cost (ledger), the variance of the training return over the last ``--tail`` rounds
(oscillation, Fig. 11b), and the parameter function's share of round time (paper: < 5 %).

Run:  python benchmarks/stellaris_ablation.py                       (writes benchmarks/results/stellaris_ablation.json)
      python benchmarks/stellaris_ablation.py --smoke               (2 arms, 1 seed, 3 rounds: seconds)
      python benchmarks/stellaris_ablation.py --arms --decays 0.92 0.94 0.96 0.98 1.0 --output d.json
      python benchmarks/stellaris_ablation.py --merge a.json b.json --output all.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nitro_ablation import spread  # noqa: E402

from nimbus.config import load_config  # noqa: E402
from nimbus.roles.evaluate import evaluate_checkpoint  # noqa: E402
from nimbus.run.loop import train  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "stellaris-cartpole.yaml"
ARMS = {"stellaris": [], "stellaris-no-truncation": ["stellaris.truncation=none"],
        "sync": ["stellaris.rule=sync"], "softsync": ["stellaris.rule=softsync", "stellaris.softsync_k=2"],
        "ssp": ["stellaris.rule=ssp", "stellaris.ssp_bound=1"], "async": ["stellaris.rule=async"]}
EVAL_SEED = 12345
log = logging.getLogger("stellaris_ablation")


@dataclass(frozen=True)
class Run:
    arm: str
    seed: int
    eval_return: float
    final_return: float
    tail_variance: float      # variance of the per-round training return over the last rounds
    cost_usd: float
    wall_s: float
    env_steps: int
    parameter_share: float    # parameter function seconds / round seconds, median over rounds
    refused_share: float      # gradients refused / gradients computed


def run_arm(*, arm: str, seed: int, rounds: int, root: Path, extra: list[str], eval_episodes: int,
            tail: int) -> Run:
    overrides = [f"seed={seed}", f"train.max_rounds={rounds}", "train.total_env_steps=10000000",
                 "train.target_return=null", "stellaris.learners=4", f"output.root_dir={root}",
                 "output.status_line=false", "output.loggers=[]", "train.eval_episodes=0", *extra]
    result = train(config=load_config(path=CONFIG, overrides=overrides), run_dir=root / f"{arm}-s{seed}")
    rows = result.rows
    evaluated = evaluate_checkpoint(path=result.run_dir, episodes=eval_episodes, seed=EVAL_SEED, explore=False)
    returns = [r.return_mean for r in rows[-tail:] if r.return_mean is not None]
    refused = sum(r.extras["staleness/rejected"] for r in rows)
    computed = refused + sum(r.extras["staleness/admitted"] for r in rows)
    return Run(arm=arm, seed=seed, eval_return=evaluated.mean_return, final_return=float(result.summary.final_return
                                                                                        or 0.0),
               tail_variance=float(np.var(returns)) if returns else float("nan"),
               cost_usd=result.summary.serverless_cost_usd, wall_s=result.summary.wall_s,
               env_steps=result.summary.env_steps,
               parameter_share=float(np.median([r.extras["staleness/parameter_s"] / r.round_s for r in rows])),
               refused_share=refused / max(computed, 1.0))


def table(runs: list[Run]) -> dict[str, dict]:
    out = {}
    for arm in dict.fromkeys(r.arm for r in runs):
        mine = [r for r in runs if r.arm == arm]
        out[arm] = {key: spread([getattr(r, key) for r in mine]) for key in
                    ("eval_return", "final_return", "tail_variance", "cost_usd", "wall_s", "parameter_share",
                     "refused_share")}
        out[arm]["seeds"] = len(mine)
    return out


def markdown(summary: dict[str, dict]) -> str:
    def cell(s: dict, fmt: str) -> str:
        return f"{s['mean']:{fmt}} ± {s['std']:{fmt}} ({s['min']:{fmt}}..{s['max']:{fmt}})"
    lines = ["| arm | eval return | training return | tail variance | cost (USD) | wall (s) | parameter share | "
             "refused |", "|" + " --- |" * 8]
    for arm, s in summary.items():
        lines.append(f"| {arm} | {cell(s['eval_return'], '.0f')} | {cell(s['final_return'], '.0f')} | "
                     f"{cell(s['tail_variance'], '.0f')} | {cell(s['cost_usd'], '.4f')} | {cell(s['wall_s'], '.1f')} | "
                     f"{s['parameter_share']['mean']:.1%} | {s['refused_share']['mean']:.0%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="*", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--decays", nargs="*", type=float, default=[], help="extra stellaris arms at these d")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--tail", type=int, default=10, help="rounds in the return variance")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--root", type=Path, default=REPO / "runs" / "stellaris-ablation")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--merge", nargs="+", type=Path)
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "stellaris_ablation.json")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.merge:
        runs = [Run(**r) for path in args.merge for r in json.loads(path.read_text())["runs"]]
    else:
        arms = {arm: ARMS[arm] for arm in (["stellaris", "sync"] if args.smoke else args.arms)}
        arms.update({f"stellaris-d{d:g}": [f"stellaris.decay={d}"] for d in args.decays})
        seeds, rounds = ([0], 3) if args.smoke else (args.seeds, args.rounds)
        runs = []
        for seed in seeds:                       # seed-major: the arms of one seed run back to back
            for arm, extra in arms.items():
                run = run_arm(arm=arm, seed=seed, rounds=rounds, root=args.root, extra=extra,
                              eval_episodes=2 if args.smoke else args.eval_episodes, tail=args.tail)
                log.info("%s seed %d: eval %.1f, wall %.1f s, refused %.0f%%", arm, seed, run.eval_return,
                         run.wall_s, 100 * run.refused_share)
                runs.append(run)
    summary = table(runs)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                                   "torch": torch.__version__, "load_1m": os.getloadavg()[0]},
                                       "runs": [asdict(r) for r in runs], "summary": summary}, indent=2))
    print(markdown(summary))


if __name__ == "__main__":
    main()
