"""Record demonstrations of the dishwashing task with the scripted solver (scripted.py) into a
Minari dataset (envs/demos.py), for training with `demos.path`:

    python3 -m trainer.tools.record --episodes 20 --out datasets/dishwashing_scripted
    python3 -m trainer.tools.record --episodes 20 --noise 0.2 --out datasets/noisy \\
        --set env.camera=close

Every step stores the state vector and the frame the pixel config (--config) renders, so one
recording serves state and pixel runs. --noise adds Gaussian noise of that std to every action;
--detours P hands each step, with probability P, to 1-8 uniform random actions, after which the
solver finds its way back: states a learning policy visits and the solver never does, for
pretraining. --lag N --gain G stand in for a person's hand: the solver reacts N steps late and
moves at G of its speed (docs/demonstrations.md measures what they train). --policy CHECKPOINT
lets a trained policy act from each episode's start until, with probability --handover per step,
the solver takes over: the states that policy reaches, labelled with the simulator's state
(DAgger's data, for an encoder). Episode i starts from seed --seed + i.
Under randomised scenes, --views K also stores every step as K - 1 other scenes show it, for
pretraining an encoder that reads the same state from any scene (docs/encoders.md). See
docs/dishwashing.md.
"""

import argparse
import dataclasses
import math
import sys

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from envs import demos
from envs.config import frames_of
from envs.rendering import configure
from errors import UserError
from trainer.config.load import SEED_LIMIT, Config, load_config
from trainer.policy.trained import Policy
from trainer.process import lock
from trainer.process.cli import prog, run_command
from trainer.process.device import resolve_device

# what loads mujoco is imported inside the functions that use it, after the command's
# configure() has checked MUJOCO_GL: a bad one is then one line, not mujoco's traceback
DEFAULT_CONFIG = "configs/dishwashing_video.yaml"
DETOUR_STEPS = 8


@dataclasses.dataclass(frozen=True)
class Acting:
    """Who acts: the solver, with Gaussian `noise`, random `detours` (a probability per step) and
    a person-like `lag` and `gain`, after `policy` (anything with `act(stacks) -> actions`, e.g.
    trainer.policy.trained.Policy) until a `handover` (a probability per step)."""

    noise: float = 0.0
    detours: float = 0.0
    policy: object = None
    handover: float = 0.0
    # a person's hand, roughly: the solver sees the state `lag` steps late and moves at `gain` of
    # its speed (a lag at full speed overshoots and circles the target: a person slows down)
    lag: int = 0
    gain: float = 1.0


class OneEnv:
    """The OpenGL env (`env.backend: mujoco`) as a batch of one world: episodes are played one at a
    time."""

    def __init__(self, cfg: Config, views: int = 1):
        from envs.make import make_env

        self.batch = 1
        self.env = make_env(cfg.env, pixels=True)
        self._base = self.env.unwrapped
        self.frame_space = gym.spaces.Box(0, 255, self.env.observation_space.shape[1:], np.uint8)
        self.state_dim, self.action_space = self._base.observation().shape[0], self.env.action_space
        self.stack_shape = self.env.observation_space.shape
        self._views, self._other_scenes = views, []
        self.stacks = None  # the latest (1, frame_stack, C, H, W), for a policy that acts

    def reset(self, seed: int) -> dict[str, np.ndarray]:
        """The observations of an episode started from `seed`, each with a leading 1
        (observed())."""
        from envs.randomize import other_scenes

        stack, info = self.env.reset(seed=seed)
        if self._views > 1:
            self._other_scenes = other_scenes(info["scene_seed"], self._views - 1)
        return self._observed(stack)

    def step(self, actions: np.ndarray):
        """(observations, rewards, terminated, truncated) after float32 (1, A) `actions`, each with
        a leading 1."""
        stack, *outcome, _ = self.env.step(actions[0])  # outcome: reward, terminated, truncated
        return self._observed(stack), *(np.array([x]) for x in outcome)

    def _observed(self, stack: np.ndarray) -> dict[str, np.ndarray]:
        """{state: (1, S), pixels: (1, C, H, W)[, views: (1, views - 1, C, H, W), the step in the
        other scenes]}."""
        from envs.randomize import render_scenes

        self.stacks = stack[None]
        observed = {demos.STATE: self._base.observation()[None], demos.PIXELS: stack[-1][None]}
        if self._views > 1:
            observed[demos.VIEWS] = render_scenes(self.env, self._other_scenes)[None]
        return observed

    def close(self) -> None:
        self.env.close()


