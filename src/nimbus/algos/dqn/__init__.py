"""DQN (Mnih et al. 2015) with double Q (van Hasselt et al. 2016), n-step targets and PER weights."""

from nimbus.algos.dqn.algorithm import DQN, DQNModel
from nimbus.algos.dqn.config import DQNConfig
from nimbus.algos.dqn.learner import DQNUpdate, DQNUpdateStats, dqn_update

__all__ = ["DQN", "DQNConfig", "DQNModel", "DQNUpdate", "DQNUpdateStats", "dqn_update"]
