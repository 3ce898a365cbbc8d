"""What every aggregation rule shares (stellaris/rules.py has the rules): the arrival, the verdict and the
rule's common state. A rule is a plain object the workflow drives; see rules.py's docstring for the calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Arrival:
    key: str            # the gradient's Store key
    slot: int           # the learner slot that computed it
    read_version: int   # the policy version its learner read


@dataclass(frozen=True)
class Member:
    key: str
    staleness: int
    scale: float        # multiplies the gradient before the mean (Eq. 4's α0/δ^(1/v) as a factor of α0)
    slot: int = 0
    read_version: int = 0

    def arrival(self) -> Arrival:
        """The arrival this member came from (to tell the rule it was lost: `Rule.lost`)."""
        return Arrival(key=self.key, slot=self.slot, read_version=self.read_version)


@dataclass(frozen=True)
class Aggregation:
    members: tuple[Member, ...]
    separate_steps: bool = False   # stellaris_code: one optimizer step per member, in order (still one version)


@dataclass(frozen=True)
class Rejection:
    key: str
    staleness: int
    reason: str


@dataclass(frozen=True)
class Verdict:
    aggregation: Aggregation | None
    rejected: tuple[Rejection, ...] = ()


def staleness_scale(*, staleness: int, root: int) -> float:
    """Eq. 4 as a factor of α0: 1/δ^(1/v) for δ > 0, 1 for a fresh gradient."""
    return 1.0 if staleness <= 0 else float(staleness) ** (-1.0 / root)


class Rule:
    """Common state: the parameter version now, and launches/applications per learner slot."""

    name = "async"

    def __init__(self, *, learners: int) -> None:
        if learners < 1:
            raise ValueError(f"learners must be ≥ 1, got {learners}")
        self.learners = learners
        self.version = 0
        self.aggregations = 0
        self.launches_per_version: Counter[int] = Counter()
        self.applied_per_slot: Counter[int] = Counter()
        self.lost_per_slot: Counter[int] = Counter()       # gradients that never counted (Rule.lost)
        self.lost_per_version: Counter[int] = Counter()    # the same, by the version their learner read
        self.round = 0

    def start_round(self, *, index: int) -> None:
        """Training round ``index`` (a batch) starts: the staleness-aware rules decay their threshold by round."""
        self.round = index

    @property
    def threshold(self) -> float | None:
        """β_k for the staleness-aware rules; None where the rule has no threshold."""
        return None

    def may_launch(self, *, slot: int) -> bool:
        return True

    def launched(self, *, slot: int) -> None:
        self.launches_per_version[self.version] += 1

    def _member(self, *, arrival: Arrival, scale: float = 1.0) -> Member:
        return Member(key=arrival.key, staleness=self.version - arrival.read_version, scale=scale, slot=arrival.slot,
                      read_version=arrival.read_version)

    def offer(self, *, arrival: Arrival) -> Verdict:
        return Verdict(aggregation=Aggregation(members=(self._member(arrival=arrival),)))

    gathers = False
    """Whether the rule takes several arrivals at once (``offer_many``): the queue rules with a staleness
    threshold, whose decision is over the whole queue; the others decide per gradient."""

    def offer_many(self, *, arrivals: Sequence[Arrival]) -> Verdict:
        """Every gradient that landed while the parameter function ran, queued together, then one decision over
        the queue (the paper's parameter function fetches the newly computed gradients into its queue)."""
        raise NotImplementedError(f"rule {self.name!r} decides per gradient: use offer")

    def state(self) -> dict[str, Any]:
        """What a checkpoint saves to resume this rule (JSON-ready: str keys, ints, floats, None): the round,
        the counters and what the rule measured (δmax and its measurement). Not the version (the workflow
        sets ``version`` from the checkpoint's policy version) nor queued gradients (not resumed)."""
        return {"rule": self.name, "round": self.round, "aggregations": self.aggregations,
                "applied_per_slot": {str(slot): count for slot, count in sorted(self.applied_per_slot.items())},
                "lost_per_slot": {str(slot): count for slot, count in sorted(self.lost_per_slot.items())},
                **self._own_state()}

    def restore(self, *, state: Mapping[str, Any]) -> None:
        """Continue from ``state()`` of a rule of the same name (ValueError otherwise)."""
        if state.get("rule") != self.name:
            raise ValueError(f"cannot restore rule {self.name!r} from the state of rule {state.get('rule')!r}")
        self.round = int(state["round"])
        self.aggregations = int(state["aggregations"])
        self.applied_per_slot = Counter({int(slot): int(n) for slot, n in state["applied_per_slot"].items()})
        self.lost_per_slot = Counter({int(slot): int(n) for slot, n in state.get("lost_per_slot", {}).items()})
        self._restore_own(state=state)

    def _own_state(self) -> dict[str, Any]:
        return {}

    def _restore_own(self, *, state: Mapping[str, Any]) -> None:
        return None

    def applied(self, *, aggregation: Aggregation, refused_keys: Collection[str] = ()) -> None:
        """The parameter function published the aggregation as one new version; the members it refused
        (``refused_keys``: not finite, wrong shape) count as lost."""
        self.version += 1
        self.aggregations += 1
        for member in aggregation.members:
            if member.key in refused_keys:
                self.lost(arrival=member.arrival(), reason="refused by the parameter function")
            else:
                self.applied_per_slot[member.slot] += 1

    def unpublished(self, *, aggregation: Aggregation) -> None:
        """The parameter function published nothing (it refused every member): the version stays, and every
        member counts as lost (`sync` launches learners again for this version)."""
        for member in aggregation.members:
            self.lost(arrival=member.arrival(), reason="refused by the parameter function")

    def lost(self, *, arrival: Arrival, reason: str) -> None:
        """A launched gradient that will never count: non-finite at the learner, or its function failed (never
        offered), or refused by the parameter function (`applied`, `unpublished`). A rule that waits for a
        number of gradients stops waiting for it: `sync` launches another learner at its version, `ssp`
        advances its slot's clock. ``reason`` is for the log."""
        self.lost_per_slot[arrival.slot] += 1
        self.lost_per_version[arrival.read_version] += 1

    @property
    def holding(self) -> int:
        """Gradients the rule holds, waiting (queued, not yet aggregated or refused)."""
        return 0

    def stalled(self) -> Verdict:
        """The progress watchdog: the workflow calls it when no learner is in flight, no gradient waits to be
        offered, no parameter function runs and no learner can be launched, i.e. nothing that could change
        the rule's mind can arrive. The rule settles what it holds (aggregates or refuses it: each rule says
        which) and re-opens launches at the current version, so no rule waits forever. Treat the verdict as
        an offer's."""
        self.launches_per_version[self.version] = self.lost_per_version[self.version]
        return Verdict(aggregation=None)


class QueueRule(Rule):
    """A rule that holds gradients in a queue until it aggregates them."""

    def __init__(self, *, learners: int) -> None:
        super().__init__(learners=learners)
        self.queue: list[Member] = []

    @property
    def holding(self) -> int:
        return len(self.queue)

    def stalled(self) -> Verdict:
        """Aggregates what the queue holds (the rules without a staleness bound); see `Rule.stalled`."""
        super().stalled()
        return self._flush() if self.queue else Verdict(aggregation=None)

    def _flush(self, *, separate_steps: bool = False) -> Verdict:
        members, self.queue = tuple(self.queue), []
        return Verdict(aggregation=Aggregation(members=members, separate_steps=separate_steps))
