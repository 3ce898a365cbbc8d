"""The worker process on its own: ready report, EOF exit, import errors, and P11 on its socket."""

from __future__ import annotations

import os
import time
from pathlib import Path

from nimbus.data.channel import open_frame
from nimbus.data.shm import run_prefix
from nimbus.data.transport import LENGTH, recv_frame
from nimbus.runtime.base import FunctionSpec, Resources
from nimbus.runtime.interpreter import worker_env
from nimbus.runtime.pool import spawn_worker
from runtime_helpers import evil_pickle


def _spawn(entrypoint: str):
    spec = FunctionSpec(name="f", entrypoint=entrypoint)
    handle = spawn_worker(worker_id="w-test", spec=spec, prefix=run_prefix(), inline_max_bytes=65536,
                          compress_min_bytes=1 << 20)
    ready = open_frame(frame=recv_frame(sock=handle.sock), source="w", unlink_segment=True)
    return handle, ready.tag


def test_worker_reports_ready_and_exits_on_eof() -> None:
    handle, tag = _spawn("nimbus.runtime.builtin:empty")
    assert tag["op"] == "ready" and tag["error"] is None and tag["pid"] == handle.pid and 0 < tag["init_s"] < 30
    handle.sock.close()
    assert handle.proc.wait(timeout=10) == 0


def test_import_error_is_reported_not_raised() -> None:
    handle, tag = _spawn("nimbus.no_such_module:fn")
    assert tag["error"]["type"] == "ModuleNotFoundError" and "no_such_module" in tag["error"]["traceback"]
    assert handle.proc.wait(timeout=10) == 1
    handle.sock.close()


def test_worker_rejects_a_pickle_without_running_it(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    handle, _ = _spawn("nimbus.runtime.builtin:echo")
    payload = evil_pickle(marker)
    handle.sock.sendall(LENGTH.pack(len(payload)) + payload)
    assert handle.proc.wait(timeout=10) == 2
    time.sleep(0.1)
    assert not marker.exists()
    handle.sock.close()


def test_worker_env_limits_threads() -> None:
    env = worker_env(spec=FunctionSpec(name="f", entrypoint="m:f", resources=Resources(cpus=2.5)), prefix="p_")
    assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"], env["NIMBUS_SHM_PREFIX"]) == ("2", "2", "p_")
    assert env["PATH"] == os.environ["PATH"]
    assert "x86_non_temporal_threshold" in env["GLIBC_TUNABLES"] or "GLIBC_TUNABLES" in os.environ


def test_entrypoint_module_init_worker_runs_once_at_load(tmp_path: Path, monkeypatch) -> None:
    """A function module's optional ``init_worker()`` runs when the worker loads it (Lambda's init phase)."""
    from nimbus.runtime.worker import load_entrypoint

    (tmp_path / "nimbus_init_probe.py").write_text(
        "CALLS = []\n\ndef init_worker():\n    CALLS.append(1)\n\ndef fn(*, context, request):\n    return request\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = load_entrypoint("nimbus_init_probe:fn")
    import nimbus_init_probe
    assert callable(fn) and nimbus_init_probe.CALLS == [1]
