"""ARTOS's claim (Fig. 13b: -38 % average update time vs Ray for SAC): the ``offpolicy`` workflow vs a
sync-style off-policy loop in which actors and the learner alternate (RLlib, CleanRL).

Both modes are the same ``train.workflow: offpolicy`` run — same config, seed, env steps and
hyperparameters — except ``offpolicy.lockstep``: false, actors keep sampling (and the learner
keeps updating) while the other side works; true, actors are held while the learner updates and the
learner waits until every actor fragment is in. ARTOS's *average update time* for SAC is "a full round
for the learner to fetch and use experience data from the replay buffer": here the wall clock from
one learner result to the next (``round_s`` of every metrics row but the first, which includes
start-up), divided by the gradient steps those rounds took (``--metric step``, the default) or by the
rounds (``--metric call``). The learner function's own compute per gradient step is reported beside
it, to show how much of the difference is overlap rather than a slower or faster learner.

Configs (each as shipped, capped at ``--steps`` env steps): sac-pendulum (the claim's algorithm;
one gradient step per env step, so the learner dominates a round on this CPU), dqn-cartpole (half a
gradient step per env step) and impala-cartpole (one small update per actor fragment). Runs are
subprocesses, interleaved async / lockstep per repeat so both see the same machine load.

Run:  python benchmarks/offpolicy_update_time.py [--repeats 2] [--configs sac-pendulum dqn-cartpole impala-cartpole]
      (writes benchmarks/results/offpolicy_update_time.json and prints the table)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from _common import RunUsage, child_line, child_result, record, versions, write_result

REPO = Path(__file__).resolve().parents[1]
STEPS = {"sac-pendulum": 3000, "dqn-cartpole": 20000, "impala-cartpole": 30000}
GOAL = 0.7


def run_once(*, config_name: str, lockstep: bool, steps: int, seed: int, out_dir: Path) -> dict:
    from nimbus.config import load_config
    from nimbus.run.loop import train

    config = load_config(path=REPO / "configs" / f"{config_name}.yaml", overrides=[
        f"seed={seed}", f"train.total_env_steps={steps}", "train.target_return=null", "train.eval_episodes=0",
        "output.report=false", "output.status_line=false", "output.loggers=[]",
        f"output.root_dir={out_dir}", f"offpolicy.lockstep={'true' if lockstep else 'false'}"])
    result = train(config=config)
    rows = result.rows[1:]  # the first round's clock includes start-up
    steps_done = sum(r.extras["gradient_steps"] for r in rows)
    wall = sum(r.round_s for r in rows)
    return {"config": config_name, "mode": "lockstep" if lockstep else "async", "seed": seed,
            "env_steps": result.summary.env_steps, "rounds": len(rows), "gradient_steps": int(steps_done),
            "s_per_call": wall / max(len(rows), 1), "s_per_gradient_step": wall / max(steps_done, 1),
            "compute_s_per_gradient_step": sum(r.extras["compute_s"] for r in rows) / max(steps_done, 1),
            "learner_call_s": statistics.mean(r.extras["learner_call_s"] for r in rows) if rows else None,
            "final_return": result.summary.final_return, "run_wall_s": result.summary.wall_s}


def spawn(*, config_name: str, lockstep: bool, steps: int, seed: int, timeout_s: float) -> dict:
    cmd = [sys.executable, __file__, "--child", config_name, "--lockstep", str(int(lockstep)),
           "--child-steps", str(steps), "--seed", str(seed)]
    usage = RunUsage.start()
    result = child_result(cmd=cmd, cwd=REPO, timeout_s=timeout_s, what=f"{config_name} lockstep={lockstep}")
    return {**result, **usage.fields(cpu=False)}


def summarise(*, runs: list[dict], metric: str) -> dict:
    key = "s_per_gradient_step" if metric == "step" else "s_per_call"
    out = {}
    for name in dict.fromkeys(r["config"] for r in runs):
        mine = {mode: [r for r in runs if r["config"] == name and r["mode"] == mode] for mode in ("async", "lockstep")}
        med = {mode: statistics.median(r[key] for r in rs) for mode, rs in mine.items()}
        compute = {mode: statistics.median(r["compute_s_per_gradient_step"] for r in rs) for mode, rs in mine.items()}
        # what overlap can hide: the round minus the learner's own compute (robust to the machine's load,
        # which scales both); per gradient step
        rest = {mode: statistics.median(r["s_per_gradient_step"] - r["compute_s_per_gradient_step"] for r in rs)
                for mode, rs in mine.items()}
        pairs = [a[key] / b[key] for a, b in zip(mine["async"], mine["lockstep"])]
        ratio = med["async"] / med["lockstep"]
        out[name] = {"update_s": med, "learner_compute_s_per_step": compute, "non_compute_s_per_step": rest,
                     "lockstep_non_compute_share": rest["lockstep"] / med["lockstep"] if key == "s_per_gradient_step"
                     else None, "ratio_async_over_lockstep": ratio, "ratio_per_repeat": pairs,
                     "goal_met": ratio <= GOAL}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--configs", nargs="+", default=list(STEPS))
    parser.add_argument("--steps", type=int, default=None, help="env steps per run (default: per config)")
    parser.add_argument("--metric", choices=("step", "call"), default="step")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "offpolicy_update_time.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--lockstep", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child-steps", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with tempfile.TemporaryDirectory(prefix="nimbus-bench-") as tmp:
            result = run_once(config_name=args.child, lockstep=bool(args.lockstep), steps=args.child_steps,
                              seed=args.seed, out_dir=Path(tmp))
        print(child_line(result), flush=True)
        return 0
    runs = []
    for repeat in range(args.repeats):
        for name in args.configs:
            for lockstep in (False, True):
                run = spawn(config_name=name, lockstep=lockstep, steps=args.steps or STEPS[name], seed=repeat,
                            timeout_s=args.timeout_s)
                runs.append(run)
                print(f"{name:16s} {run['mode']:8s} seed {repeat}: {run['s_per_gradient_step'] * 1e3:8.2f} ms/step "
                      f"{run['s_per_call'] * 1e3:8.1f} ms/call, learner compute "
                      f"{run['compute_s_per_gradient_step'] * 1e3:7.2f} ms/step, {run['rounds']} calls, "
                      f"load {run['loadavg_1m_before']:.1f}->{run['loadavg_1m_after']:.1f}", flush=True)
    summary = summarise(runs=runs, metric=args.metric)
    print(f"\n{'config':16s} {'async':>10s} {'lockstep':>10s} {'ratio':>7s}  (median {args.metric} time, ms)"
          f"  non-compute ms/step async / lockstep")
    for name, s in summary.items():
        rest = s["non_compute_s_per_step"]
        print(f"{name:16s} {s['update_s']['async'] * 1e3:10.2f} {s['update_s']['lockstep'] * 1e3:10.2f} "
              f"{s['ratio_async_over_lockstep']:7.2f}  {rest['async'] * 1e3:6.2f} / {rest['lockstep'] * 1e3:6.2f}  "
              f"goal <= {GOAL}: {'met' if s['goal_met'] else 'NOT met'}")
    result = {**record(benchmark="offpolicy_update_time"), "versions": versions(modules=("torch",)),
              "metric": args.metric, "runs": runs, "summary": summary, "goal_ratio": GOAL}
    print(f"wrote {write_result(path=args.out, result=result)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
