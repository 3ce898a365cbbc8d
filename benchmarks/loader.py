"""Device data loader (Stellaris §V-B) on this machine's CPU: PPO update time with the loader on vs off.

The update is ``StreamingPPOUpdate`` over a Hopper-v5-sized batch (2048 rows: obs 11, actions 3;
SB3's defaults: 10 epochs × minibatch 64 = 320 gradient steps, 64×64 tanh MLPs, 1 torch thread), all
blocks present, so only the loader differs: off, each minibatch is gathered (``batch[key][rows]``)
right before its step; on, a background thread gathers (and on a GPU would pin and copy, on its own
stream) the next minibatch while the current one trains. Both variants run in every repeat, side by
side; the weights after the update are checked equal.

Run:  python benchmarks/loader.py [--repeats 3]   (writes benchmarks/results/loader.json)
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.bench.transfer import environment
from nimbus.envs.spaces import EnvSpaces
from nimbus.onpolicy.pipeline import PipelineOptions, StreamingPPOUpdate

REPO = Path(__file__).resolve().parents[1]


def blocks(*, algo: PPO, model: torch.nn.Module, rows: int, count: int) -> list[dict[str, torch.Tensor]]:
    out = []
    for seed in range(count):
        g = torch.Generator().manual_seed(seed)
        obs = torch.randn(rows, 11, generator=g)
        act = algo.act(model=model, obs=obs, explore=True)
        cut = torch.zeros(rows, dtype=torch.bool)
        cut[-1] = True
        out.append({"obs": obs, "actions": torch.as_tensor(act.actions),
                    "log_prob": torch.as_tensor(act.extras["log_prob"]),
                    "values": torch.as_tensor(act.extras["values"]), "rewards": torch.randn(rows, generator=g),
                    "next_values": torch.randn(rows, generator=g), "terminated": torch.zeros(rows, dtype=torch.bool),
                    "cut": cut})
    return out


def timed_update(*, algo: PPO, model: torch.nn.Module, data: list[dict], loader: bool) -> tuple[float, torch.nn.Module]:
    model = copy.deepcopy(model)
    update = StreamingPPOUpdate(algo=algo, model=model, optimizer=algo.make_optimizer(model=model),
                                block_rows=[len(b["rewards"]) for b in data], options=PipelineOptions(loader=loader),
                                progress=0.0, generator=torch.Generator().manual_seed(0))
    for index, block in enumerate(data):
        update.add_stage(block=index, arrays=block)
    started = time.perf_counter()
    update.finish()
    return time.perf_counter() - started, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "loader.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    algo = PPO(config=PPOConfig())
    torch.manual_seed(0)
    model = algo.make_model(spaces=EnvSpaces(observation=gym.spaces.Box(-5, 5, (11,), np.float32),
                                             action=gym.spaces.Box(-1, 1, (3,), np.float32)))
    data = blocks(algo=algo, model=model, rows=1024, count=2)
    times: dict[str, list[float]] = {"off": [], "on": []}
    timed_update(algo=algo, model=model, data=data, loader=False)  # warm-up
    for _ in range(args.repeats):
        off_s, off_model = timed_update(algo=algo, model=model, data=data, loader=False)
        on_s, on_model = timed_update(algo=algo, model=model, data=data, loader=True)
        for p, q in zip(off_model.parameters(), on_model.parameters()):
            torch.testing.assert_close(p, q, atol=0, rtol=0)
        times["off"].append(off_s)
        times["on"].append(on_s)
    summary = {name: [min(v), statistics.median(v), max(v)] for name, v in times.items()}
    summary["speedup_median"] = summary["off"][1] / summary["on"][1]
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"summary": summary, "times_s": times, "environment": environment()},
                                          indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
