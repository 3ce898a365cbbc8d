"""Function requests on the wire (data/request.py): every request class round-trips through the codec, and a
fixed request encodes to the very bytes it did before the classes shared ``WireRequest`` (the digests below were
recorded from main 8263291, where each class wrote its own header): the wire format did not change."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from nimbus.data.codec import Message, decode, encode
from nimbus.data.replay import ReplayBatch
from nimbus.data.request import WireRequest
from nimbus.envs.slot_state import SLOT_META, SlotState
from nimbus.marless.actor import MultiAgentActorRequest
from nimbus.marless.learner import MarlessLearnerRequest
from nimbus.marless.team_learner import TeamLearnerRequest
from nimbus.marless.team_rows import VDNPostprocessRequest
from nimbus.marless.value_learner import ValueLearnerRequest
from nimbus.offpolicy.actor import OffPolicyActorRequest
from nimbus.offpolicy.learner import OffPolicyLearnerRequest
from nimbus.roles.actor import ActorRequest, FragmentRequest
from nimbus.roles.learner import LearnerRequest
from nimbus.stellaris.learner import GradientRequest
from nimbus.stellaris.parameter import ParameterRequest


@dataclass(frozen=True)
class EchoRequest(WireRequest, header="echo", affinity="echo-{rank}-{model[policy]}"):
    rank: int
    model: dict[str, Any]


def test_wire_message_writes_the_fields_under_header_then_affinity_then_extra():
    req = EchoRequest(rank=3, model={"policy": "p"})
    message = req.wire_message(arrays={"x": np.arange(2)}, extra_header={"slot": [1]})
    assert list(message.header) == ["echo", "_affinity", "slot"]
    assert message.header == {"echo": {"rank": 3, "model": {"policy": "p"}}, "_affinity": "echo-3-p", "slot": [1]}
    assert EchoRequest.from_message(decode(encode(req.to_message()))) == req
    assert req.to_message().arrays == {}


def test_a_subclass_of_a_request_keeps_its_header_key_and_affinity():
    @dataclass(frozen=True)
    class LoudEcho(EchoRequest):
        volume: int = 11

    message = LoudEcho(rank=1, model={"policy": "q"}).to_message()
    assert message.header == {"echo": {"rank": 1, "model": {"policy": "q"}, "volume": 11}, "_affinity": "echo-1-q"}
    assert LoudEcho.from_message(message) == LoudEcho(rank=1, model={"policy": "q"})


SLOT = SlotState(arrays={"slot.obs": np.arange(6, dtype=np.float32).reshape(2, 3)}, meta=[{"kind": "a"}, {"kind": "b"}])
ENV = {"env_id": "CartPole-v1", "env_kwargs": {"max_episode_steps": 50}}
ALGO = {"name": "ppo", "lr": 0.0003, "normalize_obs": True}
ACTOR = {**ENV, "num_envs": 2, "fragment_steps": 8, "seed": 7, "actor_rank": 1, "slot_seq": 3, "policy_version": 4,
         "weights_key": "weights/default/4", "algo": ALGO, "snapshot": True, "env_imports": ["my_envs"],
         "env_wrappers": ["gymnasium.wrappers.ClipAction"]}
LEARNER = {**ENV, "algo": ALGO, "policy": "default", "policy_version": 4, "has_optimizer_state": True,
           "buffer": {"kind": "shm", "name": "buf-1"}, "progress": 0.25, "seed": 7, "device": "cpu",
           "torch_threads": 1, "probe": {"subset_size": None, "max_iterations": 30, "tolerance": 0.001},
           "batch_key": None, "env_imports": [], "env_wrappers": []}
MA = {"agent_policy": {"a0": "p0", "a1": "p1"}, "all_agents": ["a0", "a1"]}
BATCH = ReplayBatch(indices=np.array([3, 1]), seqs=np.array([10, 11]), columns={"weights": np.ones(2, np.float32)},
                    next_indices=np.array([4, 2]), next_seqs=np.array([12, 13]))

# name: (request, how to make its message)
CASES: dict[str, tuple[Any, Any]] = {
    "actor": (ActorRequest(**ACTOR), lambda r: r.to_message()),
    "actor+restore": (ActorRequest(**ACTOR), lambda r: r.to_message(restore=SLOT)),
    "offpolicy_actor": (OffPolicyActorRequest(**ACTOR, random_actions=True), lambda r: r.to_message()),
    "learner": (LearnerRequest(**LEARNER), lambda r: r.to_message(
        indices=np.array([5, 2, 9], dtype=np.int32), obs_moments={"obs_mean": np.zeros(3, np.float32)})),
    "offpolicy_learner": (OffPolicyLearnerRequest(**LEARNER, return_td_errors=True, row_group=2),
                          lambda r: r.to_batch_message(batch=BATCH)),
    "gradient": (GradientRequest(**ENV, algo=ALGO, policy="default", policy_version=4, batch_key="batch/r3",
                                 grad_key="grad/r3/0", peer_versions=[3, 4], truncation="paper", rho=1.0,
                                 progress=0.5, device="cpu", torch_threads=1, env_imports=[], env_wrappers=[],
                                 slowdown=2.0), lambda r: r.to_task_message(positions=np.arange(4, dtype=np.int32))),
    "parameter": (ParameterRequest(model={"policy": "default", "device": "cpu"}, policy_version=4,
                                   has_optimizer_state=True, keys=["grad/r3/0", "grad/r3/1"], scales=[0.5, 0.5],
                                   separate_steps=False, progress=0.5, recompute=[None, {"batch_key": "b"}],
                                   resident=True, run_key="run-1", replay=[], publish_state=False, export=False),
                  lambda r: r.to_message(positions=[None, np.array([1, 2])])),
    "vdn_postprocess": (VDNPostprocessRequest(round=3, all_agents=["a0", "a1"], batch_keys=["batch/p0/r3"],
                                              post_key="post/team/r3"), lambda r: r.to_message()),
    "team_learner": (TeamLearnerRequest(round=3, algo={"name": "qmix"}, **MA, policy_versions={"p0": 2, "p1": 2},
                                        replay_keys=["post/team/r2", "post/team/r3"], spaces={"p0": {"obs_shape": [4]}},
                                        seed=7, progress=0.5, mixer_version=2, state_dim=8, torch_threads=1,
                                        probe=True), lambda r: r.to_message()),
    "value_learner": (ValueLearnerRequest(policy="p0", round=3, algo={"name": "iql"}, agents={"a0": 0}, **MA,
                                          policy_versions={"p0": 2, "p1": 2}, replay_keys=["batch/p0/r3"],
                                          spaces={"p0": {"obs_shape": [4]}}, seed=7, progress=0.5, torch_threads=1,
                                          probe=False), lambda r: r.to_message()),
    "marless_learner": (MarlessLearnerRequest(**ENV, algo={"name": "mappo"}, policy="p0", round=3,
                                              agents={"a0": 0}, all_agents=["a0", "a1"], batch_key="batch/p0/r3",
                                              weights_version=2, critic_version=2, seed=7, progress=0.5,
                                              probe={"subset_size": 256}, env_imports=["pkg"], agent_id=True),
                        lambda r: r.to_message()),
    "marless_actor": (MultiAgentActorRequest(**ENV, num_envs=2, fragment_steps=8, seed=7, actor_rank=1, slot_seq=3,
                                             agent_policy={"a0": "p0"}, weights_keys={"p0": "weights/p0/2"},
                                             algo={"name": "mappo"}, env_imports=("pkg",), snapshot=True,
                                             agent_id=True), lambda r: r.to_message(restore=SLOT)),
}

# the first 16 hex digits of sha256(encode(message)), recorded on main 8263291 (before WireRequest); actor, learner
# and their off-policy forms re-recorded when ActorRequest gained env_backend and LearnerRequest compile
DIGESTS = {
    "actor": "b186cb91ec771eed",
    "actor+restore": "6a8f91f79e86c30f",
    "gradient": "c4a05730a5aebada",
    "learner": "562492ffd4ea7671",
    "marless_actor": "f8e2e2cb792ee795",
    "marless_learner": "1a3870bb4bdc8b30",
    "offpolicy_actor": "09d3084a5ca88de7",
    "offpolicy_learner": "7a010cc09ce14741",
    "parameter": "6cfaa0d6f8acb792",
    "team_learner": "80c3b9df77306eb1",
    "value_learner": "a2195c75fd0c3620",
    "vdn_postprocess": "27f8eef838846612",
}


def _jsonable(request: Any) -> Any:
    return json.loads(json.dumps(vars(request)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_request_round_trips_and_encodes_to_todays_bytes(name: str):
    request, make = CASES[name]
    message: Message = make(request)
    frame = encode(message)
    back = type(request).from_message(decode(frame))
    assert type(back) is type(request) and _jsonable(back) == _jsonable(request)
    assert encode(make(back)) == frame   # what came back sends the same bytes again
    assert hashlib.sha256(frame).hexdigest()[:16] == DIGESTS[name]


@pytest.mark.parametrize("name", ["actor+restore", "marless_actor"])
def test_every_actor_request_leads_with_the_fragment_fields_and_carries_a_restored_slot(name: str):
    request, make = CASES[name]
    message: Message = make(request)
    leading = [field for field in FragmentRequest.__dataclass_fields__]
    assert leading == ["env_id", "env_kwargs", "num_envs", "fragment_steps", "seed", "actor_rank", "slot_seq"]
    assert list(message.header[request.HEADER])[:len(leading)] == leading
    assert message.header["_affinity"] == f"actor-{request.actor_rank}"
    assert message.header[SLOT_META] == SLOT.meta and list(message.arrays) == list(SLOT.arrays)
    assert message.arrays is not SLOT.arrays   # the slot's own dict is never handed to the message
    assert request.to_message().arrays == {} and SLOT_META not in request.to_message().header
