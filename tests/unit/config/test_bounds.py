"""Counts that a later part bounds are refused at load or build time, naming the key and the bound (issue 28.3).

``--set actors.scaling.num_actors=100000`` ran 104 s and died with ``actor_rank 1024 outside [0, 1024)``: the
buffer keeps per-rank counters for 1,024 actor ranks. Each bound lives in schema/bounds.py, and the part it
describes reads it from there.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nimbus.config import load_config, parse_config
from nimbus.errors import ConfigError
from nimbus.schema.bounds import MAX_ACTORS, MAX_INLINE_BYTES, MAX_SEED, RANK_STRIDE

REPO = Path(__file__).resolve().parents[3]
PPO = REPO / "configs" / "ppo-cartpole.yaml"
SPREAD = REPO / "configs" / "marless-ippo-spread.yaml"
OVER = MAX_ACTORS + 1


@pytest.mark.parametrize("config,override,key", [
    (PPO, f"actors.scaling={{kind: fixed, num_actors: {OVER}}}", r"actors\.scaling\.num_actors"),
    (PPO, f"actors.scaling={{kind: nitro, min_actors: 8, max_actors: {OVER}}}", r"actors\.scaling\.max_actors"),
    (PPO, f"actors.scaling={{kind: nitro, min_actors: {OVER}, max_actors: {OVER}}}", r"actors\.scaling\.min_actors"),
    (PPO, f"actors.scaling={{kind: hydrozoa, initial_actors: 2, max_actors: {OVER}, double_every_rounds: 1}}",
     r"actors\.scaling\.max_actors"),
    (PPO, f"actors.scaling={{kind: hydrozoa, initial_actors: {OVER}, max_actors: {OVER}, double_every_rounds: 1}}",
     r"actors\.scaling\.initial_actors"),
    (PPO, f"actors.scaling={{kind: max, max_actors: {OVER}}}", r"actors\.scaling\.max_actors"),
    (PPO, f"actors.preregister={OVER}", r"actors\.preregister"),
    (SPREAD, f"marless.i_max={OVER}", r"marless\.i_max"),
    (SPREAD, f"marless={{i_min: {OVER}, i_max: {OVER}}}", r"marless\.i_min"),
])
def test_every_actor_count_is_at_most_the_buffers_rank_table(config: Path, override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key + r": Input should be less than or equal to 1024"):
        load_config(path=config, overrides=[override])
    at_bound = override.replace(str(OVER), str(MAX_ACTORS))
    load_config(path=config, overrides=[at_bound, "algo.minibatch_size=64"] if config == PPO else [at_bound])


def test_a_population_member_has_at_most_rank_stride_actors() -> None:
    pbt = ["pbt={members: 2, hyperparameters: {lr: {low: 1.0e-4, high: 1.0e-2, log: true}}}"]
    message = rf"actors\.scaling: {RANK_STRIDE + 1} actors per member exceed {RANK_STRIDE}"
    with pytest.raises(ConfigError, match=message):
        load_config(path=PPO, overrides=[*pbt, f"actors.scaling.num_actors={RANK_STRIDE + 1}"])
    load_config(path=PPO, overrides=[*pbt, f"actors.scaling.num_actors={RANK_STRIDE}"])
    load_config(path=PPO, overrides=[f"actors.scaling.num_actors={RANK_STRIDE + 1}"])   # one policy: the buffer's bound


def test_the_seed_fits_what_torch_is_seeded_with() -> None:
    with pytest.raises(ConfigError, match=r"seed: Input should be less than or equal to 4294967295"):
        load_config(path=PPO, overrides=[f"seed={MAX_SEED + 1}"])
    assert load_config(path=PPO, overrides=[f"seed={MAX_SEED}"]).seed == MAX_SEED


def test_inline_bodies_are_at_most_what_the_workers_outbox_takes() -> None:
    from nimbus.data.transport import DEFAULT_MAX_FRAME_BYTES

    assert MAX_INLINE_BYTES == DEFAULT_MAX_FRAME_BYTES // 2    # data/channel.py's Outbox refuses more
    with pytest.raises(ConfigError, match=r"channel\.inline_max_bytes: Input should be less than or equal to"):
        load_config(path=PPO, overrides=[f"channel.inline_max_bytes={MAX_INLINE_BYTES + 1}"])


@pytest.mark.parametrize("algo,capacity", [("dqn", "buffer_capacity"), ("sac", "buffer_capacity"),
                                           ("iql", "replay_capacity"), ("vdn", "replay_capacity")])
def test_learning_starts_fits_in_the_replay(algo: str, capacity: str) -> None:
    workflow = "marless" if algo in ("iql", "vdn") else "offpolicy"
    data = {"algo": {"name": algo, capacity: 10_000, "learning_starts": 10_001}, "train": {"workflow": workflow}}
    with pytest.raises(ConfigError, match=rf"algo\.learning_starts \(10001\) exceeds algo\.{capacity} \(10000\)"):
        parse_config(data=data)


def test_the_buffer_is_built_with_the_bound_the_config_checks() -> None:
    from nimbus.policy.build import policy_data

    config = load_config(path=PPO, overrides=[f"actors.scaling.num_actors={MAX_ACTORS}", "actors.fragment_steps=1",
                                              "env.num_envs_per_actor=1", "algo.minibatch_size=64"])
    data = policy_data(config=config)
    try:
        assert data.buffer.max_actors == MAX_ACTORS
    finally:
        data.buffer.close(unlink=True)


def test_the_issues_100000_actors_exit_2_before_any_worker_starts(tmp_path: Path, run_cli) -> None:
    started = time.perf_counter()
    code, said = run_cli("train", str(PPO), "--set", "actors.scaling.num_actors=100000", "--set",
                         f"output.root_dir={tmp_path}")
    assert code == 2, said[-2000:]
    assert "actors.scaling.num_actors: Input should be less than or equal to 1024" in said
    assert time.perf_counter() - started < 120 and not list(tmp_path.rglob("ledger.jsonl"))
