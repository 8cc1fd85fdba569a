"""Frames/s collected into the replay with random actions: the MuJoCo Warp backend (env.backend:
mujoco_warp) at N worlds in P processes against the OpenGL backend's env in this process (num_envs
1) and its 2 worker processes (num_envs 2).

    # dishwashing and cartpole swing-up, 84 px, N = 1 16 64, P = 1 and 2
    nice -n 5 python3 bench/mjwarp.py
    nice -n 5 python3 bench/mjwarp.py --tasks dm_control/cartpole-swingup-v0 --worlds 64 256 \\
        --processes 2 --seconds 10
    nice -n 5 python3 bench/mjwarp.py --worlds 16 64 --processes 2 --lit  # shadows, skybox cost
    nice -n 5 python3 bench/mjwarp.py --worlds 64 --breakdown  # where a frame's time goes, per side

A frame is one observation written to the replay (sac/replay.py, frame stacks of 3), reset frames
included; action repeat 1, so every frame is a physics step (20 for dishwashing) plus a render.
Contenders are built first (the warp ones compile their kernels on first use, then load them from
~/.cache/warp), warmed up by a few untimed steps, then timed in turn in rounds of --seconds each, so
that load from other jobs on a shared machine hits all alike. Prints a JSON line per contender
(warp_N for N worlds in one process, warp_NxP split over P: env.warp_processes) and task, then each
task's best warp rate over the 2-worker rate (docs/warp.md compares it with 3x, the speed-up that
would make warp worth its setup on a CPU). The OpenGL side renders as configured by default
(env.render_shadow_size 512, env.render_offsamples 0); the warp side ray-traces without shadows or
skybox (the defaults), and with `--lit` each warp contender is timed a second time with
env.warp_shadows and env.warp_skybox on (its name ends in _lit): docs/warp.md compares the looks.
`--breakdown` times instead a frame's two parts on each side, in this process, in milliseconds per
frame of one world: the physics (the task's physics steps per task step) and the render. MuJoCo C's
mj_step and OpenGL's camera on one env, against MuJoCo Warp's step, sync and render of N worlds
divided by N. Each timed call follows an untimed random step of the env, so the states are the ones
random actions visit.
"""

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere: the project's modules sit at the repo root

from trainer.process.cli import configure_script

configure_script()  # before mujoco loads: its import raises on a bad MUJOCO_GL

import mujoco
import numpy as np
import torch

from bench.common import cpu_name, positive
from envs.make import make_batched_env, make_env, make_vector_env
from envs.pixels import Camera, mujoco_handles
from errors import UserError
from sac.replay import ReplayBuffer, frame_bytes
from trainer.config.checks import validate
from trainer.config.load import Config
from trainer.process.cli import error_exit, explain
from trainer.process.device import replay_frames_device

TASKS = ("Dishwashing-v0", "dm_control/cartpole-swingup-v0")
# replay slots per env ring: the ring wraps, which costs what a large buffer's writes cost
SLOTS_PER_ENV = 64
WARMUP_STEPS = 3


def config(env_id: str, *, num_envs: int, image_size: int, backend: str, processes: int = 1,
           lit: bool = False) -> Config:
    cfg = Config()
    cfg.env.id, cfg.env.num_envs, cfg.env.image_size, cfg.env.backend = (
        env_id, num_envs, image_size, backend)
    cfg.env.action_repeat, cfg.env.warp_processes = 1, processes
    cfg.env.warp_shadows = cfg.env.warp_skybox = lit
    return cfg


def replay(cfg: Config, env, device: torch.device) -> ReplayBuffer:
    """The trainer's replay for `env`'s frame stacks (trainer/run/loop.py), SLOTS_PER_ENV slots per
    env, its frames where training would keep them (`replay.device`: host memory on the CPU)."""
    frame_shape, capacity = env.single_observation_space.shape[1:], SLOTS_PER_ENV * cfg.env.num_envs
    frames_on = replay_frames_device(cfg.replay.device, device,
                                     capacity * frame_bytes(frame_shape, np.uint8))
    return ReplayBuffer(capacity=capacity, frame_shape=frame_shape, frame_dtype=np.uint8,
                        action_dim=env.single_action_space.shape[0],
                        frame_stack=cfg.env.frame_stack,
                        seed=cfg.training.seed, discount=cfg.sac.discount,
                        num_envs=cfg.env.num_envs,
                        frames_on=frames_on, nstep=cfg.sac.nstep)


class Workers:
    """make_vector_env(cfg.env, pixels), as the trainer runs it: num_envs worker processes stepped
    in turn, or one env in this process (envs/workers.py)."""

    def __init__(self, cfg: Config, device: torch.device):
        self.env, n = make_vector_env(cfg.env, True), cfg.env.num_envs
        self.action_dim = self.env.single_action_space.shape[0]
        self.replay = replay(cfg, self.env, device)
        self.rng = np.random.default_rng(0)
        self.replay.add_resets(self.env.reset(seed=0))
        self.first = np.zeros(n, bool)

    def step(self) -> int:
        act = lambda obs: self.rng.uniform(-1, 1, (len(obs), self.action_dim))  # noqa: E731
        action, obs, reward, terminated, truncated = self.env.step(act)
        self.replay.add_batch(obs, action, reward, terminated, self.first)
        self.first = terminated | truncated
        return len(obs)

    def close(self) -> None:
        self.env.close()


