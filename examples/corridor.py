"""Corridor-v0: walk right to the goal. A custom gymnasium env that nimbus trains (see the README)."""
import gymnasium as gym
from gymnasium import spaces


class Corridor(gym.Env):
    def __init__(self, length: int = 8):
        self.length = length
        self.observation_space = spaces.Dict({"position": spaces.Discrete(length), "goal": spaces.Discrete(length)})
        self.action_space = spaces.Discrete(2)  # 0: step left, 1: step right

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = int(self.np_random.integers(0, self.length - 1))
        return {"position": self.position, "goal": self.length - 1}, {}

    def step(self, action):
        self.position = min(max(self.position + (1 if action == 1 else -1), 0), self.length - 1)
        reached = self.position == self.length - 1
        return {"position": self.position, "goal": self.length - 1}, (1.0 if reached else -0.1), reached, False, {}


gym.register(id="Corridor-v0", entry_point=Corridor, max_episode_steps=50)
