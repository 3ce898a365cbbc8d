"""IQL (independent Q-learning, Tan 1993 / Tampuu et al. 2017) as a MARLess algorithm (MARLess §4.2, Fig. 5a).

Every policy is a Q-network over its agent's own observation; agents act ε-greedily on it. The only
learner role is the *policy function* (marless/value_learner.py): a double-DQN loss per policy on
its agents' transitions, sampled from an off-policy replay of the last rounds' batches. ε lives in the
model as a buffer, so it travels with the weights the learner publishes (the learner sets it from the
run's progress); the target network and the gradient-step count live in the Store beside the weights
(``target/<policy>/<v>``, the weights header's ``grad_steps``).

``ValueAlgorithm`` is shared with VDN and QMIX (algos/multiagent/vdn.py, qmix.py); the configs live in
algos/multiagent/config.py (torch-free: validating a config imports no torch).

Example::

    algo = IQL(config=IQLConfig())
    model = algo.make_policy(spaces=spaces)
    out = algo.act(model=model, obs=torch.as_tensor(obs), explore=True)   # ε-greedy, ε from the weights
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from nimbus.algos.base import ActOutput
from nimbus.algos.dqn.loss import double_q_target, epsilon_greedy, linear_schedule
from nimbus.algos.multiagent.config import ValueConfigBase
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import ConfigError
from nimbus.models.qnet import QNetwork

if TYPE_CHECKING:
    from nimbus.data.codec import Message


class QPolicy(nn.Module):
    """A policy of a value-based MARL algorithm: the Q-network ``q`` and the exploration rate ``epsilon``."""

    def __init__(self, *, q: nn.Module, epsilon: float) -> None:
        super().__init__()
        self.q = q
        self.register_buffer("epsilon", torch.tensor(float(epsilon)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(obs)


class ValueAlgorithm:
    """The MultiAgentAlgorithm protocol (multi-agent contract) for Q-learning policies; subclasses set name and roles."""

    name = "value"
    roles: tuple[str, ...] = ("policy",)
    centralised = False   # neither IQL nor VDN reads the global state (QMIX's mixer does)
    on_policy = False
    joint = False         # VDN, QMIX: one learner invocation trains the whole team (marless/team_learner.py)

    def __init__(self, *, config: ValueConfigBase) -> None:
        self.config = config

    def make_policy(self, *, spaces: EnvSpaces) -> QPolicy:
        if not isinstance(spaces.action, gym.spaces.Discrete):
            raise ConfigError(f"algo.name: {self.name} needs Discrete action spaces, got {spaces.action}")
        q = QNetwork(observation_space=spaces.observation, num_actions=int(spaces.action.n),
                     hidden_sizes=self.config.hidden_sizes)
        return QPolicy(q=q, epsilon=self.config.exploration_initial_eps)

    def make_optimizer(self, *, model: QPolicy) -> torch.optim.Optimizer:
        return torch.optim.Adam(model.q.parameters(), lr=self.config.lr)

    def act(self, *, model: torch.nn.Module, obs: torch.Tensor, explore: bool) -> ActOutput:
        """Greedy actions; with ``explore``, each replaced by a uniform one with probability ε (the model's)."""
        with torch.no_grad():
            q_values = model.q(obs)
        actions = epsilon_greedy(q_values=q_values, epsilon=float(model.epsilon)) if explore else q_values.argmax(dim=1)
        return ActOutput(actions=actions.cpu().numpy().astype(np.int64))

    def epsilon_at(self, *, progress: float) -> float:
        c = self.config
        return linear_schedule(start=c.exploration_initial_eps, end=c.exploration_final_eps,
                               fraction=c.exploration_fraction, progress=progress)


class IQL(ValueAlgorithm):
    name = "iql"
    roles = ("policy",)


# --- the TD targets: pure functions over tensors ---


def iql_targets(*, rewards: torch.Tensor, terminated: torch.Tensor, q_next_online: torch.Tensor,
                q_next_target: torch.Tensor, gamma: float, double_q: bool) -> torch.Tensor:
    """y = r + γ(1 − terminated)·Q̄(o', a*), a* from the online (double) or the target network. [B]."""
    return double_q_target(q_next_online=q_next_online, q_next_target=q_next_target, returns_n=rewards,
                           discount_n=gamma * (1.0 - terminated.float()), double_q=double_q)


def next_values(*, q_next_online: torch.Tensor, q_next_target: torch.Tensor, double_q: bool) -> torch.Tensor:
    """Q̄(o', a*) per row [B] (a* as in ``iql_targets``), no grad."""
    zeros = torch.zeros(q_next_target.shape[0], device=q_next_target.device)
    return double_q_target(q_next_online=q_next_online, q_next_target=q_next_target, returns_n=zeros,
                           discount_n=torch.ones_like(zeros), double_q=double_q)


def initial_messages(*, algo: ValueAlgorithm, spaces: EnvSpaces, state_dim: int, num_agents: int,
                     seed: int) -> dict[str, Message]:
    """Version 0 of a policy: ``weights`` (the Q-network, ε at its initial value; header ``grad_steps`` 0).

    The target network of version 0 is the weights themselves (the learner reads ``weights/<p>/0`` when
    ``target/<p>/0`` is absent), so there is no separate ``target`` message. ``state_dim`` and
    ``num_agents`` are unused (neither IQL nor VDN has a centralised network). The same as the generic
    version-0 weights plus the ``grad_steps`` header (the learner reads a missing one as 0).
    """
    from nimbus.models.weights import model_to_message   # on first use: importing the config loads no data code

    del state_dim, num_agents
    with torch.random.fork_rng(devices=[]):   # seeded, the caller's RNG untouched
        torch.manual_seed(seed)
        message = model_to_message(model=algo.make_policy(spaces=spaces), version=0)
    message.header["grad_steps"] = 0
    return {"weights": message}
