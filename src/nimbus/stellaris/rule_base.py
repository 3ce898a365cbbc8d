"""What every aggregation rule shares (stellaris/rules.py has the rules): the arrival, the verdict and the
rule's common state. A rule is a plain object the workflow drives; see rules.py's docstring for the calls.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
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
        return Member(key=arrival.key, staleness=self.version - arrival.read_version, scale=scale, slot=arrival.slot)

    def offer(self, *, arrival: Arrival) -> Verdict:
        return Verdict(aggregation=Aggregation(members=(self._member(arrival=arrival),)))

    def state(self) -> dict[str, Any]:
        """What a checkpoint saves to resume this rule (JSON-ready: str keys, ints, floats, None): the round,
        the counters and what the rule measured (δmax and its measurement). Not the version (the workflow
        sets ``version`` from the checkpoint's policy version) nor queued gradients (not resumed)."""
        return {"rule": self.name, "round": self.round, "aggregations": self.aggregations,
                "applied_per_slot": {str(slot): count for slot, count in sorted(self.applied_per_slot.items())},
                **self._own_state()}

    def restore(self, *, state: Mapping[str, Any]) -> None:
        """Continue from ``state()`` of a rule of the same name (ValueError otherwise)."""
        if state.get("rule") != self.name:
            raise ValueError(f"cannot restore rule {self.name!r} from the state of rule {state.get('rule')!r}")
        self.round = int(state["round"])
        self.aggregations = int(state["aggregations"])
        self.applied_per_slot = Counter({int(slot): int(n) for slot, n in state["applied_per_slot"].items()})
        self._restore_own(state=state)

    def _own_state(self) -> dict[str, Any]:
        return {}

    def _restore_own(self, *, state: Mapping[str, Any]) -> None:
        return None

    def applied(self, *, aggregation: Aggregation) -> None:
        """The parameter function published the aggregation as one new version."""
        self.version += 1
        self.aggregations += 1
        for member in aggregation.members:
            self.applied_per_slot[member.slot] += 1


class QueueRule(Rule):
    """A rule that holds gradients in a queue until it aggregates them."""

    def __init__(self, *, learners: int) -> None:
        super().__init__(learners=learners)
        self.queue: list[Member] = []

    def _flush(self, *, separate_steps: bool = False) -> Verdict:
        members, self.queue = tuple(self.queue), []
        return Verdict(aggregation=Aggregation(members=members, separate_steps=separate_steps))
