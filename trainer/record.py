"""Record demonstrations of the dishwashing task with the scripted solver (scripted.py) into a Minari dataset
(envs/demos.py), for training with `demos.path`:

    python3 -m trainer.record --episodes 20 --out datasets/dishwashing_scripted
    python3 -m trainer.record --episodes 20 --noise 0.2 --out datasets/noisy --set env.camera=close

One recording serves state and pixel runs: every step stores the state vector and the camera frame the pixel config
(`--config`, default configs/dishwashing_video.yaml: camera, image size, render settings) renders, both exactly as
the trainer's env returns them. Storing the frames rather than simulator states to re-render costs ~21 KB a step
(20 episodes: ~20 MB) but keeps the dataset usable where the scene cannot be re-rendered (another renderer gives
other pixels) and in the same format as demonstrations that never had a simulator state (a real camera). A run
whose camera or image size differs is told to re-record (a few seconds per episode).

`--noise` adds Gaussian noise of that standard deviation to every action (clipped to [-1, 1]) for coverage of
states next to the solver's path; the stored action is the one executed. Episode i starts from seed `--seed` + i.

An entry point like train_sac.py, so it lives in the trainer layer: it reads configs and configures rendering.
"""

import argparse
import sys

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from errors import UserError
from trainer.config import Config, explain, load_config

DEFAULT_CONFIG = "configs/dishwashing_video.yaml"


def record(cfg: Config, episodes: int, noise: float, seed: int, progress: bool = True):
    """`episodes` scripted episodes in the pixel env `cfg` describes; (episodes, observation space, action space,
    number of successful episodes). Rendering must be configured first (trainer/headless.py), as `main` does."""
    from envs import demos, make_env
    from envs.dishwashing.scripted import scripted_action

    env = make_env(cfg.env, pixels=True)
    base, rng = env.unwrapped, np.random.default_rng(seed)
    frame_space = gym.spaces.Box(0, 255, env.observation_space.shape[1:], np.uint8)
    unbounded = np.full(base.observation().shape, np.inf, np.float32)
    space = gym.spaces.Dict({demos.STATE: gym.spaces.Box(-unbounded, unbounded), demos.PIXELS: frame_space})
    recorded, successes = [], 0
    for i in tqdm(range(episodes), unit="episode", disable=not progress):
        frames, _ = env.reset(seed=seed + i)
        states, pixels = [base.observation()], [frames[-1]]
        actions, rewards, terminations, truncations = [], [], [], []
        done, info = False, {}
        while not done:
            action = scripted_action(states[-1])
            if noise > 0:
                action = np.clip(action + rng.normal(0.0, noise, action.shape), -1.0, 1.0).astype(np.float32)
            frames, reward, terminated, truncated, info = env.step(action)
            states.append(base.observation())
            pixels.append(frames[-1])
            actions.append(action)
            rewards.append(reward)
            terminations.append(terminated)
            truncations.append(truncated)
            done = terminated or truncated
        successes += bool(info.get("success"))
        recorded.append(
            demos.Episode(
                {demos.STATE: np.asarray(states, np.float32), demos.PIXELS: np.asarray(pixels, np.uint8)},
                np.asarray(actions, np.float32),
                np.asarray(rewards, np.float32),
                np.asarray(terminations, bool),
                np.asarray(truncations, bool),
            )
        )
    env.close()
    return recorded, space, env.action_space, successes


def recording_settings(cfg: Config) -> dict:
    """What the stored frames and steps depend on; the trainer checks them against its config."""
    return {
        "env_id": cfg.env.id,
        "camera": cfg.env.camera,
        "image_size": cfg.env.image_size,
        "action_repeat": cfg.env.action_repeat,
        "backend": cfg.env.backend,  # whose renderer made the frames: main() records with the OpenGL env only
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m trainer.record",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--out", required=True, help="dataset folder to create (must not exist)")
    parser.add_argument("--noise", type=float, default=0.1, help="std of Gaussian action noise (0 = none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="pixel config whose camera view is recorded")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    args = parser.parse_args(argv)
    from trainer.headless import configure

    try:
        configure()  # before the env layer loads mujoco
        from envs import demos

        if args.episodes < 1 or args.noise < 0:
            raise UserError(f"--episodes must be >= 1 and --noise >= 0, got {args.episodes} and {args.noise}")
        cfg = load_config(args.config, [*args.set, "encoder.type=video"])
        demos.check_new(args.out)
        if cfg.env.backend != "mujoco":
            raise UserError(f"trainer.record drives the OpenGL env (env.backend=mujoco), not env.backend="
                            f"{cfg.env.backend}; drop that setting (a warp pixel run cannot use OpenGL frames)")
        if not cfg.env.id.startswith("Dishwashing"):
            raise UserError(
                f"the scripted solver plays the dishwashing tasks only, not env.id={cfg.env.id}; "
                "pass a dishwashing config"
            )
        episodes, space, action_space, successes = record(cfg, args.episodes, args.noise, args.seed)
        demos.write(args.out, episodes, space, action_space, cfg.env.id, recording_settings(cfg))
    except UserError as err:
        print(f"error: {explain(err)}", file=sys.stderr)
        return 2
    steps = sum(len(e) for e in episodes)
    print(f"wrote {args.out}: {len(episodes)} episodes, {steps} steps, {successes} successful")
    return 0


if __name__ == "__main__":
    sys.exit(main())