class Worlds:
    """MuJoCo Warp (`env.backend: mujoco_warp`): all episodes at once, a world each, as the run's
    worlds render."""

    def __init__(self, cfg: Config, episodes: int):
        from envs.make import make_batched_env

        self.batch = episodes
        # one process has the states
        env_cfg = dataclasses.replace(cfg.env, num_envs=episodes, warp_processes=1)
        self.env = make_batched_env(env_cfg, pixels=True,
                                    device=resolve_device(cfg.training.device))
        self.frame_space = gym.spaces.Box(0, 255, self.env.single_observation_space.shape[1:],
                                          np.uint8)
        self.state_dim, self.action_space = self.env.task.state_dim, self.env.single_action_space
        self.stack_shape = self.env.single_observation_space.shape
        self.stacks = None  # the latest (N, frame_stack, C, H, W), for a policy that acts

    def _observed(self, stacks) -> dict[str, np.ndarray]:
        self.stacks = stacks
        return {demos.STATE: self.env.states().cpu().numpy(),
                demos.PIXELS: stacks[:, -1].cpu().numpy()}

    def reset(self, seed: int) -> dict[str, np.ndarray]:
        """{state: float32 (N, S), pixels: uint8 (N, C, H, W)}; world i starts from `seed` + i."""
        return self._observed(self.env.reset(seed))

    def step(self, actions: np.ndarray):
        _, stacks, reward, terminated, truncated = self.env.step(lambda _: actions)
        return self._observed(stacks), *(x.cpu().numpy() for x in (reward, terminated, truncated))

    def close(self) -> None:
        self.env.close()


def record(cfg: Config, episodes: int, *, seed: int, acting: Acting = Acting(), views: int = 1,
           progress: bool = True):
    """(episodes, observation space, action space, successes); rendering: envs/rendering.py."""
    source = Worlds(cfg, episodes) if cfg.env.backend == "mujoco_warp" else OneEnv(cfg, views)
    if acting.policy and tuple(acting.policy.spec.obs_shape) != source.stack_shape:
        source.close()
        raise UserError("--policy sees frame stacks of shape "
                        f"{tuple(acting.policy.spec.obs_shape)} and --config renders "
                        f"{source.stack_shape}; record with the config the policy was trained on")
    rng = np.random.default_rng(seed)
    recorded = []
    try:  # closed on an interrupt too: a renderer left to the interpreter's exit prints EGL errors
        with tqdm(total=episodes, unit="episode", disable=not progress) as bar:
            for first in range(0, episodes, source.batch):
                recorded += play(source, seed=seed + first, acting=acting, rng=rng,
                                 ended=bar.update)
    finally:
        source.close()
    # the dishwashing tasks terminate on success only
    return (recorded, observation_space(source, views), source.action_space,
            sum(bool(e.terminations[-1]) for e in recorded))


def observation_space(source: "OneEnv | Worlds", views: int = 1) -> gym.spaces.Dict:
    """What a recording of `source` stores per step."""
    unbounded = np.full(source.state_dim, np.inf, np.float32)
    space = gym.spaces.Dict({demos.STATE: gym.spaces.Box(-unbounded, unbounded),
                             demos.PIXELS: source.frame_space})
    if views > 1:
        space[demos.VIEWS] = gym.spaces.Box(0, 255, (views - 1, *source.frame_space.shape),
                                            np.uint8)
    return space


