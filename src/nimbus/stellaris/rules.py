"""Gradient aggregation rules for asynchronous learner functions (Stellaris §V-C).

A rule sees each gradient as it lands (`offer`) and answers with a `Verdict`: the gradients to
aggregate now (an `Aggregation`, each member with its staleness and scale), or nothing yet, plus any
gradient it refuses (P7: a refused gradient never reaches the optimizer, and is counted). The
workflow invokes the parameter function with the aggregation, then calls `applied` when the new
version is published; it offers nothing while a parameter function is in flight, so a queued
gradient's staleness (version now − version its learner read) cannot change while it waits.

    stellaris       the paper, with δmax measured in steady state. The paper measures δmax in training
                    round 0, run without a threshold; here round 0 is the cold start (workers, the
                    first parameter function and the first learners start cold, and their gradients
                    are the stalest of the run: 7 where steady state peaks at 3-5 in the shipped
                    CartPole config), so it is excluded: rounds 0 and 1 run without a threshold, each
                    gradient applied on arrival, and δmax (at least 1) is the largest staleness of the
                    gradients whose learner read a version published since round 1 started (so no
                    learner launched in round 0 counts, even one that lands in round 1). Excluding a
                    round rather than taking the largest of the first K aggregations keeps the paper's
                    unit (a round) and its "max", and needs no K fitted to a config: any K that reaches
                    back into round 0 would see the cold starts again. ``warmup_rounds=0`` is the paper
                    as written. From then on β_k = δmax · d^k in round k (k counts every round, the
                    unmeasured ones too); every arrival is queued and the whole queue is aggregated
                    when its mean staleness ≤ β_k. A gradient that even a full queue of fresh ones could
                    not admit (δ > β_k · ``max_queue``) is refused at once; a queue longer than
                    ``max_queue`` sheds its stalest gradient (refused). Scale 1/δ^(1/v) for δ > 0, 1 at
                    δ = 0, applied by the parameter function as the step's learning rate (Eq. 4).
    stellaris_code  the authors' code (IntelliSys-Lab/Stellaris-SC24, evaluation/experiment/stellaris.py and
                    rllib/policy/torch_policy_v2.py; the same at 0f96794 and the newest commit): no
                    threshold (each gradient applied on arrival) until a round's mean staleness is > 0;
                    then max_staleness = int(that mean) + 1 and in round k the threshold is the integer
                    clip(int(max_staleness · d^k) + 1, 1, max_staleness) (their round_id = k + 1 and
                    d^(round_id − 1)). The queue is aggregated when its mean staleness ≤ the threshold
                    or it holds ``learners`` gradients; each member is its own optimizer step
                    (``separate_steps``), unscaled: their per-gradient learning-rate factor is a LambdaLR
                    whose lambda receives the scheduler's step count, not the staleness, and with v 3
                    it resets every factor below their decay to 1, so it is 1 at every step. Nothing is
                    refused.
    sync            only gradients of the current version (others refused); aggregate when ``learners``
                    of them are queued; at most ``learners`` launches per version (`may_launch`).
    softsync        aggregate every ``k`` gradients, whatever their staleness (Zhang et al. 2016).
    ssp             each gradient applied on arrival; a learner slot more than ``s`` applied gradients
                    ahead of the slowest slot waits (`may_launch`, Ho et al. 2013).
    async           each gradient applied on arrival.

What the workflow calls (every call keyword-only; rule_base.py has each one's contract)::

    rule = make_rule(name="stellaris", learners=3)
    rule.version = progress.policy_version; rule.restore(state=saved)   # a resumed run (state() saved it)
    rule.start_round(index=k)                          # as each batch starts
    if rule.may_launch(slot=s): rule.launched(slot=s)  # a learner launched at rule.version
    verdict = rule.offer(arrival=Arrival(key="grad/main/7", slot=1, read_version=4))
    rule.lost(arrival=..., reason="non-finite")        # a launched gradient that will never be offered
    # verdict.rejected: refused (P7); verdict.aggregation: invoke the parameter function, then
    rule.applied(aggregation=..., refused_keys=...)    # it published (members it refused count as lost)
    rule.unpublished(aggregation=...)                  # it published nothing (all refused)
    verdict = rule.stalled()                           # watchdog: nothing in flight, nothing launchable
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from nimbus.stellaris.rule_base import (
    Aggregation,
    Arrival,
    Member,
    QueueRule,
    Rejection,
    Rule,
    Verdict,
    staleness_scale,
)

__all__ = ["Aggregation", "Arrival", "Member", "Rejection", "Rule", "Verdict", "RULES", "make_rule",
           "staleness_scale"]

RuleName = Literal["stellaris", "stellaris_code", "sync", "softsync", "ssp", "async"]
RULES: tuple[str, ...] = ("stellaris", "stellaris_code", "sync", "softsync", "ssp", "async")


class AsyncRule(Rule):
    name = "async"


class SSPRule(Rule):
    """Stale synchronous parallel: apply on arrival; a slot ``bound`` applied gradients ahead of the slowest waits."""

    name = "ssp"

    def __init__(self, *, learners: int, bound: int) -> None:
        super().__init__(learners=learners)
        self.bound = bound

    def may_launch(self, *, slot: int) -> bool:
        """A slot's clock counts its gradients applied or lost, so a slot whose gradients are lost holds no one back."""
        clocks = self.applied_per_slot + self.lost_per_slot
        slowest = min(clocks[s] for s in range(self.learners))
        return clocks[slot] - slowest <= self.bound


