"""Snapshot and restore (ARTOS's CRIU role): with ``actors.restore_slots`` a rank's env slot survives its
worker being reclaimed, so the run is the same as one whose workers stayed warm."""

from __future__ import annotations

from nimbus.run.loop import train

BASE = ["train.max_rounds=5", "actors.scaling.num_actors=2", "algo.num_epochs=2"]


def _returns(result) -> list:
    return [(row.episodes, row.return_mean) for row in result.rows]


def test_reclaimed_workers_restore_their_ranks_and_episodes_continue(make_config) -> None:
    warm = train(config=make_config(overrides=BASE))
    reclaimed = ["runtime.keep_alive_s=0.02"]
    restored = train(config=make_config(overrides=BASE + reclaimed + ["actors.restore_slots=true"]))
    assert restored.summary.cold_starts > warm.summary.cold_starts  # workers were reclaimed between rounds
    assert _returns(restored) == _returns(warm)  # ...and every rank went on exactly where it was
    fresh = train(config=make_config(overrides=BASE + reclaimed))
    assert fresh.summary.cold_starts > warm.summary.cold_starts
    assert _returns(fresh) != _returns(warm)  # without restore, a reclaimed rank starts new episodes
