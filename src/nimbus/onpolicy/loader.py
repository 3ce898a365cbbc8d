"""The device data loader (Stellaris §V-B): a background thread stages the next minibatch on the
learner's device while the current one trains.

Given the batch (tensors on the CPU, e.g. decoded from the shared buffer) and the row indices of
each minibatch, the loader thread gathers minibatch i+1 (``batch[key][rows]``), pins it and copies it
to the device with ``non_blocking=True`` on its own CUDA stream, while the caller runs the gradient
step of minibatch i. At most ``depth`` staged minibatches wait, so memory stays bounded. On a CPU
learner there is no copy to hide, but the gathering (and any decoding the caller does in
``make``) still overlaps the step — torch's ops release the GIL.

Example::

    loader = DeviceLoader(batch=cpu_batch, index_batches=[order[i:i + 64] for i in range(0, n, 64)],
                          device=torch.device("cuda"))
    for minibatch in loader:          # dict of tensors already on the device
        step(minibatch)
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import torch

_DONE = object()


class DeviceLoader:
    """Iterate staged minibatches (dicts of tensors on ``device``) in ``index_batches`` order."""

    def __init__(self, *, batch: dict[str, torch.Tensor], index_batches: list[torch.Tensor], device: torch.device,
                 depth: int = 2) -> None:
        if depth < 1:
            raise ValueError(f"depth must be ≥ 1, got {depth}")
        self.batch, self.index_batches, self.device, self.depth = batch, index_batches, torch.device(device), depth
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        self._thread = threading.Thread(target=self._run, name="nimbus-loader", daemon=True)
        self._thread.start()
        try:
            while True:
                item = self._queue.get()
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                minibatch, ready = item
                if ready is not None:  # the consumer's stream waits for the copy; the allocator learns who uses it
                    consumer = torch.cuda.current_stream(self.device)
                    consumer.wait_event(ready)
                    for value in minibatch.values():
                        value.record_stream(consumer)
                yield minibatch
        finally:
            self._stop.set()
            while self._thread.is_alive():  # unblock a producer waiting for room, then let it end
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    self._thread.join(timeout=0.01)

    def _run(self) -> None:
        cuda = self.device.type == "cuda"
        stream = torch.cuda.Stream(device=self.device) if cuda else None
        try:
            for rows in self.index_batches:
                if self._stop.is_set():
                    return
                self._put(self._stage(rows=rows, stream=stream))
            self._put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._put(exc)

    def _stage(self, *, rows: torch.Tensor, stream: torch.cuda.Stream | None) -> tuple[dict, object]:
        gathered = {key: value[rows] for key, value in self.batch.items()}
        if stream is None:
            return {key: value.to(self.device) for key, value in gathered.items()}, None
        with torch.cuda.stream(stream):
            # a host column is pinned, then copied without blocking; one already on the GPU is only gathered
            staged = {key: value if value.is_cuda else value.pin_memory().to(self.device, non_blocking=True)
                      for key, value in gathered.items()}
            ready = torch.cuda.Event()
            ready.record(stream)
        return staged, ready

    def _put(self, item: object) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                continue
