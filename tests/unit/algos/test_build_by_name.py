"""algos/base.py ``build_by_name``: the one lookup behind ``make_algorithm`` and ``make_multiagent_algo`` (an unknown
name lists the known ones; a config of another algorithm under a known name is refused)."""

from __future__ import annotations

import pytest

from nimbus.algos.base import build_by_name
from nimbus.algos.multiagent import make_multiagent_algo
from nimbus.algos.multiagent.config import MAPPOConfig
from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.algos.registry import make_algorithm
from nimbus.algos.sac.config import SACConfig


class Named:
    def __init__(self, name: str) -> None:
        self.name = name


def test_builds_what_the_name_maps_to():
    assert build_by_name(config=Named("a"), builders={"a": lambda c: ("built", c.name)}, configs={"a": Named},
                         kind="thing") == ("built", "a")
    assert isinstance(make_algorithm(config=PPOConfig()), PPO)
    assert make_multiagent_algo(config=MAPPOConfig()).roles == ("postprocess", "critic", "policy")


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"^unknown thing 'z'; known: \['a', 'b'\]$"):
        build_by_name(config=Named("z"), builders={"b": print, "a": print}, configs={}, kind="thing")
    known = r"\['ippo', 'iql', 'mappo', 'qmix', 'vdn'\]"
    with pytest.raises(ValueError, match=rf"^unknown multi-agent algorithm 'ppo'; known: {known}$"):
        make_multiagent_algo(config=PPOConfig())


def test_a_config_of_another_algorithm_is_refused():
    class Other(Named):
        pass

    with pytest.raises(TypeError, match=r"^algorithm 'a' needs a Other, got Named$"):
        build_by_name(config=Named("a"), builders={"a": print}, configs={"a": Other}, kind="thing")
    with pytest.raises(TypeError, match=r"^algorithm 'ppo' needs a PPOConfig, got SACConfig$"):
        make_algorithm(config=SACConfig().model_copy(update={"name": "ppo"}))