def play(source: OneEnv | Worlds, *, seed: int, acting: Acting, rng: np.random.Generator,
         ended) -> list:
    """One batch of scripted episodes, as envs/demos.Episode; `ended(n)` is told each step that n
    episodes ended."""
    from envs.dishwashing.scripted import scripted_action

    # every world's, per step: observations; (actions, rewards, flags)
    seen, taken = [source.reset(seed)], []
    lengths, live = np.zeros(batch := len(seen[0][demos.STATE]), int), np.ones(batch, bool)
    detour = np.zeros(batch, int)  # random steps left per world
    policy_acts = np.full(batch, acting.policy is not None)
    while live.any():
        late = seen[max(len(seen) - 1 - acting.lag, 0)][demos.STATE]
        actions = np.stack([scripted_action(state) for state in late]).astype(np.float32)
        actions[:, :3] *= acting.gain  # the moves; the fingers open or shut
        if policy_acts.any():
            actions = np.where(policy_acts[:, None], acting.policy.act(source.stacks),
                               actions).astype(np.float32)
            policy_acts &= rng.random(batch) >= acting.handover
        if acting.noise > 0:
            actions = np.clip(actions + rng.normal(0.0, acting.noise, actions.shape), -1.0,
                              1.0).astype(np.float32)
        # no draws without: recordings made before detours existed stay as they were
        if acting.detours > 0:
            starting = (detour == 0) & (rng.random(batch) < acting.detours)
            detour[starting] = rng.integers(1, DETOUR_STEPS + 1, int(starting.sum()))
            random = rng.uniform(-1.0, 1.0, actions.shape).astype(np.float32)
            actions = np.where((detour > 0)[:, None], random, actions)
            detour = np.maximum(detour - 1, 0)
        observed, rewards, terminated, truncated = source.step(actions)
        seen.append(observed)
        taken.append((actions, rewards, terminated, truncated))
        lengths += live
        ending = live & (terminated | truncated)
        live &= ~ending
        ended(int(ending.sum()))
    observed = {key: np.stack([step[key] for step in seen]) for key in seen[0]}  # (T + 1, N, ...)
    dtypes = {demos.STATE: np.float32}  # frames are uint8
    # actions, rewards, terminated, truncated: (T, N, ...)
    steps = [np.stack(per_step) for per_step in zip(*taken)]
    return [
        demos.Episode(
            {key: values[: n + 1, i].astype(dtypes.get(key, np.uint8))
             for key, values in observed.items()},
            *(values[:n, i].astype(dtype)
              for values, dtype in zip(steps, (np.float32, np.float32, bool, bool))),
        )
        for i, n in enumerate(lengths)
    ]


def check_views(cfg: Config, views: int) -> None:
    if views < 1:
        raise UserError(
            f"--views must be >= 1 (the episode's own scene and views - 1 others), got {views}")
    if views > 1 and not cfg.env.randomize.enabled:
        raise UserError(f"--views {views} stores other scenes, and {cfg.env.id} is shown in one "
                        "fixed scene here; record with a randomised config "
                        "(configs/dishwashing_video_randomized.yaml) or drop --views")
    if views > 1 and cfg.env.backend != "mujoco":
        raise UserError("--views renders the other scenes through OpenGL, and this config renders "
                        f"with env.backend={cfg.env.backend}; set env.backend=mujoco or drop "
                        "--views")


def recording_settings(cfg: Config) -> dict:
    """What the stored frames and steps depend on; the trainer checks them against its config."""
    return {"env_id": cfg.env.id, "image_size": cfg.env.image_size,
            "action_repeat": cfg.env.action_repeat,
            "randomized": cfg.env.randomize.enabled, **frames_of(cfg.env)}


