"""Multi-agent algorithms for the ``multiagent`` workflow (MARLess §4.2): configs, lookup, version-0 messages.

``MARL_ALGO_CONFIGS`` maps each name to its config class; ``make_marl_algo`` builds the algorithm, which
names the roles (function kinds) a policy's round invokes, in order. ``initial_messages`` gives version 0
of a policy's networks as Store messages: ``weights`` (the policy network, functions/weights.py format)
and, for actor-critic algorithms, ``critic`` (critic network + optimizer state, `critic_to_message`).

Example::

    algo = make_marl_algo(config=MAPPOConfig())
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

from nimbus.algos.base import ActOutput, EnvSpaces
from nimbus.algos.marl.config import IPPOConfig, MAPPOConfig
from nimbus.algos.marl.ppo import MarlPPO
from nimbus.data.codec import Message
from nimbus.functions.weights import load_model, load_optimizer, model_to_message, optimizer_to_message

MARL_ALGO_CONFIGS: dict[str, type[BaseModel]] = {"ippo": IPPOConfig, "mappo": MAPPOConfig}

_BUILDERS: dict[str, Callable[[Any], Any]] = {
    "ippo": lambda config: MarlPPO(config=config),
    "mappo": lambda config: MarlPPO(config=config),
}

_OPTIM_PREFIX = "optim."


class MarlAlgorithm(Protocol):
    name: str
    roles: tuple[str, ...]   # function kinds per policy round, in invocation order
    centralised: bool        # the actor records the global state
    on_policy: bool

    def make_policy(self, *, spaces: EnvSpaces) -> torch.nn.Module: ...

    def act(self, *, model: torch.nn.Module, obs: torch.Tensor, explore: bool) -> ActOutput: ...


def make_marl_algo(*, config: BaseModel) -> Any:
    """The multi-agent algorithm named by ``config.name``."""
    name = getattr(config, "name", None)
    if name not in _BUILDERS:
        raise ValueError(f"unknown multi-agent algorithm {name!r}; known: {sorted(_BUILDERS)}")
    expected = MARL_ALGO_CONFIGS[name]
    if not isinstance(config, expected):
        raise TypeError(f"algorithm {name!r} needs a {expected.__name__}, got {type(config).__name__}")
    return _BUILDERS[name](config)


def marl_algo_from_dict(*, algo: dict[str, Any]) -> Any:
    """The algorithm of a request's ``algo`` dict (a config's ``model_dump(mode="json")``)."""
    return make_marl_algo(config=MARL_ALGO_CONFIGS[algo["name"]].model_validate(algo))


def critic_to_message(*, critic: torch.nn.Module, optimizer: torch.optim.Optimizer | None, version: int) -> Message:
    """The critic network (``param.*``) and its optimizer state (``optim.state.*``, header ``optim``) in one Message."""
    message = model_to_message(model=critic, version=version)
    if optimizer is None or not optimizer.state:
        return message
    optim = optimizer_to_message(optimizer=optimizer, version=version)
    arrays = {**message.arrays, **{_OPTIM_PREFIX + key: value for key, value in optim.arrays.items()}}
    return Message(header={**message.header, "optim": optim.header}, arrays=arrays)


def load_critic(*, critic: torch.nn.Module, optimizer: torch.optim.Optimizer, message: Message) -> bool:
    """Load the critic network, and its optimizer state when the message has one (False: a fresh optimizer)."""
    load_model(model=critic, message=message)
    if "optim" not in message.header:
        return False
    arrays = {key[len(_OPTIM_PREFIX):]: value for key, value in message.arrays.items() if key.startswith(_OPTIM_PREFIX)}
    load_optimizer(optimizer=optimizer, message=Message(header=message.header["optim"], arrays=arrays))
    return True


def initial_messages(*, algo: Any, spaces: EnvSpaces, state_dim: int, num_agents: int, seed: int) -> dict[str, Message]:
    """Version 0 of one policy: ``weights`` and, for actor-critic algorithms, ``critic``; seeded, global RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        messages = {"weights": model_to_message(model=algo.make_policy(spaces=spaces), version=0)}
        if "critic" in algo.roles:
            critic = algo.make_critic(spaces=spaces, state_dim=state_dim, num_agents=num_agents)
            messages["critic"] = critic_to_message(critic=critic, optimizer=None, version=0)
    return messages
