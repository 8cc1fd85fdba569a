"""The dishwashing task, registered with Gymnasium on import as `Dishwashing-v0` and
`DishwashingFeasible-v0`."""

import gymnasium as gym

ENTRY_POINT = "envs.dishwashing.env:DishwashingEnv"

# episode limits in agent steps: about twice what the scripted policy needs (~50 full, ~20 feasible)
gym.register("Dishwashing-v0", entry_point=ENTRY_POINT, max_episode_steps=100,
             kwargs={"variant": "full"})
gym.register("DishwashingFeasible-v0", entry_point=ENTRY_POINT, max_episode_steps=50,
             kwargs={"variant": "feasible"})
