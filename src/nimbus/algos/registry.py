"""Algorithm lookup by config name.

`AlgoConfig` is the discriminated union (on ``name``) of every algorithm's config, for the top-level
config's ``algo:`` section; `ALGO_CONFIGS` maps each name to its config class (to validate an ``algo``
dict on its own); `make_algorithm` builds the algorithm for a validated config. Adding an algorithm =
one member of the union and one entry in each table.

Example::

    algo = make_algorithm(config=PPOConfig(lr=2.5e-4))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Union

from pydantic import BaseModel, Field

from nimbus.algos.base import Algorithm, build_by_name
from nimbus.algos.compiled import CompileMode
from nimbus.algos.dqn.algorithm import DQN
from nimbus.algos.dqn.config import DQNConfig
from nimbus.algos.impala.algorithm import Impala
from nimbus.algos.impala.config import ImpalaConfig
from nimbus.algos.multiagent import MULTIAGENT_ALGO_CONFIGS
from nimbus.algos.multiagent.config import IPPOConfig, IQLConfig, MAPPOConfig, QMIXConfig, VDNConfig
from nimbus.algos.ppo.algorithm import PPO
from nimbus.algos.ppo.config import PPOConfig
from nimbus.algos.sac.algorithm import SAC
from nimbus.algos.sac.config import SACConfig
from nimbus.errors import ConfigError

AlgoConfig = Annotated[Union[PPOConfig, DQNConfig, ImpalaConfig, SACConfig,  # noqa: UP007
                             IPPOConfig, MAPPOConfig, IQLConfig, VDNConfig, QMIXConfig], Field(discriminator="name")]

ALGO_CONFIGS: dict[str, type[BaseModel]] = {"ppo": PPOConfig, "dqn": DQNConfig, "impala": ImpalaConfig,
                                            "sac": SACConfig, **MULTIAGENT_ALGO_CONFIGS}
# the multi-agent ones validate here but are built by nimbus.algos.multiagent.make_multiagent_algo
# (train.workflow: marless)

_BUILDERS: dict[str, Callable[[Any], Algorithm]] = {
    "ppo": lambda config: PPO(config=config),
    "dqn": lambda config: DQN(config=config),        # off-policy ones run on train.workflow: offpolicy
    "impala": lambda config: Impala(config=config),
    "sac": lambda config: SAC(config=config),
}


def make_algorithm(*, config: BaseModel, compile_mode: CompileMode = "off") -> Algorithm:
    """The algorithm named by ``config.name``, built from its config; ``compile_mode`` (``learner.compile``) is
    PPO's: the config rules refuse it for the others."""
    name = getattr(config, "name", None)
    if name in MULTIAGENT_ALGO_CONFIGS:
        raise ConfigError(f"algo.name: {name!r} is a multi-agent algorithm; it needs train.workflow: marless "
                          "(and a PettingZoo Parallel env)")
    if compile_mode != "off":
        if name != "ppo":
            raise ConfigError(f"learner.compile: {compile_mode} compiles PPO's update; algo.name is {name!r}")
        return PPO(config=config, compile_mode=compile_mode)  # type: ignore[arg-type]
    return build_by_name(config=config, builders=_BUILDERS, configs=ALGO_CONFIGS, kind="algorithm")
