"""FunctionSpecs from the config: how every technique names a function role and the resources it runs with.

Example::

    spec = role_spec(config=config, role="actor", entrypoint="nimbus.onpolicy.actor:actor_function")
    runtime.invoke(spec=spec, request=request)
"""

from __future__ import annotations

from nimbus.config import FunctionConfig, NimbusConfig
from nimbus.errors import ConfigError
from nimbus.runtime.base import FunctionSpec, Resources


def function_spec(*, name: str, entrypoint: str, kind: str, function: FunctionConfig) -> FunctionSpec:
    """The FunctionSpec of a function named ``name``: its resources, timeout, retries and heartbeat from ``function``
    (a ``functions.<role>`` section)."""
    return FunctionSpec(name=name, entrypoint=entrypoint, kind=kind,
                        resources=Resources(cpus=function.cpus, gpus=function.gpus, memory_mb=function.memory_mb),
                        timeout_s=function.timeout_s, max_retries=function.max_retries,
                        retry_exceptions=function.retry_exceptions, heartbeat_s=function.heartbeat_s)


def role_spec(*, config: NimbusConfig, role: str, entrypoint: str) -> FunctionSpec:
    """The FunctionSpec of one function role (``functions.<role>`` in the config, config/sections.py ROLES). Named by
    role, not policy: the policies of a run share warm workers (caches are keyed by policy and version)."""
    return function_spec(name=role, entrypoint=entrypoint, kind=role, function=config.role_function(role=role))


def check_devices(*, config: NimbusConfig) -> None:
    """Exit 2 before anything starts for devices this machine lacks: ``learner.device: cuda`` or
    ``devices.kind: cuda`` with no CUDA device visible to torch, where the functions run here (local
    runtime, or a private Ray; a Ray cluster's learners may sit on other nodes' GPUs). With a device pool
    (``devices.pool: on_demand``) learner-side functions compute on their lease's device, so ``learner.device``
    is not checked then (runtime/devices.py)."""
    import torch  # here: the spec helpers above serve the driver's config code, which loads no torch

    here = config.runtime.backend == "local" or config.runtime.address == "local"
    if not here or torch.cuda.is_available():
        return
    if config.learner.device == "cuda" and config.devices.pool != "on_demand":   # a pool's lease decides instead
        raise ConfigError("learner.device: cuda, but torch sees no CUDA device on this machine (use auto or cpu)")
    if config.devices.pool == "on_demand" and config.devices.kind == "cuda":
        raise ConfigError("devices.kind: cuda, but torch sees no CUDA device on this machine (use auto or cpu)")
