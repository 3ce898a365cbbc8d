"""What a workflow does differently when functions may run on other machines (runtime ``ray``), and how
a run recognises that its Store is gone.

* **Batches through the Store.** The ARTOS buffer is shared memory on the driver's machine; a
  learner on another node cannot attach it. With ``System.ship_batches`` the driver writes the
  round's rows once under the per-round key ``batch/<policy>/<version>`` (Ray's object store or
  Redis) and the learner request names that key; the key is deleted as soon as the learner's
  result is accepted (consumed), so per-round keys never pile up.
* **A mirror of the newest policy.** With a remote store the driver copies each new version's
  weights and optimizer state into its ``MirroredStore`` when the learner finishes, so a final
  checkpoint can be written even if Redis dies (P12).
* **Store failures** (``StoreUnavailable`` and subclasses, raised in the driver or inside a
  function) end the run cleanly: final checkpoint from the mirror, summary, then a clear error.

Example::

    key = ship_batch(system=system, policy="main", version=7, indices=indices)   # None without ship_batches
    ...
    finish_learner_round(system=system, policy="main", version=7, new_version=8)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from nimbus.data.codec import Message
from nimbus.data.stores import MirroredStore
from nimbus.errors import FunctionFailed, StoreUnavailable
from nimbus.models.weights import optim_key, weights_key

if TYPE_CHECKING:
    from nimbus.policy.system import System

log = logging.getLogger(__name__)
STORE_FAILURES = frozenset({"StoreUnavailable", "StoreAuthError", "StoreFull"})


def batch_key(*, policy: str, version: int) -> str:
    return f"batch/{policy}/{version}"


def ship_batch(*, system: System, policy: str, version: int, indices: np.ndarray) -> str | None:
    """Put the round's rows under ``batch/<policy>/<version>`` when batches travel through the Store."""
    if not system.ship_batches:
        return None
    key = batch_key(policy=policy, version=version)
    system.store.put(key=key, message=Message(header={"policy_version": version},
                                              arrays=system.buffer.read(indices=indices)))
    return key


def finish_learner_round(*, system: System, policy: str, version: int, new_version: int) -> None:
    """The learner's result was accepted: delete the consumed batch, mirror the new policy locally."""
    if system.ship_batches:
        system.store.delete(key=batch_key(policy=policy, version=version))
    if isinstance(system.store, MirroredStore):
        system.store.remember(keys=[weights_key(policy=policy, version=new_version),
                                    optim_key(policy=policy, version=new_version)])


def store_failure(exc: BaseException) -> StoreUnavailable | None:
    """The store error behind ``exc`` (raised here, or by a function: FunctionFailed), else None."""
    if isinstance(exc, StoreUnavailable):
        return exc
    if isinstance(exc, FunctionFailed) and exc.error_type in STORE_FAILURES:
        last = exc.traceback_text.strip().splitlines()[-1] if exc.traceback_text.strip() else exc.error_type
        return StoreUnavailable(f"function {exc.function!r} lost the store: {last}")
    return None


def run_unless_store_lost(*, run: Callable[[], None]) -> StoreUnavailable | None:
    """Run the workflow; a store failure ends it (returned, logged), anything else propagates."""
    try:
        run()
    except Exception as exc:  # noqa: BLE001 - only store failures are handled here
        lost = store_failure(exc)
        if lost is None:
            raise
        log.error("the store is gone, stopping the run cleanly: %s", lost)
        return lost
    return None
