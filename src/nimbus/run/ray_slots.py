"""On the Ray backend, an actor's envs go on when its worker is evicted or reclaimed (``actors.restore_slots``).

A Ray actor worker holds a rank's envs mid-episode only while it lives. When the pool evicts it (the cluster is
full) or reclaims it (keep-alive), the rank's next worker would start fresh envs: unfinished episodes are lost,
and when that happens every round no episode outlives a fragment, so the moving return stops and evaluation has
nothing to show. ``actors.restore_slots`` carries each rank's env slot with its result and restores it in a
worker that lacks it. ``keep_slots_on_ray`` turns it on for an onpolicy run on Ray whose config leaves it
unset and whose env snapshots exactly (envs/snapshot.py); the saved config.yaml then says so. A config that sets
``actors.restore_slots`` (true or false) is left as it is.
"""

from __future__ import annotations

import logging

from nimbus.config import NimbusConfig
from nimbus.envs.make import make_env
from nimbus.envs.snapshot import SnapshotUnsupported, check_snapshot

log = logging.getLogger(__name__)


def keep_slots_on_ray(*, config: NimbusConfig) -> NimbusConfig:
    """``config`` with ``actors.restore_slots`` on where the module docstring says, else ``config`` itself."""
    actors = config.actors
    set_by_config = "restore_slots" in actors.model_fields_set
    if config.runtime.backend != "ray" or config.train.workflow != "onpolicy" or set_by_config \
            or actors.env_backend == "envpool":
        return config
    env = make_env(env_id=config.env.id, seed=config.seed, kwargs=config.env.kwargs, imports=config.env.imports,
                   wrappers=config.env.wrappers)
    try:
        check_snapshot(env=env)
    except SnapshotUnsupported as exc:
        log.info("runtime.backend ray: an evicted actor's episodes restart (%s)", exc)
        return config
    finally:
        env.close()
    log.info("runtime.backend ray: actors.restore_slots on, so an evicted actor's episodes go on in its next worker")
    return config.model_copy(update={"actors": actors.model_copy(update={"restore_slots": True})})
