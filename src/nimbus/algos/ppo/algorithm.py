"""PPO as an `Algorithm` (algos/base.py): model, acting, buffer columns, GAE post-processing, loss.

Example (one on-policy round, single process)::

    algo = PPO(config=PPOConfig())
    model = algo.make_model(spaces=EnvSpaces(observation=env.observation_space, action=env.action_space))
    step = algo.act(model=model, obs=torch.as_tensor(obs), explore=True)
    opt = algo.make_optimizer(model=model)
    ...                                             # fill the columns of algo.buffer_spec(spaces=...)
    batch = algo.postprocess(batch=rows)            # + advantages, returns
    stats = algo.update(model=model, optimizer=opt, batch=batch, progress=p, generator=g)  # ppo_update
"""

from __future__ import annotations

import gymnasium as gym
import torch

from nimbus.algos.base import ActOutput, KeySpec, LossOutput
from nimbus.algos.compiled import CompileMode
from nimbus.algos.gae import compute_gae
from nimbus.algos.ppo.config import PPOConfig
from nimbus.algos.ppo.learner import UpdateStats, minibatch_loss, ppo_update
from nimbus.algos.step import make_adam, param_device
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.custom import CustomPolicyValue, build_user_network
from nimbus.models.mlp import ActorCritic, PolicyValueModel


class PPO:
    """Proximal Policy Optimisation with GAE(λ) and the clipped surrogate objective."""

    name = "ppo"

    def __init__(self, *, config: PPOConfig, compile_mode: CompileMode = "off") -> None:
        self.config = config
        self.compile_mode = compile_mode  # the minibatch loss compiled or not (algos/compiled.py)

    def make_model(self, *, spaces: EnvSpaces) -> PolicyValueModel:
        """A fresh ActorCritic, or ``algo.model`` wrapped (initialised from torch's global RNG: seed it first)."""
        if self.config.model is not None:  # the user's network, its contract checked (models/custom.py)
            net = build_user_network(ref=self.config.model, kwargs=self.config.model_kwargs, spaces=spaces, algo="ppo")
            return CustomPolicyValue(net=net, action_space=spaces.action)
        return ActorCritic(
            observation_space=spaces.observation,
            action_space=spaces.action,
            hidden_sizes=self.config.hidden_sizes,
            activation=self.config.activation,
        )

    def make_optimizer(self, *, model: torch.nn.Module) -> torch.optim.Optimizer:
        """Adam at the configured lr and eps (ppo_update re-sets lr from the schedule on each update): fused on CUDA
        and the CPU, foreach elsewhere (`make_adam`)."""
        return make_adam(params=model.parameters(), lr=self.config.lr, eps=self.config.adam_eps,
                         device=param_device(model))

    def act(self, *, model: torch.nn.Module, obs: torch.Tensor, explore: bool) -> ActOutput:
        """Batch-first actions (unclipped for Box spaces) with extras log_prob and values, as numpy."""
        with torch.no_grad():
            action, log_prob, value = model.act(torch.as_tensor(obs), explore=explore)
        return ActOutput(actions=action.numpy(), extras={"log_prob": log_prob.numpy(), "values": value.numpy()})

    def buffer_spec(self, *, spaces: EnvSpaces) -> dict[str, KeySpec]:
        """Per-step columns the actor writes; rows of one (actor, env) are contiguous and in time order."""
        if isinstance(spaces.action, gym.spaces.Discrete):
            action = KeySpec(shape=(), dtype="int64")
        else:
            action = KeySpec(shape=tuple(spaces.action.shape), dtype="float32")
        scalar = KeySpec(shape=(), dtype="float32")
        flag = KeySpec(shape=(), dtype="bool")
        return {
            "obs": KeySpec(shape=tuple(spaces.observation.shape), dtype="float32"),
            "actions": action,
            "log_prob": scalar,
            "values": scalar,
            "next_values": scalar,  # V(s_{t+1}); V(final obs) on truncation; V(next obs) at a fragment's end
            "rewards": scalar,
            "terminated": flag,
            "truncated": flag,
            "cut": flag,  # terminated or truncated or last row of the fragment
        }

    def postprocess(self, *, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A new dict: `batch` plus float32 ``advantages`` and ``returns`` (GAE, `compute_gae`)."""
        advantages, returns = compute_gae(
            rewards=batch["rewards"],
            values=batch["values"].float(),
            next_values=batch["next_values"],
            terminated=batch["terminated"],
            cut=batch["cut"],
            gamma=self.config.gamma,
            gae_lambda=self.config.gae_lambda,
        )
        return {**batch, "advantages": advantages, "returns": returns}

    def loss(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> LossOutput:
        """The PPO loss over the whole (post-processed) batch at the configured clip_coef."""
        return minibatch_loss(model=model, batch=batch, config=self.config, clip_coef=self.config.clip_coef)

    def update(
        self,
        *,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: dict[str, torch.Tensor],
        progress: float,
        generator: torch.Generator,
    ) -> UpdateStats:
        """PPO's own minibatch epochs on a post-processed batch (`ppo_update` with this config)."""
        return ppo_update(model=model, optimizer=optimizer, batch=batch, config=self.config, progress=progress,
                          generator=generator, compile_mode=self.compile_mode)
