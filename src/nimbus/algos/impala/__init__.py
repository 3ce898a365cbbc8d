"""IMPALA (Espeholt et al. 2018, V-trace) and IMPACT (Luo et al. 2020, target network + clipped surrogate)."""

from nimbus.algos.impala.algorithm import Impala, ImpalaModel
from nimbus.algos.impala.config import ImpalaConfig
from nimbus.algos.impala.learner import ImpalaUpdateStats, impala_update
from nimbus.algos.impala.vtrace import VTraceReturns, vtrace

__all__ = ["Impala", "ImpalaConfig", "ImpalaModel", "ImpalaUpdateStats", "VTraceReturns", "impala_update", "vtrace"]
