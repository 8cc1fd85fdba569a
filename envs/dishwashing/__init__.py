"""The dishwashing task, registered with Gymnasium on import (envs/__init__.py imports it, so YAML configs can
name `env.id: Dishwashing-v0` or `DishwashingFeasible-v0`). See env.py for the task, reward and observation."""

import gymnasium as gym

ENTRY_POINT = "envs.dishwashing.env:DishwashingEnv"

# episode limits in agent steps: about twice what the scripted policy needs (~50 full, ~20 feasible)
gym.register("Dishwashing-v0", entry_point=ENTRY_POINT, max_episode_steps=100, kwargs={"variant": "full"})
gym.register("DishwashingFeasible-v0", entry_point=ENTRY_POINT, max_episode_steps=50, kwargs={"variant": "feasible"})
