"""Frozen configs of the multi-agent algorithms (the ``algo:`` section, MARLess §4.2): IPPO and MAPPO; IQL, VDN and
QMIX (``ValueConfigBase``). Torch-free, like every config section: validating a config imports no torch.

IPPO and MAPPO are both PPO with a separate critic network: IPPO's critic sees the agent's own observation, MAPPO's the
global state concatenated with a one-hot of the agent's index (a centralised critic shared by the agents
of one policy). Defaults follow the MAPPO paper's MPE settings (Yu et al. 2022, Table 13: lr 7e-4,
gamma 0.99, GAE λ 0.95, clip 0.2, entropy 0.01, 64-unit tanh MLPs), with 10 epochs of 4 minibatches.

Example::

    IPPOConfig(lr=5e-4).model_dump(mode="json")     # what the learner and actor requests carry
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from nimbus.schema.base import ConfigSection
from nimbus.schema.fields import Widths, check_batch_fits

Schedule = Literal["constant", "linear"]


class MultiAgentPPOConfig(ConfigSection):
    """The fields IPPO and MAPPO share."""

    gamma: float = Field(default=0.99, gt=0.0, le=1.0)
    """Discount factor."""
    gae_lambda: float = Field(default=0.95, ge=0.0, le=1.0)
    """GAE λ."""
    clip_coef: float = Field(default=0.2, gt=0.0)
    """PPO's ratio clip ε."""
    lr: float = Field(default=7e-4, gt=0.0)
    """Policy network learning rate (Adam)."""
    critic_lr: float = Field(default=7e-4, gt=0.0)
    """Critic network learning rate (Adam)."""
    lr_schedule: Schedule = "constant"
    """linear: both learning rates times (1 − progress)."""
    num_epochs: int = Field(default=10, gt=0)
    """Passes over the round's rows, for the policy and for the critic."""
    num_minibatches: int = Field(default=4, gt=0)
    """Minibatches per epoch (the rows of a policy vary with the agents mapped to it, so a count, not a size)."""
    ent_coef: float = Field(default=0.01, ge=0.0)
    """Entropy bonus in the policy loss."""
    vf_clip: float | None = Field(default=None, gt=0.0)
    """Value clipping around the old values; None: unclipped squared error."""
    max_grad_norm: float = Field(default=0.5, gt=0.0)
    """Gradient-norm clip, policy and critic each."""
    normalize_advantages: bool = True
    """Normalise advantages per minibatch."""
    value_norm: bool = True
    """Fit the critic to returns standardised by running statistics (MAPPO's ValueNorm); False: raw returns."""
    hidden_sizes: Widths = (64, 64)
    """Policy network hidden widths."""
    critic_hidden_sizes: Widths = (64, 64)
    """Critic network hidden widths."""
    activation: Literal["tanh", "relu"] = "tanh"
    """Hidden activation of both networks."""
    adam_eps: float = Field(default=1e-5, gt=0.0)
    """Adam's ε."""


class IPPOConfig(MultiAgentPPOConfig):
    """Independent PPO: each policy's critic sees its agent's own observation."""

    name: Literal["ippo"] = "ippo"
    """The algorithm."""


class MAPPOConfig(MultiAgentPPOConfig):
    """MAPPO: the critic sees the global state ⊕ one-hot(agent index)."""

    name: Literal["mappo"] = "mappo"
    """The algorithm."""


class ValueConfigBase(ConfigSection):
    """The fields IQL, VDN and QMIX share. Defaults follow EPyMARL's MPE settings for IQL/VDN (lr 5e-4,
    γ 0.99, 64-unit hidden layers, ε 1 → 0.05, hard target copy every 200 updates), with DQN's Huber
    loss and gradient-norm clip (algos/dqn/config.py)."""

    lr: float = Field(5e-4, gt=0)
    """Adam learning rate."""
    gamma: float = Field(0.99, ge=0, le=1)
    """Discount."""
    batch_size: int = Field(256, ge=1)
    """Rows per gradient step (IQL: one agent's transitions; VDN, QMIX: joint team transitions)."""
    gradient_steps: int = Field(50, ge=1)
    """Gradient steps per learner invocation (IQL: one invocation per policy a round; VDN, QMIX: one for the team,
    each step updating every policy)."""
    replay_capacity: int = Field(50_000, ge=1)
    """Rows the replay holds: the newest rows of the last rounds' batches; older ones are dropped."""
    learning_starts: int = Field(1_000, ge=0)
    """Replay rows needed before the first gradient step (before that the invocation publishes v+1 with
    only ε updated)."""
    exploration_initial_eps: float = Field(1.0, ge=0, le=1)
    """ε at the start of the run."""
    exploration_final_eps: float = Field(0.05, ge=0, le=1)
    """ε after ``exploration_fraction`` of the run."""
    exploration_fraction: float = Field(0.5, ge=0, le=1)
    """Fraction of the run (progress 0..1) over which ε decays linearly."""
    target_update_period: int = Field(200, ge=1)
    """Gradient steps between hard copies of the online network into the target, counted across
    invocations."""
    double_q: bool = True
    """Double DQN targets (the online network picks a', the target network values it)."""
    huber_delta: float = Field(10.0, gt=0)
    """Huber loss threshold (MPE returns are tens in magnitude; a large δ is close to MSE)."""
    max_grad_norm: float | None = Field(10.0, gt=0)
    """Gradient-norm clip (VDN, QMIX: one norm over all the team's parameters); None disables it."""
    hidden_sizes: Widths = (64, 64)
    """The Q-network's MLP torso."""

    @model_validator(mode="after")
    def _check(self) -> ValueConfigBase:
        check_batch_fits(batch_size=self.batch_size, capacity=self.replay_capacity, capacity_key="replay_capacity")
        return self


class IQLConfig(ValueConfigBase):
    """Independent Q-learning: one DQN per policy on its own agents' transitions."""

    name: Literal["iql"] = "iql"
    """The algorithm."""


class VDNConfig(ValueConfigBase):
    """Value decomposition: Q_tot = Σ over the team's agents of their Q values, one TD loss."""

    name: Literal["vdn"] = "vdn"
    """The algorithm."""


class QMIXConfig(ValueConfigBase):
    """QMIX: Q_tot from a monotonic mixing network over the env's global state, one TD loss on it.

    Mixer sizes as pymarl's defaults (``mixing_embed_dim`` 32, ``hypernet_embed`` 64)."""

    name: Literal["qmix"] = "qmix"
    """The algorithm."""
    mixing_embed_dim: int = Field(32, ge=1)
    """E: the mixing network's hidden width."""
    hypernet_embed: int = Field(64, ge=1)
    """The hypernetworks' hidden width (two-layer hypernetworks for the mixing weights)."""
