"""Bring-your-own env: module:EnvId, env.imports, env.wrappers, and the observation-space check."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from nimbus.envs.make import make_env
from nimbus.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
FLATTEN = "gymnasium.wrappers.FlattenObservation"


@pytest.fixture
def user_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on sys.path holding a user module that registers TextEnv-v0 (a Text observation)."""
    (tmp_path / "textenvs.py").write_text(textwrap.dedent('''
        import gymnasium as gym
        import numpy as np

        class TextEnv(gym.Env):
            observation_space = gym.spaces.Text(max_length=4)
            action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                return "ab", {}

            def step(self, action):
                return "ab", 0.0, True, False, {}

        gym.register(id="TextEnv-v0", entry_point=TextEnv)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    yield tmp_path
    for name in ("textenvs", "corridor"):
        sys.modules.pop(name, None)
    for env_id in ("TextEnv-v0", "Corridor-v0"):
        gym.registry.pop(env_id, None)


def test_module_colon_id_imports_the_module_and_flattens_a_dict_observation(user_modules: Path) -> None:
    env = make_env(env_id="corridor:Corridor-v0", seed=3, wrappers=(FLATTEN,))
    obs, _ = env.reset()
    assert isinstance(env.observation_space, gym.spaces.Box) and env.observation_space.shape == (16,)
    assert obs.shape == (16,) and obs[7] == 1 and obs[8:].sum() == 1   # one-hot goal (7), then position (keys sorted)
    for _ in range(20):
        obs, reward, terminated, truncated, _ = env.step(1)
        if terminated:
            break
    assert terminated and reward == 1.0 and obs[8 + 7] == 1


def test_env_imports_register_the_id_before_it_is_made(user_modules: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown env id 'Corridor-v0'.*env\.imports"):
        make_env(env_id="Corridor-v0", seed=0, wrappers=(FLATTEN,))
    env = make_env(env_id="Corridor-v0", seed=0, imports=("corridor",), wrappers=(FLATTEN,))
    assert env.observation_space.shape == (16,)


def test_dict_observation_without_a_wrapper_names_the_space_and_the_fix(user_modules: Path) -> None:
    with pytest.raises(ConfigError, match=r"Dict observation space.*env\.wrappers: \[gymnasium\.wrappers\."
                                          r"FlattenObservation\]"):
        make_env(env_id="corridor:Corridor-v0", seed=0)


def test_text_observation_is_refused_with_the_wrapper_to_write(user_modules: Path) -> None:
    with pytest.raises(ConfigError, match=r"Text observation space.*ObservationWrapper") as info:
        make_env(env_id="TextEnv-v0", seed=0, imports=("textenvs",))
    assert "FlattenObservation" not in str(info.value)   # flattening a Text space is no fix


@pytest.mark.parametrize(("kwargs", "pattern"), [
    ({"imports": ("no_such_module_xyz",)}, r"env\.imports: cannot import module 'no_such_module_xyz'"),
    ({"wrappers": ("gymnasium.wrappers.NoSuchWrapper",)}, r"env\.wrappers: module 'gymnasium\.wrappers' has no "
                                                          r"attribute 'NoSuchWrapper'"),
    ({"wrappers": ("numpy:ndarray",)}, r"env\.wrappers: 'numpy:ndarray' is not a gymnasium\.Wrapper subclass"),
])
def test_bad_imports_and_wrappers_name_their_key(kwargs: dict, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        make_env(env_id="CartPole-v1", seed=0, **kwargs)


def test_wrappers_apply_in_order_outermost_last() -> None:
    env = make_env(env_id="CartPole-v1", seed=0, wrappers=("gymnasium.wrappers.OrderEnforcing",
                                                           "gymnasium.wrappers.RecordEpisodeStatistics"))
    assert type(env.env).__name__ == "RecordEpisodeStatistics" and type(env.env.env).__name__ == "OrderEnforcing"
    obs, _ = env.reset()
    assert obs.dtype == np.float32


def test_guide_example_blocks_are_the_example_files() -> None:
    """docs/guide.md shows examples/corridor.py and corridor.yaml verbatim (and test_cli trains that config)."""
    guide = (EXAMPLES.parent / "docs" / "guide.md").read_text()
    for name in ("corridor.py", "corridor.yaml"):
        marker = f"<!-- example:examples/{name} -->\n```{'python' if name.endswith('.py') else 'yaml'}\n"
        start = guide.index(marker) + len(marker)
        assert guide[start:guide.index("```", start)] == (EXAMPLES / name).read_text(), name
    assert len((EXAMPLES / "corridor.py").read_text().splitlines()) <= 25
