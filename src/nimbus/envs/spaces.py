"""The observation and action spaces of an env: what a model is built for (algos/, models/) and what envs/ report."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym


@dataclass(frozen=True)
class EnvSpaces:
    observation: gym.Space
    action: gym.Space
