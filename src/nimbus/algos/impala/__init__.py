"""IMPALA (Espeholt et al. 2018, V-trace) and IMPACT (Luo et al. 2020, target network + clipped surrogate)."""

from nimbus.algos import lazy_exports

_HOMES = {
    "Impala": "algorithm", "ImpalaModel": "model", "ImpalaConfig": "config", "ImpalaUpdateStats": "learner",
    "impala_update": "learner", "VTraceReturns": "vtrace", "vtrace": "vtrace"}
__all__ = sorted(_HOMES)
__getattr__ = lazy_exports(package=__name__, homes=_HOMES)
