"""One learner update, three ways, on the same batch: nimbus's ``algo.update``, a plain reference loop written here
in CleanRL's shape, and Stable-Baselines3's ``train()``. Milliseconds per minibatch step and updates per second.

Cases (synthetic batches of the shapes the shipped configs train on; every update starts from the last one's
weights, as in a run):

* ``ppo-cartpole``: 64x64 tanh actor-critic, 4-dim observations, 2 actions, 256 rows, minibatch 256, 20 epochs
  (configs/ppo-cartpole.yaml): 20 steps per update;
* ``ppo-mujoco-512`` / ``ppo-mujoco-4096``: 2x256 tanh, 17-dim observations, 6-dim Gaussian actions, 4096 rows,
  10 epochs, minibatch 512 (80 steps) or 4096 (10 steps);
* ``sac``: 2x256 actor and twin critics, batch 256, 16 gradient steps per update (SB3 samples its replay inside
  ``train()``: its figure includes that sampling, nimbus's and the reference's do not);
* ``dqn``: 2x256 Q-network, 4-dim observations, 2 actions, batch 128, 16 gradient steps per update.

The reference loop is CleanRL's update as written there (ppo.py / ppo_continuous_action.py, sac_continuous_action.py
with the actor and α updated every step, dqn.py), default Adam, its one ``.item()`` per PPO minibatch included.

``--compile`` sets nimbus's ``learner.compile`` for the PPO cases (algos/compiled.py; the other algorithms and
the two baselines run eagerly); the table's last column is the first update's seconds, compilation included.

Repeats are interleaved (nimbus, reference, SB3, nimbus, ...), each timing ``--updates`` updates after one warm-up
update; a figure is min / median / max over ``--repeats``. On CUDA the clock is read after ``synchronize``.

Run (alone, on an idle machine):
    python benchmarks/learner_update.py                                   # CPU, every case
    python benchmarks/learner_update.py --device cuda --compile off      # a GPU
    python benchmarks/learner_update.py --cases ppo-cartpole --repeats 2 --updates 1 --tiny   # smoke
Writes benchmarks/results/learner_update[_<device>][_<compile mode>].json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import record, stats, versions, write_result  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CASES: dict[str, dict[str, Any]] = {
    "ppo-cartpole": {"obs": 4, "actions": 2, "rows": 256, "hidden": 64,
                     "algo": {"name": "ppo", "num_epochs": 20, "minibatch_size": 256, "lr": 1e-3, "gamma": 0.98,
                              "gae_lambda": 0.8, "max_grad_norm": 0.5}},
    "ppo-mujoco-512": {"obs": 17, "actions": -6, "rows": 4096, "hidden": 256,
                       "algo": {"name": "ppo", "num_epochs": 10, "minibatch_size": 512, "hidden_sizes": [256, 256]}},
    "ppo-mujoco-4096": {"obs": 17, "actions": -6, "rows": 4096, "hidden": 256,
                        "algo": {"name": "ppo", "num_epochs": 10, "minibatch_size": 4096, "hidden_sizes": [256, 256]}},
    "sac": {"obs": 17, "actions": -6, "rows": 256 * 16, "hidden": 256,
            "algo": {"name": "sac", "batch_size": 256, "hidden_sizes": [256, 256], "learning_starts": 0}},
    "dqn": {"obs": 4, "actions": 2, "rows": 128 * 16, "hidden": 256,
            "algo": {"name": "dqn", "batch_size": 128, "hidden_sizes": [256, 256], "learning_starts": 0,
                     "target_update_interval": 1000}},
}
TINY = {"rows": 64, "num_epochs": 2, "minibatch_size": 32, "batch_size": 16, "hidden": 16}


def spaces_of(case: dict[str, Any]) -> tuple[gym.Space, gym.Space]:
    """Observation and action spaces: ``actions`` > 0 is Discrete(n), < 0 a Box of -n dimensions in [-1, 1]."""
    obs = gym.spaces.Box(-10.0, 10.0, (case["obs"],), dtype=np.float32)
    n = case["actions"]
    return obs, (gym.spaces.Discrete(n) if n > 0 else gym.spaces.Box(-1.0, 1.0, (-n,), dtype=np.float32))


def make_batch(*, case: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """Every column any of the three learners reads, ``rows`` rows."""
    rng = np.random.default_rng(seed)
    rows, (_, action_space) = case["rows"], spaces_of(case)
    discrete = isinstance(action_space, gym.spaces.Discrete)
    actions = (rng.integers(0, action_space.n, rows) if discrete
               else rng.uniform(-0.9, 0.9, (rows, *action_space.shape)).astype(np.float32))
    ends = rng.random(rows) < 0.01
    return {"obs": rng.standard_normal((rows, case["obs"])).astype(np.float32), "actions": actions,
            "next_obs": rng.standard_normal((rows, case["obs"])).astype(np.float32),
            "rewards": rng.standard_normal(rows).astype(np.float32), "terminated": ends,
            "truncated": np.zeros(rows, bool), "cut": ends | (np.arange(rows) % 128 == 127),
            "log_prob": np.log(rng.uniform(0.2, 0.9, rows)).astype(np.float32),
            "values": rng.standard_normal(rows).astype(np.float32),
            "next_values": rng.standard_normal(rows).astype(np.float32)}


# --- nimbus -------------------------------------------------------------------------------------------------------

def nimbus_learner(*, case: dict[str, Any], batch: dict[str, np.ndarray], device: torch.device,
                   compile_mode: str) -> tuple[Callable[[], None], int]:
    from nimbus.algos.registry import ALGO_CONFIGS, make_algorithm
    from nimbus.envs.spaces import EnvSpaces

    config = ALGO_CONFIGS[case["algo"]["name"]].model_validate(case["algo"])
    # learner.compile is PPO's: the other algorithms run eagerly whatever --compile says (the table says which)
    algo = make_algorithm(config=config, compile_mode=compile_mode if config.name == "ppo" else "off")
    obs_space, action_space = spaces_of(case)
    model = algo.make_model(spaces=EnvSpaces(observation=obs_space, action=action_space)).to(device)
    optimizer = algo.make_optimizer(model=model)
    keys = algo.buffer_spec(spaces=EnvSpaces(observation=obs_space, action=action_space))
    rows = algo.postprocess(batch={k: torch.as_tensor(batch[k], device=device) for k in keys})
    generator = torch.Generator().manual_seed(0)
    return (lambda: algo.update(model=model, optimizer=optimizer, batch=rows, progress=0.5, generator=generator)), \
        _steps(case)


def _steps(case: dict[str, Any]) -> int:
    algo = case["algo"]
    if algo["name"] == "ppo":
        return algo["num_epochs"] * -(-case["rows"] // algo["minibatch_size"])
    return case["rows"] // algo["batch_size"]


# --- the reference loop (CleanRL's shape) ---------------------------------------------------------------------------

def mlp(sizes: list[int], *, activation: type[nn.Module] = nn.Tanh) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers += [nn.Linear(sizes[i], sizes[i + 1]), activation()]
    return nn.Sequential(*layers[:-1])


def reference_learner(*, case: dict[str, Any], batch: dict[str, np.ndarray],
                      device: torch.device) -> tuple[Callable[[], None], int]:
    build = {"ppo": _reference_ppo, "sac": _reference_sac, "dqn": _reference_dqn}[case["algo"]["name"]]
    b = {k: torch.as_tensor(v, device=device) for k, v in batch.items()}
    return build(case=case, b=b, device=device), _steps(case)


def _reference_ppo(*, case: dict[str, Any], b: dict[str, torch.Tensor], device: torch.device) -> Callable[[], None]:
    h, n_act, algo = case["hidden"], case["actions"], case["algo"]
    critic = mlp([case["obs"], h, h, 1]).to(device)
    actor = mlp([case["obs"], h, h, abs(n_act)]).to(device)
    logstd = nn.Parameter(torch.zeros(1, abs(n_act), device=device))
    params = [*critic.parameters(), *actor.parameters(), *([logstd] if n_act < 0 else [])]
    optimizer = torch.optim.Adam(params, lr=algo.get("lr", 3e-4), eps=1e-5)
    advantages, returns = b["rewards"] * 0.5, b["rewards"] + b["values"]   # stand-ins: GAE is not timed
    epochs, mb = algo["num_epochs"], algo["minibatch_size"]

    def evaluate(obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = actor(obs)
        if n_act > 0:
            dist = torch.distributions.Categorical(logits=out)
            return dist.log_prob(actions), dist.entropy(), critic(obs).squeeze(-1)
        dist = torch.distributions.Normal(out, logstd.expand_as(out).exp())
        return dist.log_prob(actions).sum(1), dist.entropy().sum(1), critic(obs).squeeze(-1)

    def update() -> None:
        n = b["obs"].shape[0]
        clipfracs = []
        for _ in range(epochs):
            inds = torch.randperm(n, device=device)
            for start in range(0, n, mb):
                idx = inds[start:start + mb]
                newlogprob, entropy, newvalue = evaluate(b["obs"][idx], b["actions"][idx])
                logratio = newlogprob - b["log_prob"][idx]
                ratio = logratio.exp()
                with torch.no_grad():
                    clipfracs += [((ratio - 1.0).abs() > 0.2).float().mean().item()]
                adv = advantages[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.2)).mean()
                v_loss = 0.5 * ((newvalue - returns[idx]) ** 2).mean()
                loss = pg_loss - 0.0 * entropy.mean() + 0.5 * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, 0.5)
                optimizer.step()

    return update


def _reference_sac(*, case: dict[str, Any], b: dict[str, torch.Tensor], device: torch.device) -> Callable[[], None]:
    h, obs_dim, act_dim, bs = case["hidden"], case["obs"], -case["actions"], case["algo"]["batch_size"]
    qf1, qf2 = (mlp([obs_dim + act_dim, h, h, 1], activation=nn.ReLU).to(device) for _ in range(2))
    qf1_t, qf2_t = (mlp([obs_dim + act_dim, h, h, 1], activation=nn.ReLU).to(device) for _ in range(2))
    qf1_t.load_state_dict(qf1.state_dict())
    qf2_t.load_state_dict(qf2.state_dict())
    actor = mlp([obs_dim, h, h, 2 * act_dim], activation=nn.ReLU).to(device)
    log_alpha = torch.zeros(1, requires_grad=True, device=device)
    q_opt = torch.optim.Adam([*qf1.parameters(), *qf2.parameters()], lr=3e-4)
    a_opt = torch.optim.Adam(actor.parameters(), lr=3e-4)
    alpha_opt = torch.optim.Adam([log_alpha], lr=3e-4)

    def sample(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = actor(obs).chunk(2, dim=-1)
        std = torch.clamp(log_std, -5, 2).exp()
        x = mean + std * torch.randn_like(mean)
        y = torch.tanh(x)
        log_prob = torch.distributions.Normal(mean, std).log_prob(x) - torch.log(1 - y.pow(2) + 1e-6)
        return y, log_prob.sum(1, keepdim=True)

    def update() -> None:
        for start in range(0, b["obs"].shape[0], bs):
            obs, act = b["obs"][start:start + bs], b["actions"][start:start + bs]
            nxt, rew = b["next_obs"][start:start + bs], b["rewards"][start:start + bs]
            done = b["terminated"][start:start + bs].float()
            alpha = log_alpha.exp().detach()
            with torch.no_grad():
                next_a, next_lp = sample(nxt)
                q_next = (torch.min(qf1_t(torch.cat([nxt, next_a], 1)), qf2_t(torch.cat([nxt, next_a], 1)))
                          - alpha * next_lp)
                target = rew + (1 - done) * 0.99 * q_next.view(-1)
            q_loss = (nn.functional.mse_loss(qf1(torch.cat([obs, act], 1)).view(-1), target)
                      + nn.functional.mse_loss(qf2(torch.cat([obs, act], 1)).view(-1), target))
            q_opt.zero_grad()
            q_loss.backward()
            q_opt.step()
            pi, log_pi = sample(obs)
            min_q = torch.min(qf1(torch.cat([obs, pi], 1)), qf2(torch.cat([obs, pi], 1)))
            actor_loss = ((alpha * log_pi) - min_q).mean()
            a_opt.zero_grad()
            actor_loss.backward()
            a_opt.step()
            alpha_loss = (-log_alpha.exp() * (log_pi.detach() - act_dim)).mean()
            alpha_opt.zero_grad()
            alpha_loss.backward()
            alpha_opt.step()
            with torch.no_grad():
                for net, tgt in ((qf1, qf1_t), (qf2, qf2_t)):
                    for p, tp in zip(net.parameters(), tgt.parameters()):
                        tp.data.copy_(0.005 * p.data + 0.995 * tp.data)

    return update


def _reference_dqn(*, case: dict[str, Any], b: dict[str, torch.Tensor], device: torch.device) -> Callable[[], None]:
    h, bs = case["hidden"], case["algo"]["batch_size"]
    q = mlp([case["obs"], h, h, case["actions"]], activation=nn.ReLU).to(device)
    target = mlp([case["obs"], h, h, case["actions"]], activation=nn.ReLU).to(device)
    target.load_state_dict(q.state_dict())
    optimizer = torch.optim.Adam(q.parameters(), lr=1e-4)

    def update() -> None:
        for start in range(0, b["obs"].shape[0], bs):
            obs, act = b["obs"][start:start + bs], b["actions"][start:start + bs]
            nxt, rew = b["next_obs"][start:start + bs], b["rewards"][start:start + bs]
            done = b["terminated"][start:start + bs].float()
            with torch.no_grad():
                target_max, _ = target(nxt).max(dim=1)
                td_target = rew + 0.99 * target_max * (1 - done)
            old_val = q(obs).gather(1, act.view(-1, 1)).squeeze()
            loss = nn.functional.mse_loss(td_target, old_val)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return update


# --- Stable-Baselines3 ----------------------------------------------------------------------------------------------

class _Spaces(gym.Env):
    """An env that only carries spaces: SB3 builds its policy from them; train() never steps it."""

    def __init__(self, obs_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space, self.action_space = obs_space, action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        return self.observation_space.sample(), 0.0, False, False, {}


def sb3_learner(*, case: dict[str, Any], batch: dict[str, np.ndarray],
                device: torch.device) -> tuple[Callable[[], None], int]:
    import stable_baselines3 as sb3
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import DummyVecEnv

    obs_space, action_space = spaces_of(case)
    env = DummyVecEnv([lambda: _Spaces(obs_space, action_space)])
    algo, h, rows = case["algo"], case["hidden"], case["rows"]
    if algo["name"] == "ppo":
        model = sb3.PPO("MlpPolicy", env, n_steps=rows, batch_size=algo["minibatch_size"], n_epochs=algo["num_epochs"],
                        policy_kwargs={"net_arch": {"pi": [h, h], "vf": [h, h]}}, device=device, seed=0)
        _fill_rollout(model=model, batch=batch)
    else:
        kind = sb3.SAC if algo["name"] == "sac" else sb3.DQN
        model = kind("MlpPolicy", env, batch_size=algo["batch_size"], learning_starts=0, buffer_size=rows,
                     policy_kwargs={"net_arch": [h, h]}, device=device, seed=0)
        actions = batch["actions"].reshape(rows, -1) if algo["name"] == "sac" else batch["actions"].reshape(rows, 1)
        for i in range(rows):
            model.replay_buffer.add(batch["obs"][i:i + 1], batch["next_obs"][i:i + 1], actions[i:i + 1],
                                    batch["rewards"][i:i + 1], batch["terminated"][i:i + 1], [{}])
    model.set_logger(configure(None, [""]))
    steps = _steps(case)
    if algo["name"] == "ppo":
        return model.train, steps
    return (lambda: model.train(gradient_steps=steps, batch_size=algo["batch_size"])), steps


def _fill_rollout(*, model: Any, batch: dict[str, np.ndarray]) -> None:
    buffer = model.rollout_buffer
    for i in range(buffer.buffer_size):
        buffer.add(batch["obs"][i:i + 1], batch["actions"][i:i + 1].reshape(1, -1), batch["rewards"][i:i + 1],
                   batch["cut"][i:i + 1], torch.as_tensor(batch["values"][i:i + 1]),
                   torch.as_tensor(batch["log_prob"][i:i + 1]))
    buffer.compute_returns_and_advantage(last_values=torch.zeros(1), dones=np.zeros(1, bool))


# --- timing ---------------------------------------------------------------------------------------------------------

def time_updates(*, update: Callable[[], Any], updates: int, device: torch.device) -> float:
    """Seconds per update over ``updates`` updates (the device drained before each clock read)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    started = time.perf_counter()
    for _ in range(updates):
        update()
    sync()
    return (time.perf_counter() - started) / updates


