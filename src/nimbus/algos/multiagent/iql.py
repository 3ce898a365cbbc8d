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

from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from nimbus.algos.base import ActOutput
from nimbus.algos.dqn.loss import epsilon_greedy, linear_schedule
from nimbus.algos.multiagent.config import ValueConfigBase
from nimbus.algos.step import make_adam, param_device
from nimbus.envs.spaces import EnvSpaces
from nimbus.errors import ConfigError
from nimbus.models.qnet import QNetwork

if TYPE_CHECKING:
    from nimbus.data.codec import Message

NEXT_ACTION_MASK = "next_action_mask"   # the batch column of the legal actions of next_obs (the target's max)


class QPolicy(nn.Module):
    """A policy of a value-based MARL algorithm: the Q-network ``q`` and the exploration rate ``epsilon``."""

    epsilon: torch.Tensor   # a buffer: it travels with the weights

    def __init__(self, *, q: nn.Module, epsilon: float) -> None:
        super().__init__()
        self.q = q
        self.register_buffer("epsilon", torch.tensor(float(epsilon)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q(obs)


class ValueAlgorithm:
    """The MultiAgentAlgorithm protocol (multi-agent contract) for Q-learning policies; subclasses set name and
    roles."""

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
        """Adam over the Q-network: fused on CUDA and the CPU, foreach elsewhere (algos/step.py ``make_adam``)."""
        return make_adam(params=model.q.parameters(), lr=self.config.lr, device=param_device(model))

    def act(self, *, model: torch.nn.Module, obs: torch.Tensor, explore: bool,
            action_mask: torch.Tensor | None = None) -> ActOutput:
        """Greedy actions; with ``explore``, each replaced by a uniform one with probability ε (the model's). With
        ``action_mask`` [B, n] (the env's legal actions), both the greedy and the uniform action are legal ones."""
        with torch.no_grad():
            q_values = model.q(obs)
            if action_mask is not None:
                actions = masked_epsilon_greedy(q_values=q_values, action_mask=action_mask,
                                                epsilon=float(model.epsilon) if explore else 0.0)
            elif explore:
                actions = epsilon_greedy(q_values=q_values, epsilon=float(model.epsilon))
            else:
                actions = q_values.argmax(dim=1)
        return ActOutput(actions=actions.cpu().numpy().astype(np.int64))

    def epsilon_at(self, *, progress: float) -> float:
        c = self.config
        return linear_schedule(start=c.exploration_initial_eps, end=c.exploration_final_eps,
                               fraction=c.exploration_fraction, progress=progress)


class IQL(ValueAlgorithm):
    name = "iql"
    roles = ("policy",)


# --- acting and the TD targets among the legal actions: pure functions over tensors ---


def masked_q(*, q_values: torch.Tensor, action_mask: torch.Tensor | None) -> torch.Tensor:
    """``q_values`` [B, n] with every action ``action_mask`` forbids at the dtype's lowest finite number, so no
    argmax or max picks it (pymarl's ``mac_out[avail_actions == 0] = -9999999``); None: unchanged."""
    if action_mask is None:
        return q_values
    return q_values.masked_fill(~action_mask.to(device=q_values.device, dtype=torch.bool),
                                torch.finfo(q_values.dtype).min)


def masked_epsilon_greedy(*, q_values: torch.Tensor, action_mask: torch.Tensor, epsilon: float) -> torch.Tensor:
    """The best legal action of each row, replaced with probability ``epsilon`` by one drawn uniformly among the
    row's legal actions (torch's global RNG: the random scores first, then the coin flips). No grad."""
    with torch.no_grad():
        legal = action_mask.to(device=q_values.device, dtype=torch.bool)
        greedy = masked_q(q_values=q_values, action_mask=legal).argmax(dim=1)
        if epsilon <= 0.0:
            return greedy
        scores = torch.rand(q_values.shape).to(q_values.device).masked_fill(~legal, -1.0)   # legal: uniform in [0, 1)
        return torch.where(torch.rand(greedy.shape).to(q_values.device) < epsilon, scores.argmax(dim=1), greedy)



def iql_targets(*, rewards: torch.Tensor, terminated: torch.Tensor, q_next_online: torch.Tensor,
                q_next_target: torch.Tensor, gamma: float, double_q: bool,
                next_action_mask: torch.Tensor | None = None) -> torch.Tensor:
    """y = r + γ(1 − terminated)·Q̄(o', a*), a* from the online (double) or the target network, among the legal
    actions of o' when ``next_action_mask`` [B, n] is given. [B]."""
    return rewards.float() + gamma * (1.0 - terminated.float()) * next_values(
        q_next_online=q_next_online, q_next_target=q_next_target, double_q=double_q, next_action_mask=next_action_mask)


def next_values(*, q_next_online: torch.Tensor, q_next_target: torch.Tensor, double_q: bool,
                next_action_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Q̄(o', a*) per row [B], a* the argmax of the online (double) or the target network's Q over the legal
    actions of o' (all without ``next_action_mask``), valued by the target network; no grad."""
    with torch.no_grad():
        selector = masked_q(q_values=q_next_online if double_q else q_next_target, action_mask=next_action_mask)
        return q_next_target.gather(1, selector.argmax(dim=1, keepdim=True)).squeeze(1)


def initial_messages(*, algo: ValueAlgorithm, spaces: EnvSpaces, state_dim: int, num_agents: int,
                     seed: int) -> dict[str, Message]:
    """Version 0 of a policy: ``weights`` (the Q-network, ε at its initial value; header ``grad_steps`` 0).

    The target network of version 0 is the weights themselves (the learner reads ``weights/<p>/0`` when
    ``target/<p>/0`` is absent), so there is no separate ``target`` message. ``state_dim`` and
    ``num_agents`` are unused (neither IQL nor VDN has a centralised network). The same as the generic
    version-0 weights plus the ``grad_steps`` header (the learner reads a missing one as 0).
    """
    from nimbus.models.weights import model_to_message  # on first use: importing the config loads no data code

    del state_dim, num_agents
    with torch.random.fork_rng(devices=[]):   # seeded, the caller's RNG untouched
        torch.manual_seed(seed)
        message = model_to_message(model=algo.make_policy(spaces=spaces), version=0)
    message.header["grad_steps"] = 0
    return {"weights": message}
