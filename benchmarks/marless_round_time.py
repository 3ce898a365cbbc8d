"""Seconds per training round: nimbus's marless workflow vs a single-process PettingZoo + torch IPPO loop.

The work of a round is the same on both sides (configs/marless-ippo-spread.yaml, mpe2 simple_spread with
3 agents, no sharing, fixed actors): 16 env copies × 25 steps with every agent acting on its own policy
(64-64 tanh MLPs), then per policy GAE on its agent's rows, a critic fit (10 epochs × 4 minibatches, value
normalisation) and a PPO policy update (10 epochs × 4 minibatches, clip 0.2, entropy 0.01).

* nimbus: ``train()`` on the local backend: 4 actor functions × 4 envs in worker processes, then a critic
  and a policy function per policy (3 of each in flight), with the Store, ledger and metrics as shipped.
  The per-round time is the metrics row's ``round_s`` (actors start → learners done).
* nimbus, no slot restore: the same with ``actors.restore_slots=false``, what the shipped config's slot
  capture and hand-over (marless/slot.py) cost per round.
* peer: one Python process steps the 16 envs one after the other (batched inference per agent), then
  updates the 3 policies one after the other: what a researcher writes first with PettingZoo and torch.
  Its round time spans the same steps.

Runs alternate (nimbus, peer, nimbus, …) ``--repeats`` times, each ``--rounds`` rounds; the first
``--warmup`` rounds of every run (worker start, first-touch costs) are left out. MARLess reports 1.27×
over its serverful baseline; the issue's goal here is nimbus ≥ 1× the peer (peer time / nimbus time).

Run:  python benchmarks/marless_round_time.py [--repeats 3] [--rounds 30]
      (writes benchmarks/results/marless_round_time.json and prints the table)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "marless-ippo-spread.yaml"
ENVS, STEPS, AGENTS = 16, 25, 3
GAMMA, LAMBDA, CLIP, ENT, LR, EPOCHS, MINIBATCHES, GRAD_NORM = 0.99, 0.95, 0.2, 0.01, 7e-4, 10, 4, 0.5


# ------------------------------------------------------------------------------------------------ nimbus
def nimbus_round_times(*, rounds: int, seed: int, overrides: tuple[str, ...] = ()) -> list[float]:
    from nimbus.config import load_config
    from nimbus.run.loop import train

    with tempfile.TemporaryDirectory() as root:
        config = load_config(path=CONFIG, overrides=[
            f"seed={seed}", f"train.max_rounds={rounds}", "train.total_env_steps=100000000", "train.eval_episodes=0",
            f"output.root_dir={root}", "output.status_line=false", "output.loggers=[]", "output.report=false",
            *overrides])
        result = train(config=config)
        rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    return [float(row["round_s"]) for row in rows]


# -------------------------------------------------------------------------------------------------- peer
def mlp(inputs: int, outputs: int, head_std: float) -> nn.Sequential:
    layers, width = [], inputs
    for hidden in (64, 64):
        layer = nn.Linear(width, hidden)
        nn.init.orthogonal_(layer.weight, np.sqrt(2))
        nn.init.zeros_(layer.bias)
        layers += [layer, nn.Tanh()]
        width = hidden
    head = nn.Linear(width, outputs)
    nn.init.orthogonal_(head.weight, head_std)
    nn.init.zeros_(head.bias)
    return nn.Sequential(*layers, head)


class PeerPolicy:
    """One agent's actor, critic (with return normalisation) and their Adam optimizers."""

    def __init__(self, *, obs_dim: int, actions: int) -> None:
        self.actor, self.critic = mlp(obs_dim, actions, 0.01), mlp(obs_dim, 1, 1.0)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=LR, eps=1e-5)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=LR, eps=1e-5)
        self.mean, self.var, self.count = 0.0, 1.0, 0.0

    def update_norm(self, returns: torch.Tensor) -> None:
        n, mean, var = float(returns.numel()), float(returns.mean()), float(returns.var(unbiased=False))
        total = self.count + n
        delta = mean - self.mean
        self.var = (self.var * self.count + var * n + delta ** 2 * self.count * n / total) / total
        self.mean += delta * n / total
        self.count = total

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1) * max(self.var, 1e-8) ** 0.5 + self.mean


