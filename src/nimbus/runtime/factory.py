"""Choosing the Runtime backend from ``config.runtime`` — and the rules that tie runtime and store together.

``make_runtime`` returns a ``LocalRuntime`` (default), a ``RayRuntime``, an ``InlineRuntime``
(runtime/inline.py) or a ``SimulatedRuntime`` (runtime/simulated.py); ``StampedRuntime`` wraps any of them so that
every request carries the headers every function needs (``_store``: the descriptor from which a function opens the
run's Store, data/stores.py), whichever workflow sends it.

Rules checked at config load (``nimbus.config.rules.check_cluster``; errors name the keys):

* ``store.backend: ray`` needs ``runtime.backend: ray`` (only Ray workers reach the object store; so not inline);
* ``store.backend: shm`` lives on one machine: with ``runtime.backend: ray`` it needs
  ``runtime.address: local`` (every actor on this machine) — use redis or ray across machines;
* ``store.fallback: shm`` is refused where shm would not reach the functions, for the same reason;
* ``store.password`` and ``store.password_env`` are exclusive; ``store.url`` is redis://, rediss:// or unix://;
* leaving this machine needs authentication (``check_authentication``): a password or TLS for Redis,
  ``RAY_AUTH_MODE=token`` for Ray, unless ``store.allow_insecure`` / ``runtime.allow_insecure`` says otherwise.

Example::

    runtime = StampedRuntime(inner=make_runtime(config=config, ledger=ledger, worker_env={}),
                             headers={"_store": store_descriptor})
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from nimbus.cost.ledger import Ledger
from nimbus.data.codec import Message
from nimbus.errors import ClusterError
from nimbus.runtime.base import FunctionSpec, Resources, Runtime

if TYPE_CHECKING:
    from nimbus.config import NimbusConfig


def make_runtime(*, config: NimbusConfig, ledger: Ledger, worker_env: dict[str, str]) -> Runtime:
    """The configured backend. ``worker_env``: variables every worker needs (Ray workers do not inherit
    the driver's environment; local workers do, so it is already there)."""
    rc = config.runtime
    if rc.backend == "ray":
        try:
            from nimbus.runtime.ray_backend import RayRuntime  # ray is an optional extra
        except ImportError as exc:
            raise ClusterError(f"runtime.backend: ray needs the [ray] extra (pip install -e '.[ray]'): {exc}") from None

        return RayRuntime(ledger=ledger, address=rc.address, capacity_cpus=rc.capacity_cpus,
                          max_workers=rc.max_workers, keep_alive_s=rc.keep_alive_s, init_timeout_s=rc.init_timeout_s,
                          compress_min_bytes=config.channel.compress_min_bytes, worker_env=worker_env,
                          resident=resident_resources(config=config))
    if rc.backend == "simulated":
        from nimbus.runtime.simulated import SimulatedRuntime
        from nimbus.runtime.simulated_pool import simulated_devices

        devices = None if config.devices.pool == "none" else \
            simulated_devices(slots=config.devices.cpu_slots, kinds=frozenset(config.devices.kinds))
        return SimulatedRuntime(ledger=ledger, simulation=config.simulation, capacity_cpus=rc.capacity_cpus,
                                max_workers=rc.max_workers, keep_alive_s=rc.keep_alive_s, seed=config.seed,
                                devices=devices)
    from nimbus.runtime.devices import device_pool
    if rc.backend == "inline":
        from nimbus.runtime.inline import InlineRuntime

        return InlineRuntime(ledger=ledger, devices=device_pool(config=config.devices))
    from nimbus.runtime.forkserver import TRAINING_PRELOAD
    from nimbus.runtime.local import LocalRuntime

    return LocalRuntime(ledger=ledger, capacity_cpus=rc.capacity_cpus, max_workers=rc.max_workers,
                        keep_alive_s=rc.keep_alive_s, inline_max_bytes=config.channel.inline_max_bytes,
                        compress_min_bytes=config.channel.compress_min_bytes, init_timeout_s=rc.init_timeout_s,
                        start_method=rc.start_method, preload=TRAINING_PRELOAD,
                        devices=device_pool(config=config.devices))


def resident_resources(*, config: NimbusConfig) -> Resources:
    """What a run keeps warm at once (a Ray actor holds its resources while idle): its peak actors, and its
    learner-side functions: Stellaris's learners and parameter function, a multi-agent run's learner, critic and
    post-processing function, else one learner."""
    from nimbus.config.rules import peak_actors

    roles = {"stellaris": [("gradient_learner", config.stellaris.learners), ("parameter", 1)],
             "marless": [("learner", 1), ("critic", 1), ("postprocess", 1)]}.get(
        config.train.workflow, [("learner", 1)])
    roles.append(("actor", peak_actors(scaling=config.actors.scaling)))
    functions = [(config.role_function(role=role), count) for role, count in roles]
    return Resources(cpus=sum(f.cpus * n for f, n in functions), memory_mb=sum(f.memory_mb * n for f, n in functions))


class StampedRuntime:
    """A Runtime that adds fixed ``headers`` to every request (a request's own keys win), then delegates.

    Example::

        runtime = StampedRuntime(inner=LocalRuntime(ledger=ledger), headers={"_store": {"backend": "shm"}})
    """

    def __init__(self, *, inner: Runtime, headers: dict[str, Any]) -> None:
        self.inner = inner
        self.headers = dict(headers)

    def invoke(self, *, spec: FunctionSpec, request: Message) -> Future[Message]:
        return self.inner.invoke(spec=spec, request=self._stamp(request))

    def map(self, *, spec: FunctionSpec, requests: list[Message]) -> list[Future[Message]]:
        return self.inner.map(spec=spec, requests=[self._stamp(r) for r in requests])

    def prewarm(self, *, spec: FunctionSpec, count: int, wait_s: float | None = None) -> None:
        self.inner.prewarm(spec=spec, count=count, wait_s=wait_s)

    def preregister(self, *, spec: FunctionSpec, count: int, wait_s: float | None = None) -> None:
        self.inner.preregister(spec=spec, count=count, wait_s=wait_s)

    def stats(self) -> Any:
        return self.inner.stats()

    def bill_provisioned(self) -> None:
        self.inner.bill_provisioned()

    def shutdown(self) -> None:
        self.inner.shutdown()

    def now_s(self) -> float:
        return self.inner.now_s()

    def event_queue(self) -> Any:
        return self.inner.event_queue()

    def call_later(self, *, delay_s: float, callback: Callable[[], None]) -> Any:
        return self.inner.call_later(delay_s=delay_s, callback=callback)

    def exclusive(self) -> Any:
        return self.inner.exclusive()

    def _stamp(self, request: Message) -> Message:
        return Message(header={**self.headers, **request.header}, arrays=request.arrays)
