"""DQN (Mnih et al. 2015) with double Q (van Hasselt et al. 2016), n-step targets and PER weights."""

from nimbus.algos import lazy_exports

_HOMES = {
    "DQN": "algorithm", "DQNModel": "model", "DQNConfig": "config", "DQNUpdate": "learner",
    "DQNUpdateStats": "learner", "dqn_update": "learner"}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(package=__name__, homes=_HOMES)
