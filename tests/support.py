"""Plain helpers shared by tests in several folders (fixtures live in the conftest files): polling for a
condition, a run's directory and ledger, a pool's ledger (several workloads), a Python child under this test's
shared-memory prefix, a pickle that must never be unpickled, a user's networks (``algo.model``)."""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from nimbus.cost.ledger import Ledger
from nimbus.data.shm import PREFIX_ENV


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` executed as module ``name``, for tests of what a script computes (registered in
    sys.modules first: its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name,
                                                  Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def wait_for(predicate: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.02) -> bool:
    """Polls ``predicate`` every ``interval_s`` until it is true or ``timeout_s`` has passed; its last answer."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


def ledger_rows(run_dir: Path) -> list[dict]:
    """Every row of a run's cost ledger (``<run_dir>/ledger.jsonl``), in order."""
    return [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]


def pool_ledger(root: Path) -> Ledger:
    """The pool's ledger of a run of several workloads under the output root ``root`` (``pool-*/ledger.jsonl``)."""
    return Ledger.load(path=next(root.glob("pool-*")) / "ledger.jsonl")


def only_run_dir(root: Path) -> Path:
    """The one run directory under ``root`` (an output root after a single run)."""
    (run_dir,) = [p for p in root.iterdir() if p.is_dir()]
    return run_dir


def run_python(code: str, prefix: str) -> str:
    """Runs ``code`` in a fresh interpreter under the shared-memory ``prefix``; its stripped stdout."""
    env = {**os.environ, PREFIX_ENV: prefix}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class _Evil:
    """Unpickling this runs ``touch <path>``: the side effect P11 tests (never unpickle what crossed a process
    boundary) look for."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def evil_pickle(path: Path) -> bytes:
    """A pickle that touches ``path`` if anyone unpickles it."""
    return pickle.dumps(_Evil(path))


USER_NETS = '''
"""A user's networks for algo.model (tests/conftest.py's ``user_nets`` writes this module as ``usernets``)."""
from torch import nn


class Policy(nn.Module):
    def __init__(self, *, observation_space, action_space, width=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(observation_space.shape[0], width), nn.Tanh())
        out = action_space.n if hasattr(action_space, "n") else action_space.shape[0]
        self.pi = nn.Linear(width, out)
        self.v = nn.Linear(width, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h)


class QNet(nn.Module):
    def __init__(self, *, observation_space, action_space):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(observation_space.shape[0], 64), nn.ReLU(), nn.Linear(64, action_space.n))

    def forward(self, obs):
        return self.net(obs)


class WrongWidth(Policy):
    def forward(self, obs):
        h = self.body(obs)
        return h, self.v(h)          # 32 logits for 2 actions


class OneOutput(Policy):
    def forward(self, obs):
        return self.pi(self.body(obs))


class Positional(nn.Module):
    def __init__(self, obs_dim):
        super().__init__()
'''
