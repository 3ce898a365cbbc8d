"""envs/batched.py: the per-env loop, gymnasium's vector API and EnvPool give the same rows where they should."""

from __future__ import annotations

import numpy as np
import pytest

from nimbus.config.rules import ENVPOOL_TWIN_IDS
from nimbus.envs.batched import ENVPOOL_TWINS, envpool_installed, envpool_kwargs, make_batched, resolve_backend
from nimbus.envs.registry import extra_available

needs_envpool = pytest.mark.skipif(not envpool_installed(), reason="the envpool extra is not installed here")
needs_mujoco = pytest.mark.skipif(not extra_available("mujoco"), reason="the mujoco extra is not installed here")
needs_atari = pytest.mark.skipif(not extra_available("atari"), reason="the atari extra is not installed here")
NUM_ENVS = 4


def _run(*, backend: str, env_id: str, steps: int, seed: int = 3) -> dict[str, np.ndarray]:
    """``steps`` steps of seeded random actions; every key stacked over time, plus episode returns and lengths."""
    batch = make_batched(backend=backend, env_id=env_id, num_envs=NUM_ENVS, seed=seed)
    rng = np.random.default_rng(0)
    rows: dict[str, list[np.ndarray]] = {"obs": [batch.reset()]}
    returns, lengths, tally, count = [], [], np.zeros(NUM_ENVS), np.zeros(NUM_ENVS, dtype=int)
    for _ in range(steps):
        if hasattr(batch.action_space, "n"):
            actions = rng.integers(0, batch.action_space.n, NUM_ENVS)
        else:
            actions = rng.uniform(-1, 1, (NUM_ENVS, *batch.action_space.shape))
        step = batch.step(actions=actions)
        for key, value in step.items():
            rows.setdefault(key, []).append(np.array(value))
        tally += step["rewards"]
        count += 1
        for i in np.flatnonzero(step["terminated"] | step["truncated"]):
            returns.append(tally[i])
            lengths.append(count[i])
            tally[i], count[i] = 0.0, 0
    batch.close()
    return {**{key: np.stack(value) for key, value in rows.items()}, "returns": np.array(returns),
            "lengths": np.array(lengths)}


def test_gymnasium_vector_api_gives_the_loops_rows_bit_for_bit() -> None:
    loop = _run(backend="gymnasium", env_id="CartPole-v1", steps=300)
    vector = _run(backend="vector", env_id="CartPole-v1", steps=300)
    assert len(loop["returns"]) > 20   # autoresets happened inside the run
    for key in loop:
        np.testing.assert_array_equal(vector[key], loop[key], err_msg=key)


@pytest.mark.parametrize("backend", ["gymnasium", "vector", pytest.param("envpool", marks=needs_envpool)])
def test_an_ended_episode_is_reset_in_the_same_step(backend: str) -> None:
    """final_obs is where the episode ended (a pole past 12 degrees or a cart past 2.4); next_obs is a fresh reset
    (every coordinate within 0.05), and no row is a reset step: CartPole pays 1 every step, so return == length."""
    run = _run(backend=backend, env_id="CartPole-v1", steps=300)
    ended = run["terminated"]
    assert ended.sum() > 20
    final = run["final_obs"][ended]
    assert np.all((np.abs(final[:, 0]) > 2.4) | (np.abs(final[:, 2]) > 0.2095))
    assert np.all(np.abs(run["next_obs"][ended]) <= 0.05)
    alive = ~(run["terminated"] | run["truncated"])
    np.testing.assert_array_equal(run["next_obs"][alive], run["final_obs"][alive])
    np.testing.assert_array_equal(run["returns"], run["lengths"])
    np.testing.assert_array_equal(run["rewards"], np.ones_like(run["rewards"]))


