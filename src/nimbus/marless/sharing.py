"""MARLess's dynamic learner sharing (MARLess §4.3): detect a performance decrease, measure how alike the
agents behave, group them, and pick each group's base model.

* ``PerformanceDetector``: each agent's round reward min-max normalised over that agent's history
  (r̂ = (r − min r) / (max r − min r); 0.5 while the history has no spread), the global reward = their mean,
  a tolerant window of the last W global rewards and its slope k **in noise standard deviations per round**
  (the least-squares slope over the round-to-round noise σ of the 2W global rewards before the window,
  ``noise_scaled_slope``); when the window is full and k < γ, it says *toggle* and clears the window. The
  scale is why γ = −1 (the paper's SMAC value) can fire and a flat, noisy window does not: docs/marless.md,
  "The detector's scale".
* ``similarity``: PCA of the agents' recent (observation, action) rows (fitted on all of them, whitened),
  a Gaussian KDE per agent, KL(p_i ‖ p_j) by Monte Carlo on samples of p_i; symmetrised for clustering.
* ``num_groups``: at the j-th enabling (j = 1, 2, …) N' = min(2^j, 2^(⌊log2 N⌋+1)), clipped to N.
* ``group_agents``: KMeans over the rows of the divergence matrix, only agents with the same spaces
  together (a class of n_c agents gets round(N' · n_c / N) groups, at least 1, at most n_c).
* ``base_agent``: the member with the highest convexity C = −e_max/e_min (Nitro's Hessian probe); a
  member without a probe (NaN) ranks last; ties go to the first in agent order.
* ``SharingController``: ``none`` (one policy per agent, or ``marless.policy_mapping``'s map of free names),
  ``static`` (one policy per space class from round 0), ``full`` (one policy, the first agent's, for all; the
  agents need identical spaces) or ``marless`` (the detector toggles; enabling groups the agents, disabling gives
  every agent its own policy back). Policies are named ``p_<agent>``; a group uses its base agent's policy. An
  initial map (``marless.agent_policy``) that puts an agent on a policy built for other spaces is refused when the
  controller is built, before any worker starts (marless/checks.py).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from nimbus.envs.spaces import EnvSpaces
from nimbus.marless.checks import check_full_sharing, check_policy_mapping, check_policy_spaces


def policy_of(agent: str) -> str:
    return f"p_{agent}"


def space_signature(*, spaces: EnvSpaces) -> str:
    """Agents with equal signatures can share a policy (same observation and action spaces)."""
    return f"{spaces.observation!r}|{spaces.action!r}"


NOISE_FLOOR = 0.01
"""The smallest noise k divides by, in normalised-reward units (1 % of an agent's range): a noiseless series gives
a finite k, and |k| ≤ 1 / NOISE_FLOOR = 100 (normalised rewards lie in [0, 1], so a slope does too)."""
NOISE_WINDOWS = 2
"""The round-to-round noise is measured on the NOISE_WINDOWS · W global rewards before the window (kept across
switches), so a drop inside the window does not inflate it; on all of them and the window while fewer than W."""


def least_squares_slope(values: Sequence[float]) -> float:
    """Slope of the least-squares line through (0, v0), (1, v1), …"""
    y = np.asarray(values, dtype=np.float64)
    x = np.arange(len(y), dtype=np.float64)
    x -= x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


def round_noise(values: Sequence[float]) -> float:
    """σ of a series' round-to-round noise: the sample standard deviation of its successive differences over √2
    (a linear trend cancels; a single step of D adds about D²/(2n) to σ² over n values)."""
    differences = np.diff(np.asarray(values, dtype=np.float64))
    if len(differences) < 2:
        return 0.0          # too few to tell: NOISE_FLOOR applies
    return float(np.std(differences, ddof=1)) / math.sqrt(2.0)


def noise_scaled_slope(*, window: Sequence[float], before: Sequence[float]) -> float:
    """The detector's k: the window's least-squares slope per round in units of the round-to-round noise σ of the
    global rewards ``before`` it (with the window while fewer than its length; σ at least NOISE_FLOOR): how many
    noise standard deviations the fitted line moves per round (docs/marless.md, "The detector's scale")."""
    reference = list(before) if len(before) >= len(window) else [*before, *window]
    return least_squares_slope(window) / max(round_noise(reference), NOISE_FLOOR)


class PerformanceDetector:
    """The tolerant window over the global normalised reward (module docstring)."""

    def __init__(self, *, window: int, gamma: float) -> None:
        self.window_size, self.gamma = window, gamma
        self.history: dict[str, list[float]] = {}
        self.window: list[float] = []
        self.recent: list[float] = []      # the last (NOISE_WINDOWS + 1) · W global rewards, for the noise
        self.slope = math.nan

    def normalised(self, *, agent: str, value: float) -> float:
        history = self.history[agent]
        low, high = min(history), max(history)
        return 0.5 if high == low else (value - low) / (high - low)

    def observe(self, *, agent_returns: dict[str, float]) -> bool:
        """Add one round's per-agent rewards; True when sharing should toggle now (the window is then cleared)."""
        if not agent_returns:
            return False
        for agent, value in agent_returns.items():
            self.history.setdefault(agent, []).append(float(value))
        reward = float(np.mean([self.normalised(agent=a, value=v) for a, v in agent_returns.items()]))
        self.window = (self.window + [reward])[-self.window_size:]
        self.recent = (self.recent + [reward])[-(NOISE_WINDOWS + 1) * self.window_size:]
        if len(self.window) < self.window_size:
            self.slope = math.nan
            return False
        self.slope = noise_scaled_slope(window=self.window, before=self.recent[:-len(self.window)])
        if self.slope < self.gamma:
            self.window = []
            return True
        return False


def num_groups(*, enabling: int, num_agents: int) -> int:
    """N' at the ``enabling``-th time sharing is switched on (1-based)."""
    if enabling < 1 or num_agents < 1:
        raise ValueError(f"enabling ({enabling}) and num_agents ({num_agents}) start at 1")
    cap = 2 ** (math.floor(math.log2(num_agents)) + 1)
    return min(2 ** enabling, cap, num_agents)


def similarity(*, samples: dict[str, np.ndarray], pca_dims: int, bandwidth: float, kl_samples: int,
               seed: int) -> tuple[list[str], np.ndarray]:
    """The agents (in the order given) and the matrix KL[i, j] = KL(p_i ‖ p_j) of their (obs, action) densities."""
    from sklearn.decomposition import PCA
    from sklearn.neighbors import KernelDensity
    from sklearn.preprocessing import StandardScaler

    agents = list(samples)
    stacked = np.concatenate([np.asarray(samples[a], dtype=np.float64) for a in agents])
    dims = max(1, min(pca_dims, stacked.shape[1], len(stacked) - 1))
    scaled = StandardScaler().fit_transform(stacked)
    projected = PCA(n_components=dims, whiten=True, random_state=seed).fit_transform(scaled)
    bounds = np.cumsum([0] + [len(samples[a]) for a in agents])
    kdes = [KernelDensity(bandwidth=bandwidth).fit(projected[bounds[i]:bounds[i + 1]]) for i in range(len(agents))]
    kl = np.zeros((len(agents), len(agents)))
    for i, kde in enumerate(kdes):
        draws = kde.sample(kl_samples, random_state=seed + i)
        own = kde.score_samples(draws)
        for j, other in enumerate(kdes):
            if i != j:
                kl[i, j] = float(np.mean(own - other.score_samples(draws)))
    return agents, kl


def similarity_within_classes(*, samples: dict[str, np.ndarray], compatible: dict[str, str], pca_dims: int,
                              bandwidth: float, kl_samples: int, seed: int) -> tuple[list[str], np.ndarray]:
    """``similarity`` inside each class of compatible agents (agents with other spaces have samples of other widths
    and are never grouped together); entries across classes stay 0, which ``group_agents`` never reads. One class
    (every agent alike) is ``similarity`` itself."""
    agents = list(samples)
    classes: dict[str, list[int]] = {}
    for index, agent in enumerate(agents):
        classes.setdefault(compatible[agent], []).append(index)
    kl = np.zeros((len(agents), len(agents)))
    for members in classes.values():
        _, block = similarity(samples={agents[i]: samples[agents[i]] for i in members}, pca_dims=pca_dims,
                              bandwidth=bandwidth, kl_samples=kl_samples, seed=seed)
        kl[np.ix_(members, members)] = block
    return agents, kl


def group_agents(*, agents: list[str], kl: np.ndarray, num_groups: int, seed: int,
                 compatible: dict[str, str]) -> list[list[str]]:
    """KMeans on the symmetrised divergences, within each class of compatible agents; groups in agent order."""
    from sklearn.cluster import KMeans

    divergence = (kl + kl.T) / 2.0
    classes: dict[str, list[int]] = {}
    for index, agent in enumerate(agents):
        classes.setdefault(compatible[agent], []).append(index)
    groups: list[list[str]] = []
    for members in classes.values():
        k = min(len(members), max(1, round(num_groups * len(members) / len(agents))))
        if k == len(members):
            labels = np.arange(len(members))
        elif k == 1:
            labels = np.zeros(len(members), dtype=int)
        else:
            features = divergence[np.ix_(members, members)]
            labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(features)
        for label in sorted(set(labels.tolist()), key=lambda lab: int(np.flatnonzero(labels == lab)[0])):
            groups.append([agents[members[i]] for i in np.flatnonzero(labels == label)])
    return sorted(groups, key=lambda group: agents.index(group[0]))


def base_agent(*, group: list[str], convexity: dict[str, float]) -> str:
    """The member whose policy has the highest convexity (NaN last; ties: first in ``group`` order)."""
    def score(agent: str) -> float:
        value = convexity.get(agent, math.nan)
        return -math.inf if value is None or not math.isfinite(value) else value
    return max(group, key=lambda agent: (score(agent), -group.index(agent)))


class SharingController:
    """Which policy each agent uses (module docstring); ``decide`` returns a new map or None."""

    def __init__(self, *, config: Any, agents: list[str], compatible: dict[str, str], seed: int) -> None:
        self.config, self.agents, self.compatible, self.seed = config, list(agents), dict(compatible), seed
        check_policy_spaces(agent_policy=config.agent_policy, compatible=self.compatible)   # exit 2 before any worker
        check_policy_mapping(mapping=config.policy_mapping, compatible=self.compatible)
        if config.sharing == "full":
            check_full_sharing(compatible=self.compatible)
        self.detector = PerformanceDetector(window=config.window, gamma=config.gamma)
        self.enabled = config.sharing in ("static", "full")
        self.enablings = 0
        self.toggles = 0
        self.groups: list[list[str]] = []

    @property
    def needs_convexity(self) -> bool:
        return self.config.sharing == "marless"

    def probes_now(self, *, agent_returns: dict[str, float]) -> bool:
        """Whether this round's ``decide`` (with the same returns, known once the actors are back) will read the
        convexity: only when it switches sharing on (the base agent of each group); the detector is not moved."""
        if self.config.sharing != "marless" or self.enabled:
            return False
        return copy.deepcopy(self.detector).observe(agent_returns=agent_returns)

    def initial_map(self) -> dict[str, str]:
        if self.config.sharing == "full":
            return {agent: policy_of(self.agents[0]) for agent in self.agents}
        if self.config.policy_mapping:
            return {agent: self.config.policy_mapping.get(agent, policy_of(agent)) for agent in self.agents}
        if self.config.agent_policy:
            return {agent: self.config.agent_policy.get(agent, policy_of(agent)) for agent in self.agents}
        if self.config.sharing == "static":   # one policy per class of compatible agents: its first agent's
            first: dict[str, str] = {}
            for agent in self.agents:
                first.setdefault(self.compatible[agent], agent)
            return {agent: policy_of(first[self.compatible[agent]]) for agent in self.agents}
        return {agent: policy_of(agent) for agent in self.agents}

    def decide(self, *, round: int, agent_returns: dict[str, float], samples: dict[str, np.ndarray],
               convexity: dict[str, float]) -> dict[str, str] | None:
        if self.config.sharing != "marless" or not self.detector.observe(agent_returns=agent_returns):
            return None
        self.toggles += 1
        if self.enabled:    # sharing made things worse: every agent its own policy again
            self.enabled, self.groups = False, []
            return {agent: policy_of(agent) for agent in self.agents}
        self.enabled, self.enablings = True, self.enablings + 1
        count = num_groups(enabling=self.enablings, num_agents=len(self.agents))
        agents, kl = similarity_within_classes(samples={a: samples[a] for a in self.agents}, compatible=self.compatible,
                                               pca_dims=self.config.pca_dims, bandwidth=self.config.kde_bandwidth,
                                               kl_samples=self.config.kl_samples, seed=self.seed + round)
        self.groups = group_agents(agents=agents, kl=kl, num_groups=count, seed=self.seed + round,
                                   compatible=self.compatible)
        mapping = {}
        for group in self.groups:
            base = base_agent(group=group, convexity=convexity)
            mapping.update({agent: policy_of(base) for agent in group})
        return mapping

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to decide as this one would have (JSON: a checkpoint's manifest)."""
        detector = self.detector
        return {"enabled": self.enabled, "enablings": self.enablings, "toggles": self.toggles,
                "groups": [list(group) for group in self.groups],
                "history": {agent: list(values) for agent, values in detector.history.items()},
                "window": list(detector.window), "recent": list(detector.recent),
                "slope": None if math.isnan(detector.slope) else detector.slope}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.enabled, self.enablings = bool(state["enabled"]), int(state["enablings"])
        self.toggles = int(state["toggles"])
        self.groups = [list(group) for group in state["groups"]]
        self.detector.history = {agent: [float(v) for v in values] for agent, values in state["history"].items()}
        self.detector.window = [float(v) for v in state["window"]]
        self.detector.recent = [float(v) for v in state.get("recent", state["window"])]   # older manifests: the window
        self.detector.slope = math.nan if state["slope"] is None else float(state["slope"])

    def state(self) -> dict[str, float]:
        return {"sharing": float(self.enabled), "slope": self.detector.slope, "enablings": float(self.enablings),
                "toggles": float(self.toggles), "window": float(len(self.detector.window))}
