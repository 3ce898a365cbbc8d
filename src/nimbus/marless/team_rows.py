"""VDN's *post-processing function* (MARLess §4.2, Fig. 5c): the team's joint rows of a round.

``vdn_postprocess_function`` (VDN's *post-processing function*, once per round for the team): reads
  the round's batches of every policy (``batch/<policy>/r<k>``, rows tagged with ``agent_index``),
  aligns the team's per-agent rows per (env, t) into joint rows and puts ``post/team/r<k>``: per agent
  ``<agent>/obs``, ``<agent>/next_obs``, ``<agent>/actions``, ``<agent>/terminated``, ``<agent>/alive``; for the team
  ``rewards`` (the sum of the agents' rewards), ``terminated`` (every agent terminated), ``truncated`` and, when
  the actors recorded it (QMIX), the global ``state`` and ``next_state`` (one per joint row).
  Alignment: every agent's rows, taken in batch order, run over the same (actor, env, t) sequence (the
  actor writes each agent's rows env-major then time, actors in rank order), so the j-th row of each
  agent is the same step. That needs a row for every agent at every step: the actor writes padding rows
  (terminated, reward 0, ``alive`` False) for an agent that finished before the others; unequal row counts
  raise EnvContractError. The team's ``terminated`` holds once every agent has terminated; until then the
  finished agents' terminated flags mask their next values out of the target and their ``alive`` flags
  their Q values out of Q_tot (marless/rows.py). IQL's replay drops padding rows.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nimbus.data.codec import Message
from nimbus.data.request import WireRequest
from nimbus.data.stores import function_store
from nimbus.errors import EnvContractError
from nimbus.marless.rows import ALIVE
from nimbus.runtime.base import FunctionContext

POSTPROCESS_HEADER = "vdn_postprocess"
AGENT_COLUMNS = ("obs", "next_obs", "actions", "terminated", ALIVE)   # per agent in a joint (VDN) row
TEAM_COLUMNS = ("state", "next_state")   # once per joint row, when the actors recorded them (QMIX)


@dataclass(frozen=True)
class VDNPostprocessRequest(WireRequest, header=POSTPROCESS_HEADER, affinity="postprocess-team"):
    round: int
    all_agents: Sequence[str]          # every agent, sorted (``agent_index`` indexes this list)
    batch_keys: Sequence[str]          # this round's batch/<policy>/r<k> of every policy with agents
    post_key: str                      # where the joint rows go: post/team/r<k>


# --- joint rows for VDN (the TD targets are in algos/multiagent/iql.py and vdn.py) ---


def align_team_rows(*, rows: dict[str, np.ndarray], all_agents: Sequence[str]) -> dict[str, np.ndarray]:
    """Per-agent rows (``agent_index`` into ``all_agents``) → joint rows, the j-th row of each agent together."""
    index = np.asarray(rows["agent_index"])
    selections = [np.flatnonzero(index == i) for i in range(len(all_agents))]
    counts = {agent: int(sel.size) for agent, sel in zip(all_agents, selections, strict=True)}
    if len(set(counts.values())) != 1 or not selections or selections[0].size == 0:
        raise EnvContractError(f"VDN needs every agent at every step; rows per agent: {counts}")
    joint: dict[str, np.ndarray] = {}
    rows = {ALIVE: np.ones(index.shape[0], dtype=bool), **rows}   # rows written before the column: all live
    for agent, sel in zip(all_agents, selections, strict=True):
        for column in AGENT_COLUMNS:
            joint[f"{agent}/{column}"] = np.asarray(rows[column])[sel]
    joint["rewards"] = np.sum([np.asarray(rows["rewards"])[sel] for sel in selections], axis=0).astype(np.float32)
    joint["terminated"] = np.all([np.asarray(rows["terminated"])[sel] for sel in selections], axis=0)
    joint["truncated"] = np.any([np.asarray(rows["truncated"])[sel] for sel in selections], axis=0)
    for shared in TEAM_COLUMNS:   # the global state (QMIX's actors record it): the same for every agent's row
        if shared in rows:
            joint[shared] = np.asarray(rows[shared])[selections[0]]
    return joint




def vdn_postprocess_function(*, context: FunctionContext, request: Message) -> Message:
    req = VDNPostprocessRequest.from_message(request)
    started = time.perf_counter()
    store = function_store(header=request.header)
    parts = [store.get(key=key).arrays for key in req.batch_keys]
    columns = [c for c in ("agent_index", "rewards", "truncated", *AGENT_COLUMNS, *TEAM_COLUMNS)
               if all(c in part for part in parts)]
    rows = {column: np.concatenate([np.asarray(part[column]) for part in parts]) for column in columns}
    joint = align_team_rows(rows=rows, all_agents=req.all_agents)
    store.put(key=req.post_key, message=Message(header={"round": req.round, "agents": list(req.all_agents)},
                                                arrays=joint), writer=context.invocation_id)
    return Message(header={"post_key": req.post_key, "rows": int(joint["rewards"].shape[0]),
                           "team_reward_mean": float(joint["rewards"].mean()),
                           "postprocess_s": time.perf_counter() - started})
