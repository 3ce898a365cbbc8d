"""The ``marless:`` config section: MARLess's dynamic learner sharing and per-policy actor scaling (MARLess §4.3-4.4).

Read only when ``train.workflow: marless`` (marless/workflow.py, docs/marless.md). Policies are named
after agents (``p_<agent>``); ``sharing`` maps agents onto fewer of them, ``scaling`` sets the actor count.
Each ablation arm is one line: ``sharing: none | static | full | marless`` and ``scaling: fixed | marless``;
``policy_mapping`` maps agents onto policies of any name, ``agent_id`` conditions shared policies on the agent.

Example (YAML)::

    train: {workflow: marless}
    algo: {name: ippo}
    env: {id: "mpe2:simple_spread_v3", kwargs: {N: 6}}
    marless: {sharing: marless, gamma: -0.3, scaling: marless, i_max: 8}
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from nimbus.schema.base import ConfigSection
from nimbus.schema.bounds import MAX_ACTORS


class MarlessConfig(ConfigSection):
    sharing: Literal["none", "static", "full", "marless"] = "none"
    """none: one policy per agent; static: one policy for all agents with the same spaces from round 0; full: one
    policy for every agent (full parameter sharing; all agents need the same spaces); marless: the
    performance-decrease detector switches sharing on and off (§4.3)"""
    window: int = Field(default=10, ge=2)
    """W: rounds in the detector's tolerant window (least-squares slope of the global normalised reward)"""
    gamma: float = -0.3
    """γ: toggle sharing when the window is full and its slope k < γ, k in round-to-round noise standard deviations
    per round (docs/marless.md, "The detector's scale"): −0.3 fires on a real decrease and on about 0.6 % of flat
    windows (W = 10); the paper's 0.1 (MPE) fires unless the reward rises, its −1 (SMAC) only on a collapse"""
    pca_dims: int = Field(default=4, ge=1)
    """PCA components of the agents' (observation, action) samples before the per-agent KDE"""
    kde_bandwidth: float = Field(default=0.5, gt=0)
    """Gaussian KDE bandwidth in the PCA space (after whitening to unit variance)"""
    kl_samples: int = Field(default=256, ge=16)
    """Monte-Carlo samples per KL(p_i ‖ p_j) estimate"""
    scaling: Literal["fixed", "marless"] = "fixed"
    """fixed: actors.scaling's count every round; marless: per-policy I_j from each policy's convexity (§4.4)"""
    i_max: int = Field(default=8, ge=1, le=MAX_ACTORS)
    """I_max: the most actor functions a round uses (the paper's 50, scaled to this machine)"""
    i_min: int | None = Field(default=None, ge=1, le=MAX_ACTORS)
    """I_min (default I_max / N agents, at least 1)"""
    beta: float = Field(default=0.5, ge=0, le=1)
    """β in I_threshold = β (I_max − I_min): at or above it the round takes max_j I_j, below it the mean"""
    scaling_window: int = Field(default=10, ge=4)
    """rounds of each policy's convexity C kept for S_j = clip((C_max − C_t − 2σ) / (C_max − C_min), 0, 1), σ the
    probe's round-to-round noise (docs/marless.md); at least 4: σ needs three values before the newest"""
    agent_policy: dict[str, str] = Field(default_factory=dict)
    """initial agent → policy map (values ``p_<agent>``; empty: one policy per agent); checked against the env's
    agents when the run starts (an unknown agent or policy exits 2)"""
    policy_mapping: dict[str, str] = Field(default_factory=dict)
    """agent → policy of any name for the whole run (agents not listed keep ``p_<agent>``); agents mapped to one
    name need the same spaces; with ``sharing: none`` only (the map is then the run's map)"""
    agent_id: bool | None = None
    """append a one-hot of the agent's index to every policy's input (and IPPO's critic's); null: on whenever
    agents may share a policy (``sharing`` other than none, or a ``policy_mapping``)"""

    @model_validator(mode="after")
    def _bounds(self) -> MarlessConfig:
        if self.i_min is not None and self.i_min > self.i_max:
            raise ValueError(f"i_min ({self.i_min}) must be ≤ i_max ({self.i_max})")
        for agent, policy in self.agent_policy.items():
            if not policy.startswith("p_"):
                raise ValueError(f"agent_policy.{agent}: policies are named p_<agent> (got {policy!r})")
        if self.policy_mapping and self.sharing != "none":
            raise ValueError(f"policy_mapping: sets the run's map itself, so it needs sharing: none "
                             f"(got sharing: {self.sharing})")
        if self.policy_mapping and self.agent_policy:
            raise ValueError("policy_mapping: give either policy_mapping or agent_policy, not both")
        for agent, policy in self.policy_mapping.items():
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", policy):
                raise ValueError(f"policy_mapping.{agent}: a policy name is letters, digits, _ . - (got {policy!r})")
        return self


def check_multiagent_env(*, env: Any) -> None:
    """The ``env:`` keys a multi-agent run cannot honour (called from config/rules.py's marless check, so a
    config is refused when it loads, exit 2): ``env.wrappers`` are gymnasium wrappers, which the PettingZoo
    actors do not apply."""
    if env.wrappers:
        raise ValueError(f"env.wrappers: {list(env.wrappers)} are gymnasium wrappers, for single-agent envs; "
                         "train.workflow: marless does not apply them. Wrap the PettingZoo env inside your own "
                         "factory (env.id: pkg.module:factory, e.g. with pettingzoo.utils.wrappers or supersuit) "
                         "and drop env.wrappers")
