"""The MARLess section is ``marless:`` (issue 24 item 7: one spelling); the old ``marl:`` key exits 2 naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus import cli
from nimbus.config.loading import load_config
from nimbus.errors import ConfigError

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "marless-ippo-spread.yaml"


def test_the_shipped_config_reads_its_marless_section() -> None:
    config = load_config(path=CONFIG, overrides=["marless.sharing=static"])
    assert config.marless.sharing == "static"


@pytest.mark.parametrize("how", ["file", "override"])
def test_an_old_marl_key_exits_2_naming_marless(how: str, tmp_path: Path, capsys) -> None:
    path, overrides = CONFIG, ["--set", "marl.sharing=static"]
    if how == "file":
        path = tmp_path / "old.yaml"
        path.write_text(CONFIG.read_text() + "marl: {sharing: static}\n")
        overrides = []
    with pytest.raises(ConfigError, match=r"^marl: this section is now called marless:"):
        load_config(path=path, overrides=overrides[1:])
    assert cli.main(["train", str(path), *overrides]) == 2
    assert "marl: this section is now called marless:" in capsys.readouterr().err
