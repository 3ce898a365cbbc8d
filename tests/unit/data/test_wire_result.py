"""data/result.py: a function's result as a typed dataclass on the codec's header, read back by name."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from nimbus.data.codec import Message, decode, encode
from nimbus.data.result import ResultError, WireResult, invocation_id
from nimbus.roles.actor import ActorResult
from nimbus.roles.learner import LearnerResult


@dataclass(frozen=True)
class EchoResult(WireResult):
    rank: int
    note: str = "none"


def test_a_result_travels_as_flat_header_keys_through_the_codec_and_comes_back_equal() -> None:
    result = ActorResult(actor_rank=2, policy_version=7, env_steps=256, episode_returns=[12.0, 30.5],
                         episode_lengths=[12, 31], sampling_s=0.25, env_s=0.125, inference_s=0.0625)
    message = decode(encode(result.wire_message(arrays={"obs": np.zeros((4, 2), np.float32)},
                                                extra_header={"_slot": {"seq": 3}})))
    assert message.header["env_steps"] == 256 and message.header["_slot"] == {"seq": 3}   # flat, extras beside
    assert ActorResult.from_message(message) == result
    assert message.arrays["obs"].shape == (4, 2)


def test_a_missing_field_is_named_and_a_default_fills_an_older_functions_result() -> None:
    with pytest.raises(ResultError, match=r"LearnerResult: the function's result lacks stats, nonfinite, .*"
                                          r"\(it has policy_version\)"):
        LearnerResult.from_message(Message(header={"policy_version": 3}, arrays={}))
    assert EchoResult.from_message(Message(header={"rank": 1, "_attempt": 2}, arrays={})) == EchoResult(rank=1)


def test_the_runtimes_invocation_id_is_read_beside_the_fields() -> None:
    message = EchoResult(rank=0).wire_message(extra_header={"_invocation_id": "abc"})
    assert invocation_id(message) == "abc" and invocation_id(EchoResult(rank=0).wire_message()) is None
