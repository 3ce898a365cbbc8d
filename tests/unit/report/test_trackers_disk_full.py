"""A tracker that fails is dropped and training goes on, except on a full disk: that stops the run (metrics.jsonl
and the checkpoints are on the same disk), so the CLI prints its one "disk full" line and exits 1."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from nimbus.report.trackers import RunTrackers
from tests.unit.report.test_trackers import _row


class Failing:
    def __init__(self, error: BaseException) -> None:
        self.error, self.finished = error, False

    def log(self, *, scalars, step: int) -> None:
        raise self.error

    def finish(self, *, artifacts, failed: bool = False) -> None:
        self.finished = True


def test_a_full_disk_in_a_tracker_stops_the_run(tmp_path: Path) -> None:
    trackers = RunTrackers(trackers=[Failing(OSError(errno.ENOSPC, "No space left on device"))],
                           artifacts_from=tmp_path)
    with pytest.raises(OSError) as raised:
        trackers.log(row=_row(1), runtime={})
    assert raised.value.errno == errno.ENOSPC


@pytest.mark.parametrize("error", [OSError(errno.ECONNREFUSED, "refused"), RuntimeError("server said no")])
def test_any_other_tracker_failure_drops_that_tracker(tmp_path: Path, error: BaseException) -> None:
    failing = Failing(error)
    trackers = RunTrackers(trackers=[failing], artifacts_from=tmp_path)
    trackers.log(row=_row(1), runtime={})
    assert trackers.trackers == [] and failing.finished
