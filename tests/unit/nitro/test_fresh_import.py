"""``nimbus.nitro.config`` imported first in a process (nimbus.config ↔ nitro/config.py circle: nitro/__init__)."""

from __future__ import annotations

import subprocess
import sys


def test_nitro_config_imports_first_in_a_fresh_process() -> None:
    """``import nimbus.nitro.config`` as a process's first nimbus import (nimbus.config ↔ nitro/config.py circle)."""
    result = subprocess.run([sys.executable, "-c", "import nimbus.nitro.config as c; print(c.ScalingConfig)"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
