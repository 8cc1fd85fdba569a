"""The scripted dishwashing solver acting on a frozen encoder's state estimate instead of the
simulator's state: how far a policy can get on what the encoder reads, before any RL. Per scene set
(the fixed scene, the config's training scenes, its held-out scenes) it prints the success rate over
--episodes evaluation starts, the solver's own on the true state for the same starts, and the
estimate's errors: its root mean square over all steps, and the part of it that stays the same
through an episode (a scene's bias, which no closed loop can see). --trusted GROUP... reads those
parts of the state from the simulator instead (e.g. "plate grasped", a flag a still frame barely
shows). --policy CHECKPOINT lets a trained policy act instead of the solver: where it goes, and what
the encoder reads there; with --policy-reads weights, its actor reads --weights' estimate instead of
its own trunk's (a policy on a state_estimate trunk, and an encoder in the same label units: one
trainer.tools.pretrain --init went on from). Each run's episodes are also counted by how they end
(placed, never grasped, let go outside the slot, still held), with where the plate was, from the
slot, when a failed episode last let it go.

    python3 scripts/scripted_from_frames.py \\
        --config configs/dishwashing_video_frozen_randomized.yaml \\
        --weights pretrained/dishwashing_simple2dcnn_views.pt

The estimate is in the state's units through the pretraining labels' mean and spread, read from the
weights' report (.json), or fitted again on the recordings given with --data.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envs.rendering import configure
from errors import UserError
from trainer.config.load import EVAL_SEED_OFFSET, load_config
from trainer.policy.trained import load_checkpoint
from trainer.process.cli import run_command

# what loads mujoco is imported inside the functions that use it, after the command's
# configure() has checked MUJOCO_GL: a bad one is then one line, not mujoco's traceback
REPORTED = ("plate - gripper", "slot - plate", "gripper position")
SCENES = ("fixed", "train", "heldout")
# how an episode ends; "let go": outside the slot
OUTCOMES = ("placed", "never grasped", "let go", "still held")


def state_scaler(cfg, weights: str, data: list[str] | None, holdout: float):
    """The pretraining's Standardiser: from its report, or fitted again on `data`'s training
    episodes (a report written before reports stored it names its recordings)."""
    from trainer.tools.pretrain import Standardiser, read_datasets, read_report, report_path

    saved = read_report(weights)
    if not data and "labels" in saved:
        return Standardiser.of(**saved["labels"])
    if not data and "data" not in saved:
        raise UserError(f"the recordings {weights} was pretrained on are unknown "
                        f"({report_path(weights)} names none); pass them with --data")
    train, _, _, _ = read_datasets(data or saved["data"], cfg, holdout)
    return Standardiser.fit(
        np.concatenate([e.observations["state"] for e in train]).astype(np.float32))


def scene_env(cfg, scenes: str):
    from envs.make import make_env

    randomize = dataclasses.replace(cfg.env.randomize, enabled=scenes == "train")
    return make_env(dataclasses.replace(cfg.env, randomize=randomize), pixels=True,
                    heldout=scenes == "heldout")


def play(env, estimate, *, seeds: list[int], act) -> dict:
    """Success rate over episodes from `seeds`, `act(frame stack, estimate, state)` choosing the
    actions; per reported group, the error of `estimate(frame stack)`: RMS over steps, and RMS of
    each episode's mean; how the episodes ended (OUTCOMES), and for those let go outside the slot,
    slot - plate (m) at the last release."""
    from envs.dishwashing.env import OBS_GROUPS, OBS_SLOT_FROM_PLATE

    successes, errors, outcomes, releases = [], [], dict.fromkeys(OUTCOMES, 0), []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        steps, done, success, held, grasped, release = [], False, False, False, False, None
        while not done:
            true, guess = env.unwrapped.observation(), estimate(obs)
            steps.append(guess - true)
            obs, _, terminated, truncated, info = env.step(act(obs, guess, true))
            if held and not info["held"]:
                release = env.unwrapped.observation()[OBS_SLOT_FROM_PLATE]
            held, grasped = info["held"], grasped or info["held"]
            success, done = terminated, terminated or truncated
        outcome = ("placed" if success else "still held" if held else "let go" if grasped
                   else "never grasped")
        outcomes[outcome] += 1
        if outcome == "let go":
            releases.append(release)
        successes.append(success)
        errors.append(np.array(steps))
    result = {"success": float(np.mean(successes)), "outcomes": outcomes,
              "releases": np.array(releases)}
    for name in REPORTED:
        part = OBS_GROUPS[name]
        result[name] = (float(np.sqrt(np.mean(np.concatenate([e[:, part] for e in errors]) ** 2))),
                        float(np.sqrt(np.mean([e[:, part].mean(0) ** 2 for e in errors]))))
    return result


def describe_outcomes(result: dict) -> str:
    """'placed 7, never grasped 6, let go 4 (the plate 2.9 cm across from the slot, 1.1 cm above it:
    medians), ...'."""
    parts = []
    for name, count in result["outcomes"].items():
        parts.append(f"{name} {count}")
        if name == "let go" and count:
            offsets = result["releases"]
            across, above = (np.median(np.linalg.norm(offsets[:, :2], axis=1)),
                             np.median(-offsets[:, 2]))
            parts[-1] += (f" (the plate {100 * across:.1f} cm across from the slot, "
                          f"{100 * above:.1f} cm above it: medians)")
    return ", ".join(parts)


