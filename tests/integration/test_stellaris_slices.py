"""Stellaris's learners as the paper runs them (issue 26, Build): invoked per slice as the round's buffer fills, each
reading only its slice, GAE computed once by the driver, their number following the rows. On the simulated backend
(a virtual clock: the order of events is deterministic) with the shipped config's algorithm."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch

from nimbus.algos.ppo.algorithm import PPO
from nimbus.report.metrics import read_metrics
from nimbus.run.loop import train
from nimbus.stellaris import filling as filling_module, learner as learner_module
from nimbus.stellaris.workflow import StellarisWorkflow

SIM = ["runtime.backend=simulated", "simulation.functions.actor.distribution=lognormal",
       "simulation.functions.actor.sigma=0.5", "train.total_env_steps=100000"]


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> dict:
    """Records actor deliveries and learner launches (simulated seconds), each arrival's rows before and after the
    driver's post-processing, the slices put, the keys learners read and every PPO post-processing call."""
    seen: dict = {"delivered": defaultdict(list), "launched": defaultdict(list), "arrivals": [],
                  "slices": defaultdict(dict), "read": [], "postprocessed_rows": 0}
    on_actor, launch, add_slice = (StellarisWorkflow._on_actor, StellarisWorkflow._launch,
                                   getattr(StellarisWorkflow, "_add_slice", None))
    postprocess_rows, batch_of, postprocess = (getattr(filling_module, "postprocess_rows", None), learner_module._batch,
                                               PPO.postprocess)

    def on_actor_spy(self, *, future, rank):
        on_actor(self, future=future, rank=rank)
        seen["delivered"][self.round.index].append(self.clock())

    def launch_spy(self, *, slot, batch, **task):   # (before slices: the batch's key and a task's positions)
        piece = task.get("piece")
        key, positions = (piece.key, piece.positions) if piece is not None else (batch.key, task["positions"])
        seen["launched"][batch.round.index].append((self.clock(), key, positions.tolist()))
        launch(self, slot=slot, batch=batch, **task)

    def add_slice_spy(self, *, batch, arrays):
        seen["slices"][batch.round.index][f"{batch.key}/s{len(batch.slice_keys)}"] = arrays
        add_slice(self, batch=batch, arrays=arrays)

    def rows_spy(*, algorithm, rows, needed):
        done = postprocess_rows(algorithm=algorithm, rows=rows, needed=needed)
        seen["arrivals"].append((rows, done))
        return done

    def batch_spy(*, state, store, key):
        seen["read"].append(key)
        return batch_of(state=state, store=store, key=key)

    def postprocess_spy(self, *, batch):
        seen["postprocessed_rows"] += len(batch["rewards"])
        return postprocess(self, batch=batch)

    monkeypatch.setattr(StellarisWorkflow, "_on_actor", on_actor_spy)
    monkeypatch.setattr(StellarisWorkflow, "_launch", launch_spy)
    monkeypatch.setattr(StellarisWorkflow, "_add_slice", add_slice_spy, raising=False)
    monkeypatch.setattr(filling_module, "postprocess_rows", rows_spy, raising=False)
    monkeypatch.setattr(learner_module, "_batch", batch_spy)
    monkeypatch.setattr(PPO, "postprocess", postprocess_spy)
    return seen


def _run(make_shipped_config, overrides: list[str]) -> list[dict]:
    config = make_shipped_config("stellaris-cartpole", overrides=[*SIM, *overrides])
    result = train(config=config)
    return read_metrics(path=result.run_dir / "metrics.jsonl")


def test_the_first_slices_learners_start_before_the_last_actor_delivers(make_shipped_config, spied) -> None:
    """Fails before slices: the batch was cut into tasks only once every actor had delivered."""
    rows = _run(make_shipped_config, ["train.max_rounds=3"])
    delivered, launched = spied["delivered"], spied["launched"]
    assert len(delivered[0]) == 2 and delivered[0][0] < delivered[0][1]   # the two actors end apart
    first_launch = min(t for t, _, _ in launched[0])
    assert first_launch == delivered[0][0] < delivered[0][1]   # at the first actor's delivery, not the last's
    assert rows[0]["extras"]["staleness/learners_early"] >= 3   # its two slices' learners, up to the cap
    assert all(row["extras"]["staleness/learners_in_flight_max"] <= 3 for row in rows)


