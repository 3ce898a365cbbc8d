"""Soft Actor-Critic (Haarnoja et al. 2018): twin Q, squashed Gaussian actor, automatic entropy tuning."""

from nimbus.algos import lazy_exports

__all__ = ["SAC", "SACConfig", "SACModel", "SACUpdateStats", "make_optimizer", "sac_update"]
__getattr__ = lazy_exports(package=__name__, homes={
    "SAC": "algorithm", "SACModel": "algorithm", "SACConfig": "config", "SACUpdateStats": "learner",
    "make_optimizer": "learner", "sac_update": "learner"})