def record_by_hand(cfg: Config, args) -> None:
    """--teleop: the episodes a person drives and keeps, written as the solver's are."""
    from envs.make import control_fps
    from trainer.run.person import Person, start_pygame
    from trainer.tools import teleop

    if args.policy or args.detours or args.views > 1 or cfg.env.backend != "mujoco":
        raise UserError("--teleop drives one OpenGL env (env.backend=mujoco) by hand: drop "
                        "--policy, --detours and --views")
    pygame = start_pygame(args.teleop)
    pygame.display.set_caption("dishwashing: Enter keeps, Backspace discards, Esc stops")
    source = OneEnv(cfg)
    try:
        with lock.hold_output(args.out, what="dataset"):
            demos.check_new(args.out)
            kept, discarded = teleop.drive(
                source, Person(pygame, args.teleop), episodes=args.episodes,
                seed=args.seed, fps=control_fps(cfg.env.id, cfg.env.action_repeat))
            if not kept:
                raise UserError(f"no episode was kept, so nothing was written to {args.out}")
            demos.write(args.out, kept, observation_space(source), source.action_space, cfg.env.id,
                        {**recording_settings(cfg), "driver": f"person ({args.teleop})"})
    finally:
        source.close()
        pygame.quit()
    successes = sum(bool(e.terminations[-1]) for e in kept)
    print(f"wrote {args.out}: {len(kept)} episodes a person kept ({successes} successful), "
          f"{discarded} discarded")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog("trainer.tools.record"),
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--out", required=True, help="dataset folder to create (must not exist)")
    parser.add_argument("--noise", type=float, default=0.1,
                        help="std of Gaussian action noise (0 = none)")
    parser.add_argument("--detours", type=float, default=0.0,
                        help=f"probability per step of 1 to {DETOUR_STEPS} uniform random actions "
                             "(default 0)")
    parser.add_argument("--policy", metavar="CHECKPOINT",
                        help="a trained policy that acts before the solver")
    parser.add_argument("--handover", type=float, default=0.05,
                        help="with --policy: probability per step that the solver takes over "
                             "(default 0.05)")
    parser.add_argument("--lag", type=int, default=0,
                        help="the solver sees the state this many steps late, as a person "
                             "reacts late (default 0)")
    parser.add_argument("--gain", type=float, default=1.0,
                        help="the solver moves at this share of its speed, as a person "
                             "slows down near a target (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default=DEFAULT_CONFIG,
                        help="pixel config whose camera view is recorded")
    parser.add_argument("--views", type=int, default=1,
                        help="scenes each step is stored in under env.randomize: the episode's "
                             "own and views - 1 others (default 1)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key")
    parser.add_argument("--teleop", choices=("keyboard", "gamepad"),
                        help="a person drives each episode in a window instead of the solver, "
                             "and keeps or discards it (trainer/tools/teleop.py has the keys)")
    args = parser.parse_args(argv)

    def record_dataset() -> None:
        configure()  # before mujoco loads: its import raises on a bad MUJOCO_GL

        if (args.episodes < 1 or not 0 <= args.noise < math.inf or not 0 <= args.detours <= 1
                or not 0 <= args.handover <= 1 or not 0 <= args.seed < SEED_LIMIT):
            raise UserError("--episodes must be >= 1, --noise a number >= 0, --detours and "
                            f"--handover probabilities in [0, 1] and --seed in [0, {SEED_LIMIT}), "
                            f"got {args.episodes}, {args.noise}, {args.detours}, {args.handover} "
                            f"and {args.seed}")
        if not 0 <= args.lag <= 100 or not 0 < args.gain <= 1:
            raise UserError(f"--lag must be 0-100 steps and --gain in (0, 1], got {args.lag} "
                            f"and {args.gain}")
        cfg = load_config(args.config, [*args.set, "encoder.type=video"])
        demos.check_new(args.out)
        if not cfg.env.id.startswith("Dishwashing"):
            raise UserError(
                f"the scripted solver plays the dishwashing tasks only, not env.id={cfg.env.id}; "
                "pass a dishwashing config"
            )
        check_views(cfg, args.views)
        if args.teleop:
            return record_by_hand(cfg, args)
        policy = Policy.load(args.policy, unit_actions=True) if args.policy else None
        acting = Acting(noise=args.noise, detours=args.detours, policy=policy,
                        handover=args.handover, lag=args.lag, gain=args.gain)
        with lock.hold_output(args.out, what="dataset"):  # one recording into a folder at a time
            # again, held: another recording may have written it meanwhile
            demos.check_new(args.out)
            episodes, space, action_space, successes = record(cfg, args.episodes, seed=args.seed,
                                                              acting=acting,
                                                               views=args.views)
            person_like = args.lag or args.gain != 1
            driver = (f"solver, person-like (lag {args.lag}, gain {args.gain:g}, noise "
                      f"{args.noise:g})" if person_like else "solver")
            demos.write(args.out, episodes, space, action_space, cfg.env.id,
                        {**recording_settings(cfg), "driver": driver})
        steps = sum(len(e) for e in episodes)
        print(f"wrote {args.out}: {len(episodes)} episodes, {steps} steps, {successes} successful")

    return run_command(record_dataset,
                       cut_short=f"no dataset was written to {args.out}; record it again")


if __name__ == "__main__":
    sys.exit(main())
