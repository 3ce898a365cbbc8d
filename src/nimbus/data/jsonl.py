"""JSON-lines run files (metrics.jsonl, ledger.jsonl, ...) that a killed process or a full disk may leave with a
torn last line: a row written in part, without its newline.

Readers skip a line that is not JSON with a warning naming the file and line (`read_jsonl`); a process about to
append to such a file first cuts the torn tail (`cut_torn_tail`), so its new rows are not glued onto it.

Example::

    rows = read_jsonl(path=run_dir / "metrics.jsonl")     # a torn last row: skipped, with a warning
    cut_torn_tail(path=run_dir / "metrics.jsonl")          # before appending (train --resume)
    cut_rows_from(path=run_dir / "metrics.jsonl", key="round", first=50)   # resumed from round 50's checkpoint
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def read_jsonl(*, path: Path) -> list[Any]:
    """Each line's JSON value, in order; blank lines ignored, a line that is not JSON skipped with a warning."""
    lines = Path(path).read_text(encoding="utf-8", errors="replace").split("\n")
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            torn = number == len(lines)   # the text after the last newline: a write cut short
            log.warning("%s line %d is not JSON (%s); skipped", path, number,
                        "a torn last line" if torn else "a corrupt line")
    return rows


def cut_torn_tail(*, path: Path) -> bool:
    """Make ``path`` end with a complete line before something appends to it: a torn last line is cut off (with a
    warning), a complete last row that only lacks its newline gets one. True when something was cut."""
    path = Path(path)
    if not path.is_file():
        return False
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    keep = data.rfind(b"\n") + 1
    try:
        json.loads(data[keep:])
    except ValueError:
        with open(path, "r+b") as handle:
            handle.truncate(keep)
        log.warning("%s ended in a torn line (%d bytes, a write cut short); cut it before appending", path,
                    len(data) - keep)
        return True
    with open(path, "ab") as handle:
        handle.write(b"\n")
    return False


def cut_rows_from(*, path: Path, key: str, first: int) -> int:
    """Cut every row from the first whose ``key`` is ``first`` or more to the end (in place, so a handle already
    open for appending keeps writing to this file): a run resumed from the checkpoint of round ``first`` writes
    those rounds again, and a reader must not see them twice. Returns how many rows were cut."""
    path = Path(path)
    if not path.is_file():
        return 0
    data = path.read_bytes()
    offset = 0
    for line in data.splitlines(keepends=True):
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if isinstance(row, dict) and isinstance(row.get(key), int) and row[key] >= first:
            cut = len(data[offset:].splitlines())
            with open(path, "r+b") as handle:
                handle.truncate(offset)
            log.warning("%s: cut %d row(s) from %s %d on, written after the checkpoint this run resumes from "
                        "(those rounds run again)", path, cut, key, first)
            return cut
        offset += len(line)
    return 0
