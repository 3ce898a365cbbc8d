"""The ``devices:`` and ``prewarm:`` config sections: ARTOS's on-demand device pool and pre-warming (003 §4.3).

``devices.pool: on_demand`` makes learner-side functions (the FunctionSpec kinds in ``devices.kinds``) lease
one device of a shared pool for the duration of each invocation and release it after the update, so a few
devices are time-multiplexed across learners and workloads (runtime/devices.py). ``devices.kind: auto`` uses
every visible CUDA device and, with none, ``cpu_slots`` CPU learner slots, so the same pool runs everywhere.

``prewarm.mode: monitor`` runs ARTOS's workload monitor (runtime/prewarm.py): windows of actor start-up
times and learner finish times; once stable, actor workers are pre-warmed during the learner's update so
that they are warm when it finishes.

Example (YAML)::

    devices: {pool: on_demand, kind: cpu, cpu_slots: 1}
    prewarm: {mode: monitor, window: 5, stability: 0.2}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nimbus.schema.base import ConfigSection

LEARNER_SIDE_KINDS = ("learner", "gradient_learner", "parameter", "critic", "policy", "postprocess")


class DevicesConfig(ConfigSection):
    pool: Literal["none", "on_demand"] = "none"
    """on_demand: learner-side functions lease a device per invocation and release it after (ARTOS 4.3)"""
    kind: Literal["auto", "cuda", "cpu"] = "auto"
    """the pool's devices: every visible CUDA device (cuda), cpu_slots CPU slots (cpu), cuda if any else cpu (auto)"""
    cpu_slots: int = Field(default=1, ge=1)
    """learner slots when the pool runs over CPUs: at most this many learner-side functions run at once"""
    learners_per_device: int = Field(default=1, ge=1)
    """learner-side functions that share one GPU at once (Stellaris runs 4); CPU slots are cpu_slots"""
    kinds: tuple[str, ...] = LEARNER_SIDE_KINDS
    """FunctionSpec kinds that lease a device (local, inline and simulated runtimes)"""


class PrewarmConfig(ConfigSection):
    mode: Literal["none", "monitor"] = "none"
    """monitor: pre-warm actor workers during the learner's update once the workload is stable, and the actors a
    scaler adds at its decision (every workflow: onpolicy, offpolicy, stellaris, marless)"""
    window: int = Field(default=5, ge=2)
    """sliding-window length of actor start-up times and learner finish times (paper: 5)"""
    stability: float = Field(default=0.2, gt=0)
    """λ: stable when range(learner_fins) < λ · mean(learner_fins) (paper: 0.2)"""
