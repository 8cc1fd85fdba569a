"""Evaluate checkpoints: the deterministic policy for N episodes from fixed seeds, in the trainer's
evaluation env.

    python3 -m trainer.policy.evaluate CHECKPOINT [CHECKPOINT ...] [--episodes N] [--seed S] \\
        [--envs K] [--out DIR]
        [--video] [--heldout] [--set key=value ...]

A CHECKPOINT may also be a folder that trainer.policy.export wrote (its config.yaml and weights).

Prints each checkpoint's mean return and success rate with 95% intervals (several checkpoints: also
their IQM) and writes episodes.csv. Episode i starts from seed S + i, by default the run's own
evaluation seeds, so `--episodes <training.eval_episodes>` repeats the evaluation the trainer
logged. See docs/deploy.md.
"""

import argparse
import contextlib
import csv
import functools
import io
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from scipy import stats
from tqdm import tqdm

from envs.rendering import configure
from errors import UserError, check_writable_folder, no_room
from file_ops import atomic_write, new_aside_folder
from trainer.config.load import EVAL_SEED_OFFSET
from trainer.policy.trained import load_with_config
from trainer.process import lock
from trainer.process.cli import prog, run_command
from trainer.process.device import resolve_device
from trainer.run.episodes import Episode, run_episodes
from trainer.run.video import write_videos

CONFIDENCE = 0.95
BOOTSTRAP_SAMPLES = 50_000  # rliable's default for its interval estimates
# the most a CSV line takes beside twice its checkpoint's name: seed, return, length, separators
CSV_LINE_BYTES = 64


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog("trainer.policy.evaluate"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT",
                        help="<run>_latest.pt, <run>_best.pt or <run>_ep<N>.pt, a local file or a "
                             "URL (s3://...), or an exported folder")
    parser.add_argument("--episodes", type=positive, default=10,
                        help="episodes per checkpoint (default 10)")
    parser.add_argument("--seed", type=int,
                        help="episode i starts from seed S + i (default: the run's eval seeds)")
    parser.add_argument("--envs", type=positive, default=1,
                        help="worker processes the episodes are spread over (default 1: this "
                             "process); a video then shows the frames the policy sees. MuJoCo "
                             "Warp policies run every episode in a world of its own already")
    parser.add_argument("--out",
                        help="folder for episodes.csv and videos (default: <logs>/<run>/evaluate)")
    parser.add_argument("--video", action="store_true",
                        help="write a GIF and an MP4 of the first episodes of each checkpoint")
    parser.add_argument("--video-episodes", type=positive, default=1,
                        help="episodes in each video (default 1)")
    parser.add_argument("--video-size", type=positive,
                        help="video pixels (default: the run's logging.video_size)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key of the checkpoints' config, e.g. "
                             "env.max_episode_steps=500")
    parser.add_argument("--heldout", action="store_true",
                        help="also evaluate on held-out randomised scenes (episodes_heldout.csv)")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar")
    return parser.parse_args(argv)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def mean_interval(values: np.ndarray) -> tuple[float, tuple[float, float] | None]:
    """(mean, (low, high)): the mean and its Student's t confidence interval; None for one value,
    whose spread is unknown (not a zero-width interval)."""
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, None
    half = (stats.t.ppf((1 + CONFIDENCE) / 2, len(values) - 1) * np.std(values, ddof=1)
            / np.sqrt(len(values)))
    return mean, (mean - half, mean + half)


def wilson(successes: int, n: int) -> tuple[float, float]:
    """Wilson's score interval of a success rate: sound at 0 and 100% and for few episodes, where p
    +- z*se is not."""
    z = stats.norm.ppf((1 + CONFIDENCE) / 2)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def iqm_interval(scores: np.ndarray) -> tuple[float, float, float]:
    """(IQM, low, high): rliable's interquartile mean and percentile-bootstrap interval over runs,
    from a fixed seed."""
    samples = np.random.default_rng(0).integers(0, len(scores), (BOOTSTRAP_SAMPLES, len(scores)))
    boot = stats.trim_mean(scores[samples], 0.25, axis=1)
    low, high = np.percentile(boot, [100 * (1 - CONFIDENCE) / 2, 100 * (1 + CONFIDENCE) / 2])
    return float(stats.trim_mean(scores, 0.25)), float(low), float(high)


def summary(rows: list[Episode]) -> dict:
    returns = np.array([row.ret for row in rows])
    mean, interval = mean_interval(returns)
    # return_std: the spread over episodes that rl-baselines3-zoo's model cards give (numpy's std)
    result = {"episodes": len(rows), "return": mean, "return_ci": interval,
              "return_std": float(np.std(returns)),
              "length": float(np.mean([row.length for row in rows])), "success": None}
    if rows[0].success is not None:
        wins = sum(row.success for row in rows)
        result |= {"success": wins / len(rows), "successes": wins,
                   "success_ci": wilson(wins, len(rows))}
    return result