def gae(*, rewards, values, next_values, terminated, cut) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows env-major then time; a cut row ends a segment (terminated: no bootstrap)."""
    advantages = torch.zeros_like(rewards)
    running = torch.zeros(())
    for t in reversed(range(len(rewards))):
        if cut[t]:
            running = torch.zeros(())
        delta = rewards[t] + GAMMA * next_values[t] * (1.0 - terminated[t]) - values[t]
        running = delta + GAMMA * LAMBDA * (1.0 - terminated[t]) * running
        advantages[t] = running
    return advantages, advantages + values


def minibatches(rows: int, generator: torch.Generator) -> list[torch.Tensor]:
    order = torch.randperm(rows, generator=generator)
    return list(order.chunk(MINIBATCHES))


def peer_update(*, policy: PeerPolicy, data: dict[str, torch.Tensor], generator: torch.Generator) -> None:
    with torch.no_grad():
        values, next_values = policy.values(data["obs"]), policy.values(data["next_obs"])
    advantages, returns = gae(rewards=data["rewards"], values=values, next_values=next_values,
                              terminated=data["terminated"], cut=data["cut"])
    policy.update_norm(returns)
    std = max(policy.var, 1e-8) ** 0.5
    targets = (returns - policy.mean) / std
    for _ in range(EPOCHS):
        for rows in minibatches(len(targets), generator):
            loss = ((policy.critic(data["obs"][rows]).squeeze(-1) - targets[rows]) ** 2).mean()
            policy.critic_opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.critic.parameters(), GRAD_NORM)
            policy.critic_opt.step()
    for _ in range(EPOCHS):
        for rows in minibatches(len(targets), generator):
            adv = advantages[rows]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            dist = torch.distributions.Categorical(logits=policy.actor(data["obs"][rows]))
            ratio = (dist.log_prob(data["actions"][rows]) - data["logp"][rows]).exp()
            surrogate = torch.max(-adv * ratio, -adv * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
            loss = surrogate - ENT * dist.entropy().mean()
            policy.actor_opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.actor.parameters(), GRAD_NORM)
            policy.actor_opt.step()


def peer_round_times(*, rounds: int, seed: int) -> list[float]:
    from mpe2 import simple_spread_v3

    torch.manual_seed(seed)
    envs = [simple_spread_v3.parallel_env(N=AGENTS, max_cycles=STEPS) for _ in range(ENVS)]
    observations = [env.reset(seed=seed * 1000 + i)[0] for i, env in enumerate(envs)]
    agents = list(envs[0].possible_agents)
    policies = {a: PeerPolicy(obs_dim=envs[0].observation_space(a).shape[0], actions=envs[0].action_space(a).n)
                for a in agents}
    generator = torch.Generator().manual_seed(seed)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        columns = {a: {k: [] for k in ("obs", "next_obs", "actions", "logp", "rewards", "terminated", "cut")}
                   for a in agents}
        per_env = [{a: {k: [] for k in columns[a]} for a in agents} for _ in envs]
        for _ in range(STEPS):
            batch = {a: torch.as_tensor(np.stack([obs[a] for obs in observations]), dtype=torch.float32)
                     for a in agents}
            with torch.no_grad():
                dists = {a: torch.distributions.Categorical(logits=policies[a].actor(batch[a])) for a in agents}
                actions = {a: dists[a].sample() for a in agents}
                logps = {a: dists[a].log_prob(actions[a]) for a in agents}
            for e, env in enumerate(envs):
                obs, rewards, terminated, truncated, _ = env.step({a: int(actions[a][e]) for a in agents})
                for a in agents:
                    done = bool(terminated[a] or truncated[a])
                    for key, value in (("obs", batch[a][e].numpy()), ("next_obs", obs[a]),
                                       ("actions", int(actions[a][e])), ("logp", float(logps[a][e])),
                                       ("rewards", rewards[a]),
                                       ("terminated", float(terminated[a])), ("cut", done)):
                        per_env[e][a][key].append(value)
                observations[e] = env.reset()[0] if not env.agents else obs
        for e in range(len(envs)):
            for a in agents:
                per_env[e][a]["cut"][-1] = True
                for key, values in per_env[e][a].items():
                    columns[a][key] += values
        for a in agents:
            data = {k: torch.as_tensor(np.array(v, dtype=np.float32 if k not in ("actions", "cut") else None))
                    for k, v in columns[a].items()}
            data["actions"] = data["actions"].long()
            peer_update(policy=policies[a], data=data, generator=generator)
        times.append(time.perf_counter() - started)
    return times


# -------------------------------------------------------------------------------------------------- main
def stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "marless_round_time.json")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    sides = (("nimbus", nimbus_round_times),
             ("nimbus, no slot restore",
              lambda **kw: nimbus_round_times(**kw, overrides=("actors.restore_slots=false",))),
             ("peer", peer_round_times))
    runs: dict[str, list[float]] = {name: [] for name, _ in sides}
    medians: dict[str, list[float]] = {name: [] for name, _ in sides}
    for repeat in range(args.repeats):
        for name, measure in sides:
            times = measure(rounds=args.rounds, seed=repeat)[args.warmup:]
            runs[name] += times
            medians[name].append(statistics.median(times))
            print(f"{name} repeat {repeat}: median {statistics.median(times) * 1e3:.0f} ms/round", flush=True)
    summary = {name: stats(values) for name, values in runs.items()}
    speedup = {"per_repeat": [p / n for p, n in zip(medians["peer"], medians["nimbus"])],
               "median_of_medians": statistics.median(medians["peer"]) / statistics.median(medians["nimbus"])}
    restore_cost = {"per_repeat": [n / o for n, o in zip(medians["nimbus"], medians["nimbus, no slot restore"])],
                    "median_of_medians": statistics.median(medians["nimbus"])
                    / statistics.median(medians["nimbus, no slot restore"])}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads(), "load_1m_before": load_before,
                    "load_1m_after": os.getloadavg()[0]},
        "rounds": args.rounds, "warmup": args.warmup, "summary_s": summary, "run_medians_s": medians,
        "speedup_peer_over_nimbus": speedup, "shipped_over_no_slot_restore": restore_cost}, indent=2))
    print("| side | min (ms) | median (ms) | max (ms) |\n| --- | --- | --- | --- |")
    for name, s in summary.items():
        print(f"| {name} | {s['min'] * 1e3:.0f} | {s['median'] * 1e3:.0f} | {s['max'] * 1e3:.0f} |")
    print(f"peer / nimbus (median of run medians): {speedup['median_of_medians']:.2f}x")
    print(f"nimbus / nimbus without slot restore: {restore_cost['median_of_medians']:.3f}x")


if __name__ == "__main__":
    main()
