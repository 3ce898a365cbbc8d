"""Every YAML a command reads goes through the configs' guarded loader: a self-expanding pricing file (plan
--pricing, the report) or run config.yaml (simulate fit) is refused at once, naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus.cost.pricing import load_pricing
from nimbus.errors import ConfigError
from nimbus.runtime.simulated_fit import learner_rows

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def test_a_self_expanding_pricing_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pricing.yaml"
    path.write_text(BOMB)
    with pytest.raises(ConfigError, match=r"pricing\.yaml: expands to more than"):
        load_pricing(path=path)


def test_a_self_expanding_run_config_is_refused_by_simulate_fit(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(BOMB)
    with pytest.raises(ConfigError, match=r"config\.yaml: expands to more than"):
        learner_rows(run_dir=tmp_path)
