"""stellaris/slices.py: the filling buffer cuts full slices as rows arrive, shuffles only whole units (IMPACT's env
columns stay in time order), and the round's rest is its last, shorter slice."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nimbus.stellaris.slices import SliceCutter


def _rows(start: int, count: int) -> dict[str, np.ndarray]:
    return {"id": np.arange(start, start + count), "obs": np.arange(start, start + count)[:, None] * np.ones(3)}


def test_full_slices_are_cut_as_rows_arrive_and_the_rest_is_the_last_slice() -> None:
    cutter = SliceCutter(slice_rows=96, unit_rows=1)
    first = cutter.add(rows=_rows(0, 256), generator=torch.Generator().manual_seed(0))
    assert [len(s["id"]) for s in first] == [96, 96] and cutter.pending_rows == 64
    second = cutter.add(rows=_rows(256, 256), generator=torch.Generator().manual_seed(1))
    assert [len(s["id"]) for s in second] == [96, 96, 96]
    rest = cutter.rest()
    assert len(rest["id"]) == 32 and cutter.rest() is None
    ids = np.concatenate([s["id"] for s in (*first, *second, rest)])
    assert sorted(ids.tolist()) == list(range(512))   # every row once, none lost
    assert all(np.array_equal(s["obs"][:, 0], s["id"]) for s in (*first, *second, rest))   # columns stay aligned


def test_units_are_shuffled_whole() -> None:
    cutter = SliceCutter(slice_rows=64, unit_rows=32)
    (one, two) = cutter.add(rows=_rows(0, 128), generator=torch.Generator().manual_seed(0))
    for piece in (one, two):
        for column in piece["id"].reshape(2, 32):
            assert column[0] % 32 == 0 and np.array_equal(np.diff(column), np.ones(31))   # a whole fragment, in order
    with pytest.raises(ValueError, match="multiple"):
        SliceCutter(slice_rows=48, unit_rows=32)


def test_an_impact_slice_must_be_whole_env_columns() -> None:
    from pathlib import Path

    from nimbus.config import load_config
    from nimbus.errors import ConfigError
    config = Path(__file__).resolve().parents[3] / "configs" / "stellaris-impact-cartpole.yaml"
    with pytest.raises((ConfigError, ValueError), match="stellaris.slice_rows"):
        load_config(path=config, overrides=["stellaris.slice_rows=48"])
    assert load_config(path=config, overrides=["stellaris.slice_rows=64"]).stellaris.slice_rows == 64