def describe(name: str, result: dict) -> str:
    if result["return_ci"]:
        low, high = result["return_ci"]
        spread = f"(95% CI {low:.1f} to {high:.1f}), {result['episodes']} episodes of mean length"
    else:  # one episode
        spread = "(n=1, no interval), 1 episode of length"
    text = f"{name}: return {result['return']:.1f} {spread} {result['length']:.1f}"
    if result["success"] is not None:
        low, high = result["success_ci"]
        text += (f", success {result['successes']}/{result['episodes']} = {result['success']:.0%} "
                 f"(95% Wilson CI {low:.0%} to {high:.0%})")
    return text


def describe_aggregate(results: list[dict]) -> str:
    returns = np.array([result["return"] for result in results])
    iqm, low, high = iqm_interval(returns)
    text = (f"across {len(results)} checkpoints: return mean {returns.mean():.1f}, IQM {iqm:.1f} "
            f"(95% bootstrap CI {low:.1f} to {high:.1f})")
    if results[0]["success"] is not None:
        rates = np.array([result["success"] for result in results])
        iqm, low, high = iqm_interval(rates)
        text += (
            f"; success mean {rates.mean():.0%}, IQM {iqm:.0%} (95% bootstrap CI {low:.0%} to "
            f"{high:.0%})")
    return text


def write_csv(rows: list[Episode], path: Path) -> None:
    text = io.StringIO(newline="")
    writer = csv.writer(text)
    writer.writerow(("checkpoint", "seed", "return", "length", "success"))
    for row in rows:
        success = "" if row.success is None else int(row.success)
        writer.writerow((row.checkpoint, row.seed, f"{row.ret:.6g}", row.length, success))
    atomic_write(path, lambda f: f.write(text.getvalue().encode()))


@contextlib.contextmanager
def claim(out: Path, *, room: int) -> Iterator[Callable[[], None]]:
    """`out` for this evaluation alone (a lock beside its episodes.csv), and `room` bytes of its
    disk held for the CSV files until the call yielded (an unnamed file, gone however the process
    ends): a full disk is one line before any episode, and a disk that fills meanwhile cannot cost
    the episodes' rows."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(lock.hold_output(out / "episodes.csv", what="evaluation output"))
            held = stack.enter_context(tempfile.TemporaryFile(dir=out))
            os.posix_fallocate(held.fileno(), 0, room)
        except OSError as err:
            if not (full := no_room(err)):
                raise
            raise UserError(f"cannot write the evaluation to {out} ({full.strerror}); free space "
                            "on its disk or pass --out on another disk (no episode was "
                            "run)") from None
        yield held.close


def move_earlier(out: Path, names: list[str]) -> str:
    """The files `names` that an earlier evaluation left in `out`, moved into
    `out/replaced-<time>/`; what was moved, in words ("" for nothing)."""
    earlier = [name for name in names if (out / name).exists()]
    if not earlier:
        return ""
    aside = new_aside_folder(out, "replaced")
    for name in earlier:
        (out / name).rename(aside / name)
    return f"moved the earlier evaluation's {', '.join(earlier)} to {aside}\n"


def default_out(configs: list) -> Path:
    folders = {Path(cfg.logging.tensorboard_dir) / cfg.run_name for cfg in configs}
    if len(folders) > 1:
        raise UserError(f"the checkpoints belong to {len(folders)} runs "
                        f"({', '.join(sorted(map(str, folders)))}); pass --out DIR for their "
                        "episodes.csv")
    return folders.pop() / "evaluate"


def evaluate(name: str, policy, cfg, *, episodes: int, seed: int | None, video_episodes: int,
             video_size: int | None,
             progress, heldout: bool = False,
             envs: int = 1) -> tuple[list[Episode], list[np.ndarray]]:
    """One checkpoint's episodes, and video frames when `video_size` is given."""
    # here: mujoco loads after configure() has checked MUJOCO_GL
    from envs.make import make_eval_env

    env, camera = make_eval_env(cfg.env, cfg.pixels, policy.device,
                                worlds=min(episodes, cfg.training.eval_episodes),
                                processes=min(envs, episodes), video_size=video_size,
                                heldout=heldout)
    seed = cfg.training.seed + EVAL_SEED_OFFSET if seed is None else seed
    try:
        return run_episodes(policy.act, env, name=name, seed=seed, episodes=episodes, camera=camera,
                            film=video_episodes if video_size else 0, video_size=video_size
                            or cfg.logging.video_size,
                            progress=progress)
    finally:
        if camera is not None:
            camera.close()
        env.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_command(lambda: run(args),
                       cut_short="the evaluation was cut short: no episodes.csv was written")


