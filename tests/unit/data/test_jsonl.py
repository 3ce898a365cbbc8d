"""Torn JSON-lines files (#28.6): readers skip a line that is not JSON with a warning; a resume cuts a torn tail
before appending, and keeps a complete last row that only lacks its newline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nimbus.data.jsonl import cut_torn_tail, read_jsonl


@pytest.mark.parametrize(("name", "text", "rows", "warning"), [
    ("metrics.jsonl", '{"round": 0}\n{"round": 1}\n{"round": 2, "env_st', [{"round": 0}, {"round": 1}],
     "line 3 is not JSON (a torn last line); skipped"),
    ("ledger.jsonl", '{"a": 1}\n{"a": 2, "b\n\n{"a": 3}\n', [{"a": 1}, {"a": 3}],
     "line 2 is not JSON (a corrupt line); skipped"),
], ids=["torn-last-line", "corrupt-middle-line"])
def test_a_line_that_is_not_json_is_skipped_and_named(tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str,
                                                      text: str, rows: list[dict], warning: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with caplog.at_level("WARNING"):
        assert read_jsonl(path=path) == rows
    assert f"{path} {warning}" in caplog.text


def test_cut_torn_tail_cuts_only_the_torn_row(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"round": 0}\n{"round": 1, "ret')
    with caplog.at_level("WARNING"):
        assert cut_torn_tail(path=path) is True
    assert path.read_text() == '{"round": 0}\n' and "ended in a torn line (17 bytes" in caplog.text
    with open(path, "a") as handle:
        handle.write(json.dumps({"round": 1}) + "\n")
    assert read_jsonl(path=path) == [{"round": 0}, {"round": 1}]


def test_cut_torn_tail_keeps_a_complete_row_without_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"round": 0}\n{"round": 1}')
    assert cut_torn_tail(path=path) is False
    assert path.read_text() == '{"round": 0}\n{"round": 1}\n'
    whole = '{"round": 0}\n'
    path.write_text(whole)
    assert cut_torn_tail(path=path) is False and path.read_text() == whole
    assert cut_torn_tail(path=tmp_path / "absent.jsonl") is False


def test_cut_rows_from_keeps_the_rows_before_and_an_open_appender_goes_on(tmp_path) -> None:
    from nimbus.data.jsonl import cut_rows_from, read_jsonl

    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(f'{{"round": {r}}}\n' for r in (0, 1, 2, 3, 4)))
    with open(path, "a", buffering=1) as appender:   # opened before the cut, as the metrics sink is
        assert cut_rows_from(path=path, key="round", first=3) == 2
        appender.write('{"round": 3}\n')
    assert [row["round"] for row in read_jsonl(path=path)] == [0, 1, 2, 3]
    assert cut_rows_from(path=path, key="round", first=9) == 0
