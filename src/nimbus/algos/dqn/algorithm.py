"""DQN as an ``Algorithm``: model (online + target Q-network, ε as a buffer), ε-greedy act, loss.

ε lives in the model as a buffer, so it travels with the weights the learner broadcasts: ``update``
sets it from the run's progress (linear schedule over SB3's ``exploration_fraction`` of the run);
``set_exploration`` does the same for a caller without a learner. The gradient-step count is a
buffer too, so the target-copy cadence survives a learner restart.

Example::

    algo = DQN(config=DQNConfig())
    model = algo.make_model(spaces=spaces)
    out = algo.act(model=model, obs=torch.as_tensor(obs), explore=True)     # ε-greedy
    stats = algo.update(model=model, optimizer=algo.make_optimizer(model=model),
                        batch=algo.postprocess(batch=rows), progress=step / total, generator=g)
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from nimbus.algos.base import ActOutput, KeySpec, LossOutput
from nimbus.algos.dqn.config import DQNConfig
from nimbus.algos.dqn.learner import DQNUpdate, DQNUpdateStats, dqn_update
from nimbus.algos.dqn.loss import batch_td_loss, epsilon_greedy, linear_schedule, one_step_targets
from nimbus.algos.dqn.model import DQNModel
from nimbus.algos.step import make_adam, param_device
from nimbus.envs.spaces import EnvSpaces
from nimbus.models.custom import build_user_network
from nimbus.models.qnet import QNetwork


def transition_spec(*, spaces: EnvSpaces, action: KeySpec) -> dict[str, KeySpec]:
    """The per-step keys every off-policy actor writes (DQN, SAC): s, a, r, s', terminated, truncated."""
    obs_space = spaces.observation
    obs = KeySpec(shape=tuple(obs_space.shape), dtype=np.dtype(obs_space.dtype).name)
    return {
        "obs": obs,
        "actions": action,
        "rewards": KeySpec(shape=(), dtype="float32"),
        "next_obs": obs,
        "terminated": KeySpec(shape=(), dtype="bool"),
        "truncated": KeySpec(shape=(), dtype="bool"),
    }


class DQN:
    name = "dqn"

    def __init__(self, *, config: DQNConfig) -> None:
        self.config = config

    def make_model(self, *, spaces: EnvSpaces) -> DQNModel:
        if not isinstance(spaces.action, gym.spaces.Discrete):
            raise TypeError(f"DQN needs a Discrete action space, got {spaces.action}")
        if self.config.model is not None:  # the user's Q-network, its contract checked (models/custom.py)
            q = build_user_network(ref=self.config.model, kwargs=self.config.model_kwargs, spaces=spaces, algo="dqn")
        else:
            q = QNetwork(observation_space=spaces.observation, num_actions=int(spaces.action.n),
                         hidden_sizes=self.config.hidden_sizes)
        return DQNModel(q=q, epsilon=self.config.exploration_initial_eps)

    def make_optimizer(self, *, model: torch.nn.Module) -> torch.optim.Optimizer:
        return make_adam(params=model.q.parameters(), lr=self.config.lr, device=param_device(model))

    def act(self, *, model: torch.nn.Module, obs: torch.Tensor, explore: bool) -> ActOutput:
        """Greedy actions; with ``explore``, each replaced by a uniform one with probability ε."""
        with torch.no_grad():
            q_values = model.q(obs)
        actions = epsilon_greedy(q_values=q_values, epsilon=float(model.epsilon)) if explore else q_values.argmax(dim=1)
        return ActOutput(actions=actions.numpy().astype(np.int64))

    def buffer_spec(self, *, spaces: EnvSpaces) -> dict[str, KeySpec]:
        return transition_spec(spaces=spaces, action=KeySpec(shape=(), dtype="int64"))

    def postprocess(self, *, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Adds one-step ``returns_n``/``discount_n`` when the replay did not compute n-step ones."""
        if "returns_n" in batch:
            return batch
        if self.config.n_step != 1:
            raise ValueError(f"n_step={self.config.n_step} needs an n-step replay that provides returns_n")
        returns_n, discount_n = one_step_targets(rewards=batch["rewards"], terminated=batch["terminated"],
                                                 gamma=self.config.gamma)
        return {**batch, "returns_n": returns_n, "discount_n": discount_n}

    def loss(self, *, model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> LossOutput:
        out = batch_td_loss(model=model, batch=batch, config=self.config)  # type: ignore[arg-type]
        return LossOutput(loss=out.loss, stats={
            "losses/td_loss": float(out.loss.detach()),
            "losses/q_values": float(out.q_taken.mean()),
            "losses/td_abs": float(out.td_errors.abs().mean()),
        })

    def update(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
               progress: float, generator: torch.Generator) -> DQNUpdateStats:
        """``dqn_update`` (one gradient step per ``batch_size`` rows), then ε for ``progress``.

        The per-row TD errors for PER come from ``dqn_update`` directly. ``generator`` is unused: the
        replay already sampled the rows at random.
        """
        result = dqn_update(model=model, optimizer=optimizer, batch=batch, config=self.config,  # type: ignore[arg-type]
                            with_td_errors=False)
        self.set_exploration(model=model, progress=progress)  # type: ignore[arg-type]
        return result.stats

    def update_with_td_errors(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                              batch: dict[str, torch.Tensor], progress: float,
                              generator: torch.Generator) -> DQNUpdate:
        """``update`` that also returns the per-row TD errors (batch order), for PER priorities."""
        result = dqn_update(model=model, optimizer=optimizer, batch=batch, config=self.config)  # type: ignore[arg-type]
        self.set_exploration(model=model, progress=progress)  # type: ignore[arg-type]
        return result

    # --- schedules over the run's progress ∈ [0, 1] ---

    def epsilon_at(self, *, progress: float) -> float:
        c = self.config
        return linear_schedule(start=c.exploration_initial_eps, end=c.exploration_final_eps,
                               fraction=c.exploration_fraction, progress=progress)

    def set_exploration(self, *, model: DQNModel, progress: float) -> float:
        eps = self.epsilon_at(progress=progress)
        model.epsilon.fill_(eps)
        return eps

    def per_beta_at(self, *, progress: float) -> float:
        """PER's importance-weight exponent, β0 → 1 linearly over the run (Schaul et al. 2016)."""
        return linear_schedule(start=self.config.per_beta0, end=1.0, fraction=1.0, progress=progress)

    def priorities(self, *, td_errors: np.ndarray) -> np.ndarray:
        """PER priorities for the sum tree: (|δ| + ε)^α."""
        c = self.config
        return np.power(np.abs(np.asarray(td_errors, dtype=np.float64)) + c.per_eps, c.per_alpha)