def run(args: argparse.Namespace) -> int:
    configure()
    loaded = []
    # every checkpoint is read before the first episode: bad input fails at once
    for name in args.checkpoints:
        # --heldout through the config's own check: a state or MuJoCo Warp policy is a one-line
        # error
        overrides = [*args.set, "env.randomize.heldout=true"] if args.heldout else args.set
        policy, cfg = load_with_config(name, unit_actions=True, overrides=overrides)
        if args.video and args.envs > 1 and not cfg.pixels:
            raise UserError("--video with --envs > 1 films the frames the policy sees, and a "
                            "state policy sees none; drop --envs or --video")
        loaded.append((name, policy.to(resolve_device(cfg.training.device)), cfg))
    out = Path(args.out) if args.out else default_out([cfg for _, _, cfg in loaded])
    check_writable_folder(out, what=f"write the evaluation to {out}", fix="pass --out DIR")
    csvs = ["episodes.csv", *(["episodes_heldout.csv"] if args.heldout else [])]
    videos = [f"{Path(name).stem}.{kind}" for name in args.checkpoints
              for kind in ("gif", "mp4")] if args.video else []
    room = len(csvs) * (CSV_LINE_BYTES + args.episodes * sum(2 * len(name.encode()) + CSV_LINE_BYTES
                                                              for name in args.checkpoints))
    with claim(out, room=room) as release:
        # once, before this evaluation's first file: one cut short leaves the earlier files be
        keep_earlier = functools.cache(lambda: move_earlier(out, csvs + videos))
        rows, heldout_rows, filmed, lost = evaluate_all(args, loaded, out, keep_earlier)
        release()  # the space held is the CSV files' now
        moved = keep_earlier()
        write_csv(rows, out / "episodes.csv")
        if args.heldout:  # a file of its own: episodes.csv keeps its columns and meaning
            write_csv(heldout_rows, out / "episodes_heldout.csv")
    print(f"{moved}wrote {', '.join(str(out / name) for name in csvs + filmed)}")
    if lost:
        raise UserError(f"{lost}, so the evaluation went on without them and its CSV files are "
                        "written; free space on that disk, or pass --out on another, to film them "
                        "with --video")
    return 0


def evaluate_all(args: argparse.Namespace, loaded: list, out: Path,
                 keep_earlier: Callable[[], str]) -> tuple[list[Episode], list[Episode], list[str],
                                                           str]:
    """The checkpoints' rows and held-out rows, the names of the videos written, and "" or what
    says that the videos from one checkpoint on did not fit on the disk (the episodes go on
    without them)."""
    rows, results, heldout_rows, heldout_results, filmed, lost = [], [], [], [], [], ""
    said_no_mp4 = False
    total = args.episodes * len(loaded) * (2 if args.heldout else 1)
    with tqdm(total=total, unit="ep", disable=not args.progress, dynamic_ncols=True) as bar:
        for name, policy, cfg in loaded:
            size = (args.video_size or cfg.logging.video_size) if args.video else None
            episodes, clip = evaluate(name, policy, cfg, episodes=args.episodes, seed=args.seed,
                                      video_episodes=args.video_episodes, video_size=size,
                                      progress=bar,
                                      envs=args.envs)
            rows += episodes
            results.append(summary(episodes))
            bar.write(describe(name, results[-1]))
            if clip and not lost:
                stem = Path(name).stem
                try:
                    keep_earlier()
                    no_mp4 = write_videos(clip, out / f"{stem}.gif")
                except OSError as err:
                    if not (full := no_room(err)):
                        raise
                    lost = f"cannot write the videos from {name} on to {out} ({full.strerror})"
                else:
                    filmed += [f"{stem}.gif", *([] if no_mp4 else [f"{stem}.mp4"])]
                    # once: each checkpoint after it would say the same
                    if no_mp4 and not said_no_mp4:
                        said_no_mp4 = True
                        bar.write(f"warning: {no_mp4}", file=sys.stderr)
            if args.heldout:
                episodes, _ = evaluate(name, policy, cfg, episodes=args.episodes, seed=args.seed,
                                       video_episodes=0,
                                       video_size=None, progress=bar, heldout=True, envs=args.envs)
                heldout_rows += episodes
                heldout_results.append(summary(episodes))
                bar.write(describe(f"{name}, held-out scenes", heldout_results[-1]))
    if len(results) > 1:
        print(describe_aggregate(results))
        if heldout_results:
            print(f"held-out scenes, {describe_aggregate(heldout_results)}")
    return rows, heldout_rows, filmed, lost


if __name__ == "__main__":
    sys.exit(main())
