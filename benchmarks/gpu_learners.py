"""Learner updates per second on CPU vs GPU, and with 1, 2, 4 learners sharing one GPU (issue 25.5).

One *update* is one ``algo.update`` call on a batch already on the device, as the learner function runs it:

* ``ppo-cartpole``: configs/ppo-cartpole.yaml's algo (20 epochs of one 256-row minibatch, net 64x64),
  256 rows (its round);
* ``ppo-large``: the same PPO with a 256x256 net, 4096 rows and minibatch 512 (a MuJoCo-sized round);
* ``sac-pendulum``: configs/sac-pendulum.yaml's algo (net 256x256, batch 256), 16 gradient steps per update.

Devices: the CPU (``--cpu-threads`` torch threads) and ``cuda:0``. Sharing: 1, 2 and 4 learner processes
(spawned) updating ``ppo-large`` on ``cuda:0`` at once, as ``devices.learners_per_device: N`` lets the device
pool lease them: the aggregate and per-learner updates/s. Each figure times ``--seconds`` of updates after two
warm-up updates (``torch.cuda.synchronize`` before reading the clock).

Without CUDA the GPU columns print "no CUDA: skipped" and only the CPU figures are measured.

Run:  python benchmarks/gpu_learners.py [--seconds 3] [--learners 1 2 4] [--cpu-threads 4]
      (writes benchmarks/results/gpu_learners.json and prints a markdown block for docs/benchmarks.md)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORKLOADS: dict[str, dict[str, Any]] = {
    "ppo-cartpole": {"env": "CartPole-v1", "rows": 256,
                     "algo": {"name": "ppo", "gamma": 0.98, "gae_lambda": 0.8, "lr": 0.001, "num_epochs": 20,
                              "minibatch_size": 256, "ent_coef": 0.0, "max_grad_norm": 0.5}},
    "ppo-large": {"env": "Pendulum-v1", "rows": 4096,
                  "algo": {"name": "ppo", "num_epochs": 4, "minibatch_size": 512, "hidden_sizes": [256, 256]}},
    "sac-pendulum": {"env": "Pendulum-v1", "rows": 256 * 16,
                     "algo": {"name": "sac", "lr": 0.001, "batch_size": 256, "hidden_sizes": [256, 256],
                              "learning_starts": 0}},
}


def _setup(*, workload: str, device: str, seed: int) -> tuple[Any, Any, Any, dict]:
    import gymnasium as gym
    import numpy as np
    import torch

    from nimbus.algos.registry import ALGO_CONFIGS, make_algorithm
    from nimbus.envs.spaces import EnvSpaces

    spec = WORKLOADS[workload]
    config = ALGO_CONFIGS[spec["algo"]["name"]].model_validate(spec["algo"])
    algo = make_algorithm(config=config)
    env = gym.make(spec["env"])
    spaces = EnvSpaces(observation=env.observation_space, action=env.action_space)
    env.close()
    torch.manual_seed(seed)
    model = algo.make_model(spaces=spaces).to(device)
    rng = np.random.default_rng(seed)
    batch = {}
    for key, column in algo.buffer_spec(spaces=spaces).items():
        shape = (spec["rows"], *column.shape)
        if column.dtype == "bool":
            value = rng.random(shape) < 0.02
        elif key == "actions" and isinstance(spaces.action, gym.spaces.Discrete):
            value = rng.integers(0, int(spaces.action.n), size=shape)
        elif key == "actions":
            value = rng.uniform(-1.0, 1.0, size=shape)
        elif key == "log_prob":
            value = np.log(rng.uniform(0.2, 0.9, size=shape))
        else:
            value = rng.standard_normal(shape)
        batch[key] = torch.as_tensor(value.astype(column.dtype), device=device)
    return algo, model, algo.make_optimizer(model=model), batch


def updates_per_s(*, workload: str, device: str, seconds: float, seed: int = 0) -> float:
    """Updates per second of ``workload`` on ``device`` over ``seconds`` (after two warm-up updates)."""
    import torch

    algo, model, optimizer, batch = _setup(workload=workload, device=device, seed=seed)
    generator = torch.Generator().manual_seed(seed)

    def one() -> None:
        algo.update(model=model, optimizer=optimizer, batch=algo.postprocess(batch=batch), progress=0.0,
                    generator=generator)

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    for _ in range(2):
        one()
    sync()
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        one()
        done += 1
    sync()
    return done / (time.perf_counter() - started)


def _shared_learner(workload: str, seconds: float, seed: int, start_at: float, queue: Any) -> None:
    import torch
    torch.set_num_threads(1)
    while time.time() < start_at:  # every learner starts together, after its CUDA context exists
        if not torch.cuda.is_initialized():
            torch.zeros(1, device="cuda:0")
        time.sleep(0.005)
    queue.put(updates_per_s(workload=workload, device="cuda:0", seconds=seconds, seed=seed))


def shared_gpu(*, learners: int, workload: str, seconds: float) -> dict[str, float]:
    """``learners`` spawned processes updating ``workload`` on cuda:0 at the same time."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    start_at = time.time() + 15.0  # spawn + import torch + CUDA context, for every learner
    procs = [context.Process(target=_shared_learner, args=(workload, seconds, i, start_at, queue))
             for i in range(learners)]
    for proc in procs:
        proc.start()
    rates = [queue.get(timeout=120 + seconds * 4) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    return {"learners": learners, "aggregate_updates_per_s": sum(rates), "per_learner_updates_per_s": min(rates)}


def summary(results: dict[str, Any]) -> str:
    gpu = results["gpu"] or "no CUDA: skipped"
    lines = [f"GPU learner benchmark ({results['date']}, {results['gpu'] or 'no GPU'}; CPU: {results['cpu']}, "
             f"{results['cpu_threads']} torch threads; `python benchmarks/gpu_learners.py --seconds "
             f"{results['seconds']}`)", "",
             "| workload | CPU updates/s | GPU updates/s | GPU / CPU |", "|---|---|---|---|"]
    for name, row in results["single"].items():
        cuda = row.get("cuda")
        ratio = f"{cuda / row['cpu']:.2f}x" if cuda else "-"
        lines.append(f"| {name} | {row['cpu']:.1f} | {f'{cuda:.1f}' if cuda else gpu} | {ratio} |")
    lines += ["", f"| learners on one GPU ({results['shared_workload']}) | aggregate updates/s | per learner |",
              "|---|---|---|"]
    if not results["shared"]:
        lines.append(f"| 1, 2, 4 | {gpu} | - |")
    for row in results["shared"]:
        lines.append(f"| {row['learners']} | {row['aggregate_updates_per_s']:.1f} | "
                     f"{row['per_learner_updates_per_s']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per figure")
    parser.add_argument("--learners", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--cpu-threads", type=int, default=4)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "gpu_learners.json")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.cpu_threads)
    cuda = torch.cuda.is_available()
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": args.seconds,
        "gpu": torch.cuda.get_device_name(0) if cuda else None, "cpu": platform.processor() or platform.machine(),
        "cpu_threads": args.cpu_threads, "torch": torch.__version__, "single": {}, "shared": [],
        "shared_workload": "ppo-large"}
    for name in args.workloads:
        row = {"cpu": updates_per_s(workload=name, device="cpu", seconds=args.seconds)}
        if cuda:
            row["cuda"] = updates_per_s(workload=name, device="cuda:0", seconds=args.seconds)
        results["single"][name] = row
    if cuda:
        results["shared"] = [shared_gpu(learners=n, workload="ppo-large", seconds=args.seconds)
                             for n in args.learners]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(summary(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
