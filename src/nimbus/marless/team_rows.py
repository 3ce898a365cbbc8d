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
  their Q values out of Q_tot (marless/rows.py). IQL's replay drops padding rows. It returns a
  `VDNPostprocessResult`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nimbus.data.codec import Message
from nimbus.data.request import WireRequest
from nimbus.data.result import WireResult
from nimbus.data.stores import function_store
from nimbus.errors import EnvContractError
from nimbus.marless.rows import ALIVE
from nimbus.runtime.base import FunctionContext

POSTPROCESS_HEADER = "vdn_postprocess"
AGENT_COLUMNS = ("obs", "next_obs", "actions", "terminated", ALIVE)   # per agent in a joint (VDN) row
MASK_COLUMNS = ("action_mask", "next_action_mask")   # per agent, when its env gives action masks
TEAM_COLUMNS = ("state", "next_state")   # once per joint row, when the actors recorded them (QMIX)


@dataclass(frozen=True)
class VDNPostprocessRequest(WireRequest, header=POSTPROCESS_HEADER, affinity="postprocess-team"):
    round: int
    all_agents: Sequence[str]          # every agent, sorted (``agent_index`` indexes this list)
    batch_keys: Sequence[str]          # this round's batch/<policy>/r<k> of every policy with agents
    post_key: str                      # where the joint rows go: post/team/r<k>


@dataclass(frozen=True)
class VDNPostprocessResult(WireResult):
    """What the team's post-processing function returns (the joint rows themselves are in the Store)."""

    post_key: str               # post/team/r<k>
    rows: int                   # joint rows: one per (actor, env, t)
    team_reward_mean: float     # the mean of the joint rows' team reward
    postprocess_s: float


# --- joint rows for VDN (the TD targets are in algos/multiagent/iql.py and vdn.py) ---


def align_team_rows(*, parts: Sequence[dict[str, np.ndarray]], all_agents: Sequence[str]) -> dict[str, np.ndarray]:
    """The policies' batches (rows tagged with ``agent_index`` into ``all_agents``) → joint rows, the j-th row of each
    agent together. Each agent's columns are taken from the batch that holds its rows and never concatenated with
    another policy's, so agents whose observations differ in size each keep their own width."""
    own = {agent: _agent_rows(parts=parts, agent_index=i) for i, agent in enumerate(all_agents)}
    counts = {agent: int(rows["rewards"].shape[0]) for agent, rows in own.items()}
    if len(set(counts.values())) != 1 or not own or next(iter(counts.values())) == 0:
        raise EnvContractError(f"VDN needs every agent at every step; rows per agent: {counts}")
    joint: dict[str, np.ndarray] = {}
    for agent, rows in own.items():
        rows.setdefault(ALIVE, np.ones(counts[agent], dtype=bool))   # rows written before the column: all live
        for column in (*AGENT_COLUMNS, *(c for c in MASK_COLUMNS if c in rows)):
            joint[f"{agent}/{column}"] = rows[column]
    joint["rewards"] = np.sum([rows["rewards"] for rows in own.values()], axis=0).astype(np.float32)
    joint["terminated"] = np.all([rows["terminated"] for rows in own.values()], axis=0)
    joint["truncated"] = np.any([rows["truncated"] for rows in own.values()], axis=0)
    first = own[all_agents[0]]
    for shared in TEAM_COLUMNS:   # the global state (QMIX's actors record it): the same for every agent's row
        if shared in first:
            joint[shared] = first[shared]
    return joint


def _agent_rows(*, parts: Sequence[dict[str, np.ndarray]], agent_index: int) -> dict[str, np.ndarray]:
    """The columns of one agent's rows, in batch order, from the batches that hold it (an agent maps to one policy,
    so to one batch a round)."""
    pieces: dict[str, list[np.ndarray]] = {}
    for part in parts:
        selection = np.flatnonzero(np.asarray(part["agent_index"]) == agent_index)
        if selection.size == 0:
            continue
        for column, value in part.items():
            pieces.setdefault(column, []).append(np.asarray(value)[selection])
    if not pieces:
        return {"rewards": np.zeros(0, np.float32)}
    return {column: np.concatenate(values) for column, values in pieces.items()}


def vdn_postprocess_function(*, context: FunctionContext, request: Message) -> Message:
    req = VDNPostprocessRequest.from_message(request)
    started = time.perf_counter()
    store = function_store(header=request.header)
    wanted = ("agent_index", "rewards", "truncated", *AGENT_COLUMNS, *MASK_COLUMNS, *TEAM_COLUMNS)
    parts = [{c: v for c, v in store.get(key=key).arrays.items() if c in wanted} for key in req.batch_keys]
    joint = align_team_rows(parts=parts, all_agents=req.all_agents)
    store.put(key=req.post_key, message=Message(header={"round": req.round, "agents": list(req.all_agents)},
                                                arrays=joint), writer=context.invocation_id)
    return VDNPostprocessResult(post_key=req.post_key, rows=int(joint["rewards"].shape[0]),
                                team_reward_mean=float(joint["rewards"].mean()),
                                postprocess_s=time.perf_counter() - started).wire_message()
