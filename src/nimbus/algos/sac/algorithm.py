"""SAC as an ``Algorithm``: squashed Gaussian actor, twin critics with Polyak targets, learned log α.

The actor works in [-1, 1]; ``act`` rescales to the Box bounds (a_env = a · scale + bias) and the
buffer keeps env-scale actions, which the loss maps back to [-1, 1] for the critics. Log-probs (and
the target entropy −|A|) are those of the [-1, 1] action, as in Stable-Baselines3, so α does not
depend on the bounds.

Example::

    algo = SAC(config=SACConfig())
    model = algo.make_model(spaces=spaces)                       # bounded Box actions only
    out = algo.act(model=model, obs=torch.as_tensor(obs), explore=True)
    env.step(out.actions)                                        # within the action bounds
"""

from __future__ import annotations

import numpy as np
import torch

from nimbus.algos.base import ActOutput, KeySpec, LossOutput
from nimbus.algos.dqn.algorithm import transition_spec
from nimbus.algos.sac.config import SACConfig
from nimbus.algos.sac.learner import SACUpdateStats, make_optimizer, sac_update
from nimbus.algos.sac.loss import batch_losses
from nimbus.algos.sac.model import SACModel
from nimbus.envs.spaces import EnvSpaces


class SAC:
    name = "sac"

    def __init__(self, *, config: SACConfig) -> None:
        self.config = config

    def make_model(self, *, spaces: EnvSpaces) -> SACModel:
        return SACModel(spaces=spaces, config=self.config)

    def make_optimizer(self, *, model: torch.nn.Module) -> torch.optim.Optimizer:
        """One Adam, parameter groups critic / actor / alpha (see ``learner.make_optimizer``)."""
        return make_optimizer(model=model, config=self.config)  # type: ignore[arg-type]

    def act(self, *, model: torch.nn.Module, obs: torch.Tensor, explore: bool) -> ActOutput:
        """a ~ π(·|s) (``explore``) or tanh(μ(s)), rescaled to the action bounds."""
        with torch.no_grad():
            actions, _ = model.actor.sample(obs, deterministic=not explore)
            env_actions = model.to_env_actions(actions)
        return ActOutput(actions=env_actions.numpy().astype(np.float32))

    def buffer_spec(self, *, spaces: EnvSpaces) -> dict[str, KeySpec]:
        return transition_spec(spaces=spaces, action=KeySpec(shape=tuple(spaces.action.shape), dtype="float32"))

    def postprocess(self, *, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return batch

    def loss(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> LossOutput:
        """Critic + actor + α losses as one scalar (their gradients touch disjoint parameters)."""
        out = batch_losses(model=model, batch=batch, config=self.config)  # type: ignore[arg-type]
        return LossOutput(loss=out.total, stats=out.stats)

    def update(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
               progress: float, generator: torch.Generator) -> SACUpdateStats:
        """``sac_update``: one gradient step per ``batch_size`` rows; progress unused. The policy's noise
        (``torch.randn_like`` in the actor's ``sample``) draws from torch's global generator, so the update
        runs under a fork of it seeded from ``generator`` (the learner seeds that per version): same seed,
        same update."""
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return sac_update(model=model, optimizer=optimizer, batch=batch, config=self.config)  # type: ignore[arg-type]
