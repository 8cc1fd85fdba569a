"""Show what the video encoder sees on the dishwashing task: the last frame of each observation, for
each camera, rendered through make_env's video path at the config's resolution, at evenly spaced
moments of a scripted episode. Rows are cameras, columns moments; pixels are enlarged without
smoothing.

    python3 scripts/frame_grid.py [--config configs/dishwashing_video.yaml] \\
        [--out docs/dishwashing_frames.png]

`--scenes N`: instead, the first frame of N episodes in randomised scenes (the config's
env.randomize ranges; top row training scenes, seeds 0..N-1, bottom row held-out scenes of the same
seeds), from the config's own camera:
    python3 scripts/frame_grid.py --config configs/dishwashing_video_randomized.yaml --scenes 6 \\
        --out docs/dishwashing_randomized_frames.png
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainer.config.load import load_config
from trainer.process.cli import configure_script

configure_script()  # before mujoco loads: its import raises on a bad MUJOCO_GL

from envs.dishwashing.scripted import scripted_action
from envs.make import make_env

CAMERAS = ("overview", "close")
GAP = 4  # white pixels between tiles


def episode_frames(config: str, camera: str, seed: int) -> list[np.ndarray]:
    """Every (H, W, 3) frame the encoder gets in one scripted episode, seen from `camera`."""
    cfg = load_config(config, [f"env.camera={camera}"])
    env = make_env(cfg.env, cfg.pixels)
    obs, _ = env.reset(seed=seed)
    frames, done = [obs[-1].transpose(1, 2, 0)], False
    while not done:
        obs, _, terminated, truncated, _ = env.step(scripted_action(env.unwrapped.observation()))
        frames.append(obs[-1].transpose(1, 2, 0))
        done = terminated or truncated
    env.close()
    return frames


def scene_rows(config: str, scenes: int, moment: int) -> list[np.ndarray]:
    """[training scenes, held-out scenes]: each a list of the frames the encoder gets at step
    `moment` of a scripted episode from seeds 0..scenes-1 (the same starts: only the scene differs
    between the rows)."""
    cfg = load_config(config, ["env.randomize.enabled=true"])
    rows = []
    for heldout in (False, True):
        env = make_env(cfg.env, cfg.pixels, heldout=heldout)
        row = []
        for seed in range(scenes):
            obs, _ = env.reset(seed=seed)
            for _ in range(moment):
                obs, *_ = env.step(scripted_action(env.unwrapped.observation()))
            row.append(obs[-1].transpose(1, 2, 0))
        env.close()
        rows.append(row)
    return rows


def join(images: list[np.ndarray], axis: int) -> np.ndarray:
    """Concatenate along `axis` (0 rows, 1 columns) with white gaps between."""
    shape = list(images[0].shape)
    shape[axis] = GAP
    gap = np.full(shape, 255, np.uint8)
    return np.concatenate([part for image in images for part in (gap, image)][1:], axis=axis)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs" / "dishwashing_video.yaml"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "dishwashing_frames.png"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--moments", type=int, default=6,
                        help="columns: evenly spaced steps, first and last included")
    parser.add_argument("--scale", type=int, default=2, help="pixel enlargement for viewing")
    parser.add_argument("--scenes", type=int, default=0,
                        help="randomised scenes per row (0: cameras and moments)")
    parser.add_argument("--moment", type=int, default=12,
                        help="with --scenes: the scripted episode's step shown")
    args = parser.parse_args()
    if args.scenes:
        rows = scene_rows(args.config, args.scenes, args.moment)
        enlarge = np.ones((args.scale, args.scale, 1), np.uint8)
        grid = join([join([np.kron(frame, enlarge) for frame in row], axis=1) for row in rows],
                    axis=0)
        Image.fromarray(grid).save(args.out, optimize=True)
        print(f"wrote {args.out}: training scenes 0..{args.scenes - 1} (top), held-out scenes of "
              f"the same seeds (bottom), step {args.moment}")
        return

    rows = []
    for camera in CAMERAS:
        frames = episode_frames(args.config, camera, args.seed)
        picks = np.linspace(0, len(frames) - 1, args.moments).round().astype(int)
        rows.append(join([np.kron(frames[i], np.ones((args.scale, args.scale, 1), np.uint8))
                          for i in picks], axis=1))
    grid = join(rows, axis=0)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(grid).save(args.out, optimize=True)
    steps = ", ".join(map(str, picks))
    print(f"wrote {args.out}: cameras {', '.join(CAMERAS)} (rows), steps {steps} of "
          f"{len(frames) - 1} (columns)")


if __name__ == "__main__":
    main()
