"""The Buffer's shared-memory blocks (data/buffer_blocks.py): all or nothing when made or opened, versioned."""

from __future__ import annotations

import pytest

from nimbus.data import buffer_blocks
from nimbus.data.buffer_blocks import DESCRIPTOR_VERSION, allocate, attach_segments, map_blocks
from nimbus.data.shm import Segment, list_segments

KEYS = {"obs": {"shape": [2], "dtype": "float32"}, "reward": {"shape": [], "dtype": "float32"}}


def test_a_failed_allocation_leaves_no_segment(prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    create = Segment.create

    def create_twice(**kwargs) -> Segment:   # the third segment (the first metadata column) cannot be made
        if len(made) == 2:
            raise OSError("no room")
        made.append(kwargs["name"])
        return create(**kwargs)

    monkeypatch.setattr(buffer_blocks.Segment, "create", create_twice)
    with pytest.raises(OSError, match="no room"):
        allocate(keys=KEYS, capacity_rows=4, max_actors=2)
    assert len(made) == 2 and list_segments(prefix=prefix) == []


def test_blocks_map_the_same_memory_on_both_sides_and_attach_checks_the_version(prefix: str) -> None:
    descriptor, segments = allocate(keys=KEYS, capacity_rows=4, max_actors=2)
    assert descriptor["version"] == DESCRIPTOR_VERSION and list(descriptor["keys"]) == ["obs", "reward"]
    attached = attach_segments(descriptor=descriptor)
    theirs = map_blocks(descriptor=descriptor, segments=attached)
    ours = map_blocks(descriptor=descriptor, segments=segments)
    ours.columns["obs"][1] = [3.0, 4.0]
    ours.header["rows_by_actor"][1] = 7
    assert theirs.columns["obs"][1].tolist() == [3.0, 4.0] and int(theirs.header["rows_by_actor"][1]) == 7
    assert theirs.columns["obs"].shape == (4, 2) and set(theirs.meta) == set(buffer_blocks.META_DTYPES)
    with pytest.raises(ValueError, match="version 0"):
        attach_segments(descriptor={**descriptor, "version": 0})
    missing = {**descriptor, "header": f"{prefix}bh_missing"}
    with pytest.raises(FileNotFoundError):
        attach_segments(descriptor=missing)
    del theirs, ours
    for segment in attached + segments:
        segment.close()
    for segment in segments:
        segment.unlink()
    assert list_segments(prefix=prefix) == []
