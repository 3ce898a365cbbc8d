"""``actors.restore_slots`` for MARLess runs: a multi-agent actor rank's episodes survive its worker being
reclaimed (marless/slot.py), so the run is the same as one whose workers stayed warm."""

from __future__ import annotations

import pytest

from nimbus.run.loop import train

pytest.importorskip("mpe2", reason="the MARLess tests need the [mpe] extra")
# fragments of 15 steps against episodes of 25: round 1 starts mid-episode (step 15) and finishes the episodes a
# restored rank goes on with (step 25), which a fresh rank cannot. One policy (static sharing): the actors' slots
# are the subject, and 2 learner functions start cold each round instead of 6.
BASE = ["train.max_rounds=2", "actors.scaling={kind: fixed, num_actors: 2}", "actors.fragment_steps=15",
        "env.num_envs_per_actor=2", "algo.num_epochs=1", "runtime.capacity_cpus=2", "actors.restore_slots=false",
        "marless.sharing=static"]


def _returns(result) -> list:
    return [(row.episodes, row.return_mean) for row in result.rows]


def test_reclaimed_workers_restore_their_ranks_and_the_episodes_go_on(make_shipped_config) -> None:
    warm = train(config=make_shipped_config("marless-ippo-spread", overrides=BASE))
    reclaimed = ["runtime.keep_alive_s=0.02"]
    restored = train(config=make_shipped_config("marless-ippo-spread",
                                                overrides=BASE + reclaimed + ["actors.restore_slots=true"]))
    assert restored.summary.cold_starts > warm.summary.cold_starts   # workers were reclaimed between rounds
    assert _returns(restored) == _returns(warm)                       # ...and every rank went on where it was
    fresh = train(config=make_shipped_config("marless-ippo-spread", overrides=BASE + reclaimed))
    assert fresh.summary.cold_starts > warm.summary.cold_starts
    assert _returns(fresh) != _returns(warm)                          # without restore: new episodes
