"""Seconds per evaluation with its episodes in the trainer's process against spread over worker
processes (`training.eval_envs`): the trainer's own periodic evaluation of a fresh agent (every
episode runs to its step limit, as early in a run), the settings alternating in one process so that
load from other jobs hits all alike.

    python3 -m bench.eval_speed --config configs/dishwashing_video.yaml --envs 1 2 --rounds 3

One JSON line per setting: the median seconds per evaluation, its speed-up over the first setting,
and the mean return, which matches the first setting's (the same episodes). A fresh agent's episodes
all run to the step limit, so every worker is busy until the end of its round: a trained policy's
episodes end at different steps, and gain less.
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import cpu_name, positive
from envs.rendering import configure
from trainer.config.load import load_config

ROOT = Path(__file__).resolve().parent.parent


def build(config: str, *, profile: str, eval_envs: int, folder: Path, sets: list[str]):
    # here: mujoco loads after configure() has checked MUJOCO_GL
    from trainer.run.loop import Trainer

    cfg = load_config(ROOT / config, [f"profile={profile}", "demos.path=null", "env.num_envs=1",
                                      f"training.eval_envs={eval_envs}", "logging.progress=false",
                                      "logging.eval_video=false",
                                      f"logging.tensorboard_dir={folder / 'runs'}",
                                      f"checkpoint.dir={folder / 'ckpt'}", *sets])
    return Trainer(cfg)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/dishwashing_video.yaml")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--envs", type=positive(int), nargs="+", default=[1, 2],
                        help="training.eval_envs values")
    parser.add_argument("--rounds", type=positive(int), default=3,
                        help="evaluations timed per setting")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config overrides")
    args = parser.parse_args(argv)
    configure()
    with tempfile.TemporaryDirectory() as tmp:
        runs, seconds, returns = {}, {envs: [] for envs in args.envs}, {}
        try:
            for envs in args.envs:
                runs[envs] = build(args.config, profile=args.profile, eval_envs=envs,
                                   folder=Path(tmp) / str(envs),
                                   sets=args.set)
            for _ in range(args.rounds):
                for envs, run in runs.items():
                    start = time.perf_counter()
                    returns[envs] = run.evaluate()[0]
                    seconds[envs].append(time.perf_counter() - start)
        finally:
            for run in runs.values():
                run.close()
    first = statistics.median(seconds[args.envs[0]])
    for envs, spent in seconds.items():
        cfg = runs[envs].cfg
        print(json.dumps({"cpu": cpu_name(), "device": str(runs[envs].device),
                          "config": args.config,
                          "profile": cfg.profile, "eval_envs": envs,
                          "episodes": cfg.training.eval_episodes,
                          "seconds_per_evaluation": round(statistics.median(spent), 2),
                          "speedup": round(first / statistics.median(spent), 2),
                          "mean_return": returns[envs]}))


if __name__ == "__main__":
    main()
