"""The learner side of a MARLess round (MARLess §4.2, Fig. 5): which functions run, with which requests, and
which Store keys the round leaves behind.

* ``OnPolicyLearning`` (IPPO, MAPPO): each role of the algorithm in order (postprocess → critic → policy),
  one invocation per active policy and role, the policies of a role concurrently; the round's
  ``batch/``, ``post/`` and ``adv/`` values are dropped once the policy functions have returned.
* ``ValueLearning`` (IQL, VDN, QMIX): an off-policy replay of the last rounds' batches. IQL's policy function
  for p reads p's last ``replay_rounds`` batches; VDN's and QMIX's post-processing function (once per round, for
  the team) joins every policy's batch into ``post/team/r<k>`` and one policy function for the team
  (marless/team_learner.py) reads the last rounds of those and updates every active policy (and QMIX's mixer)
  jointly: two learner invocations a round however many policies. A key that leaves every replay is deleted.

Both read each function's typed result (marless/results.py), return each active policy's row statistics (loss
parts, ``convexity``...: the results' ``row_stats()``) and advance the versions in ``progress``.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import CancelledError, Future
from typing import Any

from nimbus.data.codec import Message
from nimbus.errors import NimbusError
from nimbus.marless.learner import ROLE_RESULTS, MarlessLearnerRequest
from nimbus.types import schedule_fraction

TEAM = "team"   # VDN's joint rows: post/team/r<k>


def batch_key(*, policy: str, round: int) -> str:
    return f"batch/{policy}/r{round}"


def results_of(*, futures: list[Future], what: str) -> list[Message]:
    """Every future's result, in order; the first failure (after the runtime's retries) stops the run. Each future is
    awaited through its own ``exception()``, not ``concurrent.futures.wait``: a simulated runtime's future advances
    the virtual clock when awaited that way, where ``wait`` would block on a condition nothing signals."""
    for future in futures:
        with contextlib.suppress(CancelledError):   # a cancelled one fails below, as after ``wait``
            future.exception()   # every one has ended (as ``wait`` would) before the first failure is raised
    out = []
    for future in futures:
        try:
            out.append(future.result())
        except Exception as exc:
            raise NimbusError(f"a {what} function failed after its retries: {exc}") from exc
    return out


def nonfinite_round(*, stats: dict[str, dict[str, float]]) -> bool:
    """Whether a learner function of the round skipped a step on a non-finite loss or gradient (every learner counts
    them: ``nonfinite_steps``, the critic's ``critic_nonfinite_steps``); the driver's ``train.max_nonfinite_losses``
    guard counts such rounds in a row."""
    return any(value > 0 for policy_stats in stats.values() for key, value in policy_stats.items()
               if key.endswith("nonfinite_steps"))


class _Learning:
    def __init__(self, *, parts: Any, progress: Any) -> None:
        self.parts, self.progress = parts, progress

    probe = False   # set by the workflow each round: probe the updated policies' convexity (``probe_now``)

    def probe_now(self, *, agent_returns: dict[str, float]) -> bool:
        """Probe this round only when a controller will read it: the scaler every round, the sharing controller
        on the rounds it switches sharing on; a probe that no controller reads would only cost learner time."""
        self.probe = self.parts.scaler.needs_convexity or \
            self.parts.sharing.probes_now(agent_returns=agent_returns)
        return self.probe

    def _progress_fraction(self) -> float:
        return schedule_fraction(progress=self.progress, total_env_steps=self.parts.config.train.total_env_steps)

    def _invoke(self, *, role: str, requests: list[Message]) -> list[Message]:
        runtime, spec = self.parts.shared.runtime, self.parts.specs[role]
        futures = [runtime.invoke(spec=spec, request=request) for request in requests]
        self.progress.learner_invocations += len(futures)
        return results_of(futures=futures, what=role)

    def _members(self, *, policy: str, agent_policy: dict[str, str]) -> dict[str, int]:
        agents = list(self.parts.agents)
        return {a: agents.index(a) for a in agents if agent_policy[a] == policy}


class OnPolicyLearning(_Learning):
    def run(self, *, active: list[str], agent_policy: dict[str, str], round: int, rows_per_agent: int
            ) -> tuple[dict[str, dict[str, float]], list[str]]:
        stats: dict[str, dict[str, float]] = {policy: {} for policy in active}
        for role in self.parts.algo.roles:
            requests = [self.request(policy=p, agent_policy=agent_policy, round=round).to_message() for p in active]
            for policy, message in zip(active, self._invoke(role=role, requests=requests)):
                stats[policy].update(ROLE_RESULTS[role].from_message(message).row_stats())
                if role == "policy":
                    self.progress.versions[policy] += 1
                elif role == "critic":
                    self.progress.critic_versions[policy] += 1
        stale = [f"{prefix}/{policy}/r{round}" for policy in active for prefix in ("batch", "post", "adv")]
        return stats, stale

    def request(self, *, policy: str, agent_policy: dict[str, str], round: int) -> MarlessLearnerRequest:
        cfg = self.parts.config
        return MarlessLearnerRequest(
            env_id=cfg.env.id, env_kwargs=dict(cfg.env.kwargs), algo=cfg.algo.model_dump(mode="json"), policy=policy,
            round=round, agents=self._members(policy=policy, agent_policy=agent_policy),
            all_agents=tuple(self.parts.agents), batch_key=batch_key(policy=policy, round=round),
            weights_version=self.progress.versions[policy], critic_version=self.progress.critic_versions.get(policy, 0),
            seed=cfg.seed + round, progress=self._progress_fraction(), probe=self.probe,
            env_imports=tuple(cfg.env.imports), agent_id=self.parts.agent_id)


class ValueLearning(_Learning):
    def __init__(self, *, parts: Any, progress: Any) -> None:
        super().__init__(parts=parts, progress=progress)
        # progress.replays: policy (IQL) or TEAM (VDN) → keys, oldest first; what a checkpoint keeps
        # (train.checkpoint_replay), and a resume puts back
        self.replays: dict[str, list[str]] = progress.replays

    def run(self, *, active: list[str], agent_policy: dict[str, str], round: int, rows_per_agent: int
            ) -> tuple[dict[str, dict[str, float]], list[str]]:
        from nimbus.marless.team_rows import VDNPostprocessRequest
        from nimbus.marless.value_learner import ValuePolicyResult

        stale: list[str] = []
        if "postprocess" in self.parts.algo.roles:   # VDN: the team's joint rows, once per round
            post_key = f"post/{TEAM}/r{round}"
            self._invoke(role="postprocess", requests=[VDNPostprocessRequest(
                round=round, all_agents=tuple(self.parts.agents), post_key=post_key,
                batch_keys=tuple(batch_key(policy=p, round=round) for p in active)).to_message()])
            stale += [batch_key(policy=p, round=round) for p in active]
            stale += self._remember(owner=TEAM, key=post_key, rows=rows_per_agent)
        else:
            for policy in active:
                members = sum(p == policy for p in agent_policy.values())
                stale += self._remember(owner=policy, key=batch_key(policy=policy, round=round),
                                        rows=rows_per_agent * members)
        if getattr(self.parts.algo, "joint", False):
            return self._joint(agent_policy=agent_policy, round=round), stale
        requests = [self.request(policy=p, agent_policy=agent_policy, round=round).to_message() for p in active]
        stats = {}
        for policy, message in zip(active, self._invoke(role="policy", requests=requests)):
            stats[policy] = ValuePolicyResult.from_message(message).row_stats()
            self.progress.versions[policy] += 1
        return stats, stale

    def _joint(self, *, agent_policy: dict[str, str], round: int) -> dict[str, dict[str, float]]:
        """VDN, QMIX: one team policy function updates every policy in ``agent_policy`` (and the mixer)."""
        from nimbus.marless.team_learner import TeamLearnerRequest, TeamResult
        from nimbus.marless.value_learner import spaces_header

        cfg, in_use = self.parts.config, sorted(set(agent_policy.values()))
        request = TeamLearnerRequest(
            round=round, algo=cfg.algo.model_dump(mode="json"), all_agents=tuple(self.parts.agents),
            agent_policy=dict(agent_policy), policy_versions={p: self.progress.versions[p] for p in in_use},
            replay_keys=tuple(self.replays.get(TEAM, ())),
            spaces={p: spaces_header(spaces=self.parts.policy_spaces[p]) for p in in_use}, seed=cfg.seed + round,
            progress=self._progress_fraction(), mixer_version=self.progress.mixer_version,
            state_dim=self.parts.state_dim, probe=self.probe)
        result = TeamResult.from_message(self._invoke(role="policy", requests=[request.to_message()])[0])
        self.progress.mixer_version = result.mixer_version
        stats = {}
        for policy in in_use:
            stats[policy] = result.policies[policy].row_stats()
            self.progress.versions[policy] += 1
        return stats

    def _remember(self, *, owner: str, key: str, rows: int) -> list[str]:
        """Add this round's key to ``owner``'s replay; the keys that fall out of it (to delete)."""
        from nimbus.marless.value_learner import replay_rounds

        replay = self.replays.setdefault(owner, [])
        replay.append(key)
        keep = replay_rounds(capacity_rows=self.parts.config.algo.replay_capacity, rows_per_round=max(1, rows))
        dropped = replay[:max(0, len(replay) - keep)]
        del replay[:len(dropped)]
        return dropped

    def request(self, *, policy: str, agent_policy: dict[str, str], round: int) -> Any:
        """The policy function's ValueLearnerRequest (marless/value_learner.py)."""
        from nimbus.marless.value_learner import ValueLearnerRequest, spaces_header

        cfg, spaces = self.parts.config, self.parts.policy_spaces
        in_use = sorted(set(agent_policy.values()))
        owner = TEAM if "postprocess" in self.parts.algo.roles else policy
        return ValueLearnerRequest(
            policy=policy, round=round, algo=cfg.algo.model_dump(mode="json"),
            agents=self._members(policy=policy, agent_policy=agent_policy), all_agents=tuple(self.parts.agents),
            agent_policy=dict(agent_policy), policy_versions={p: self.progress.versions[p] for p in in_use},
            replay_keys=tuple(self.replays.get(owner, ())),
            spaces={p: spaces_header(spaces=spaces[p]) for p in in_use},
            seed=cfg.seed + round, progress=self._progress_fraction(), probe=self.probe)


def make_learning(*, parts: Any, progress: Any) -> OnPolicyLearning | ValueLearning:
    return OnPolicyLearning(parts=parts, progress=progress) if parts.algo.on_policy else \
        ValueLearning(parts=parts, progress=progress)
