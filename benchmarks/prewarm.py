"""Pre-warming from the workload monitor on vs off (issue 14, Measure; ARTOS Table 5: −7.7 % update time).

Both arms train the shipped PPO CartPole config for ``--rounds`` rounds with a keep-alive (``--keep-alive``)
shorter than the learner's update (``--epochs`` PPO epochs make it longer), so actor workers are reclaimed
while the learner runs and the next round's actors cold-start unless pre-warmed:
* ``off``: ``prewarm.mode: none``;
* ``on``:  ``prewarm.mode: monitor`` (runtime/prewarm.py: window 5, λ ``--stability``).
Start-up pre-warming (``runtime.prewarm``) is off in both, and ``runtime.max_workers`` leaves room for the
pre-warmed workers beside the ones the keep-alive is about to reclaim. Arms are interleaved (their order
alternates per repeat). Reported per run: the update time per round (``round_s`` of metrics.jsonl; mean and
median over the rounds after the monitor's first full window), the actor attempts that were cold starts
and the workers pre-warmed (from the ledger). ARTOS: −7.71 % update time with pre-warming.

Per workflow (``--scenario scale-up``, issue 25.7): each workflow's shipped config with an actor scaler that
scales up (Hydrozoa 1 → 2 → 4 every 2 rounds; MARLess scaling i_min 1, i_max 4 in the marless workflow),
start-up pre-warming off, the default keep-alive: without pre-warming each scale-up's added actors start cold;
with it they are pre-warmed when the scaler decides (runtime/prewarm.py). Reported per run: cold actor attempts,
workers pre-warmed, mean round time and the run's cost (the pre-warmed workers' provisioned time included).

Full figure (run alone; estimated 8-12 min on 2 quiet cores):
    python benchmarks/prewarm.py --repeats 5          (writes benchmarks/results/prewarm.json)
    python benchmarks/prewarm.py --scenario scale-up --repeats 3   (writes benchmarks/results/prewarm_workflows.json)
Smoke check (< 60 s):  python benchmarks/prewarm.py --smoke   (add --scenario scale-up: ~2 min)
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from _common import write_result
from nimbus.config import NimbusConfig, apply_overrides, load_config, parse_config
from nimbus.cost.ledger import Ledger
from nimbus.run.loop import train

REPO = Path(__file__).resolve().parents[1]
SKIP_ROUNDS = 6  # round 0's start-up, then the monitor's first full window (5 rounds)


def config(*, root: Path, arm: str, args: argparse.Namespace, rounds: int) -> NimbusConfig:
    base = load_config(path=REPO / "configs" / "ppo-cartpole.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(root), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    overrides = [f"name=prewarm-{arm}", f"algo.num_epochs={args.epochs}", f"runtime.keep_alive_s={args.keep_alive}",
                 "runtime.prewarm=false", "runtime.max_workers=8", f"runtime.start_method={args.start_method}",
                 f"train.max_rounds={rounds}", "train.total_env_steps=10000000", "train.target_return=100000",
                 f"prewarm.mode={'monitor' if arm == 'on' else 'none'}", f"prewarm.stability={args.stability}"]
    return parse_config(data=apply_overrides(data=base, overrides=overrides))


SCALE_UP = {   # workflow → (shipped config, overrides that make it scale up)
    "onpolicy": ("ppo-cartpole", ["actors.scaling={kind: hydrozoa, initial_actors: 1, max_actors: 4, "
                              "double_every_rounds: 2}", "algo.minibatch_size=64"]),   # 1 actor: 128 rows
    "offpolicy": ("impala-cartpole", ["actors.scaling={kind: hydrozoa, initial_actors: 1, max_actors: 4, "
                                  "double_every_rounds: 2}"]),
    "stellaris": ("stellaris-cartpole", ["actors.scaling={kind: hydrozoa, initial_actors: 1, max_actors: 4, "
                                              "double_every_rounds: 2}"]),
    "marless": ("marless-ippo-spread", ["marless.scaling=marless", "marless.i_min=1", "marless.i_max=4",
                                          "marless.scaling_window=4"]),
}


def scale_up_config(*, root: Path, arm: str, workflow: str, rounds: int) -> NimbusConfig:
    name, extra = SCALE_UP[workflow]
    base = load_config(path=REPO / "configs" / f"{name}.yaml").model_dump(mode="json")
    base["output"] = {"root_dir": str(root), "loggers": [], "report": False, "status_line": False}
    base["train"]["eval_episodes"] = 0
    overrides = [*extra, f"name=prewarm-{workflow}-{arm}", "runtime.prewarm=false", "runtime.max_workers=12",
                 f"train.max_rounds={rounds}", "train.total_env_steps=10000000", "train.target_return=100000",
                 f"prewarm.mode={'monitor' if arm == 'on' else 'none'}"]
    if workflow == "marless":
        overrides.remove("train.target_return=100000")
    return parse_config(data=apply_overrides(data=base, overrides=overrides))


def one_run(*, root: Path, arm: str, args: argparse.Namespace, rounds: int, workflow: str | None = None) -> dict:
    made = config(root=root, arm=arm, args=args, rounds=rounds) if workflow is None else \
        scale_up_config(root=root, arm=arm, workflow=workflow, rounds=rounds)
    result = train(config=made)
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    round_s = [row["round_s"] for row in rows[SKIP_ROUNDS:]] or [row["round_s"] for row in rows]
    ledger = Ledger.load(path=result.run_dir / "ledger.jsonl")
    actors = [r for r in ledger if r.function == "actor" and r.outcome == "ok"]
    return {"arm": arm, "workflow": workflow or "onpolicy", "rounds": len(rows),
            "round_s_mean": statistics.mean(round_s), "round_s_median": statistics.median(round_s),
            "cold_actor_attempts": sum(r.cold for r in actors), "actor_attempts": len(actors),
            "prewarmed_workers": sum(r.outcome == "prewarm" and r.cold for r in ledger),
            "provisioned_s": sum(r.billed_s for r in ledger if r.outcome == "prewarm" and not r.cold),
            "cost_usd": result.summary.serverless_cost_usd, "wall_s": result.summary.wall_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--epochs", type=int, default=200,
                        help="PPO epochs per update (a learner longer than the keep-alive)")
    parser.add_argument("--keep-alive", type=float, default=0.3, help="runtime.keep_alive_s (s)")
    parser.add_argument("--stability", type=float, default=0.2, help="λ of the monitor (prewarm.stability)")
    parser.add_argument("--start-method", choices=("fork_server", "spawn"), default="fork_server")
    parser.add_argument("--smoke", action="store_true", help="one repeat of 8 rounds per arm (< 60 s)")
    parser.add_argument("--scenario", choices=("keep-alive", "scale-up"), default="keep-alive",
                        help="keep-alive: the onpolicy monitor (above); scale-up: every workflow, on/off")
    parser.add_argument("--workflows", default="onpolicy,offpolicy,stellaris,marless", help="for --scenario scale-up")
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "prewarm.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.scenario == "scale-up":
        scale_up_main(args=args)
        return
    repeats, rounds = (1, 8) if args.smoke else (args.repeats, args.rounds)
    if args.smoke:
        args.stability = max(args.stability, 1.0)  # a few rounds on a busy machine: let the monitor act at all
    runs = []
    with tempfile.TemporaryDirectory(prefix="nimbus-prewarm-") as tmp:
        for repeat in range(repeats):
            for arm in (("off", "on") if repeat % 2 == 0 else ("on", "off")):  # interleaved, order alternating
                run = {"repeat": repeat,
                       **one_run(root=Path(tmp) / f"{arm}-{repeat}", arm=arm, args=args, rounds=rounds)}
                runs.append(run)
                print(json.dumps(run), flush=True)
    by_arm = {arm: [r["round_s_mean"] for r in runs if r["arm"] == arm] for arm in ("off", "on")}
    report = {"epochs": args.epochs, "keep_alive_s": args.keep_alive, "stability": args.stability,
              "start_method": args.start_method, "rounds": rounds, "runs": runs,
              "round_s_median_off": statistics.median(by_arm["off"]),
              "round_s_median_on": statistics.median(by_arm["on"])}
    report["change"] = report["round_s_median_on"] / report["round_s_median_off"] - 1.0
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}))
    if not args.smoke:
        write_result(path=Path(args.output), result=report, indent=1)


def scale_up_main(*, args: argparse.Namespace) -> None:
    """Every workflow, pre-warming off and on (interleaved), SCALE_UP's configs; one summary line per workflow."""
    repeats, rounds = (1, 6) if args.smoke else (args.repeats, 10)
    runs = []
    with tempfile.TemporaryDirectory(prefix="nimbus-prewarm-wf-") as tmp:
        for workflow in args.workflows.split(","):
            for repeat in range(repeats):
                for arm in (("off", "on") if repeat % 2 == 0 else ("on", "off")):
                    run = {"repeat": repeat, **one_run(root=Path(tmp) / f"{workflow}-{arm}-{repeat}", arm=arm,
                                                        args=args, rounds=rounds, workflow=workflow)}
                    runs.append(run)
                    print(json.dumps(run), flush=True)
    summary = {}
    for workflow in args.workflows.split(","):
        arms = {arm: [r for r in runs if r["workflow"] == workflow and r["arm"] == arm] for arm in ("off", "on")}
        summary[workflow] = {f"{key}_{arm}": statistics.median(r[key] for r in arms[arm]) for arm in ("off", "on")
                             for key in ("cold_actor_attempts", "prewarmed_workers", "round_s_mean", "cost_usd")}
        print(json.dumps({"workflow": workflow, **summary[workflow]}), flush=True)
    if not args.smoke:
        out = Path(args.output).with_name("prewarm_workflows.json")
        write_result(path=out, result={"rounds": rounds, "repeats": repeats, "runs": runs, "summary": summary},
                     indent=1)


if __name__ == "__main__":
    main()