class SoftSyncRule(QueueRule):
    name = "softsync"

    def __init__(self, *, learners: int, k: int) -> None:
        super().__init__(learners=learners)
        self.k = k

    def offer(self, *, arrival: Arrival) -> Verdict:
        self.queue.append(self._member(arrival=arrival))
        return self._flush() if len(self.queue) >= self.k else Verdict(aggregation=None)


class SyncRule(QueueRule):
    name = "sync"

    def may_launch(self, *, slot: int) -> bool:
        """At most ``learners`` launches per version, not counting those whose gradient was lost (Rule.lost)."""
        return self.launches_per_version[self.version] - self.lost_per_version[self.version] < self.learners

    def offer(self, *, arrival: Arrival) -> Verdict:
        member = self._member(arrival=arrival)
        if member.staleness != 0:
            return Verdict(aggregation=None, rejected=(Rejection(key=member.key, staleness=member.staleness,
                                                                 reason="sync admits only the current version"),))
        self.queue.append(member)
        return self._flush() if len(self.queue) >= self.learners else Verdict(aggregation=None)


class StellarisRule(QueueRule):
    """The paper's staleness-aware aggregation (see the module docstring)."""

    name = "stellaris"

    def __init__(self, *, learners: int, decay: float, root: int, max_queue: int | None = None,
                 warmup_rounds: int = 1) -> None:
        super().__init__(learners=learners)
        if warmup_rounds < 0:
            raise ValueError(f"warmup_rounds must be ≥ 0, got {warmup_rounds}")
        self.decay, self.root, self.warmup_rounds = decay, root, warmup_rounds
        self.max_queue = max_queue if max_queue is not None else 2 * learners
        self.rounds_started = 0                    # rounds this rule has seen start
        # the version the measurement began at (-1: every gradient counts; None: not measuring yet)
        self.measure_from: int | None = -1 if warmup_rounds == 0 else None
        self.measured: list[int] = []              # stalenesses measured so far
        self.seed: float | None = None             # δmax once measured

    @property
    def threshold(self) -> float | None:
        return None if self.seed is None else self.seed * self.decay ** self.round

    def start_round(self, *, index: int) -> None:
        """The first ``warmup_rounds`` rounds this rule sees are cold starts: no threshold, not measured.
        The next is the measurement round: no threshold, and the staleness of every gradient whose learner
        read a version published since it started is measured. At the start of the round after it,
        δmax = max(measured, 1); if nothing was measured, the measurement goes on one more round."""
        super().start_round(index=index)
        self.rounds_started += 1
        if self.seed is not None or self.rounds_started <= self.warmup_rounds:
            return
        if self.measure_from is None:
            self.measure_from = self.version
        elif self.measured:
            self.seed = self._seed_from(stalenesses=self.measured)

    def _seed_from(self, *, stalenesses: list[int]) -> float:
        return float(max(max(stalenesses), 1))

    def _own_state(self) -> dict[str, Any]:
        return {"rounds_started": self.rounds_started, "measure_from": self.measure_from,
                "measured_max": max(self.measured) if self.measured else None, "seed": self.seed}

    def _restore_own(self, *, state: Mapping[str, Any]) -> None:
        self.rounds_started = int(state["rounds_started"])
        self.measure_from = None if state["measure_from"] is None else int(state["measure_from"])
        self.measured = [] if state["measured_max"] is None else [int(state["measured_max"])]
        self.seed = None if state["seed"] is None else float(state["seed"])

    def _measure(self, *, member: Member, read_version: int) -> None:
        if self.measure_from is not None and (self.measure_from < 0 or read_version >= self.measure_from):
            self.measured.append(member.staleness)

    gathers = True

    def offer(self, *, arrival: Arrival) -> Verdict:
        return self.offer_many(arrivals=[arrival])

    def offer_many(self, *, arrivals: Sequence[Arrival]) -> Verdict:
        """Queue each arrival (P7: refuse one never admissible; shed the stalest beyond ``max_queue``), then
        aggregate the whole queue if its mean staleness ≤ β_k. Before δmax is measured there is no threshold: the
        queue is always admitted (one gradient offered alone is applied on arrival)."""
        rejected: list[Rejection] = []
        for arrival in arrivals:
            staleness = self.version - arrival.read_version
            member = self._member(arrival=arrival, scale=staleness_scale(staleness=staleness, root=self.root))
            threshold = self.threshold
            if threshold is None:   # warm-up and measurement rounds: no seed yet
                self._measure(member=member, read_version=arrival.read_version)
            elif self._never_admissible(staleness=member.staleness, threshold=threshold):
                rejected.append(Rejection(
                    key=member.key, staleness=member.staleness,
                    reason=f"staler than β·max_queue = {threshold * self.max_queue:g}: never admissible"))
                continue
            self.queue.append(member)
            if self.seed is not None:
                rejected.extend(self._shed())
        if self.queue and (self.seed is None or self._admissible()):
            return Verdict(aggregation=self._flush().aggregation, rejected=tuple(rejected))
        return Verdict(aggregation=None, rejected=tuple(rejected))

    def _admissible(self) -> bool:
        """The queue's mean staleness ≤ β_k (always, before δmax is measured)."""
        threshold = self.threshold
        mean = sum(m.staleness for m in self.queue) / len(self.queue)
        return threshold is None or mean <= threshold

    def stalled(self) -> Verdict:
        """The watchdog refuses what the queue holds: its bound is the point of this rule (Rule.stalled)."""
        Rule.stalled(self)
        rejected = tuple(Rejection(key=m.key, staleness=m.staleness,
                                   reason="watchdog: nothing can arrive to bring the queue's mean staleness to β")
                         for m in self.queue)
        self.queue = []
        return Verdict(aggregation=None, rejected=rejected)

    def _never_admissible(self, *, staleness: int, threshold: float) -> bool:
        """Even a full queue of fresh gradients could not bring the mean to β_k (``threshold``)."""
        return staleness > threshold * self.max_queue

    def _shed(self) -> tuple[Rejection, ...]:
        shed = []
        while len(self.queue) > self.max_queue:
            stalest = max(self.queue, key=lambda m: m.staleness)
            self.queue.remove(stalest)
            shed.append(Rejection(key=stalest.key, staleness=stalest.staleness, reason="queue full"))
        return tuple(shed)


