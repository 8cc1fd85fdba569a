"""Frames/s collected into the replay with random actions: the MuJoCo Warp backend (env.backend: mujoco_warp) at
N worlds in P processes against the OpenGL backend's env in this process (num_envs 1) and its 2 worker processes
(num_envs 2).

    nice -n 5 python3 bench/mjwarp.py       # dishwashing and cartpole swing-up, 84 px, N = 1 16 64, P = 1 and 2
    nice -n 5 python3 bench/mjwarp.py --tasks dm_control/cartpole-swingup-v0 --worlds 64 256 --processes 2 --seconds 10
    nice -n 5 python3 bench/mjwarp.py --worlds 16 64 --processes 2 --lit   # what shadows and skybox cost

A frame is one observation written to the replay (sac/replay.py, frame stacks of 3), reset frames included; action
repeat 1, so every frame is a physics step (20 for dishwashing) plus a render. Contenders are built first (the warp
ones compile their kernels on first use, then load them from ~/.cache/warp), warmed up by a few untimed steps, then
timed in turn in rounds of --seconds each, so that load from other jobs on a shared machine hits all alike. Prints a
JSON line per contender (warp_N for N worlds in one process, warp_NxP split over P: env.warp_processes) and task,
then each task's best warp rate over the 2-worker rate (the issue's target: >= 3).
The OpenGL side renders as configured by default (env.render_shadow_size 512, env.render_offsamples 0); the warp side
ray-traces without shadows or skybox (the defaults), and with `--lit` each warp contender is timed a second time with
env.warp_shadows and env.warp_skybox on (its name ends in _lit): docs/warp.md compares the looks.
"""

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the project's modules sit at the repo root

from trainer.headless import configure  # noqa: E402

configure()  # headless GL set-up before mujoco loads

import numpy as np  # noqa: E402
import torch  # noqa: E402

import envs  # noqa: E402
from sac.replay import ReplayBuffer  # noqa: E402
from trainer.config import Config  # noqa: E402

TASKS = ("Dishwashing-v0", "dm_control/cartpole-swingup-v0")
SLOTS_PER_ENV = 64  # replay slots per env ring: the ring wraps, which costs what a large buffer's writes cost
WARMUP_STEPS = 3


def config(env_id: str, num_envs: int, image_size: int, backend: str, processes: int = 1, *,
           lit: bool = False) -> Config:
    cfg = Config()
    cfg.env.id, cfg.env.num_envs, cfg.env.image_size, cfg.env.backend = env_id, num_envs, image_size, backend
    cfg.env.action_repeat, cfg.env.warp_processes = 1, processes
    cfg.env.warp_shadows = cfg.env.warp_skybox = lit
    return cfg


def replay(cfg: Config, action_dim: int, frames_on: torch.device | None) -> ReplayBuffer:
    return ReplayBuffer(capacity=SLOTS_PER_ENV * cfg.env.num_envs,
                        frame_shape=(3, cfg.env.image_size, cfg.env.image_size),
                        frame_dtype=np.uint8, action_dim=action_dim, frame_stack=cfg.env.frame_stack, seed=0,
                        discount=0.99, num_envs=cfg.env.num_envs, frames_on=frames_on)


class Workers:
    """make_vector_env(cfg.env, pixels), as the trainer runs it: num_envs worker processes stepped in turn, or one env
    in this process (envs/workers.py)."""

    def __init__(self, cfg: Config):
        self.env, n = envs.make_vector_env(cfg.env, True), cfg.env.num_envs
        self.action_dim = self.env.single_action_space.shape[0]
        self.replay = replay(cfg, self.action_dim, None)
        self.rng = np.random.default_rng(0)
        obs = self.env.reset(seed=0)
        self.replay.add_batch(obs, np.zeros((n, self.action_dim), np.float32), np.zeros(n), np.zeros(n, bool),
                              np.ones(n, bool))
        self.first = np.zeros(n, bool)

    def step(self) -> int:
        act = lambda obs: self.rng.uniform(-1, 1, (len(obs), self.action_dim))  # noqa: E731
        action, obs, reward, terminated, truncated = self.env.step(act)
        self.replay.add_batch(obs, action, reward, terminated, self.first)
        self.first = terminated | truncated
        return len(obs)

    def close(self) -> None:
        self.env.close()


