"""MARLess's typed function results (marless/results.py and one class beside each function): each travels through the
codec and comes back equal, its header keeps the flat keys (and order) the functions wrote before the classes, a
missing field or loss statistic is named, and ``row_stats`` gives the numbers the metrics row has always reported."""

from __future__ import annotations

import math

import pytest

from nimbus.data.codec import Message, decode, encode
from nimbus.data.result import ResultError
from nimbus.envs.slot_state import SLOT_META
from nimbus.marless.actor import MultiAgentActorResult
from nimbus.marless.learner import ROLE_RESULTS, CriticResult, PolicyResult, PostprocessResult
from nimbus.marless.results import MarlessResult
from nimbus.marless.team_learner import TeamPolicyResult, TeamResult
from nimbus.marless.team_rows import VDNPostprocessResult
from nimbus.marless.value_learner import ValuePolicyResult

ACTOR = MultiAgentActorResult(actor_rank=1, env_steps=200, agents=["agent_0", "agent_1"],
                              episode_returns={"agent_0": [-3.5], "agent_1": [-4.25]}, episode_lengths=[25],
                              sampling_s=0.5, env_s=0.25, inference_s=0.125, policy_versions={"p_agent_0": 3})
POSTPROCESS = PostprocessResult(post_key="post/p_agent_0/r2", rows=400, postprocess_s=0.03125)
CRITIC = CriticResult(critic_version=4, value_loss=0.75, critic_nonfinite_steps=0, explained_variance=0.5,
                      adv_key="adv/p_agent_0/r2", rows=380, dead_rows=20, device="cpu", critic_s=0.25)
POLICY = PolicyResult(policy_version=4, stats={"policy_loss": -0.015625, "entropy": 1.5, "approx_kl": 0.0078125,
                                               "clip_fraction": 0.125},
                      nonfinite_steps=1, convexity=-0.5, extras={"hessian_ratio": -0.5, "probe_s": 0.0625},
                      probe_rows=380.0, rows=380, dead_rows=20, policy_s=0.375, device="cpu")
VALUE = ValuePolicyResult(policy="p_agent_0", policy_version=5, stats={"policy_loss": 0.5, "q_mean": 2.0,
                                                                       "td_abs": 0.25},
                          grad_steps=40, gradient_steps_run=8, target_refreshes=1, nonfinite_steps=0, nonfinite=False,
                          epsilon=0.125, replay_rows=1200, convexity=-0.25, extras={}, probe_rows=0.0, policy_s=0.5,
                          device="cpu")
TEAM_PART = TeamPolicyResult(policy_version=2, stats={"policy_loss": 0.5, "q_mean": 1.0, "td_abs": 0.25},
                             gradient_steps_run=8, nonfinite_steps=0, nonfinite=False, grad_steps=16,
                             target_refreshes=0, replay_rows=600, convexity=-1.5, extras={}, probe_rows=0.0,
                             epsilon=0.25, policy_s=0.75)
TEAM = TeamResult(policies={"p_agent_0": TEAM_PART, "p_agent_1": TEAM_PART}, mixer_version=2, policy_s=0.75,
                  device="cpu")
VDN_POSTPROCESS = VDNPostprocessResult(post_key="post/team/r2", rows=200, team_reward_mean=-1.5, postprocess_s=0.0625)
RESULTS = [ACTOR, POSTPROCESS, CRITIC, POLICY, VALUE, TEAM, VDN_POSTPROCESS]

# the header keys each function wrote, in order, before its result was a class: the wire must not change
WIRE_KEYS = {
    MultiAgentActorResult: ["actor_rank", "env_steps", "agents", "episode_returns", "episode_lengths", "sampling_s",
                            "env_s", "inference_s", "policy_versions"],
    PostprocessResult: ["post_key", "rows", "postprocess_s"],
    CriticResult: ["critic_version", "value_loss", "critic_nonfinite_steps", "explained_variance", "adv_key", "rows",
                   "dead_rows", "device", "critic_s"],
    PolicyResult: ["policy_version", "policy_loss", "entropy", "approx_kl", "clip_fraction", "nonfinite_steps",
                   "convexity", "extras", "probe_rows", "rows", "dead_rows", "policy_s", "device"],
    ValuePolicyResult: ["policy", "policy_version", "policy_loss", "q_mean", "td_abs", "grad_steps",
                        "gradient_steps_run", "target_refreshes", "nonfinite_steps", "nonfinite", "epsilon",
                        "replay_rows", "convexity", "extras", "probe_rows", "policy_s", "device"],
    TeamResult: ["policies", "mixer_version", "policy_s", "device"],
    VDNPostprocessResult: ["post_key", "rows", "team_reward_mean", "postprocess_s"],
}
TEAM_PART_KEYS = ["policy_version", "policy_loss", "q_mean", "td_abs", "gradient_steps_run", "nonfinite_steps",
                  "nonfinite", "grad_steps", "target_refreshes", "replay_rows", "convexity", "extras", "probe_rows",
                  "epsilon", "policy_s"]


