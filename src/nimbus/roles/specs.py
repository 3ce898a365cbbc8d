"""FunctionSpecs from the config: how every technique names a function role and the resources it runs with.

Example::

    spec = role_spec(config=config, role="actor", entrypoint="nimbus.onpolicy.actor:actor_function")
    runtime.invoke(spec=spec, request=request)
"""

from __future__ import annotations

from nimbus.config import FunctionConfig, NimbusConfig
from nimbus.runtime.base import FunctionSpec, Resources


def function_spec(*, name: str, entrypoint: str, kind: str, function: FunctionConfig) -> FunctionSpec:
    """The FunctionSpec of a function named ``name``: its resources, timeout, retries and heartbeat from ``function``
    (a ``functions.<role>`` section)."""
    return FunctionSpec(name=name, entrypoint=entrypoint, kind=kind,
                        resources=Resources(cpus=function.cpus, gpus=function.gpus, memory_mb=function.memory_mb),
                        timeout_s=function.timeout_s, max_retries=function.max_retries,
                        heartbeat_s=function.heartbeat_s)


def role_spec(*, config: NimbusConfig, role: str, entrypoint: str) -> FunctionSpec:
    """The FunctionSpec of one function role (``functions.<role>`` in the config, config/sections.py ROLES). Named by
    role, not policy: the policies of a run share warm workers (caches are keyed by policy and version)."""
    return function_spec(name=role, entrypoint=entrypoint, kind=role, function=config.role_function(role=role))