def check_same_units(policy_cfg, scaler, args) -> None:
    """A policy's actor can read another encoder's estimate only if it learnt on a state estimate in
    the same units."""
    if policy_cfg is None or policy_cfg.encoder.video.frozen_features != "state_estimate":
        raise UserError("--policy-reads weights swaps the state estimate a policy's actor reads; "
                        "pass --policy with a checkpoint trained with "
                        "encoder.video.frozen_features=state_estimate")
    own = state_scaler(policy_cfg, policy_cfg.encoder.video.weights, None, args.holdout)
    if not (np.array_equal(own.mean, scaler.mean) and np.array_equal(own.std, scaler.std)):
        raise UserError(f"{args.policy} learnt on estimates in other units than {args.weights}'s "
                        "(their reports' labels differ); pass weights trainer.tools.pretrain "
                        "--init went on from its encoder")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config",
                        default=str(ROOT / "configs" / "dishwashing_video_frozen_randomized.yaml"))
    parser.add_argument("--weights", help="encoder weights with a readout (default: the config's)")
    parser.add_argument("--data", nargs="+",
                        help="the recordings it was pretrained on (default: its .json's)")
    parser.add_argument("--holdout", type=float, default=0.1, help="the pretraining's --holdout")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--scenes", nargs="+", choices=SCENES, default=list(SCENES))
    parser.add_argument("--policy", help="a checkpoint whose policy acts instead of the solver")
    parser.add_argument("--policy-reads", choices=("own", "weights"), default="own",
                        help="the estimate the policy's actor reads: its own trunk's, or "
                             "--weights'")
    parser.add_argument("--trusted", nargs="+", default=[], metavar="GROUP",
                        help="parts of the state read from the simulator, not the estimate")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key")
    args = parser.parse_args(argv)

    def measure() -> None:

        configure()  # before mujoco loads: its import raises on a bad MUJOCO_GL
        from envs.dishwashing.env import OBS_GROUPS
        from envs.dishwashing.scripted import scripted_action
        from scripts.scene_sensitivity import trunk_of

        if args.episodes < 1:
            raise UserError(f"--episodes must be >= 1, got {args.episodes}")
        unknown = sorted(set(args.trusted) - OBS_GROUPS.keys())
        if unknown:
            raise UserError(f"--trusted {', '.join(unknown)}: no such part of the state; the parts "
                            f"are {', '.join(OBS_GROUPS)}")
        trusted = np.zeros(max(part.stop for part in OBS_GROUPS.values()), bool)
        for name in args.trusted:
            trusted[OBS_GROUPS[name]] = True
        policy, policy_cfg, _ = (load_checkpoint(args.policy, unit_actions=True) if args.policy
                                 else (None,) * 3)

        overrides = [*args.set, "encoder.video.frozen_features=state_estimate",
                     *([f"encoder.video.weights={args.weights}"] if args.weights else [])]
        cfg = load_config(args.config, overrides)
        if not cfg.env.id.startswith("Dishwashing"):
            raise UserError("the scripted solver plays the dishwashing tasks only, not "
                            f"env.id={cfg.env.id}; pass a dishwashing config")
        trunk, scaler = trunk_of(args.config, overrides), state_scaler(cfg,
                                                                       cfg.encoder.video.weights,
                                                                       args.data,
                                                                       args.holdout)
        if args.policy_reads == "weights":
            check_same_units(policy_cfg, scaler, args)
            policy.net.encoder = trunk.encoder
        trusted = f", {', '.join(args.trusted)} read from the simulator" if args.trusted else ""
        print(f"{cfg.encoder.video.weights}, {args.episodes} episodes per scene set{trusted}; "
              "estimate errors in cm, RMS over steps / RMS of the episodes' means")
        # the evaluation's starts
        seeds = [cfg.training.seed + EVAL_SEED_OFFSET + i for i in range(args.episodes)]

        def estimate(stack: np.ndarray) -> np.ndarray:  # of the scene set's env below
            guess = scaler.states(trunk(stack[None]).astype(np.float32))[0]
            return np.where(trusted, env.unwrapped.observation(), guess)

        acts = {"the solver on the state": lambda obs, guess, true: scripted_action(true),
                "the solver on the estimate": lambda obs, guess, true: scripted_action(guess)}
        if policy:
            acts = {f"the policy of {args.policy}":
                    lambda obs, guess, true: policy.act(obs[None])[0]}
        for scenes in args.scenes:
            env = scene_env(cfg, scenes)
            try:
                results = {run: play(env, estimate, seeds=seeds, act=act)
                           for run, act in acts.items()}
            finally:
                # before another renderer starts: one left to the garbage collector breaks it
                env.close()
            for run, result in results.items():
                errors = ", ".join(f"{name} {100 * result[name][0]:.2f} / "
                                   f"{100 * result[name][1]:.2f}"
                                   for name in REPORTED)
                print(f"{scenes}, {run}: success {result['success']:.0%}; {errors}", flush=True)
                print(f"    episodes: {describe_outcomes(result)}", flush=True)

    return run_command(measure, cut_short="the measurement was cut short")


if __name__ == "__main__":
    sys.exit(main())