def uniform_actions(action_dim: int, device: torch.device):
    """A batched env's policy: uniform random actions (N, action_dim) on the env's device, from a
    seeded generator."""
    generator = torch.Generator(device).manual_seed(0)
    return lambda obs: torch.rand(len(obs), action_dim, generator=generator,
                                  device=obs.device) * 2 - 1


class Warp:
    """make_batched_env(cfg.env, pixels, device): N MuJoCo Warp worlds; frames stay on the device
    into a device-resident replay; the per-env scalars (action, reward, flags) go to the replay's
    host arrays."""

    def __init__(self, cfg: Config, device: torch.device):
        self.env = make_batched_env(cfg.env, True, device)
        self.act = uniform_actions(self.env.single_action_space.shape[0], device)
        self.replay = replay(cfg, self.env, device)
        self.replay.add_resets(self.env.reset(seed=0))
        self.first = np.zeros(cfg.env.num_envs, bool)

    def step(self) -> int:
        action, obs, reward, terminated, truncated = self.env.step(self.act)
        self.replay.add_batch(obs, action.cpu().numpy(), reward.cpu().numpy(),
                              terminated.cpu().numpy(), self.first)
        self.first = (terminated | truncated).cpu().numpy()
        return len(obs)

    def close(self) -> None:
        self.env.close()


def timed_frames(contender, seconds: float) -> tuple[int, float]:
    """Frames a contender (Workers or Warp) collects stepping for `seconds` of wall time (at least
    one step, so that no rate divides by zero), and the seconds taken: every step counted is timed,
    the first too (a contender slower than `seconds` a step would otherwise get a step for free)."""
    start = time.perf_counter()
    frames = contender.step()
    while time.perf_counter() - start < seconds:
        frames += contender.step()
    return frames, time.perf_counter() - start


class OpenGLParts:
    """One ordinary env (MuJoCo C) and its OpenGL camera, the parts of a frame timed apart
    (`--breakdown`)."""

    def __init__(self, cfg: Config, *, substeps: int):
        self.env, self.substeps = make_env(cfg.env, False), substeps
        self.camera = Camera(self.env, size=cfg.env.image_size, camera=cfg.env.camera,
                             shadow_size=cfg.env.render_shadow_size,
                             offsamples=cfg.env.render_offsamples)
        self.model, self.data, _ = mujoco_handles(self.env)
        self.env.reset(seed=0)
        self.env.action_space.seed(0)
        self.worlds = 1

    def random_step(self) -> None:
        if any(self.env.step(self.env.action_space.sample())[2:4]):
            self.env.reset()

    def physics(self) -> None:
        for _ in range(self.substeps):
            mujoco.mj_step(self.model, self.data())

    def render(self) -> None:
        self.camera.render()

    def close(self) -> None:
        self.camera.close()
        self.env.close()


class WarpParts:
    """N MuJoCo Warp worlds in this process, the parts of their frames timed apart (`--breakdown`):
    physics, then sync and render (sync computes the positions the render draws)."""

    def __init__(self, cfg: Config, device: torch.device):
        self.env = make_batched_env(cfg.env, True, device)
        self.act = uniform_actions(self.env.single_action_space.shape[0], device)
        self.env.reset(seed=0)
        self.sim, self.substeps, self.worlds = (self.env.sim, self.env.task.substeps,
                                                cfg.env.num_envs)

    def random_step(self) -> None:
        self.env.step(self.act)

    def physics(self) -> None:
        self.sim.step(self.substeps)
        self._finish()

    def render(self) -> None:
        self.sim.sync()
        self.sim.render()
        self._finish()

    def _finish(self) -> None:
        """Wait for the device's work, so that the host's clock times it (a CPU runs it before
        returning)."""
        if self.sim.device.type == "cuda":
            torch.cuda.synchronize(self.sim.device)

    def close(self) -> None:
        self.env.close()


def timed_parts(parts, seconds: float) -> dict[str, float]:
    """Seconds `parts` (OpenGLParts or WarpParts) spends in physics and in render over `seconds` of
    stepping, and the world-frames those cover."""
    totals, start = {"physics": 0.0, "render": 0.0, "frames": 0}, time.perf_counter()
    while time.perf_counter() - start < seconds:
        parts.random_step()
        for name in ("physics", "render"):
            began = time.perf_counter()
            getattr(parts, name)()
            totals[name] += time.perf_counter() - began
        totals["frames"] += parts.worlds
    return totals


