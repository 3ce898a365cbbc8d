"""The Channel over Ray (XingTian push across nodes): ``RayOutbox`` -> a destination's mailbox -> ``RayInbox``.

Same contract as data/channel.py, with Ray's object store in place of shared memory:

* ``RayOutbox.send(message=..., tag=...)`` returns at once. Its sender thread encodes the body (codec
  frame, LZ4 at ``compress_min_bytes``) and ``ray.put``s it — the transfer starts as soon as the data
  is ready — then posts only a small header (the tag and the body's ObjectRef) to the destination's
  mailbox, in send order.
* The mailbox is a tiny async Ray actor on the destination's node holding headers.
* ``RayInbox``'s receiver thread takes headers as they arrive and pulls each body into the local
  node (``ray.get``: a cross-node copy by Ray's object manager) *before* the consumer asks, decodes it,
  and hands an ``Envelope`` to ``on_message`` or its local queue. Consumers read local memory only.

The body's owner is the sender (Ray semantics): a sender that dies before the receiver pulled its
body loses it (``ray.get`` raises; the Inbox logs and drops it, as a dead worker's result is dropped).
The ``ray`` runtime's own result path follows the same pattern: the result's ObjectRef is the header,
and the driver pulls the body in Ray's completion callback (runtime/ray_backend.py).

Example::

    inbox = RayInbox(on_message=None)
    outbox = RayOutbox(mailbox=inbox.mailbox, source="actor-3")     # any Ray worker, any node
    outbox.send(message=Message(arrays={"obs": obs}), tag={"round": 3})
    envelope = inbox.get(timeout_s=5.0)
    outbox.close(); inbox.close()
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import ray

from nimbus.data.channel import Envelope
from nimbus.data.codec import DEFAULT_COMPRESS_MIN_BYTES, FLAG_LZ4, PREFIX, Message, decode, encode

log = logging.getLogger(__name__)


class Mailbox:
    """A destination's header queue (async Ray actor). Bodies stay in the object store, boxed refs here.

    An async actor may run posts out of order, so each outbox numbers its headers (``_stream``,
    ``_seq``) and the mailbox releases them per stream in order.
    """

    def __init__(self) -> None:
        self._queue: asyncio.Queue = asyncio.Queue()
        self._pending: dict[str, dict[int, tuple]] = {}
        self._next: dict[str, int] = {}

    async def post(self, tag: dict[str, Any], boxed: list) -> None:
        stream, pending = tag["_stream"], self._pending.setdefault(tag["_stream"], {})
        pending[tag["_seq"]] = (tag, boxed)
        expected = self._next.get(stream, 0)
        while expected in pending:
            self._queue.put_nowait(pending.pop(expected))
            expected += 1
        self._next[stream] = expected

    async def take(self, max_items: int, timeout_s: float) -> list:
        try:
            first = await asyncio.wait_for(self._queue.get(), timeout=timeout_s)
        except asyncio.TimeoutError:
            return []
        items = [first]
        while len(items) < max_items and not self._queue.empty():
            items.append(self._queue.get_nowait())
        return items


class RayOutbox:
    """Sender side: ``send`` returns at once; a sender thread puts bodies and posts headers in order."""

    def __init__(self, *, mailbox: Any, source: str,
                 compress_min_bytes: int | None = DEFAULT_COMPRESS_MIN_BYTES) -> None:
        self._mailbox, self._source, self._compress_min_bytes = mailbox, source, compress_min_bytes
        self._queue: deque[tuple[Message, dict[str, Any]] | None] = deque()
        self._cond = threading.Condition()
        self._unfinished = 0
        self._posted: list[Any] = []
        self._stream, self._seq = uuid.uuid4().hex, 0
        self._thread = threading.Thread(target=self._run, name="nimbus-ray-outbox", daemon=True)
        self._thread.start()

    def send(self, *, message: Message, tag: dict[str, Any]) -> None:
        with self._cond:
            self._queue.append((message, tag))
            self._unfinished += 1
            self._cond.notify_all()

    def flush(self, *, timeout_s: float | None = None) -> bool:
        """Wait until every queued message's header reached the mailbox; False on timeout."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._unfinished == 0, timeout=timeout_s):
                return False
            posted, self._posted = self._posted, []
        ready, _ = ray.wait(posted, num_returns=len(posted), timeout=timeout_s)
        return len(ready) == len(posted)

    def close(self, *, timeout_s: float = 5.0) -> None:
        self.flush(timeout_s=timeout_s)
        with self._cond:
            self._queue.append(None)
            self._cond.notify_all()
        self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue))
                item = self._queue.popleft()
            if item is None:
                return
            try:
                frame = np.frombuffer(encode(item[0], compress_min_bytes=self._compress_min_bytes), dtype=np.uint8)
                ref = ray.put(frame)
                tag = {**item[1], "_source": self._source, "_nbytes": int(frame.nbytes), "_stream": self._stream,
                       "_seq": self._seq}
                self._seq += 1
                posted = self._mailbox.post.remote(tag, [ref])
                with self._cond:
                    self._posted.append(posted)
            except Exception as exc:  # noqa: BLE001 - reported, never lost silently
                log.warning("ray outbox %s: dropped message %s: %s", self._source, item[1], exc)
            finally:
                with self._cond:
                    self._unfinished -= 1
                    self._cond.notify_all()


class RayInbox:
    """Receiver side: owns a mailbox on this node; one thread pulls every body into local memory on arrival."""

    def __init__(self, *, on_message: Callable[[Envelope], None] | None = None, batch: int = 64) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=True)
        self.mailbox = ray.remote(Mailbox).options(num_cpus=0, scheduling_strategy=here).remote()
        self._on_message, self._batch = on_message, batch
        self._queue: queue.Queue[Envelope] = queue.Queue()
        self._stop = threading.Event()
        self.received = 0
        self._thread = threading.Thread(target=self._run, name="nimbus-ray-inbox", daemon=True)
        self._thread.start()

    def get(self, *, timeout_s: float | None = None) -> Envelope:
        """Next envelope (only without ``on_message``); raises queue.Empty on timeout."""
        return self._queue.get(timeout=timeout_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        ray.kill(self.mailbox, no_restart=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                items = ray.get(self.mailbox.take.remote(self._batch, 0.2))
            except ray.exceptions.RayError as exc:
                if not self._stop.is_set():
                    log.error("ray inbox: mailbox lost: %s", exc)
                return
            for tag, boxed in items:
                self._deliver(tag=tag, ref=boxed[0])

    def _deliver(self, *, tag: dict[str, Any], ref: Any) -> None:
        try:
            frame = memoryview(ray.get(ref))
            message = decode(frame)
        except Exception as exc:  # noqa: BLE001 - a lost body (dead sender) or a bad frame: drop it
            log.warning("ray inbox: dropped a message from %s: %s", tag.get("_source"), exc)
            return
        compressed = bool(PREFIX.unpack_from(frame, 0)[2] & FLAG_LZ4)
        source, nbytes = tag.pop("_source", "?"), int(tag.pop("_nbytes", 0))
        tag.pop("_stream", None), tag.pop("_seq", None)
        envelope = Envelope(source=source, tag=tag, message=message, nbytes=nbytes, via_segment=True,
                            compressed=compressed)
        self.received += 1
        if self._on_message is None:
            self._queue.put(envelope)
            return
        try:
            self._on_message(envelope)
        except Exception:  # noqa: BLE001 - a consumer bug must not kill the receiver thread
            log.exception("ray inbox: on_message failed for a message from %r", envelope.source)
