"""The catalogue of environments nimbus is tested on (what `nimbus envs` lists, marked tested).

Any gymnasium id works with `make_env` (and a user's own, envs/custom.py); this catalogue lists the
ones nimbus's tests train with the built-in algorithms, the pip extra each needs, and whether that extra
is installed here. `untested_ids` lists every other id registered with gymnasium (``nimbus envs --all``).

Example::

    for info in list_envs():
        print(info.env_id, info.action_kind, "ok" if info.available else f"pip install nimbus-rl[{info.extra}]")
"""

from __future__ import annotations

import functools
import importlib
import logging
from dataclasses import dataclass
from typing import Literal

logger = logging.getLogger(__name__)

ActionKind = Literal["discrete", "continuous"]


@dataclass(frozen=True)
class EnvInfo:
    env_id: str
    family: str  # "classic_control", "mujoco", "atari", "mpe"
    action_kind: ActionKind
    extra: str | None  # the nimbus-rl extra it needs, None for core gymnasium
    available: bool  # the extra's modules import on this machine
    multi_agent: bool = False  # a PettingZoo Parallel env, for train.workflow: marless


@dataclass(frozen=True)
class _Entry:
    env_id: str
    family: str
    action_kind: ActionKind
    extra: str | None
    multi_agent: bool = False


_CATALOGUE: tuple[_Entry, ...] = (
    _Entry(env_id="CartPole-v1", family="classic_control", action_kind="discrete", extra=None),
    _Entry(env_id="Acrobot-v1", family="classic_control", action_kind="discrete", extra=None),
    _Entry(env_id="Pendulum-v1", family="classic_control", action_kind="continuous", extra=None),
    _Entry(env_id="Hopper-v5", family="mujoco", action_kind="continuous", extra="mujoco"),
    _Entry(env_id="HalfCheetah-v5", family="mujoco", action_kind="continuous", extra="mujoco"),
    _Entry(env_id="nimbus/AtariPong-v5", family="atari", action_kind="discrete", extra="atari"),
    # multi-agent (train.workflow: marless), a PettingZoo Parallel env
    _Entry(env_id="mpe2:simple_spread_v3", family="mpe", action_kind="discrete", extra="mpe", multi_agent=True),
)

# The modules an extra must make importable for its envs to be built.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {"mujoco": ("mujoco",), "atari": ("ale_py", "cv2"),
                                             "mpe": ("pettingzoo", "mpe2", "sklearn")}


@functools.cache
def extra_available(extra: str | None) -> bool:
    """Whether the modules of a nimbus-rl extra import here (cached; core envs are always available)."""
    if extra is None:
        return True
    for module in EXTRA_MODULES.get(extra, ()):
        try:
            importlib.import_module(module)
        except ImportError as err:  # a missing package or a broken native library
            logger.debug("extra %r unavailable: cannot import %s (%s)", extra, module, err)
            return False
    return True


def list_envs() -> list[EnvInfo]:
    """Every catalogued env with its family, action kind, extra and availability here."""
    return [
        EnvInfo(
            env_id=entry.env_id,
            family=entry.family,
            action_kind=entry.action_kind,
            extra=entry.extra,
            available=extra_available(entry.extra),
            multi_agent=entry.multi_agent,
        )
        for entry in _CATALOGUE
    ]


def untested_ids() -> list[str]:
    """Every id registered with gymnasium here that the catalogue does not list (allowed, not tested)."""
    import gymnasium as gym

    tested = {entry.env_id for entry in _CATALOGUE}
    return sorted(env_id for env_id in gym.registry if env_id not in tested and not env_id.startswith("nimbus/"))


def required_extra(*, env_id: str) -> str | None:
    """The extra a catalogued env needs; for other ids, guessed from gymnasium's entry point."""
    for entry in _CATALOGUE:
        if entry.env_id == env_id:
            return entry.extra
    try:
        import gymnasium as gym

        entry_point = str(gym.spec(env_id).entry_point)
    except Exception:  # unknown id: nothing to guess from
        return None
    if "nimbus.envs.atari" in entry_point or env_id.startswith("ALE/"):
        return "atari"
    return "mujoco" if "mujoco" in entry_point else None
