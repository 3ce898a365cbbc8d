"""Which multi-agent algorithm a config names: ``MULTIAGENT_ALGO_CONFIGS`` and ``make_multiagent_algo`` (the
package's ``nimbus.algos.multiagent`` names, loaded from here on first use)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from pydantic import BaseModel

from nimbus.algos.base import ActOutput, build_by_name
from nimbus.algos.multiagent.config import IPPOConfig, IQLConfig, MAPPOConfig, QMIXConfig, VDNConfig
from nimbus.algos.multiagent.iql import IQL
from nimbus.algos.multiagent.ppo import MultiAgentPPO
from nimbus.algos.multiagent.qmix import QMIX
from nimbus.algos.multiagent.vdn import VDN
from nimbus.envs.spaces import EnvSpaces

MULTIAGENT_ALGO_CONFIGS: dict[str, type[BaseModel]] = {"ippo": IPPOConfig, "mappo": MAPPOConfig, "iql": IQLConfig,
                                                 "vdn": VDNConfig, "qmix": QMIXConfig}

_BUILDERS: dict[str, Callable[[Any], Any]] = {
    "ippo": lambda config: MultiAgentPPO(config=config),
    "mappo": lambda config: MultiAgentPPO(config=config),
    "iql": lambda config: IQL(config=config),
    "vdn": lambda config: VDN(config=config),
    "qmix": lambda config: QMIX(config=config),
}


class MultiAgentAlgorithm(Protocol):
    name: str
    roles: tuple[str, ...]   # function kinds per policy round, in invocation order
    centralised: bool        # the actor records the global state
    on_policy: bool

    def make_policy(self, *, spaces: EnvSpaces) -> torch.nn.Module: ...

    def act(self, *, model: torch.nn.Module, obs: torch.Tensor, explore: bool) -> ActOutput: ...


def make_multiagent_algo(*, config: BaseModel) -> Any:
    """The multi-agent algorithm named by ``config.name``."""
    return build_by_name(config=config, builders=_BUILDERS, configs=MULTIAGENT_ALGO_CONFIGS,
                         kind="multi-agent algorithm")


def multiagent_algo_from_dict(*, algo: dict[str, Any]) -> Any:
    """The algorithm of a request's ``algo`` dict (a config's ``model_dump(mode="json")``)."""
    return make_multiagent_algo(config=MULTIAGENT_ALGO_CONFIGS[algo["name"]].model_validate(algo))
