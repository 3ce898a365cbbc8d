"""A turn-based (AEC) PettingZoo env where the multi-agent workflow needs a Parallel one: converted where PettingZoo
says it is safe, refused with the reason otherwise.

The marless workflow steps every live agent at once (``ParallelEnv``). PettingZoo converts an AEC env with
``pettingzoo.utils.conversions.aec_to_parallel`` only when the env says it is safe
(``metadata["is_parallelizable"]``: it updates once per cycle of all agents, as mpe2's ``env()`` constructors);
``parallel_from_aec`` does that conversion (logged once per env id and process). A truly turn-based env (chess,
tic-tac-toe, a card game: no ``is_parallelizable``) cannot run here and is refused. ``parallel_from_aec`` is called
where the env factory's result is checked (envs/parallel.py ``build_raw_env``), so the refusal reaches the user as a
config error (exit 2)."""

from __future__ import annotations

import logging
from typing import Any

from nimbus.errors import ConfigError

log = logging.getLogger(__name__)
_converted: set[str] = set()     # env ids whose conversion this process already logged


def parallel_from_aec(*, env: Any, env_id: str) -> Any:
    """``env`` itself unless it is a PettingZoo ``AECEnv``; an AEC env that declares ``is_parallelizable`` through
    ``aec_to_parallel``; any other AEC env raises ``ConfigError`` saying why."""
    from pettingzoo import AECEnv
    from pettingzoo.utils.conversions import aec_to_parallel

    if not isinstance(env, AECEnv):
        return env
    name = type(env).__name__
    if env.metadata.get("is_parallelizable", False):
        if env_id not in _converted:
            _converted.add(env_id)
            log.info("env.id %r returned %s, a turn-based (AEC) PettingZoo env that declares is_parallelizable: "
                     "converted with pettingzoo.utils.conversions.aec_to_parallel", env_id, name)
        return aec_to_parallel(env)
    raise ConfigError(f"env.id: {env_id!r} returned {name}, a turn-based (AEC) PettingZoo env whose metadata does "
                      "not declare is_parallelizable: its agents act one after another, which the marless "
                      "workflow (all agents step together, a ParallelEnv) cannot run, and PettingZoo's "
                      "aec_to_parallel conversion applies only to envs that declare it. Use the package's "
                      "parallel_env() if it has one")
