"""Soft Actor-Critic (Haarnoja et al. 2018): twin Q, squashed Gaussian actor, automatic entropy tuning."""

from nimbus.algos import lazy_exports

_HOMES = {
    "SAC": "algorithm", "SACModel": "model", "SACConfig": "config", "SACUpdateStats": "learner",
    "make_optimizer": "learner", "sac_update": "learner"}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(package=__name__, homes=_HOMES)
