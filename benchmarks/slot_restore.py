"""Restoring an actor rank's env slot (``actors.restore_slots``) against building it cold.

Per env id, for ``--num-envs`` envs of one actor slot, ``--repeats`` times:

* cold build: ``make_env`` + ``reset`` for every env (what a worker without the slot does anyway);
* capture: ``capture_slot`` after ``--steps`` random steps (what every result carries), and its size;
* encode + decode of the snapshot as codec frames (what crosses to the driver and back);
* restore: ``restore_slot`` onto the freshly built envs (the extra a reclaimed rank pays to continue
  its episodes instead of starting new ones).

A multi-agent id (``mpe2:simple_spread_v3``) measures a MARLess actor's slot (marless/slot.py) the same
way, plus ``fragment_ms``: the env steps of one 25-step fragment of the slot with random actions, what a
round's actor does besides inference, so capture + codec can be read as a share of it (the shipped MARLess
configs capture every round).

Run:   python benchmarks/slot_restore.py        (writes benchmarks/results/slot_restore.json; ~1 min)
Smoke: python benchmarks/slot_restore.py --repeats 2 --env-ids CartPole-v1 --out /tmp/slot_restore.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

from _common import record, write_result
from nimbus.data.codec import Message, decode, encode
from nimbus.envs.make import make_env
from nimbus.envs.parallel import make_parallel_env
from nimbus.envs.slot_state import capture_slot, restore_slot
from nimbus.marless.slot import MultiAgentSlot, capture_ma_slot, restore_ma_slot
from nimbus.roles.actor import EnvSlot


def build_slot(*, env_id: str, num_envs: int, seed: int) -> EnvSlot:
    envs = [make_env(env_id=env_id, seed=seed + i) for i in range(num_envs)]
    obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
    return EnvSlot(envs=envs, obs=obs, seq=0, episode_returns=np.zeros(num_envs),
                   episode_lengths=np.zeros(num_envs, dtype=np.int64))


def _timed_ms(fn) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1e3


def build_ma_slot(*, env_id: str, num_envs: int, seed: int) -> MultiAgentSlot:
    envs = [make_parallel_env(env_id=env_id, seed=seed + i, kwargs={}) for i in range(num_envs)]
    obs = [dict(env.reset()[0]) for env in envs]
    return MultiAgentSlot(envs=envs, obs=obs, states=None, seq=0,
                          returns=[dict.fromkeys(env.possible_agents, 0.0) for env in envs],
                          lengths=np.zeros(num_envs, dtype=np.int64))


def _step_ma(slot: MultiAgentSlot, steps: int) -> None:
    for _ in range(steps):
        for e, env in enumerate(slot.envs):
            obs, *_ = env.step({agent: env.action_space(agent).sample() for agent in env.agents})
            slot.obs[e] = dict(obs) if env.agents else dict(env.reset()[0])


def _timed_round_trip(*, slot, build, capture, restore) -> tuple[dict[str, float], int, object]:
    """One repeat's timings after ``slot`` was stepped: ``capture`` it, the snapshot through the codec and back, a
    cold ``build`` and ``restore`` onto it; the snapshot's size in bytes and the freshly built slot."""
    state, capture_ms = _timed_ms(lambda: capture(slot=slot))
    frame, encode_ms = _timed_ms(lambda: encode(Message(header={"meta": state.meta}, arrays=state.arrays)))
    _, decode_ms = _timed_ms(lambda: decode(frame, copy=True))
    fresh, cold_ms = _timed_ms(build)
    _, restore_ms = _timed_ms(lambda: restore(slot=fresh, state=state))
    times = {"cold_build_ms": cold_ms, "capture_ms": capture_ms, "codec_ms": encode_ms + decode_ms,
             "restore_ms": restore_ms}
    return times, len(frame), fresh


def measure_marless(*, env_id: str, num_envs: int, steps: int, repeats: int) -> dict:
    rows: dict[str, list[float]] = {"cold_build_ms": [], "capture_ms": [], "codec_ms": [], "restore_ms": [],
                                    "fragment_ms": []}
    snapshot_bytes = 0
    for r in range(repeats):
        slot = build_ma_slot(env_id=env_id, num_envs=num_envs, seed=r)
        _step_ma(slot, steps)
        _, fragment_ms = _timed_ms(partial(_step_ma, slot, 25))
        times, snapshot_bytes, fresh = _timed_round_trip(
            slot=slot, build=partial(build_ma_slot, env_id=env_id, num_envs=num_envs, seed=10_000 + r),
            capture=capture_ma_slot, restore=restore_ma_slot)
        for name, value in {**times, "fragment_ms": fragment_ms}.items():
            rows[name].append(value)
        for env in [*slot.envs, *fresh.envs]:
            env.close()
    return {"env_id": env_id, "num_envs": num_envs, "snapshot_bytes": snapshot_bytes, **rows,
            "median": {k: statistics.median(v) for k, v in rows.items()}}


def measure(*, env_id: str, num_envs: int, steps: int, repeats: int) -> dict:
    if ":" in env_id:
        return measure_marless(env_id=env_id, num_envs=num_envs, steps=steps, repeats=repeats)
    rows: dict[str, list[float]] = {"cold_build_ms": [], "capture_ms": [], "codec_ms": [], "restore_ms": []}
    snapshot_bytes = 0
    for r in range(repeats):
        slot = build_slot(env_id=env_id, num_envs=num_envs, seed=r)
        for _ in range(steps):
            for env in slot.envs:
                _, _, term, trunc, _ = env.step(env.action_space.sample())
                if term or trunc:
                    env.reset()
        times, snapshot_bytes, fresh = _timed_round_trip(
            slot=slot, build=partial(build_slot, env_id=env_id, num_envs=num_envs, seed=10_000 + r),
            capture=capture_slot, restore=restore_slot)
        for name, value in times.items():
            rows[name].append(value)
        for env in [*slot.envs, *fresh.envs]:
            env.close()
    return {"env_id": env_id, "num_envs": num_envs, "snapshot_bytes": snapshot_bytes, **rows,
            "median": {k: statistics.median(v) for k, v in rows.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-ids", default="CartPole-v1,Hopper-v4,mpe2:simple_spread_v3")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "slot_restore.json")
    args = parser.parse_args()
    results = [measure(env_id=e, num_envs=args.num_envs, steps=args.steps, repeats=args.repeats)
               for e in args.env_ids.split(",")]
    print(f"{'env':22s} {'cold build':>11s} {'restore':>9s} {'capture':>9s} {'codec':>8s} {'bytes':>8s} "
          f"{'fragment':>9s}  (median ms)")
    for r in results:
        m = r["median"]
        fragment = f"{m['fragment_ms']:9.2f}" if "fragment_ms" in m else f"{'-':>9s}"
        print(f"{r['env_id']:22s} {m['cold_build_ms']:11.2f} {m['restore_ms']:9.3f} {m['capture_ms']:9.3f} "
              f"{m['codec_ms']:8.3f} {r['snapshot_bytes']:8d} {fragment}")
    out = {**record(benchmark="slot_restore"), "results": results}
    print(f"wrote {write_result(path=args.out, result=out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
