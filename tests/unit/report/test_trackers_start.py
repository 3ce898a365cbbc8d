"""A tracker that cannot start stops the run before round 0 with one line and exit 2, in seconds: an MLflow store
that cannot be written (MLflow retries its engine for ~100 s), an MLflow server nobody answers (minutes of HTTP
retries by default). A read-only ``output.root_dir`` exits 2 naming it."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from nimbus.config.trackers import MlflowConfig, WandbConfig
from nimbus.errors import ConfigError
from nimbus.report import trackers
from nimbus.report.trackers import make_trackers

REPO = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("uri", ["sqlite:////dev/null/inside-a-file/mlflow.db", "http://127.0.0.1:{port}"])
def test_an_mlflow_tracker_that_cannot_start_is_one_line_in_seconds(tmp_path: Path, uri: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra")
    for name in ("MAX_RETRIES", "BACKOFF_FACTOR", "TIMEOUT"):
        monkeypatch.delenv(f"MLFLOW_HTTP_REQUEST_{name}", raising=False)
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"output\.(mlflow\.tracking_uri|loggers: mlflow)") as raised:
        make_trackers(loggers=("mlflow",), run_dir=tmp_path, config={}, wandb=WandbConfig(),
                      mlflow=MlflowConfig(tracking_uri=uri.format(port=_free_port())))
    assert "\n" not in str(raised.value)
    assert time.monotonic() - started < 15   # MLflow alone: 27 s (unwritable SQLite), 4 min (no server)


def test_a_read_only_root_dir_exits_2_naming_it(tmp_path: Path, run_cli) -> None:
    read_only = tmp_path / "ro"
    read_only.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(read_only)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        code, said = run_cli("train", str(REPO / "configs" / "ppo-cartpole.yaml"), "--set",
                             f"output.root_dir={read_only / 'runs'}")
    finally:
        subprocess.run(["umount", "-l", str(read_only)], capture_output=True)
    assert code == 2 and "output.root_dir" in said and "Traceback" not in said, said


def test_a_wandb_server_nobody_answers_is_one_line_in_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B online, logged in, its server a closed port (this machine has no network either): wandb.init alone waits
    90 s + 10 s of grace. The bound nimbus passes W&B is shortened here from its 15 s to keep the test short; the
    same code path hands it to wandb.init, so without it the wait would still be W&B's 100 s."""
    pytest.importorskip("wandb", reason="the wandb extra")
    monkeypatch.setattr(trackers, "WANDB_INIT_TIMEOUT_S", 2.0)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{_free_port()}")
    for name in ("WANDB_INIT_TIMEOUT", "WANDB_MODE", "WANDB_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"output\.loggers: wandb could not start") as raised:
        make_trackers(loggers=("wandb",), run_dir=tmp_path, config={}, wandb=WandbConfig(mode="online"),
                      mlflow=MlflowConfig())
    assert "\n" not in str(raised.value)
    assert time.monotonic() - started < 30
