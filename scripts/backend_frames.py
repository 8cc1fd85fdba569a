"""Show what differs between the two backends' frames: the same states rasterised by OpenGL
(`env.backend: mujoco`) and ray-traced by MuJoCo Warp (`env.backend: mujoco_warp`) as it renders by
default and with `env.warp_shadows` and `env.warp_skybox` on, at the configs' camera and resolution.
For each task, an episode runs in the ordinary env (dishwashing: the scripted policy; cartpole: a
push that flips every `PUSH_STEPS` steps, so the pole swings); at evenly spaced moments its
positions are copied into a MuJoCo Warp world per look, which render them too. Rows: per task,
OpenGL then the MuJoCo Warp looks; columns: the moments. Pixels are enlarged without smoothing.

    python3 scripts/backend_frames.py [--out docs/warp_frames.png]
"""

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainer.config.load import load_config
from trainer.process.cli import configure_script

configure_script()  # before mujoco loads: its import raises on a bad MUJOCO_GL

from envs.dishwashing.scripted import scripted_action
from envs.make import make_batched_env, make_env
from envs.pixels import mujoco_handles
from scripts.frame_grid import join

# agent steps between the cartpole push's flips: about the pole's swing at action repeat 8
PUSH_STEPS = 12
CPU = torch.device("cpu")


def push(env, step: int) -> np.ndarray:
    return np.full(env.action_space.shape, 1.0 if (step // PUSH_STEPS) % 2 == 0 else -1.0,
                   dtype=np.float32)


def scripted(env, step: int) -> np.ndarray:
    return scripted_action(env.unwrapped.observation())


# config -> (env, step) -> action
POLICIES = {"dmc/cartpole_swingup.yaml": push, "dishwashing_video.yaml": scripted}
LOOKS = {"MuJoCo Warp": {},
         "MuJoCo Warp, shadows and skybox": {"warp_shadows": True, "warp_skybox": True}}


def backend_frames(config: str, *, moments: int, seed: int) -> dict[str, list[np.ndarray]]:
    """The same `moments` states of one episode as "OpenGL" and each of LOOKS renders them, uint8
    (H, W, 3) each."""
    cfg = load_config(ROOT / "configs" / config, [])
    env = make_env(cfg.env, True)
    # the simulations the backend renders through, built as it builds them
    sims = {look: make_batched_env(dataclasses.replace(cfg.env, backend="mujoco_warp", num_envs=1,
                                                       warp_processes=1,
                                                       **settings), True, CPU).sim
            for look, settings in LOOKS.items()}
    _, data, _ = mujoco_handles(env)
    obs, _ = env.reset(seed=seed)
    states, frames, done = [data().qpos.copy()], [obs[-1].transpose(1, 2, 0)], False
    while not done:
        obs, _, terminated, truncated, _ = env.step(POLICIES[config](env, len(states)))
        states.append(data().qpos.copy())
        frames.append(obs[-1].transpose(1, 2, 0))
        done = terminated or truncated
    env.close()
    picks = np.linspace(0, len(states) - 1, moments).round().astype(int)
    shown = {"OpenGL": [frames[i] for i in picks]}
    for look, sim in sims.items():
        shown[look] = []
        for i in picks:
            sim.qpos[0] = torch.as_tensor(states[i], dtype=torch.float32)
            sim.sync()
            shown[look].append(sim.render()[0].permute(1, 2, 0).numpy().copy())
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "docs" / "warp_frames.png"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--moments", type=int, default=5,
                        help="columns: evenly spaced steps, first and last included")
    parser.add_argument("--scale", type=int, default=2, help="pixel enlargement for viewing")
    args = parser.parse_args()

    enlarge = np.ones((args.scale, args.scale, 1), np.uint8)
    rows, names = [], []
    for config in POLICIES:
        for look, frames in backend_frames(config, moments=args.moments, seed=args.seed).items():
            rows.append(join([np.kron(frame, enlarge) for frame in frames], axis=1))
            names.append(f"{config} {look}")
    Image.fromarray(join(rows, axis=0)).save(args.out, optimize=True)
    print(f"wrote {args.out}: rows {', '.join(names)}")


if __name__ == "__main__":
    main()
