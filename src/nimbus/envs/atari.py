"""Atari games with the usual DQN preprocessing, as plain gymnasium ids: ``nimbus/AtariPong-v5`` ...

``nimbus/Atari<Game>-v5`` = ``ALE/<Game>-v5`` (ale-py, which ships the ROMs; sticky actions 0.25 as
v5 defines them) with frame skipping moved into gymnasium's ``AtariPreprocessing`` (frame_skip 4,
max-pooled, noop_max 30, 84x84 grayscale uint8; episodes end at game over, not on life loss) and
``FrameStackObservation(4)``: observations are uint8 stacks of shape (4, 84, 84), which
``models.qnet.NatureCNN`` takes channels-first. Rewards are not clipped (Pong's are ±1 already) unless
``env.kwargs: {clip_rewards: true}`` (their sign, as the DQN and PPO papers train; episode returns then count
clipped rewards too).

It is one ``gym.Env`` that owns its wrapper stack, because ``envs.make.make_env`` checks the contract
on the *unwrapped* env: the preprocessing has to be part of the env it sees. Needs the ``atari`` extra
(ale-py and opencv for the resize); a missing one surfaces as a ConfigError naming the extra.

Example::

    env = make_env(env_id="nimbus/AtariPong-v5", seed=0)
    obs, _ = env.reset()              # (4, 84, 84) uint8
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

GAMES = ("Pong", "Breakout", "BeamRider", "Qbert", "SpaceInvaders")  # XingTian §5.2's, and Pong


def atari_env_id(game: str) -> str:
    return f"nimbus/Atari{game}-v5"


class AtariEnv(gym.Env):
    """``ALE/<game>-v5`` + AtariPreprocessing + FrameStackObservation(4), as one env."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, *, game: str, frame_stack: int = 4, clip_rewards: bool = False,
                 render_mode: str | None = None) -> None:
        import ale_py  # the atari extra; ImportError → ConfigError naming it (envs/make.py)
        from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

        gym.register_envs(ale_py)
        base = gym.make(f"ALE/{game}-v5", frameskip=1, render_mode=render_mode)
        env = AtariPreprocessing(base, frame_skip=4, noop_max=30, screen_size=84, grayscale_obs=True,
                                 terminal_on_life_loss=False, scale_obs=False)
        self._env = FrameStackObservation(env, stack_size=frame_stack)
        self.observation_space = self._env.observation_space
        self.action_space = self._env.action_space
        self.render_mode = render_mode
        self._clip_rewards = clip_rewards

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return self._env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self._env.step(action)
        return obs, float(np.sign(reward)) if self._clip_rewards else reward, terminated, truncated, info

    def render(self) -> Any:
        return self._env.render()

    def close(self) -> None:
        self._env.close()


def register() -> None:
    for game in GAMES:
        env_id = atari_env_id(game)
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=AtariEnv, kwargs={"game": game})


register()