@pytest.mark.parametrize("result", RESULTS, ids=lambda result: type(result).__name__)
def test_every_result_comes_back_equal_through_the_codec_with_the_runtimes_keys_beside_it(result) -> None:
    message = decode(encode(result.wire_message(extra_header={"_invocation_id": "inv-1", "_attempt": 2})))
    assert type(result).from_message(message) == result


@pytest.mark.parametrize("result", RESULTS, ids=lambda result: type(result).__name__)
def test_the_header_keeps_the_flat_keys_the_functions_always_wrote(result) -> None:
    header = result.wire_message().header
    assert list(header) == WIRE_KEYS[type(result)]
    if isinstance(result, PolicyResult):
        assert header["policy_loss"] == -0.015625 and "stats" not in header   # the statistics flat, not nested
    if isinstance(result, TeamResult):
        assert all(list(table) == TEAM_PART_KEYS for table in header["policies"].values())
        assert header["policies"]["p_agent_0"]["q_mean"] == 1.0


def test_the_actors_env_slot_travels_beside_its_fields_and_is_no_field() -> None:
    message = ACTOR.wire_message(extra_header={SLOT_META: [{"env": {}}]})
    assert message.header[SLOT_META] == [{"env": {}}]
    assert MultiAgentActorResult.from_message(message) == ACTOR


def test_row_stats_are_the_numbers_the_metrics_row_reports_bookkeeping_left_out() -> None:
    assert POLICY.row_stats() == {"policy_loss": -0.015625, "entropy": 1.5, "approx_kl": 0.0078125,
                                  "clip_fraction": 0.125, "nonfinite_steps": 1.0, "convexity": -0.5,
                                  "probe_rows": 380.0, "dead_rows": 20.0, "policy_s": 0.375}
    assert list(CRITIC.row_stats()) == ["value_loss", "critic_nonfinite_steps", "explained_variance", "dead_rows",
                                        "critic_s"]
    assert POSTPROCESS.row_stats() == {"postprocess_s": 0.03125}
    assert list(VALUE.row_stats()) == ["policy_loss", "q_mean", "td_abs", "grad_steps", "gradient_steps_run",
                                       "target_refreshes", "nonfinite_steps", "epsilon", "replay_rows", "convexity",
                                       "probe_rows", "policy_s"]   # not policy_version, the nonfinite flag, extras
    assert TEAM.policies["p_agent_1"].row_stats()["q_mean"] == 1.0
    assert all(isinstance(value, float) for value in VALUE.row_stats().values())
    unprobed = PolicyResult.from_message(Message(header={**POLICY.wire_message().header, "convexity": math.nan}))
    assert math.isnan(unprobed.row_stats()["convexity"])   # an unprobed round's NaN reaches the row


def test_a_missing_field_or_statistic_is_named() -> None:
    header = POLICY.wire_message().header
    with pytest.raises(ResultError, match=r"PolicyResult: the function's result lacks the statistics entropy \("):
        PolicyResult.from_message(Message(header={k: v for k, v in header.items() if k != "entropy"}))
    with pytest.raises(ResultError, match=r"PolicyResult: the function's result lacks dead_rows \("):
        PolicyResult.from_message(Message(header={k: v for k, v in header.items() if k != "dead_rows"}))
    with pytest.raises(ResultError, match=r"CriticResult: the function's result lacks value_loss"):
        CriticResult.from_message(Message(header={k: v for k, v in CRITIC.wire_message().header.items()
                                                  if k != "value_loss"}))
    with pytest.raises(ResultError, match=r"MultiAgentActorResult: the function's result lacks episode_returns"):
        MultiAgentActorResult.from_message(Message(header={k: v for k, v in ACTOR.wire_message().header.items()
                                                           if k != "episode_returns"}))
    team = TEAM.wire_message().header
    team["policies"]["p_agent_1"].pop("td_abs")
    with pytest.raises(ResultError, match=r"TeamPolicyResult: the function's result lacks the statistics td_abs"):
        TeamResult.from_message(Message(header=team))
    with pytest.raises(ResultError, match=r"TeamResult: the function's result lacks policies"):
        TeamResult.from_message(Message(header={"mixer_version": 0, "policy_s": 0.5, "device": "cpu"}))


def test_each_on_policy_role_reads_its_own_result_class() -> None:
    assert ROLE_RESULTS == {"postprocess": PostprocessResult, "critic": CriticResult, "policy": PolicyResult}
    assert all(issubclass(cls, MarlessResult) for cls in ROLE_RESULTS.values())
