"""`env.backend: mujoco_warp`: N worlds of a task simulated and ray-traced by MuJoCo Warp on the
training device, observations and rewards as torch tensors there (docs/warp.md).

Layers: simulation.py (MuJoCo Warp behind torch views), the batched tasks (cartpole.py,
dishwashing.py), vector.py (WarpVectorEnv: frame stacks, action repeat, autoreset), shards.py (the
worlds split over CPU processes)."""

import math
import os
from pathlib import Path

import gymnasium as gym
import torch

from envs.config import EnvConfig
from envs.mjwarp.cartpole import CartpoleSwingup
from envs.mjwarp.dishwashing import Dishwashing
from envs.mjwarp.shards import WarpShards
from envs.mjwarp.vector import WarpVectorEnv
from errors import UserError

DISHWASHING_VARIANTS = {"Dishwashing-v0": "full", "DishwashingFeasible-v0": "feasible"}
CARTPOLE_SWINGUP = "dm_control/cartpole-swingup-v0"
TASKS = (CARTPOLE_SWINGUP, *DISHWASHING_VARIANTS)
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def make_task(env_id: str, device: torch.device):
    if env_id == CARTPOLE_SWINGUP:
        return CartpoleSwingup()
    if env_id in DISHWASHING_VARIANTS:
        return Dishwashing(DISHWASHING_VARIANTS[env_id],
                           time_limit=gym.spec(env_id).max_episode_steps, device=device)
    raise UserError(f"the `backend` mujoco_warp has no task '{env_id}'; it runs {', '.join(TASKS)} "
                    "(or use the `backend` mujoco)")


def make_warp_env(cfg: EnvConfig, pixels: bool, device: torch.device,
                  heldout: bool = False) -> WarpVectorEnv | WarpShards:
    device = torch.device(device)
    task, count = make_task(cfg.id, device), processes(cfg, device)
    if count > 1:
        return WarpShards(task, cfg, pixels=pixels, processes=count, heldout=heldout)
    return WarpVectorEnv(task, cfg, num_envs=cfg.num_envs, pixels=pixels, device=device,
                         heldout=heldout)


def processes(cfg: EnvConfig, device: torch.device) -> int:
    """`cfg.warp_processes` resolved: on the CPU as set or one per usable core, at most one per
    world; 1 on a GPU."""
    if device.type != "cpu":
        if cfg.warp_processes not in (None, 1):
            raise UserError("`warp_processes` splits the worlds over CPU processes; on a GPU one "
                            "process steps them all: set it to 1 or null")
        return 1
    return min(cfg.warp_processes or usable_cores(), cfg.num_envs)


def usable_cores(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota, which a
    container limited with docker --cpus or a Kubernetes limit does not show in its affinity."""
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
             or 1)
    try:
        quota, period = cpu_max.read_text().split()
        return max(1, min(cores, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):  # no cgroup v2 file here, or no quota ("max")
        return cores