@pytest.mark.parametrize("backend", ["gymnasium", pytest.param("envpool", marks=needs_envpool)])
def test_truncation_at_the_time_limit(backend: str) -> None:
    """Pendulum never terminates: every episode is truncated at exactly 200 steps in both backends."""
    run = _run(backend=backend, env_id="Pendulum-v1", steps=450)
    assert not run["terminated"].any()
    np.testing.assert_array_equal(np.flatnonzero(run["truncated"].any(axis=1)), [199, 399])
    assert run["truncated"][[199, 399]].all()
    np.testing.assert_array_equal(run["lengths"], np.full(2 * NUM_ENVS, 200))


@needs_envpool
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", pytest.param("Hopper-v5", marks=needs_mujoco),
                                    pytest.param("nimbus/AtariQbert-v5", marks=needs_atari)])
def test_envpool_rows_have_gymnasiums_shapes_and_dtypes(env_id: str) -> None:
    gym_run = _run(backend="gymnasium", env_id=env_id, steps=5)
    pool_run = _run(backend="envpool", env_id=env_id, steps=5)
    for key in ("obs", "next_obs", "final_obs", "rewards", "terminated", "truncated"):
        assert (pool_run[key].shape, pool_run[key].dtype) == (gym_run[key].shape, gym_run[key].dtype), key


@needs_envpool
def test_envpool_is_seeded() -> None:
    first, again = _run(backend="envpool", env_id="CartPole-v1", steps=50), \
        _run(backend="envpool", env_id="CartPole-v1", steps=50)
    other = _run(backend="envpool", env_id="CartPole-v1", steps=50, seed=4)
    np.testing.assert_array_equal(first["next_obs"], again["next_obs"])
    assert not np.array_equal(first["obs"][0], other["obs"][0])
    assert len(np.unique(first["obs"][0], axis=0)) == NUM_ENVS   # each env its own seed


def test_auto_takes_envpool_only_where_nothing_needs_gymnasiums_envs() -> None:
    assert resolve_backend(backend="auto", env_id="CartPole-v1", snapshots=True) == "gymnasium"
    assert resolve_backend(backend="auto", env_id="CartPole-v1", custom=True) == "gymnasium"
    assert resolve_backend(backend="auto", env_id="Acrobot-v1x") == "gymnasium"
    assert resolve_backend(backend="vector", env_id="CartPole-v1", snapshots=True) == "vector"
    expected = "envpool" if envpool_installed() else "gymnasium"
    assert resolve_backend(backend="auto", env_id="CartPole-v1") == expected


def test_the_config_rules_know_the_same_twins() -> None:
    assert set(ENVPOOL_TWINS) == ENVPOOL_TWIN_IDS


@needs_atari
@pytest.mark.parametrize("backend", ["gymnasium", pytest.param("envpool", marks=needs_envpool)])
def test_atari_rewards_clipped_to_their_sign_in_both_backends(backend: str) -> None:
    """Qbert pays 25 a cube: with clip_rewards every reward is -1, 0 or 1, and some are 1."""
    batch = make_batched(backend=backend, env_id="nimbus/AtariQbert-v5", num_envs=2, seed=1,
                         kwargs={"clip_rewards": True})
    batch.reset()
    rng = np.random.default_rng(0)
    rewards = np.concatenate([batch.step(actions=rng.integers(0, 6, 2))["rewards"] for _ in range(300)])
    batch.close()
    assert set(np.unique(rewards)) <= {-1.0, 0.0, 1.0} and rewards.max() == 1.0


def test_envpool_builds_only_what_it_has_an_equivalent_of() -> None:
    assert envpool_kwargs(env_id="nimbus/AtariQbert-v5", kwargs={"clip_rewards": True})["reward_clip"] is True
    assert envpool_kwargs(env_id="CartPole-v1", kwargs={"max_episode_steps": 5}) is None
    assert envpool_kwargs(env_id="nimbus/AtariQbert-v5", kwargs={"frame_stack": 2}) is None
    assert resolve_backend(backend="auto", env_id="CartPole-v1", kwargs={"max_episode_steps": 5}) == "gymnasium"