class StellarisCodeRule(QueueRule):
    """The authors' code (IntelliSys-Lab/Stellaris-SC24: evaluation/experiment/stellaris.py for the threshold,
    rllib/policy/torch_policy_v2.py for the queue and the steps; module docstring)."""

    name = "stellaris_code"

    def __init__(self, *, learners: int, decay: float) -> None:
        super().__init__(learners=learners)
        self.decay = decay
        self.round_staleness_sum = 0     # the current round's stalenesses while no seed is set
        self.round_gradients = 0
        self.seed: int | None = None     # max_staleness = int(a round's mean staleness) + 1

    @property
    def threshold(self) -> int | None:
        """clip(int(max_staleness · d^k) + 1, 1, max_staleness) in round k (their round_id = k + 1)."""
        if self.seed is None:
            return None
        return min(max(int(self.seed * self.decay ** self.round) + 1, 1), self.seed)

    def start_round(self, *, index: int) -> None:
        """The seed comes from the first round whose mean staleness is > 0 (their ``info`` of the last round)."""
        super().start_round(index=index)
        if self.seed is None and self.round_gradients and self.round_staleness_sum > 0:
            self.seed = int(self.round_staleness_sum / self.round_gradients) + 1
        self.round_staleness_sum = self.round_gradients = 0

    def _own_state(self) -> dict[str, Any]:
        return {"seed": self.seed, "round_staleness_sum": self.round_staleness_sum,
                "round_gradients": self.round_gradients}

    def _restore_own(self, *, state: Mapping[str, Any]) -> None:
        self.seed = None if state["seed"] is None else int(state["seed"])
        self.round_staleness_sum = int(state["round_staleness_sum"])
        self.round_gradients = int(state["round_gradients"])

    gathers = True

    def offer(self, *, arrival: Arrival) -> Verdict:
        return self.offer_many(arrivals=[arrival])

    def offer_many(self, *, arrivals: Sequence[Arrival]) -> Verdict:
        """Queue them; before the seed every gradient is applied (as its own step), after it the queue is flushed
        when its mean staleness ≤ the threshold or it holds ``learners`` gradients."""
        for arrival in arrivals:
            member = self._member(arrival=arrival)   # scale 1: their code applies no staleness scale (docstring)
            if self.seed is None:
                self.round_staleness_sum += member.staleness
                self.round_gradients += 1
            self.queue.append(member)
        if not self.queue:
            return Verdict(aggregation=None)
        mean = sum(m.staleness for m in self.queue) / len(self.queue)
        threshold = self.threshold   # None: no seed yet
        if threshold is None or mean <= threshold or len(self.queue) >= self.learners:
            return self._flush(separate_steps=True)
        return Verdict(aggregation=None)

    def stalled(self) -> Verdict:
        """The watchdog aggregates what the queue holds, as separate steps (Rule.stalled)."""
        Rule.stalled(self)
        return self._flush(separate_steps=True) if self.queue else Verdict(aggregation=None)


def make_rule(*, name: str, learners: int, decay: float = 0.96, root: int = 3, softsync_k: int = 2,
              ssp_bound: int = 1, max_queue: int | None = None, warmup_rounds: int = 1) -> Rule:
    """The rule ``name`` (one of RULES) with its parameters (``warmup_rounds``: ``stellaris`` only)."""
    if name == "stellaris":
        return StellarisRule(learners=learners, decay=decay, root=root, max_queue=max_queue,
                             warmup_rounds=warmup_rounds)
    if name == "stellaris_code":
        return StellarisCodeRule(learners=learners, decay=decay)
    if name == "sync":
        return SyncRule(learners=learners)
    if name == "softsync":
        return SoftSyncRule(learners=learners, k=softsync_k)
    if name == "ssp":
        return SSPRule(learners=learners, bound=ssp_bound)
    if name == "async":
        return AsyncRule(learners=learners)
    raise ValueError(f"unknown aggregation rule {name!r}; expected one of {RULES}")
