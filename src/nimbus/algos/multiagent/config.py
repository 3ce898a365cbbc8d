"""Frozen configs of the on-policy multi-agent algorithms, IPPO and MAPPO (the ``algo:`` section, MARLess §4.2).

Both are PPO with a separate critic network: IPPO's critic sees the agent's own observation, MAPPO's the
global state concatenated with a one-hot of the agent's index (a centralised critic shared by the agents
of one policy). Defaults follow the MAPPO paper's MPE settings (Yu et al. 2022, Table 13: lr 7e-4,
gamma 0.99, GAE λ 0.95, clip 0.2, entropy 0.01, 64-unit tanh MLPs), with 10 epochs of 4 minibatches.

Example::

    IPPOConfig(lr=5e-4).model_dump(mode="json")     # what the learner and actor requests carry
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nimbus.config.base import ConfigSection
from nimbus.config.fields import Widths

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
