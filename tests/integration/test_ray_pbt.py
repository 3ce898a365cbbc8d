"""The same PBT config on a local Ray instance (runtime.backend: ray): members share Ray's warm workers,
exploits copy the top member's weights, and the lineage records them.

Synchronous PBT: ranked one at a time, which member exploited depended on how the members' rounds interleaved
on Ray, and in CI (twice, at loads where Ray's start-ups ran beside other tests) no ranking found the ranked member
at the bottom. Ranked a generation at a time, the bottom one of two exploits at every round, whatever the order."""

from __future__ import annotations

import json

import pytest

from nimbus.data.shm import list_segments, run_prefix
from nimbus.run.loop import train

pytestmark = pytest.mark.ray
# Both members' workers fit the 2 CPUs at once (2 x (0.25 + 0.5)): with 0.5 + 1 per member the second learner
# waited for an idle worker's eviction and the actors it evicted started cold again (measured
# back to back at load 4: 42 s against 18 s, Ray's start-up included; the members run their rounds at the same
# time, so each holds its own actor and learner at once).
PBT = ["runtime.backend=ray", "actors.function.cpus=0.25", "learner.function.cpus=0.5", "train.max_rounds=2",
       "algo.lr_schedule=constant", "algo.clip_schedule=constant", "algo.minibatch_size=64", "algo.num_epochs=4",
       "actors.scaling={kind: fixed, num_actors: 1}",
       "pbt={members: 2, interval_rounds: 1, fraction: 0.5, synchronous: true, "
       "hyperparameters: {lr: {low: 1.0e-5, high: 1.0e-2, log: true}}}"]


def test_pbt_runs_on_ray_with_the_local_config(ray_local, make_config) -> None:
    result = train(config=make_config(overrides=PBT))
    lineage = [json.loads(line) for line in (result.run_dir / "lineage.jsonl").read_text().splitlines()]
    exploits = [e for e in lineage if e["event"] == "exploit"]
    assert sorted(e["round"] for e in exploits) == [0, 1]
    assert all(e["weights_sha256"] == e["source_weights_sha256"] for e in exploits)
    members = json.loads((result.run_dir / "population.json").read_text())["members"]
    assert {name: m["rounds"] for name, m in members.items()} == {"member0": 2, "member1": 2}
    assert list_segments(prefix=run_prefix()) == []
    # Each member's learner was warm before round 0: with one pre-warmed learner the second member's first round
    # waited ~6 s for a cold start, the first member ended its rounds before the second began, and no ranking saw
    # both (no exploit in 2 of 12 seeds)
    ledger = [json.loads(line) for line in (result.run_dir / "ledger.jsonl").read_text().splitlines()]
    learners = [row for row in ledger if row["kind"] == "learner" and row["outcome"] == "ok"]
    assert len(learners) == 4 and not any(row["cold"] for row in learners)
