"""Repeat each agent action for k simulator steps: the standard trick of pixel agents (DrQ, CURL),
and the cheapest speed-up of a render-bound loop, since only the last of the k steps is rendered."""

import gymnasium as gym


class ActionRepeat(gym.Wrapper):
    def __init__(self, env: gym.Env, repeat: int):
        super().__init__(env)
        self.repeat = repeat

    def step(self, action):
        total = 0.0
        for _ in range(self.repeat):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info
