"""The ``offpolicy:`` config section: how the ``offpolicy`` workflow fires and syncs.

Read only when ``train.workflow: offpolicy`` (offpolicy/workflow.py). Defaults follow the papers:
the learner fires from a DataKeyTrigger (ARTOS Table 3: off-policy training on data), weights reach
the actors by a TimeTrigger (ARTOS: off-policy sync), and actors never wait for the learner
(``max_steps_ahead: null``). See docs/offpolicy.md.

Example (YAML)::

    train: {workflow: offpolicy}
    offpolicy: {learner_trigger: data, weight_sync_period_s: 0.25, max_steps_ahead: 2048}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nimbus.schema.base import ConfigSection


class OffPolicyConfig(ConfigSection):
    learner_trigger: Literal["data", "time"] = "data"
    """data: the learner fires when train_rows new rows arrived (DataKeyTrigger); time: every learner_period_s"""
    train_rows: int | None = Field(default=None, ge=1)
    """DataKeyTrigger size; null: algo.train_freq (DQN, SAC) or fragments_per_batch fragments (IMPALA)"""
    learner_period_s: float = Field(default=0.5, gt=0)
    """TimeTrigger period when learner_trigger is time (each call then takes algo.gradient_steps)"""
    weight_sync_period_s: float = Field(default=0.25, gt=0)
    """sync_to all: TimeTrigger period after which re-invoked actors take the newest policy_version"""
    sync_to: Literal["all", "heard_from"] = "all"
    """heard_from: a new version goes only to the actors whose fragments the update used (XingTian IMPALA)"""
    fragments_per_batch: int = Field(default=1, ge=1)
    """IMPALA: whole actor fragments per FIFO learner batch (a portion of the actors)"""
    max_gradient_steps_per_call: int = Field(default=256, ge=1)
    """DQN/SAC: at most this many owed gradient steps per learner call"""
    prioritized_steps_per_call: int = Field(default=8, ge=1)
    """PER: at most this many gradient steps per learner call, i.e. per draw from the priorities (1: per step)"""
    max_steps_ahead: int | None = Field(default=None, ge=0)
    """back-pressure: env steps actors may collect beyond what the learner consumed (× decided/initial actors)"""
    lockstep: bool = False
    """the sync-style off-policy loop (RLlib, CleanRL) for comparison: actors and learner alternate"""
