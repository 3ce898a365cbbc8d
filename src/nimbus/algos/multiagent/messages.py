"""Store messages of the multi-agent algorithms' networks: version 0 of a policy, the critic with its optimizer.

``weights`` use models/weights.py's format (``param.*``); ``critic`` adds the critic optimizer's state under
``optim.state.*`` (header ``optim``), so one Store key holds everything a critic invocation needs.

Example::

    messages = initial_messages(algo=algo, spaces=spaces, state_dim=54, num_agents=3, seed=0)
    store.put(key="critic/p_agent_0/0", message=messages["critic"])
"""

from __future__ import annotations

from typing import Any

import torch

from nimbus.data.codec import Message
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.weights import load_model, load_optimizer, model_to_message, optimizer_to_message

_OPTIM_PREFIX = "optim."


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
    """Version 0 of one policy: ``weights`` and, for actor-critic algorithms, ``critic``; seeded, global RNG
    untouched."""
    if not algo.on_policy:   # IQL, VDN: the Q-network (algos/multiagent/iql.py)
        from nimbus.algos.multiagent.iql import initial_messages as value_initial_messages
        return value_initial_messages(algo=algo, spaces=spaces, state_dim=state_dim, num_agents=num_agents, seed=seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        messages = {"weights": model_to_message(model=algo.make_policy(spaces=spaces), version=0)}
        if "critic" in algo.roles:
            critic = algo.make_critic(spaces=spaces, state_dim=state_dim, num_agents=num_agents)
            messages["critic"] = critic_to_message(critic=critic, optimizer=None, version=0)
    return messages
