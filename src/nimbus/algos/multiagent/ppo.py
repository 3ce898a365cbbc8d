"""IPPO and MAPPO as one `MultiAgentPPO` algorithm (MARLess §4.2, Fig. 5): math only, no Store, no env.

The learner split: MAPPO runs ``postprocess`` (builds the centralised critic inputs), ``critic`` (GAE with
the critic's values, then fits the critic) and ``policy`` (the clipped surrogate); IPPO runs ``critic`` and
``policy``, its critic reading the agent's own observation. The functions that do this are in
marless/learner.py; this module gives them the networks, the critic inputs and the losses.

Example::

    algo = make_multiagent_algo(config=IPPOConfig())
    policy = algo.make_policy(spaces=spaces)
    step = algo.act(model=policy, obs=torch.as_tensor(obs), explore=True)   # extras {"logp": ...}
"""

from __future__ import annotations

import numpy as np
import torch

from nimbus.algos.base import ActOutput, LossOutput
from nimbus.algos.multiagent.config import MultiAgentPPOConfig
from nimbus.algos.multiagent.networks import PolicyNet, ValueNet
from nimbus.algos.ppo.loss import normalize_advantages, policy_loss
from nimbus.algos.step import make_adam, param_device
from nimbus.envs.spaces import EnvSpaces

ACTION_MASK = "action_mask"   # the batch column of an env's action masks (envs/masks.py)
POLICY_STATS = ("policy_loss", "entropy", "approx_kl", "clip_fraction")   # policy_terms' statistics, in order


class MultiAgentPPO:
    """PPO with a separate critic; ``centralised``: the critic input is state ⊕ one-hot(agent index) (MAPPO)."""

    on_policy = True

    def __init__(self, *, config: MultiAgentPPOConfig) -> None:
        self.config = config
        self.name: str = config.name  # type: ignore[attr-defined]
        self.centralised = self.name == "mappo"
        self.roles: tuple[str, ...] = ("postprocess", "critic", "policy") if self.centralised else ("critic", "policy")

    def make_policy(self, *, spaces: EnvSpaces) -> PolicyNet:
        """A fresh policy network (initialised from torch's global RNG: seed it first)."""
        return PolicyNet(observation_space=spaces.observation, action_space=spaces.action,
                         hidden_sizes=self.config.hidden_sizes, activation=self.config.activation)

    def critic_input_dim(self, *, spaces: EnvSpaces, state_dim: int, num_agents: int) -> int:
        """Own observation size (IPPO) or state_dim + num_agents (MAPPO)."""
        if self.centralised:
            return state_dim + num_agents
        return int(np.prod(spaces.observation.shape))

    def make_critic(self, *, spaces: EnvSpaces, state_dim: int, num_agents: int) -> ValueNet:
        return ValueNet(in_features=self.critic_input_dim(spaces=spaces, state_dim=state_dim, num_agents=num_agents),
                        hidden_sizes=self.config.critic_hidden_sizes, activation=self.config.activation)

    def make_optimizer(self, *, model: torch.nn.Module, lr: float) -> torch.optim.Optimizer:
        """Adam: fused on CUDA and the CPU, foreach elsewhere (algos/step.py ``make_adam``)."""
        return make_adam(params=model.parameters(), lr=lr, eps=self.config.adam_eps, device=param_device(model))

    def act(self, *, model: torch.nn.Module, obs: torch.Tensor, explore: bool,
            action_mask: torch.Tensor | None = None) -> ActOutput:
        """Batch-first actions (unclipped for Box spaces) with extras ``logp`` (float32), as numpy; with
        ``action_mask`` (Discrete), only allowed actions, and ``logp`` of the masked distribution."""
        with torch.no_grad():
            action, log_prob = model.act(torch.as_tensor(obs), explore=explore, action_mask=action_mask)
        return ActOutput(actions=action.numpy(), extras={"logp": log_prob.float().numpy()})

    def loss(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> LossOutput:
        """The policy loss (clipped surrogate − ent_coef · entropy) on ``batch`` (obs, actions, logp, advantages;
        ``action_mask`` when the env gives masks: log-prob and entropy of the masked distribution the actor sampled)
        at the nominal clip; the advantages normalised over ``batch`` when configured. Its negation is the
        objective whose Hessian the convexity probe reads."""
        return self.policy_loss(model=model, batch=batch, clip_coef=self.config.clip_coef)

    def policy_loss(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor], clip_coef: float) -> LossOutput:
        loss, stats = self.policy_terms(model=model, batch=batch, clip_coef=clip_coef)
        return LossOutput(loss=loss, stats=dict(zip(POLICY_STATS, stats.tolist(), strict=True)))

    def policy_terms(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor],
                     clip_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``policy_loss`` without a host read: the loss and its statistics as one detached tensor in
        ``POLICY_STATS`` order, left on the device (the learner reads them once per update)."""
        new_log_prob, entropy = model.evaluate(batch["obs"], actions=batch["actions"],
                                               action_mask=batch.get(ACTION_MASK))   # the actor's distribution
        advantages = batch["advantages"]
        if self.config.normalize_advantages:
            advantages = normalize_advantages(advantages)
        pg_loss, approx_kl, clip_fraction = policy_loss(new_log_prob=new_log_prob, old_log_prob=batch["logp"],
                                                        advantages=advantages, clip_coef=clip_coef)
        entropy_mean = entropy.mean()
        stats = torch.stack([pg_loss.detach(), entropy_mean.detach(), approx_kl, clip_fraction])
        return pg_loss - self.config.ent_coef * entropy_mean, stats


def centralised_inputs(*, state: np.ndarray, agent_index: np.ndarray, num_agents: int) -> np.ndarray:
    """MAPPO's critic input per row: state ⊕ one-hot(agent_index), float32 [R, state_dim + num_agents]."""
    one_hot = np.zeros((len(agent_index), num_agents), dtype=np.float32)
    one_hot[np.arange(len(agent_index)), agent_index.astype(np.int64)] = 1.0
    return np.concatenate([np.asarray(state, dtype=np.float32).reshape(len(agent_index), -1), one_hot], axis=1)
