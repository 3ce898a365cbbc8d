"""Multi-agent algorithms for the ``multiagent`` workflow (MARLess §4.2): configs, lookup, version-0 messages.

``MULTIAGENT_ALGO_CONFIGS`` maps each name to its config class; ``make_multiagent_algo`` builds the algorithm, which
names the roles (function kinds) a policy's round invokes, in order. ``initial_messages`` gives version 0
of a policy's networks as Store messages: ``weights`` (the policy network, models/weights.py format;
IQL/VDN's Q-network with ε and a ``grad_steps`` header) and, for actor-critic algorithms, ``critic`` (critic network + optimizer state, `critic_to_message`); these
live in ``nimbus.algos.multiagent.messages`` (loaded on first use, so importing the config loads no data code).

Example::

    algo = make_multiagent_algo(config=MAPPOConfig())
    algo.roles                                  # ("postprocess", "critic", "policy")
    messages = initial_messages(algo=algo, spaces=spaces, state_dim=54, num_agents=3, seed=0)
    store.put(key="weights/p_agent_0/0", message=messages["weights"])
    store.put(key="critic/p_agent_0/0", message=messages["critic"])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from pydantic import BaseModel

from nimbus.algos.base import ActOutput, build_by_name
from nimbus.algos.multiagent.config import IPPOConfig, MAPPOConfig
from nimbus.algos.multiagent.iql import IQL, IQLConfig
from nimbus.algos.multiagent.ppo import MultiAgentPPO
from nimbus.algos.multiagent.qmix import QMIX, QMIXConfig
from nimbus.algos.multiagent.vdn import VDN, VDNConfig
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


_LAZY = ("initial_messages", "critic_to_message", "load_critic")


def __getattr__(name: str) -> Any:
    """``initial_messages``, ``critic_to_message``, ``load_critic`` from messages.py, imported on first use."""
    if name in _LAZY:
        from nimbus.algos.multiagent import messages
        return getattr(messages, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