def measure(*, name: str, case: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    batch = make_batch(case=case, seed=0)
    learners = {"nimbus": nimbus_learner(case=case, batch=batch, device=device, compile_mode=args.compile),
                "reference": reference_learner(case=case, batch=batch, device=device)}
    if not args.no_sb3:
        learners["sb3"] = sb3_learner(case=case, batch=batch, device=device)
    seconds: dict[str, list[float]] = {who: [] for who in learners}
    first_s: dict[str, float] = {}
    for who, (update, _) in learners.items():
        started = time.perf_counter()
        update()   # warm-up: lazy optimizer state, allocator, kernels, and a compiled learner's compilation
        first_s[who] = time.perf_counter() - started
    for _ in range(args.repeats):   # interleaved, so a slow spell of the machine hits every learner alike
        for who, (update, _) in learners.items():
            seconds[who].append(time_updates(update=update, updates=args.updates, device=device))
    out = {"case": name, "rows": case["rows"], "learners": {},
           "nimbus_compile": args.compile if case["algo"]["name"] == "ppo" else "off"}
    for who, (_, steps) in learners.items():
        per_update = stats(seconds[who])
        out["learners"][who] = {"steps_per_update": steps, "s_per_update": per_update,
                                "ms_per_step": {k: v * 1e3 / steps for k, v in per_update.items()},
                                "updates_per_s": 1.0 / per_update["median"], "first_update_s": first_s[who]}
    return out


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| case | learner | steps/update | ms per step (min / median / max) | updates/s | vs reference | "
             "first update (s) |", "|---|---|---|---|---|---|---|"]
    for result in results:
        ref = result["learners"]["reference"]["s_per_update"]["median"]
        for who, fig in result["learners"].items():
            ms, label = fig["ms_per_step"], who if who != "nimbus" else f"nimbus ({result['nimbus_compile']})"
            lines.append(f"| {result['case']} | {label} | {fig['steps_per_update']} | {ms['min']:.3f} / "
                         f"{ms['median']:.3f} / {ms['max']:.3f} | {fig['updates_per_s']:.1f} | "
                         f"{fig['s_per_update']['median'] / ref:.2f}x | {fig['first_update_s']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compile", default="off", choices=["off", "compile", "graphs"],
                        help="nimbus's learner.compile mode, PPO's cases only (the reference and SB3 run eagerly)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--updates", type=int, default=5, help="updates timed per repeat")
    parser.add_argument("--tiny", action="store_true", help="smoke sizes: a few rows, tiny nets")
    parser.add_argument("--no-sb3", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    for name in args.cases:
        case = CASES[name]
        if args.tiny:
            algo = {**case["algo"], **{k: v for k, v in TINY.items() if k in case["algo"]}}
            case = {**case, "rows": TINY["rows"], "hidden": TINY["hidden"], "algo": {**algo, "hidden_sizes": [16, 16]}}
        results.append(measure(name=name, case=case, args=args))
        print(f"{name}: done", file=sys.stderr)
    print(table(results))
    suffix = ("" if args.device == "cpu" else f"_{torch.device(args.device).type}") + \
        ("" if args.compile == "off" else f"_{args.compile}") + ("_tiny" if args.tiny else "")
    out = args.out or REPO / "benchmarks" / "results" / f"learner_update{suffix}.json"
    write_result(path=out, result={**record(benchmark="learner_update"), "device": args.device,
                                   "compile": args.compile, "torch_threads": torch.get_num_threads(),
                                   "versions": versions(modules=["torch", "stable_baselines3"]), "results": results})
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
