"""What a multi-agent run says about spaces it cannot train: refusals before any worker starts that name the agent and
the fix (a Dict or Discrete observation, a MultiDiscrete action), the ``actors.restore_slots`` refusal naming the
user's env class, and uint8 image observations scaled to [0, 1] for the MLPs (there is no CNN path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from nimbus.config import load_config
from nimbus.envs.parallel import make_parallel_env
from nimbus.errors import ConfigError
from nimbus.marless.parts import probe_agents

REPO = Path(__file__).resolve().parents[3]
SPACES = "tests.unit.marless.space_env:make_env"


def _config(*, algo: str, kwargs: str, restore_slots: bool = False):
    return load_config(path=REPO / "configs" / f"marless-{algo}-spread.yaml", overrides=[
        f"env.id={SPACES}", f"env.kwargs={kwargs}", f"actors.restore_slots={str(restore_slots).lower()}"])


@pytest.mark.parametrize("algo", ["ippo", "vdn"])
@pytest.mark.parametrize(("kwargs", "expected"), [
    ("{obs: dict}", r"agent 'a' observes a Dict \(pos, vel\).*gymnasium\.spaces\.flatten_space.*'action_mask'"),
    ("{obs: discrete}", r"agent 'a' observes Discrete\(5\), an index.*One-hot it in your env factory: observation "
                        r"space Box\(0, 1, \(5,\), float32\) and np\.eye\(5, dtype=np\.float32\)\[obs\]"),
    ("{action: multidiscrete}", r"agent 'a' has MultiDiscrete\(\[2 3\]\)\. Make it one Discrete\(6\) of the joint "
                                r"choices.*np\.unravel_index\(action, \[2, 3\]\)"),
])
def test_a_space_the_networks_cannot_read_is_refused_naming_the_agent_and_the_fix(algo, kwargs, expected) -> None:
    with pytest.raises(ConfigError, match=expected) as caught:
        probe_agents(config=_config(algo=algo, kwargs=kwargs))
    key = "algo.name" if "action" in kwargs else "env.id"
    assert str(caught.value).startswith(f"{key}: ")


def test_continuous_actions_with_a_value_algorithm_point_to_ippo() -> None:
    from gymnasium import spaces

    from nimbus.envs.spaces import EnvSpaces
    from nimbus.marless.checks import check_agent_spaces

    continuous = EnvSpaces(observation=spaces.Box(0, 1, (3,)), action=spaces.Box(-1, 1, (2,)))
    check_agent_spaces(spaces={"a": continuous}, algo_name="mappo", env_id="x")
    with pytest.raises(ConfigError, match=r"^algo\.name: qmix trains Discrete actions, but x's agent 'a' has Box.*"
                                          r"use ippo or mappo"):
        check_agent_spaces(spaces={"a": continuous}, algo_name="qmix", env_id="x")


def test_the_restore_slots_refusal_names_the_users_env_class_not_nimbus_wrappers() -> None:
    """A masked env is wrapped in nimbus's SplitActionMask; the refusal named that wrapper instead of the user's
    class, which is the one that needs get_state() / set_state()."""
    with pytest.raises(ConfigError, match=r"^actors\.restore_slots: .*no state snapshot for SpaceEnv .*get_state") \
            as caught:
        probe_agents(config=_config(algo="ippo", kwargs="{obs: masked}", restore_slots=True))
    assert "SplitActionMask" not in str(caught.value)


def test_uint8_images_reach_every_reader_scaled_to_the_unit_interval() -> None:
    env = make_parallel_env(env_id=SPACES, seed=0, kwargs={"obs": "image"})
    space = env.observation_space("a")
    assert space.dtype == np.float32 and float(space.high.max()) == 1.0 and space.shape == (8, 8, 3)
    obs, _ = env.reset()
    assert obs["a"].dtype == np.float32 and float(obs["a"].max()) == 1.0       # 255 → 1
    obs = env.step({"a": 0, "b": 0})[0]
    assert float(obs["b"].max()) == 0.0


def test_an_ippo_and_a_vdn_round_train_on_images(tmp_path: Path) -> None:
    """Both networks are MLPs over the scaled, flattened image (8 × 8 × 3 = 192 inputs); a run's first round trains."""
    from nimbus.config import apply_overrides, parse_config
    from nimbus.run.loop import train

    torch.set_num_threads(1)
    for algo in ("ippo", "vdn"):
        base = load_config(path=REPO / "configs" / f"marless-{algo}-spread.yaml").model_dump(mode="json")
        base["output"] = {"root_dir": str(tmp_path / algo), "loggers": [], "report": False, "status_line": False}
        result = train(config=parse_config(data=apply_overrides(data=base, overrides=[
            f"env.id={SPACES}", "env.kwargs={obs: image}", "env.num_envs_per_actor=2", "actors.fragment_steps=5",
            "actors.restore_slots=false", "actors.scaling={kind: fixed, num_actors: 1}", "runtime.backend=inline",
            "train.max_rounds=1", "train.eval_episodes=1", "algo.hidden_sizes=[8]"])))
        assert len(result.rows) == 1
