"""Every shipped config resolved (every default spelled out), recorded, and checked against the record.

A restructure that moves config sections (issue 24) must leave every shipped config resolving to the same
YAML. This dumps ``dump_config(config=load_config(path=p))`` (nimbus.config, what a run saves as
config.yaml) of every ``configs/*.yaml`` and ``examples/*.yaml`` to ``DIR/configs/<name>.yaml`` and
``DIR/examples/<name>.yaml``, or compares them with what ``DIR`` holds, byte for byte.

    python scripts/resolved_configs.py --write tests/integration/snapshots/configs   # after an intended change
    python scripts/resolved_configs.py --check tests/integration/snapshots/configs   # exit 1 and a diff if any differs

A shipped config without a record, or a record whose config is gone, is a difference too. Run it with the
repository's ``src`` first on PYTHONPATH (or nimbus installed from this checkout).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from nimbus.config import dump_config, load_config

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("configs", "examples")


def resolved(*, repo: Path) -> dict[str, str]:
    """``<folder>/<name>.yaml`` → the resolved YAML, for every shipped config."""
    return {f"{folder}/{path.name}": dump_config(config=load_config(path=path))
            for folder in FOLDERS for path in sorted((repo / folder).glob("*.yaml"))}


def recorded(*, directory: Path) -> dict[str, str]:
    return {f"{folder}/{path.name}": path.read_text()
            for folder in FOLDERS for path in sorted((directory / folder).glob("*.yaml"))}


def write(*, directory: Path, configs: dict[str, str]) -> None:
    for folder in FOLDERS:   # a record whose config is gone goes too
        for stale in (directory / folder).glob("*.yaml"):
            if f"{folder}/{stale.name}" not in configs:
                stale.unlink()
    for name, text in configs.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)


def differences(*, got: dict[str, str], want: dict[str, str]) -> list[str]:
    """One entry per config that differs from its record: a unified diff, or what is missing."""
    found = [f"{name}: no record (run --write after checking it)" for name in sorted(got.keys() - want.keys())]
    found += [f"{name}: recorded, but the config is gone" for name in sorted(want.keys() - got.keys())]
    for name in sorted(got.keys() & want.keys()):
        if got[name] != want[name]:
            found.append("".join(difflib.unified_diff(want[name].splitlines(keepends=True),
                                                      got[name].splitlines(keepends=True),
                                                      fromfile=f"recorded/{name}", tofile=f"resolved/{name}")))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, metavar="DIR", help="record every shipped config's resolved YAML")
    mode.add_argument("--check", type=Path, metavar="DIR", help="compare them with DIR's records; exit 1 if any differ")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose configs/ and examples/ to read")
    args = parser.parse_args(argv)
    configs = resolved(repo=args.repo)
    if args.write is not None:
        write(directory=args.write, configs=configs)
        print(f"recorded {len(configs)} resolved configs under {args.write}")
        return 0
    if not args.check.is_dir():
        parser.error(f"--check: {args.check} is not a directory")
    found = differences(got=configs, want=recorded(directory=args.check))
    for entry in found:
        print(entry, end="" if entry.endswith("\n") else "\n")
    print(f"{len(found)} of {len(configs)} shipped configs resolve differently from {args.check}" if found
          else f"all {len(configs)} shipped configs resolve as recorded in {args.check}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
