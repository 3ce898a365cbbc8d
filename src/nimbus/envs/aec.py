"""A turn-based (AEC) PettingZoo env where the multi-agent workflow needs a Parallel one: refused with what to do.

The multiagent workflow steps every live agent at once (``ParallelEnv``). PettingZoo converts an AEC env with
``pettingzoo.utils.conversions.aec_to_parallel`` only when the env says it is safe
(``metadata["is_parallelizable"]``: it updates once per cycle of all agents); a truly turn-based env (chess, a card
game) cannot run here. ``refuse_aec`` is called where the env factory's result is checked
(envs/parallel.py ``build_raw_env``), so the message reaches the user as a config error (exit 2)."""

from __future__ import annotations

from typing import Any

from nimbus.errors import ConfigError


def refuse_aec(*, env: Any, env_id: str) -> None:
    """Raise ``ConfigError`` with a hint when ``env`` is a PettingZoo ``AECEnv``; return otherwise."""
    from pettingzoo import AECEnv

    if not isinstance(env, AECEnv):
        return
    name = type(env).__name__
    if env.metadata.get("is_parallelizable", False):
        raise ConfigError(f"env.id: {env_id!r} returned {name}, a turn-based (AEC) PettingZoo env; the multiagent "
                          "workflow needs a ParallelEnv. This env declares metadata is_parallelizable: return "
                          "pettingzoo.utils.conversions.aec_to_parallel(env) from your factory (or use the "
                          "package's parallel_env() if it has one)")
    raise ConfigError(f"env.id: {env_id!r} returned {name}, a turn-based (AEC) PettingZoo env whose metadata does "
                      "not declare is_parallelizable: its agents act one after another, which the multiagent "
                      "workflow (all agents step together, a ParallelEnv) cannot run. Use the package's "
                      "parallel_env() if it has one")