def bench_task(env_id: str, args, device: torch.device) -> list[dict]:
    contenders = {
        "mujoco_1env": Workers(config(env_id, num_envs=1, image_size=args.image_size,
                                      backend="mujoco"), device),
        "mujoco_2workers": Workers(config(env_id, num_envs=2, image_size=args.image_size,
                                          backend="mujoco"), device),
    }
    for n in args.worlds:
        for processes in sorted({min(p, n) for p in args.processes} if device.type == "cpu"
                                else {1}):
            for lit in (False, True) if args.lit else (False,):
                name = (f"warp_{n}" if processes == 1
                        else f"warp_{n}x{processes}") + ("_lit" if lit else "")
                built = time.perf_counter()
                settings = config(env_id, num_envs=n, image_size=args.image_size,
                                  backend="mujoco_warp",
                                  processes=processes, lit=lit)
                contenders[name] = Warp(settings, device)
                print(f"# {env_id} {name} built in {time.perf_counter() - built:.1f} s",
                      file=sys.stderr, flush=True)
    for contender in contenders.values():
        for _ in range(WARMUP_STEPS):
            contender.step()
    totals = {name: [0, 0.0] for name in contenders}
    for _ in range(args.rounds):
        for name, contender in contenders.items():
            frames, seconds = timed_frames(contender, args.seconds)
            totals[name][0] += frames
            totals[name][1] += seconds
    for contender in contenders.values():
        contender.close()
    rows = [{"task": env_id, "contender": name, "frames": frames, "seconds": round(seconds, 1),
             "frames_per_s": round(frames / seconds, 1)}
            for name, (frames, seconds) in totals.items()]
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def breakdown_task(env_id: str, args, device: torch.device) -> list[dict]:
    warp = {n: WarpParts(config(env_id, num_envs=n, image_size=args.image_size,
                                backend="mujoco_warp"), device)
            for n in args.worlds}
    opengl = config(env_id, num_envs=1, image_size=args.image_size, backend="mujoco")
    sides = {"mujoco_opengl": OpenGLParts(opengl, substeps=warp[args.worlds[0]].substeps),
             **{f"warp_{n}": parts for n, parts in warp.items()}}
    for parts in sides.values():
        for _ in range(WARMUP_STEPS):
            parts.random_step()
            parts.physics()
            parts.render()
    totals = {name: Counter() for name in sides}
    for _ in range(args.rounds):
        for name, parts in sides.items():
            totals[name].update(timed_parts(parts, args.seconds))
    for parts in sides.values():
        parts.close()
    rows = [{"task": env_id, "side": name, "frames": t["frames"],
             "physics_ms_per_frame": round(1e3 * t["physics"] / t["frames"], 3),
             "render_ms_per_frame": round(1e3 * t["render"] / t["frames"], 3)}
            for name, t in totals.items()]
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and each option's default."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS,
                        help="the tasks to time")
    parser.add_argument("--worlds", nargs="+", type=positive(int), default=[1, 16, 64],
                        help="the numbers of MuJoCo Warp worlds to time")
    parser.add_argument("--processes", nargs="+", type=positive(int), default=[1, 2],
                        help="env.warp_processes to time at each N on the CPU (a GPU runs one)")
    parser.add_argument("--image-size", type=positive(int), default=84,
                        help="frame height and width, pixels")
    parser.add_argument("--seconds", type=positive(float), default=5.0,
                        help="timed seconds per contender per round")
    parser.add_argument("--rounds", type=positive(int), default=3,
                        help="timed rounds, all contenders in turn")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        choices=("cpu", "cuda"),
                        help="where the warp worlds run and the replay keeps frames")
    parser.add_argument("--lit", action="store_true",
                        help="also time each warp contender with shadows and skybox")
    parser.add_argument("--breakdown", action="store_true",
                        help="time a frame's physics and render apart on each side, in one "
                             "process (see above)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available here; use --device cpu")
    try:
        # the trainer's limits (image sizes 32-1024, at most MAX_WORLDS worlds), before any
        # contender holds a
        for n in args.worlds:  # renderer or processes
            validate(config(args.tasks[0], num_envs=n, image_size=args.image_size,
                            backend="mujoco_warp"))
    except UserError as err:
        parser.error(explain(err))
    device = torch.device(args.device)
    try:
        measure(args, device)
    except UserError as err:
        return error_exit(err)
    return 0


def measure(args, device: torch.device) -> None:
    print(json.dumps({"cpu": cpu_name(), "device": str(device),
                      "torch_threads": torch.get_num_threads()}), flush=True)
    if args.breakdown:
        for env_id in args.tasks:
            rows = {row["side"]: row for row in breakdown_task(env_id, args, device)}
            opengl = rows.pop("mujoco_opengl")
            for name, row in rows.items():
                print(json.dumps({"task": env_id, "side": name, **{
                    f"{part}_over_mujoco_opengl": round(row[f"{part}_ms_per_frame"]
                                                        / opengl[f"{part}_ms_per_frame"], 2)
                    for part in ("physics", "render")}}), flush=True)
        return
    for env_id in args.tasks:
        rows = {row["contender"]: row["frames_per_s"] for row in bench_task(env_id, args, device)}
        for suffix in ("", "_lit") if args.lit else ("",):
            best = max((name for name in rows if name.startswith("warp_")
                        and name.endswith("_lit") == bool(suffix)),
                       key=rows.get)
            print(json.dumps({"task": env_id, f"best_warp{suffix}": best,
                              f"best_warp{suffix}_over_2workers":
                              round(rows[best] / rows["mujoco_2workers"], 2)}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
