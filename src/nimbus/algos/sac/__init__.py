"""Soft Actor-Critic (Haarnoja et al. 2018): twin Q, squashed Gaussian actor, automatic entropy tuning."""

from nimbus.algos.sac.algorithm import SAC, SACModel
from nimbus.algos.sac.config import SACConfig
from nimbus.algos.sac.learner import SACUpdateStats, make_optimizer, sac_update

__all__ = ["SAC", "SACConfig", "SACModel", "SACUpdateStats", "make_optimizer", "sac_update"]
