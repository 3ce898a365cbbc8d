"""Every shipped config resolves to the YAML recorded under tests/integration/snapshots/configs
(scripts/resolved_configs.py, plan24 step 0c): moving or renaming config sections changed no default."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
RECORDS = REPO / "tests" / "integration" / "snapshots" / "configs"


def _script():
    spec = importlib.util.spec_from_file_location("resolved_configs", REPO / "scripts" / "resolved_configs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_shipped_config_resolves_as_recorded(capsys: pytest.CaptureFixture[str]) -> None:
    """After an intended change: ``python scripts/resolved_configs.py --write tests/integration/snapshots/configs``
    and say why in the commit."""
    assert _script().main(["--check", str(RECORDS)]) == 0, capsys.readouterr().out


def test_a_changed_config_a_new_one_and_a_lost_one_are_each_reported(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    for folder in ("configs", "examples"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    ppo = tmp_path / "configs" / "ppo-cartpole.yaml"
    ppo.write_text(ppo.read_text() + "learner: {torch_threads: 2}\n")
    (tmp_path / "configs" / "dqn-cartpole.yaml").rename(tmp_path / "configs" / "dqn-cartpole-2.yaml")
    assert _script().main(["--check", str(RECORDS), "--repo", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "-  torch_threads: 1\n+  torch_threads: 2" in out and "resolved/configs/ppo-cartpole.yaml" in out
    assert "configs/dqn-cartpole-2.yaml: no record" in out and "configs/dqn-cartpole.yaml: recorded, but" in out
    assert re.search(r"\n3 of \d+ shipped configs resolve differently", out)