def test_each_learner_reads_only_its_slice_and_every_row_once(make_shipped_config, spied) -> None:
    """Fails before slices: every learner read the whole batch (``batch/<policy>/r<k>``) and chose its rows."""
    rows = _run(make_shipped_config, ["train.max_rounds=2"])
    for index in (0, 1):
        slices = spied["slices"][index]
        assert sum(len(a["rewards"]) for a in slices.values()) == 512 and len(slices) == 4
        launches = spied["launched"][index]
        for key, arrays in slices.items():   # each slice learned once per epoch, each time all of it, nothing else
            reads = [positions for _, k, positions in launches if k == key]
            assert reads == [list(range(len(arrays["rewards"])))] * 4, key
        assert len(launches) == 16 == rows[index]["extras"]["staleness/learners_invoked"]
        # the slices hold exactly the rows the actors delivered, each once
        delivered = [done for _, done in spied["arrivals"]][2 * index:2 * index + 2]
        assert _row_set(np.concatenate([d["obs"] for d in delivered]), np.concatenate(
            [d["rewards"] for d in delivered])) == _row_set(np.concatenate([a["obs"] for a in slices.values()]),
                                                             np.concatenate([a["rewards"] for a in slices.values()]))
    assert spied["read"] and all("/s" in key for key in spied["read"])   # learners read slice keys only


def test_gae_is_computed_once_per_row_by_the_driver_and_equals_the_whole_batchs(make_shipped_config, spied) -> None:
    """Fails before slices: each learner worker post-processed the whole batch again (rows counted many times)."""
    rows = _run(make_shipped_config, ["train.max_rounds=2"])
    arrivals = spied["arrivals"]
    delivered_rows = sum(len(raw["rewards"]) for raw, _ in arrivals)
    # the driver's calls, once per delivered row (the next rounds' actors may have delivered before the run stopped)
    assert spied["postprocessed_rows"] == delivered_rows >= rows[-1]["env_steps"] == 1024, (
        spied["postprocessed_rows"], delivered_rows)
    # per actor == over the round's whole batch: no advantage reaches across two actors' rows
    for first in (0, 2):
        raw = {k: np.concatenate([arrivals[first][0][k], arrivals[first + 1][0][k]]) for k in arrivals[first][0]}
        whole = PPO(config=_ppo_config(make_shipped_config)).postprocess(
            batch={k: torch.as_tensor(v) for k, v in raw.items()})
        per_actor = np.concatenate([arrivals[first][1]["advantages"], arrivals[first + 1][1]["advantages"]])
        np.testing.assert_array_equal(per_actor, whole["advantages"].numpy())


@pytest.mark.parametrize(("actors", "slice_rows", "learners"), [(2, None, 16), (4, None, 32), (2, 96, 24)])
def test_the_learners_a_round_launches_follow_its_rows_and_the_cap_holds(make_shipped_config, spied, actors,
                                                                         slice_rows, learners) -> None:
    """Learners per round = epochs × slices (a 512-row round at 96 rows a slice: 5 full + the 32-row rest, 6
    slices); at most ``stellaris.learners`` in flight. Fails before slices: no key ``stellaris.slice_rows``."""
    extra = [f"actors.scaling.num_actors={actors}"] + ([f"stellaris.slice_rows={slice_rows}"] if slice_rows else [])
    rows = _run(make_shipped_config, ["train.max_rounds=2", *extra])
    for row in rows:
        assert row["extras"]["staleness/learners_invoked"] == learners
        assert row["extras"]["staleness/slices"] == learners / 4
        assert row["extras"]["staleness/rows_sliced"] == 256 * actors
        assert 1 <= row["extras"]["staleness/learners_in_flight_max"] <= 3


def _row_set(obs: np.ndarray, rewards: np.ndarray) -> list[tuple]:
    return sorted(tuple(o.tolist()) + (float(r),) for o, r in zip(obs, rewards))


def _ppo_config(make_shipped_config):
    return make_shipped_config("stellaris-cartpole").algo
