"""Environments: `make_env(cfg, pixels)` returns a Gymnasium env with actions in [-1, 1] and
observations uint8 frame stacks (T, 3, H, W) or float32 state vectors; `make_vector_env` and
`make_batched_env` give `cfg.num_envs` of them. Each builder sets up rendering first
(envs/rendering.py): a plain Python script needs no more."""

import dataclasses
import functools
import multiprocessing
import os

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import FlattenObservation, RescaleAction, TimeLimit, TransformObservation

from envs import (
    dishwashing,  # noqa: F401  (registers Dishwashing-v0 and DishwashingFeasible-v0)
    rendering,
)
from envs.action_repeat import ActionRepeat
from envs.config import EnvConfig
from envs.pixels import Camera, PixelObservation
from envs.randomize import RandomScene
from envs.workers import EnvWorkers, InProcessEnv
from errors import UserError


def make_env(cfg: EnvConfig, pixels: bool, *, heldout: bool = False) -> gym.Env:
    """`heldout`: held-out scenes (envs/randomize.py), whatever `cfg.randomize.enabled` says; else
    as it says."""
    rendering.configure()
    env = make_task(cfg.id)
    # bounds of the space's own dtype: gymnasium warns on every cast
    bound = env.action_space.dtype.type
    env = RescaleAction(env, bound(-1.0), bound(1.0))
    if cfg.action_repeat > 1:
        env = ActionRepeat(env, cfg.action_repeat)
    if cfg.max_episode_steps:
        env = TimeLimit(env, cfg.max_episode_steps)
    # inside the frames: the first frame shows the new scene
    if pixels and (heldout or cfg.randomize.enabled):
        env = RandomScene(env, cfg.randomize, camera=cfg.camera, heldout=heldout)
    if pixels:
        return PixelObservation(
            env,
            size=cfg.image_size,
            camera=cfg.camera,
            frame_stack=cfg.frame_stack,
            shadow_size=cfg.render_shadow_size,
            offsamples=cfg.render_offsamples,
        )
    if isinstance(env.observation_space, gym.spaces.Dict):
        env = FlattenObservation(env)
    # DtypeObservation's float32 space, with its bounds cast here: gymnasium warns on every run when
    # it casts them
    bounds = env.observation_space
    space = gym.spaces.Box(bounds.low.astype(np.float32), bounds.high.astype(np.float32),
                           dtype=np.float32)
    return TransformObservation(env, lambda obs: np.asarray(obs, dtype=np.float32), space)


def make_vector_env(cfg: EnvConfig, pixels: bool, *, heldout: bool = False,
                    together: bool = False) -> EnvWorkers | InProcessEnv:
    """`cfg.num_envs` worker processes, or one env in this process; `heldout` as in `make_env`,
    `together` as in EnvWorkers."""
    rendering.configure()  # here too: a worker's error would be a traceback
    if cfg.num_envs == 1:
        return InProcessEnv(make_env(cfg, pixels, heldout=heldout))
    render_threads = max(1, (os.cpu_count() or 1) // cfg.num_envs)
    return EnvWorkers(functools.partial(make_worker_env, cfg, pixels, render_threads,
                                        heldout=heldout), cfg.num_envs, together=together)


def make_batched_env(cfg: EnvConfig, pixels: bool, device, *, heldout: bool = False):
    """`cfg.num_envs` MuJoCo Warp worlds on `device`, whatever `cfg.backend` says
    (envs/mjwarp/vector.py)."""
    rendering.configure()
    try:
        from envs.mjwarp import make_warp_env
    except ImportError as err:
        raise UserError(f"the `backend` mujoco_warp needs MuJoCo Warp ({err}); install it with "
                        "'pip install -r requirements-warp.txt'") from None
    return make_warp_env(cfg, pixels, device, heldout)


def make_eval_env(cfg: EnvConfig, pixels: bool, device, *, worlds: int, processes: int,
                  video_size: int | None,
                  heldout: bool = False):
    """(env, camera or None) an evaluation runs in: a pixel policy trained on MuJoCo Warp frames in
    `worlds` worlds (ray-traced frames differ from OpenGL's), else in `processes` env processes; one
    is this process, filmed at `video_size` px by a camera of its own when that is given."""
    if cfg.backend == "mujoco_warp" and pixels:
        # one process: a short burst
        batched = dataclasses.replace(cfg, num_envs=worlds, warp_processes=1)
        return make_batched_env(batched, True, device, heldout=heldout), None
    env = make_vector_env(dataclasses.replace(cfg, num_envs=processes), pixels, heldout=heldout)
    if video_size is None or env.num_envs > 1:  # several: a video shows the frames the policy sees
        return env, None
    try:
        return env, Camera(env.env, size=video_size, camera=cfg.camera,
                           shadow_size=cfg.render_shadow_size,
                           offsamples=cfg.render_offsamples)
    except BaseException:
        env.close()
        raise


def make_worker_env(cfg: EnvConfig, pixels: bool, render_threads: int, *,
                    heldout: bool = False) -> gym.Env:
    """A vector worker's env. Mesa's software renderer starts a rasterizer thread per core in every
    process, so each worker gets its share of the cores; a share of one renders in the worker's own
    thread (docs/guide.md)."""
    if multiprocessing.parent_process() is not None:
        os.environ.setdefault("LP_NUM_THREADS", str(render_threads if render_threads > 1 else 0))
    return make_env(cfg, pixels, heldout=heldout)


def state_size(env_id: str) -> int:
    """The length of the task's state vector, as `make_env(..., pixels=False)` and `info["state"]`
    give it."""
    task = make_task(env_id)
    size = gym.spaces.flatdim(task.observation_space)
    task.close()
    return size


def control_fps(env_id: str, action_repeat: int) -> int:
    """Agent steps per simulated second: the pace a person drives the task at, LeRobot's `fps`."""
    task = make_task(env_id)
    try:
        dt = getattr(task.unwrapped, "dt", None)
    finally:
        task.close()
    if not dt:
        raise UserError(f"{env_id} does not say its time step; pass --fps")
    return max(1, round(1 / (dt * action_repeat)))


def make_task(env_id: str) -> gym.Env:
    """A Gymnasium id (`HalfCheetah-v5`) or a dm_control task as Shimmy names it
    (`dm_control/cartpole-swingup-v0`)."""
    if env_id.startswith("dm_control/"):
        import shimmy  # noqa: F401  (registers the dm_control/* ids)
    try:
        return gym.make(env_id)
    except gym.error.Error as err:
        reason = str(err).splitlines()[0]
        raise UserError(
            f"unknown `env_id` '{env_id}' ({reason}); use a Gymnasium id such as HalfCheetah-v5 "
            "or dm_control/<domain>-<task>-v0, e.g. dm_control/cartpole-swingup-v0"
        ) from None
