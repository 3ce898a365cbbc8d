"""Fault points: named places in function code where a reliability test makes an attempt die, hang or
raise (P1 and P6, docs/reliability.md), as Ray builds its chaos hooks (``RAY_testing_*``) into its own code.

A point is armed by the environment variable ``NIMBUS_FAULTS`` (a JSON object: point name → spec),
which local workers inherit from the driver. Unset, a point costs one dictionary lookup. The spec::

    {"action": "kill" | "sleep" | "raise" | "nan",  # SIGKILL this process / sleep sleep_s / raise RuntimeError /
                                             #   fault_point returns True: the caller makes its value NaN
     "counter_path": "/tmp/x",               # a file counting the passes, under a lock, so the count
     "after": 0,                             #   survives the worker a fault killed: pass `after` times
     "times": 1,                             #   quietly, then fire on the next `times` passes
     "sleep_s": 3600}

Points: ``learner.published`` (a learner function right after its put of weights and optimizer state
v+1, before its result is sent); ``learner.optimizer_step`` (inside ``optimizer.step()`` of the
learner's update, before the parameters change); ``gradient.published`` (a gradient learner right after its
put); ``gradient.nonfinite`` (``nan``: a gradient learner's gradient becomes NaN before its finiteness check);
``gradient.poisoned`` (``nan``: the gradient a learner puts is NaN, after its check: the parameter function refuses
it); ``parameter.published`` (Stellaris's parameter function right after its put of version v+1);
``actor.started`` (an actor function before it reads its weights); ``marless.policy.published`` (a multi-agent
policy function right after its put of weights and optimizer state v+1).

``raise`` raises ``InjectedFault``, which the runtime retries like a worker's death (``failure_kind``): an
injected fault stands for the platform failing at that point, not for a bug in the function's code.

Example::

    NIMBUS_FAULTS='{"learner.published": {"action": "kill", "counter_path": "/tmp/c", "times": 1}}' \\
        nimbus train configs/ppo-cartpole.yaml      # round 0's learner dies once; its retry must succeed
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from pathlib import Path

FAULTS_ENV = "NIMBUS_FAULTS"
ACTIONS = ("kill", "sleep", "raise", "nan")
INFRASTRUCTURE, APPLICATION, FATAL = "infrastructure", "application", "fatal"   # failure_kind's answers


class InjectedFault(RuntimeError):
    """A fault a test injected (a fault point, a fault-injection env): retried as a platform failure."""

    nimbus_retryable = True


def failure_kind(exc: BaseException) -> str:
    """How the runtime retries an attempt that raised ``exc`` (docs/cluster.md, "Which failures are retried").

    ``fatal``: the exception says a retry would fail the same way (``nimbus_retryable = False``: a broken env
    contract, a lost Redis after its own back-off); never retried. ``infrastructure``: the platform failed, not
    the function (an injected fault, a key the store lost, an error of Ray's own, a wait on something outside the
    function that ran out or lost its connection: ``TimeoutError``, ``ConnectionError``, e.g. a pipelined learner
    whose actors' rows did not arrive); retried up to
    ``max_retries``, like a dead or timed-out worker. ``application``: any other exception, raised by the
    function's own code (the env, the model, the loss); retried at most ``retry_exceptions`` times (default 0,
    as Ray's ``retry_exceptions=False``), since the same code on the same input raises the same error.
    """
    marked = getattr(exc, "nimbus_retryable", None)
    if marked is not None:
        return INFRASTRUCTURE if marked else FATAL
    from nimbus.data.store import KeyNotFound  # here: a worker that never reads the store does not import it

    if isinstance(exc, (KeyNotFound, TimeoutError, ConnectionError)) or type(exc).__module__.split(".")[0] == "ray":
        return INFRASTRUCTURE
    return APPLICATION


def bump_counter(*, path: str | Path, limit: int) -> bool:
    """Atomically increment the counter in ``path`` if it is below ``limit``; True if it was."""
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        count = int(handle.read().strip() or 0)
        if count >= limit:
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(str(count + 1))
        handle.flush()
        os.fsync(handle.fileno())
        return True


def read_counter(*, path: str | Path) -> int:
    try:
        return int(Path(path).read_text().strip() or 0)
    except FileNotFoundError:
        return 0


def armed(*, name: str) -> dict | None:
    """The spec ``NIMBUS_FAULTS`` gives the point ``name``, or None."""
    faults = os.environ.get(FAULTS_ENV)
    return json.loads(faults).get(name) if faults else None


def fault_point(*, name: str) -> bool:
    """Misbehave here if ``NIMBUS_FAULTS`` arms ``name`` and this pass is one of the ``times`` after ``after``.
    True when it fired with action ``nan`` (the caller makes its value non-finite); False otherwise."""
    spec = armed(name=name)
    if spec is None:
        return False
    after = int(spec.get("after", 0))
    if not bump_counter(path=spec["counter_path"], limit=after + int(spec.get("times", 1))) or \
            read_counter(path=spec["counter_path"]) <= after:
        return False
    action = spec["action"]
    if action == "nan":
        return True
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "sleep":
        time.sleep(float(spec.get("sleep_s", 3600)))
    elif action == "raise":
        raise InjectedFault(f"injected fault at {name} ({FAULTS_ENV})")
    else:
        raise ValueError(f"{FAULTS_ENV}: {name}.action must be one of {ACTIONS}, not {action!r}")
    return False