class Warp:
    """make_batched_env(cfg.env, pixels, device): N MuJoCo Warp worlds; frames stay on the device into a device-resident
    replay; the per-env scalars (action, reward, flags) go to the replay's host arrays."""

    def __init__(self, cfg: Config, device: torch.device):
        self.env = envs.make_batched_env(cfg.env, True, device)
        self.action_dim = self.env.single_action_space.shape[0]
        self.replay = replay(cfg, self.action_dim, device)
        self.generator = torch.Generator(device).manual_seed(0)
        n = cfg.env.num_envs
        obs = self.env.reset(seed=0)
        self.replay.add_batch(obs, np.zeros((n, self.action_dim), np.float32), np.zeros(n), np.zeros(n, bool),
                              np.ones(n, bool))
        self.first = np.zeros(n, bool)

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.rand(len(obs), self.action_dim, generator=self.generator, device=obs.device) * 2 - 1

    def step(self) -> int:
        action, obs, reward, terminated, truncated = self.env.step(self.act)
        self.replay.add_batch(obs, action.cpu().numpy(), reward.cpu().numpy(), terminated.cpu().numpy(), self.first)
        self.first = (terminated | truncated).cpu().numpy()
        return len(obs)

    def close(self) -> None:
        self.env.close()


def timed_frames(contender, seconds: float) -> tuple[int, float]:
    """Frames a contender (Workers or Warp) collects stepping for `seconds` of wall time, and the seconds taken."""
    frames, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        frames += contender.step()
    return frames, time.perf_counter() - start


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def bench_task(env_id: str, args, device: torch.device) -> list[dict]:
    contenders = {
        "mujoco_1env": Workers(config(env_id, 1, args.image_size, "mujoco")),
        "mujoco_2workers": Workers(config(env_id, 2, args.image_size, "mujoco")),
    }
    for n in args.worlds:
        for processes in sorted({min(p, n) for p in args.processes} if device.type == "cpu" else {1}):
            for lit in (False, True) if args.lit else (False,):
                name = (f"warp_{n}" if processes == 1 else f"warp_{n}x{processes}") + ("_lit" if lit else "")
                built = time.perf_counter()
                contenders[name] = Warp(config(env_id, n, args.image_size, "mujoco_warp", processes, lit=lit), device)
                print(f"# {env_id} {name} built in {time.perf_counter() - built:.1f} s", file=sys.stderr, flush=True)
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
             "frames_per_s": round(frames / seconds, 1)} for name, (frames, seconds) in totals.items()]
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--worlds", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--processes", nargs="+", type=int, default=[1, 2],
                        help="env.warp_processes to time at each N on the CPU (a GPU runs one)")
    parser.add_argument("--image-size", type=int, default=84)
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per contender per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--lit", action="store_true", help="also time each warp contender with shadows and skybox")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(json.dumps({"cpu": cpu_name(), "device": str(device), "torch_threads": torch.get_num_threads()}), flush=True)
    for env_id in args.tasks:
        rows = {row["contender"]: row["frames_per_s"] for row in bench_task(env_id, args, device)}
        for suffix in ("", "_lit") if args.lit else ("",):
            best = max((name for name in rows if name.startswith("warp_") and name.endswith("_lit") == bool(suffix)),
                       key=rows.get)
            print(json.dumps({"task": env_id, f"best_warp{suffix}": best, f"best_warp{suffix}_over_2workers":
                              round(rows[best] / rows["mujoco_2workers"], 2)}), flush=True)


if __name__ == "__main__":
    main()
