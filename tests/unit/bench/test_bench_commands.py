"""``nimbus bench transfer`` and ``nimbus bench sample`` end to end on a tiny grid: every transport
delivers every message, the table and the JSON file carry each figure and its ratio to memcpy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nimbus.cli import main


def test_bench_transfer_writes_every_cell_with_its_ratio(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "transfer.json"
    code = main(["bench", "transfer", "--senders", "1,2", "--sizes", "64K,1M", "--messages", "3", "--repeats", "1",
                 "--transports", "memcpy,mp_queue,channel_segment,channel", "--no-lz4", "--json", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    rows = {(r["transport"], r["senders"], r["size_bytes"]): r for r in report["results"]}
    assert len(rows) == 4 * 2 * 2
    for (_, senders, size), row in rows.items():
        assert row["mb_s_median"] > 0 and row["repeats"] == 1
        memcpy = rows[("memcpy", senders, size)]["mb_s_median"]
        assert row["ratio_to_memcpy"] == pytest.approx(row["mb_s_median"] / memcpy, rel=1e-3)
    assert "channel" in capsys.readouterr().out


def test_bench_sample_compares_actor_functions_with_one_process(tmp_path: Path) -> None:
    out = tmp_path / "sample.json"
    code = main(["bench", "sample", "--envs", "CartPole-v1", "--actors", "2", "--num-envs", "1",
                 "--fragment-steps", "64", "--fragments", "2", "--repeats", "1", "--json", str(out)])
    assert code == 0
    (result,) = json.loads(out.read_text())["results"]
    assert result["env_id"] == "CartPole-v1" and result["num_actors"] == 2
    (single,), (parallel,), (ratio,) = result["single_steps_s"], result["parallel_steps_s"], result["ratios"]
    assert single > 0 and parallel > 0 and ratio == pytest.approx(parallel / (2 * single), rel=1e-6)
