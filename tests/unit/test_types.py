"""types.py: plain data the core protocols name; Shared frees the run's shared-memory prefix on close."""

from __future__ import annotations

from pathlib import Path

from nimbus.config import parse_config
from nimbus.data import shm
from nimbus.run.build import build_shared
from nimbus.types import Progress, schedule_fraction


def test_shared_from_build_shared_releases_the_run_prefix_on_close(tmp_path: Path) -> None:
    """types.py imports no data/, so build_shared hands Shared the release function: without it close() would
    leave the run's owner lock (and owner file) behind."""
    config = parse_config(data={"algo": {"name": "ppo"}})
    shared = build_shared(config=config, run_dir=tmp_path)
    prefix = shared.shm_prefix
    assert prefix in shm._owner_locks
    shared.close()
    assert prefix not in shm._owner_locks


def test_schedule_fraction_keeps_the_original_horizon() -> None:
    assert schedule_fraction(progress=Progress(env_steps=50), total_env_steps=100) == 0.5
    assert schedule_fraction(progress=Progress(env_steps=50, schedule_env_steps=200), total_env_steps=100) == 0.25
    assert schedule_fraction(progress=Progress(env_steps=500), total_env_steps=100) == 1.0
