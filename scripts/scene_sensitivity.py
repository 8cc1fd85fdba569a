"""How far a frozen encoder's features move with the scene, against how far they move with the
state: scripted dishwashing episodes, every step rendered in --scenes randomised scenes (the
config's env.randomize ranges; the physics is untouched), then encoded. Per encoder it prints the
ratio of the two variances: 0 means the scene is ignored, 1 that it moves the features as much as
the task does.

    python3 scripts/scene_sensitivity.py \\
        --config configs/dishwashing_video_frozen_randomized.yaml \\
        --weights pretrained/dishwashing_simple2dcnn.pt \\
        pretrained/dishwashing_simple2dcnn_randomized600.pt

`--set env.randomize.color=0` (and the like) narrows the variation to what is left.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envs.rendering import configure
from errors import UserError
from trainer.config.load import load_config
from trainer.process.cli import run_command
from trainer.run.encoder_setup import build_encoders

FIRST_SCENE = 10_000  # scene seeds FIRST_SCENE.. : apart from the episodes' own seeds 0..


def scene_stacks(cfg, *, episodes: int, scenes: int) -> list[np.ndarray]:
    """Per scripted episode, uint8 (T, scenes, frame_stack, 3, H, W): each step's frame stack in
    each scene."""
    # here: mujoco loads after configure() has checked MUJOCO_GL
    from envs.dishwashing.scripted import scripted_action
    from envs.make import make_env
    from envs.randomize import render_scenes

    env = make_env(dataclasses.replace(cfg.env,
                                       randomize=dataclasses.replace(cfg.env.randomize,
                                                                     enabled=True)),
                   pixels=True)
    result = []
    try:
        for episode in range(episodes):
            env.reset(seed=episode)
            steps, done = [], False
            while not done:
                steps.append(render_scenes(env, list(range(FIRST_SCENE, FIRST_SCENE + scenes))))
                _, _, terminated, truncated, _ = env.step(
                    scripted_action(env.unwrapped.observation()))
                done = terminated or truncated
            frames = np.array(steps)  # (T, scenes, 3, H, W)
            back = np.arange(1 - cfg.env.frame_stack, 1)
            # a reset's stack repeats its first frame
            index = np.maximum(np.arange(len(frames))[:, None] + back, 0)
            result.append(frames[index].swapaxes(1, 2))
    finally:
        # before another renderer starts: a MuJoCo renderer left to the garbage collector breaks it
        env.close()
    return result


def variances(trunk, stacks: list[np.ndarray]) -> tuple[float, float]:
    """(variance across scenes at one step, variance across steps in one scene), summed over the
    features and averaged over steps, scenes and episodes."""
    across_scenes, across_steps = [], []
    for episode in stacks:
        steps, scenes = episode.shape[:2]
        features = trunk(episode.reshape(steps * scenes, *episode.shape[2:])).astype(np.float64)
        features = features.reshape(steps, scenes, -1)
        across_scenes.append(features.var(axis=1).sum(-1).mean())
        across_steps.append(features.var(axis=0).sum(-1).mean())
    return float(np.mean(across_scenes)), float(np.mean(across_steps))


def trunk_of(config: str, overrides: list[str]):
    cfg = load_config(config, overrides)
    _, trunk = build_encoders(cfg, cfg.env.stack_shape, torch.device("cpu"))
    if trunk is None:
        raise UserError(f"{config} trains its encoder, and this measures a frozen one; pass a "
                        "config with encoder.video.freeze: true and its weights (e.g. "
                        "configs/dishwashing_video_frozen.yaml)")
    return trunk


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config",
                        default=str(ROOT / "configs" / "dishwashing_video_frozen_randomized.yaml"))
    parser.add_argument("--weights", nargs="+", default=[],
                        help="encoder weights files to compare (default: the "
                        "config's encoder.video.weights)")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--scenes", type=int, default=8, help="scenes each step is rendered in")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key")
    args = parser.parse_args(argv)

    def measure() -> None:

        configure()  # before mujoco loads: its import raises on a bad MUJOCO_GL
        if args.episodes < 1 or args.scenes < 2:
            raise UserError(
                f"--episodes must be >= 1 and --scenes >= 2, got {args.episodes} and {args.scenes}")
        cfg = load_config(args.config, args.set)
        if not cfg.env.id.startswith("Dishwashing"):
            raise UserError("the scripted solver plays the dishwashing tasks only, not "
                            f"env.id={cfg.env.id}; pass a dishwashing config")
        trunks = {weights: trunk_of(args.config, [*args.set, f"encoder.video.weights={weights}"])
                  for weights in args.weights}
        trunks = trunks or {cfg.encoder.video.weights: trunk_of(args.config, args.set)}
        stacks = scene_stacks(cfg, episodes=args.episodes, scenes=args.scenes)
        for weights, trunk in trunks.items():
            scene, state = variances(trunk, stacks)
            print(f"{weights}: scene / state variance {scene / state:.3f} (scene {scene:.3g}, "
                  f"state {state:.3g})")

    return run_command(measure, cut_short="the measurement was cut short")


if __name__ == "__main__":
    sys.exit(main())
