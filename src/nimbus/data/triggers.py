"""Triggers and the trigger table: a workflow as trigger → action bindings (ARTOS §4.2, Table 3).

A trigger answers one question, ``check(now_s)``: does it fire now? A trigger that answers True has
fired and re-arms itself (DataKeyTrigger starts counting afresh, TimeTrigger starts a new period,
ObjectKeyTrigger remembers the key it saw), so one condition fires once. ``reset()`` re-arms without
firing. Triggers own no threads and block on nothing: the driver's event loop (or a buffer listener)
calls ``TriggerTable.poll``, which runs the action of every trigger that fires, in binding order.

The onpolicy workflow (PPO) as bindings::

    events = StoreEvents()                                   # whoever puts weights calls events.notify(key=...)
    weights = ObjectKeyTrigger(store_events=events, key_prefix="weights/main")
    table = TriggerTable()
    table.bind(name="invoke_actors", trigger=weights, action=lambda: invoke_actors(weights.last_key))
    table.bind(name="invoke_learner", trigger=DataKeyTrigger(buffer=buf, n_actors=8, size_rows=2048),
               action=invoke_learner)
    buf.subscribe(callback=lambda event: table.poll(now_s=time.monotonic()))

and the offpolicy one adds ``TimeTrigger(period_s=5.0)`` → weight sync.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nimbus.core import Trigger as Trigger  # the contract itself lives in core.py
from nimbus.data.buffer import Buffer
from nimbus.data.store import key_version, under_prefix, validate_key

logger = logging.getLogger(__name__)

MAX_POLL_PASSES = 64


class DataKeyTrigger:
    """Fires when rows from ≥ ``n_actors`` distinct actors, ≥ ``size_rows`` in all, arrived since it last re-armed.

    Counts come from the buffer's header (per-actor row counts), so duplicates dropped by the buffer
    never count, and the buffer may live in another process. ``keys``: the data keys that must be
    present (pipelined transfer, ARTOS §4.3); today every ingest carries every key of the spec, so
    they only need to exist in it. ARTOS Table 3: full batch = (n=num_actors, size=step_size);
    FIFO = (n=1, size=step_size).

    Example::

        trigger = DataKeyTrigger(buffer=buf, n_actors=4, size_rows=512)
    """

    def __init__(self, *, buffer: Buffer, n_actors: int, size_rows: int, keys: tuple[str, ...] = ()) -> None:
        if n_actors < 1 or size_rows < 1:
            raise ValueError(f"DataKeyTrigger needs n_actors ≥ 1 and size_rows ≥ 1, got {n_actors}, {size_rows}")
        missing = [key for key in keys if key not in buffer.keys]
        if missing:
            raise ValueError(f"DataKeyTrigger keys {missing} are not in the buffer spec {list(buffer.keys)}")
        self.buffer = buffer
        self.n_actors = n_actors
        self.size_rows = size_rows
        self.keys = tuple(keys)
        self._baseline = buffer.actor_row_counts()

    def pending(self) -> tuple[int, int]:
        """(distinct actors, rows) arrived since the trigger last re-armed."""
        arrived = self.buffer.actor_row_counts() - self._baseline
        return int(np.count_nonzero(arrived)), int(arrived.sum())

    def check(self, *, now_s: float) -> bool:
        counts = self.buffer.actor_row_counts()
        arrived = counts - self._baseline
        if np.count_nonzero(arrived) >= self.n_actors and int(arrived.sum()) >= self.size_rows:
            self._baseline = counts
            return True
        return False

    def reset(self) -> None:
        """Forget the rows that arrived so far."""
        self._baseline = self.buffer.actor_row_counts()


class StoreEvents:
    """The driver-side notifier of store puts: the component that puts a key calls ``notify(key=...)``.

    Keeps, per parent path, the highest-versioned key announced (``weights/main/12`` → parent
    ``weights/main``, version 12); keys without an integer last component are ignored.

    Example::

        events = StoreEvents()
        store.put(key="weights/main/1", message=msg); events.notify(key="weights/main/1")
        events.latest(prefix="weights/main")   # "weights/main/1"
    """

    def __init__(self) -> None:
        self._latest: dict[str, tuple[int, str]] = {}

    def notify(self, *, key: str) -> None:
        version = key_version(validate_key(key))
        if version is None:
            return
        parent = key.rsplit("/", 1)[0] if "/" in key else ""
        if parent not in self._latest or version > self._latest[parent][0]:
            self._latest[parent] = (version, key)

    def latest(self, *, prefix: str) -> str | None:
        """The announced key under ``prefix`` with the highest version (ties: the greatest key)."""
        found = [entry for entry in self._latest.values() if under_prefix(entry[1], prefix)]
        return max(found)[1] if found else None


class ObjectKeyTrigger:
    """Fires when a key under ``key_prefix`` newer (higher version) than the last one it saw was announced.

    ARTOS Table 3: actor invocation and on-policy sync (key = model parameters). The key that made
    it fire is ``last_key``. A fresh trigger fires for the newest key already announced; ``reset``
    skips everything announced so far.

    Example::

        trigger = ObjectKeyTrigger(store_events=events, key_prefix="weights/main")
        events.notify(key="weights/main/3")
        trigger.check(now_s=0.0), trigger.last_key   # (True, "weights/main/3")
    """

    def __init__(self, *, store_events: StoreEvents, key_prefix: str) -> None:
        self.store_events = store_events
        self.key_prefix = key_prefix
        self.last_key: str | None = None
        self._last_version = -1

    def check(self, *, now_s: float) -> bool:
        key = self.store_events.latest(prefix=self.key_prefix)
        version = -1 if key is None else key_version(key)
        if key is None or version is None or version <= self._last_version:
            return False
        self.last_key, self._last_version = key, version
        return True

    def reset(self) -> None:
        """Treat every key announced so far as seen."""
        key = self.store_events.latest(prefix=self.key_prefix)
        version = None if key is None else key_version(key)
        if version is not None:  # StoreEvents only keeps versioned keys
            self.last_key, self._last_version = key, version


class TimeTrigger:
    """Fires when ``period_s`` elapsed since it last fired (or was made or reset).

    ``now_s`` given to ``check`` must come from ``clock``. After a late check the next period starts
    at that check (no burst of catch-up firings). ARTOS Table 3: temporal training, off-policy sync.

    Example::

        trigger = TimeTrigger(period_s=5.0)
        trigger.check(now_s=time.monotonic())   # False until 5 s have passed
    """

    def __init__(self, *, period_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not period_s > 0:
            raise ValueError(f"TimeTrigger period_s must be > 0, got {period_s}")
        self.period_s = period_s
        self.clock = clock
        self._last_s = clock()

    def check(self, *, now_s: float) -> bool:
        if now_s - self._last_s >= self.period_s:
            self._last_s = now_s
            return True
        return False

    def reset(self) -> None:
        """Start a new period now."""
        self._last_s = self.clock()


@dataclass(frozen=True)
class Binding:
    """One row of the trigger table: when ``trigger`` fires, run ``action``."""

    name: str
    trigger: Trigger
    action: Callable[[], object]


class TriggerTable:
    """A workflow as an ordered list of bindings, polled by the driver's event loop.

    ``poll`` checks every binding in binding order and runs the action of each one that fires; an
    action sees the effects of earlier actions of the same poll. A ``poll`` re-entered from an action
    (e.g. the action ingests and a buffer listener polls) is deferred: the outer poll makes one more
    pass when the current one ends, so actions never nest.

    Example::

        table = TriggerTable()
        table.bind(name="sync_weights", trigger=TimeTrigger(period_s=5.0), action=sync_weights)
        fired = table.poll(now_s=time.monotonic())   # e.g. ["sync_weights"]
    """

    def __init__(self) -> None:
        self._bindings: list[Binding] = []
        self._polling = False
        self._repoll = False

    def bind(self, *, name: str, trigger: Trigger, action: Callable[[], object]) -> Binding:
        if any(binding.name == name for binding in self._bindings):
            raise ValueError(f"trigger table already has a binding named {name!r}")
        binding = Binding(name=name, trigger=trigger, action=action)
        self._bindings.append(binding)
        return binding

    def unbind(self, *, name: str) -> None:
        kept = [binding for binding in self._bindings if binding.name != name]
        if len(kept) == len(self._bindings):
            raise KeyError(f"trigger table has no binding named {name!r}")
        self._bindings = kept

    @property
    def bindings(self) -> tuple[Binding, ...]:
        return tuple(self._bindings)

    def poll(self, *, now_s: float) -> list[str]:
        """Run the action of every trigger that fires now; the names that fired, in binding order."""
        if self._polling:
            self._repoll = True
            return []
        fired: list[str] = []
        self._polling = True
        try:
            for _ in range(MAX_POLL_PASSES):
                self._repoll = False
                fired += self._pass(now_s=now_s)
                if not self._repoll:
                    break
            else:
                logger.warning("trigger table: still re-polled after %d passes; stopping", MAX_POLL_PASSES)
        finally:
            self._polling = False
        return fired

    def _pass(self, *, now_s: float) -> list[str]:
        fired = []
        for binding in list(self._bindings):
            if binding.trigger.check(now_s=now_s):
                logger.debug("trigger %r fired at %.3f s", binding.name, now_s)
                fired.append(binding.name)
                binding.action()
        return fired

    def reset(self) -> None:
        """Re-arm every trigger without firing."""
        for binding in self._bindings:
            binding.trigger.reset()


class TransferTrigger:
    """ARTOS's transfer trigger (Table 3, "Data Transfer", keys = pipeline keys): moves one producer's
    cached rows to the consumer in stages, key group by key group, in order.

    Bound to a producer-side cache (ARTOS: the scalable cache buffer on the actor's worker). ``offer``
    adds columns to the cache; ``check`` fires when every key of the next stage is cached; ``take``
    then hands over that stage's columns (and forgets them). Keys in no stage are never sent. The
    dual-stage pipeline is ``TransferTrigger(keys_in_order=(GAE keys, the rest))`` (onpolicy/pipeline.py);
    one stage with every key is the unpipelined transfer.

    Example::

        trigger = TransferTrigger(keys_in_order=(("rewards", "values"), ("obs", "actions")))
        trigger.offer(arrays=rollout)                 # all four keys cached
        while trigger.check(now_s=0.0):
            outbox.send(message=Message(arrays=trigger.take()), tag={"stage": trigger.stage - 1})
    """

    def __init__(self, *, keys_in_order: tuple[tuple[str, ...], ...]) -> None:
        flat = [key for stage in keys_in_order for key in stage]
        if not keys_in_order or any(not stage for stage in keys_in_order) or len(flat) != len(set(flat)):
            raise ValueError(f"TransferTrigger needs non-empty stages with each key once, got {keys_in_order}")
        self.keys_in_order = tuple(tuple(stage) for stage in keys_in_order)
        self.stage = 0  # the next stage to send
        self._cache: dict[str, np.ndarray] = {}
        self._ready = False

    def offer(self, *, arrays: dict[str, np.ndarray]) -> None:
        """Cache columns produced so far (later offers add or replace keys)."""
        self._cache.update(arrays)

    def check(self, *, now_s: float) -> bool:
        self._ready = self.stage < len(self.keys_in_order) and all(
            key in self._cache for key in self.keys_in_order[self.stage])
        return self._ready

    def take(self) -> dict[str, np.ndarray]:
        """The next stage's columns (after ``check`` fired); advances to the following stage."""
        if not self._ready:
            raise RuntimeError("TransferTrigger.take() without a check() that fired")
        stage = {key: self._cache.pop(key) for key in self.keys_in_order[self.stage]}
        self.stage += 1
        self._ready = False
        return stage

    @property
    def done(self) -> bool:
        return self.stage == len(self.keys_in_order)

    def reset(self) -> None:
        """Start a new transfer: empty cache, first stage next."""
        self._cache.clear()
        self.stage, self._ready = 0, False
