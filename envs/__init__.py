"""Environments: `make_env(cfg)` returns a Gymnasium env whose actions lie in [-1, 1] and whose observations are
float32 state vectors (`encoder.type: state`) or uint8 frame stacks (T, 3, H, W) (`encoder.type: video`).
`make_vector_env(cfg)` runs `env.num_envs` of them in worker processes, observations batched (N, ...)."""

from envs import headless

headless.configure()  # before anything imports mujoco's GL backends: see envs/headless.py

import functools  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium.wrappers import DtypeObservation, FlattenObservation, RescaleAction, TimeLimit  # noqa: E402

from envs import dishwashing  # noqa: E402,F401  (registers Dishwashing-v0 and DishwashingFeasible-v0)
from envs.action_repeat import ActionRepeat  # noqa: E402
from envs.pixels import PixelObservation  # noqa: E402
from envs.workers import EnvWorkers  # noqa: E402
from errors import UserError  # noqa: E402


def make_env(cfg) -> gym.Env:
    env = make_task(cfg.env.id)
    env = RescaleAction(env, -1.0, 1.0)
    if cfg.env.action_repeat > 1:
        env = ActionRepeat(env, cfg.env.action_repeat)
    if cfg.env.max_episode_steps:
        env = TimeLimit(env, cfg.env.max_episode_steps)
    if cfg.encoder.type == "video":
        return PixelObservation(
            env,
            size=cfg.env.image_size,
            camera=cfg.env.camera,
            frame_stack=cfg.env.frame_stack,
            shadow_size=cfg.env.render_shadow_size,
            offsamples=cfg.env.render_offsamples,
        )
    if isinstance(env.observation_space, gym.spaces.Dict):
        env = FlattenObservation(env)
    return DtypeObservation(env, np.float32)


def make_vector_env(cfg) -> EnvWorkers:
    """`env.num_envs` envs, one spawned worker process and one renderer each (fork is unsafe once torch and GL are
    initialised), frames through shared memory, stepped in turn with pipelined actions: see envs/workers.py."""
    render_threads = max(1, (os.cpu_count() or 1) // cfg.env.num_envs)
    return EnvWorkers(functools.partial(make_worker_env, cfg, render_threads), cfg.env.num_envs)


def make_worker_env(cfg, render_threads: int) -> gym.Env:
    """A vector worker's env. Mesa's software renderer (llvmpipe, what EGL and OSMesa use without a GPU) starts a
    rasterizer thread per core in every process; N workers would fight over the cores, so each gets its share. A
    share of one core means LP_NUM_THREADS=0: the worker rasterizes in its own thread, because a separate rasterizer
    thread only adds a hand-off per frame (2 workers on 2 cores collected 1.63x one env's rate against 1.38x with one
    rasterizer thread each, measured interleaved). Only in the worker processes: Gymnasium also calls this once in
    the trainer's process (for the spaces), whose environment stays as it was. A user's LP_NUM_THREADS wins; GPU
    renderers ignore it."""
    if multiprocessing.parent_process() is not None:
        os.environ.setdefault("LP_NUM_THREADS", str(render_threads if render_threads > 1 else 0))
    return make_env(cfg)


def make_task(env_id: str) -> gym.Env:
    """The bare task: a Gymnasium id (`HalfCheetah-v5`) or a dm_control task as Shimmy names it
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
