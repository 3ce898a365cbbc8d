"""IMPALA / IMPACT as an ``Algorithm``.

The network is the shared actor-critic (``models.mlp.ActorCritic``: separate policy and value MLPs,
as Stellaris Table II; ``CNNActorCritic`` for uint8 frame stacks). IMPACT adds a frozen copy as its
target network, refreshed by the learner. The model also carries ``num_grad_steps`` (a buffer), so
the target-refresh cadence survives a learner restart and travels with checkpoints.

Box actions are an unbounded diagonal Gaussian: the actor clips them for the env
(``models.distributions.clip_action``) and stores the raw sample, so the stored behaviour log-prob
matches the stored action.

Batches are time-major [T, B, ...]. ``postprocess`` turns the buffer's flat rows (each (actor, env)
fragment a contiguous, time-ordered run of ``rollout_length`` rows) into that layout.

Example::

    algo = Impala(config=ImpalaConfig(variant="impact"))
    model = algo.make_model(spaces=spaces)
    out = algo.act(model=model, obs=torch.as_tensor(obs), explore=True)
    out.extras["behaviour_log_prob"]        # [B] float32, written with the step
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from nimbus.algos.base import ActOutput, KeySpec, LossOutput
from nimbus.algos.dqn.algorithm import transition_spec
from nimbus.algos.impala.config import ImpalaConfig
from nimbus.algos.impala.learner import ImpalaUpdateStats, impala_update
from nimbus.algos.impala.loss import batch_loss
from nimbus.algos.impala.model import ImpalaModel
from nimbus.algos.step import make_adam, param_device
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.qnet import make_actor_critic


class Impala:
    name = "impala"

    def __init__(self, *, config: ImpalaConfig) -> None:
        self.config = config

    def make_model(self, *, spaces: EnvSpaces) -> ImpalaModel:
        net = make_actor_critic(observation_space=spaces.observation, action_space=spaces.action,
                                hidden_sizes=self.config.hidden_sizes, activation=self.config.activation)
        return ImpalaModel(net=net, with_target=self.config.variant == "impact")

    def make_optimizer(self, *, model: torch.nn.Module) -> torch.optim.Optimizer:
        return make_adam(params=model.net.parameters(), lr=self.config.lr, device=param_device(model))

    def act(self, *, model: torch.nn.Module, obs: torch.Tensor, explore: bool) -> ActOutput:
        """Samples a ~ π(·|s) (``explore``) or takes the mode; extras: log π(a|s) as ``behaviour_log_prob``."""
        with torch.no_grad():
            actions, log_prob, _ = model.net.act(obs, explore=explore)
        dtype = np.int64 if model.net.discrete else np.float32
        return ActOutput(actions=actions.numpy().astype(dtype),
                         extras={"behaviour_log_prob": log_prob.numpy().astype(np.float32)})

    def buffer_spec(self, *, spaces: EnvSpaces) -> dict[str, KeySpec]:
        if isinstance(spaces.action, gym.spaces.Discrete):
            action = KeySpec(shape=(), dtype="int64")
        else:
            action = KeySpec(shape=tuple(spaces.action.shape), dtype="float32")
        return {**transition_spec(spaces=spaces, action=action),
                "behaviour_log_prob": KeySpec(shape=(), dtype="float32")}

    def postprocess(self, *, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Flat rows [N, ...] → time-major [T, N/T, ...] (T = rollout_length); [T, B] batches pass as is.

        V-trace itself needs the learner's current (and target) policy, so it runs in ``loss``.
        """
        if batch["rewards"].dim() == 2:
            return batch
        n, t = batch["rewards"].shape[0], self.config.rollout_length
        if n % t:
            raise ValueError(f"{n} rows are not whole fragments of rollout_length={t}")
        return {k: v.reshape(n // t, t, *v.shape[1:]).transpose(0, 1) for k, v in batch.items()}

    def loss(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> LossOutput:
        out = batch_loss(model=model, batch=batch, config=self.config)  # type: ignore[arg-type]
        return LossOutput(loss=out.loss, stats=out.stats)

    def update(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
               progress: float, generator: torch.Generator) -> ImpalaUpdateStats:
        """One gradient step on a time-major batch (``impala_update``); progress/generator unused."""
        return impala_update(model=model, optimizer=optimizer, batch=batch,  # type: ignore[arg-type]
                             config=self.config)
