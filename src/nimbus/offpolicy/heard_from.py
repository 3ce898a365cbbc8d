"""``sync_to: heard_from`` (XingTian's IMPALA): which policy version each actor rank samples with.

A rank keeps the version it was last given until the learner has consumed its fragments; then it gets
the version that update published. A rank the learner has never heard from (a new rank, or one a
scaler boosts again after it sat idle) gets the newest version: it has no data in flight whose
policy it should stay consistent with, and sampling with version 0 would only add lag.

Example::

    versions = HeardFromVersions()
    versions.version_for(rank=2, newest=3)        # 3: never heard from
    versions.heard(ranks=(0, 1), newest=4)        # their fragments were consumed by the update to v4
    versions.forget(ranks=(2,))                   # boosted again: newest on its next start
"""

from __future__ import annotations

from collections.abc import Iterable


class HeardFromVersions:
    def __init__(self) -> None:
        self._version: dict[int, int] = {}

    def version_for(self, *, rank: int, newest: int) -> int:
        return self._version.get(rank, newest)

    def heard(self, *, ranks: Iterable[int], newest: int) -> None:
        for rank in ranks:
            self._version[rank] = newest

    def forget(self, *, ranks: Iterable[int]) -> None:
        for rank in ranks:
            self._version.pop(rank, None)

    def held(self) -> set[int]:
        """Versions some rank will still sample with (not to be deleted from the Store)."""
        return set(self._version.values())
