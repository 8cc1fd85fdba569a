"""Learning benchmark: train one config for several seeds and report evaluation return (and, for tasks that report
it, success rate) against agent steps.

    python3 bench/learn.py --config configs/inverted_pendulum_state.yaml --seeds 1 2 3 --target 900
    python3 bench/learn.py --config configs/dishwashing_feasible.yaml --seeds 1 2 --target-success 0.8

Each seed is a separate `train_sac.py --resume auto` process (`--parallel` at a time, `--threads` torch threads
each, and as many MuJoCo Warp processes on the CPU: `warp_share`), so the same command run again continues every
seed from its newest checkpoint (a run that outlives a pod or a day).
Writes <out>/learn.csv with columns frames,seed,return,success (plus env_step and wall_s, the run's training
seconds; success empty for tasks without it),
<out>/learn.png (mean +/- std over seeds, with the published pixel-SAC results as crosses for the DeepMind Control
tasks) and prints one JSON line per seed and a summary. `--report` writes the CSV and PNG of a run in progress.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the project's modules sit at the repo root

from bench.references import FRAMES, PUBLISHED  # noqa: E402
from errors import UserError  # noqa: E402
from trainer.config.load import Config, load_config  # noqa: E402
from trainer.process.cli import error_exit  # noqa: E402
from trainer.process.device import resolve_device  # noqa: E402
from trainer.run.curves import plot_curves, read_rows  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--target", type=float, help="report the first agent step whose eval return reaches this")
    parser.add_argument("--target-success", type=float,
                        help="report the first agent step whose eval success rate reaches this")
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--threads", type=int,
                        help="torch threads per seed (default: the cores shared out among --parallel)")
    parser.add_argument("--out", default="runs/bench_learn")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--report", action="store_true",
                        help="train nothing: write the CSV and PNG from what the seeds have logged so far")
    args = parser.parse_args()
    if args.parallel < 1 or (args.threads is not None and args.threads < 1):
        parser.error(f"--parallel and --threads must be >= 1, got {args.parallel} and {args.threads}")
    if min(args.seeds) < 0 or len(set(args.seeds)) < len(args.seeds):
        parser.error(f"--seeds must be distinct and >= 0 (each is a run of its own), got {args.seeds}")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a file; pass a folder for the seeds' runs")

    try:
        cfg = load_config(args.config, args.set)  # a bad config or --set fails here once, not in every seed
    except UserError as err:
        sys.exit(error_exit(err))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pending, running, results = ([] if args.report else list(args.seeds)), {}, []
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.parallel)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    while pending or running:
        while pending and len(running) < args.parallel:
            seed = pending.pop(0)
            command = [sys.executable, str(ROOT / "train_sac.py"), "--config", args.config, "--resume", "auto",
                       "--set", f"training.seed={seed}", "--set", f"checkpoint.name=seed{seed}",
                       "--set", f"checkpoint.dir={out / 'checkpoints'}",
                       "--set", f"logging.tensorboard_dir={out / 'runs'}",
                       "--set", "logging.progress=false", *warp_share(cfg, threads),
                       *sum((["--set", s] for s in args.set), [])]
            log = open(out / f"seed{seed}.log", "a")
            running[seed] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env), time.time(), log)
        for seed, (proc, start, log) in list(running.items()):
            if proc.poll() is None:
                continue
            log.close()
            del running[seed]
            if proc.returncode != 0:
                sys.exit(f"seed {seed} failed (exit {proc.returncode}); see {out / f'seed{seed}.log'}")
            results.append(summarise(out, seed, time.time() - start, args.target, args.target_success))
            print(json.dumps(results[-1]), flush=True)
        time.sleep(1)

    if args.report:
        results = [summarise(out, seed, None, args.target, args.target_success) for seed in args.seeds]
        print("\n".join(json.dumps(r) for r in results), flush=True)
    rows = [row for seed in args.seeds for row in read_eval(out, seed)]
    if not rows:
        print(f"error: no seed has logged an evaluation in {out / 'runs'}: nothing to plot; train the seeds (without "
              "--report), with evaluations on (training.eval_every_episodes > 0)", file=sys.stderr)
        sys.exit(2)
    with open(out / "learn.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["frames", "seed", "return", "success", "env_step", "wall_s"])
        writer.writerows((r["frames"], r["seed"], r["return"], "" if r["success"] is None else r["success"],
                          r["env_step"], "" if r["wall_s"] is None else r["wall_s"]) for r in rows)
    plot_curves({"this repo": rows}, out / "learn.png", title=Path(args.config).stem,
                references=PUBLISHED.get(cfg.env.id, {}), reference_frames=FRAMES)
    reached = [r for r in results if r["first_step_at_target"] is not None]
    reached_success = [r for r in results if r["first_step_at_success_target"] is not None]
    print(json.dumps({"config": args.config, "seeds": args.seeds, "target": args.target,
                      "seeds_reaching_target": len(reached),
                      "target_success": args.target_success, "seeds_reaching_success_target": len(reached_success),
                      "csv": str(out / "learn.csv"), "png": str(out / "learn.png")}))


def warp_share(cfg: Config, threads: int) -> list[str]:
    """The `--set` giving a seed its share of the cores as MuJoCo Warp processes, as it gets `threads` torch threads:
    with `env.backend: mujoco_warp` on the CPU and `env.warp_processes` left null (one per core, which seeds running
    side by side would oversubscribe), at most one per world. Nothing otherwise: the key means nothing to the
    `mujoco` backend, a GPU steps every world in one process, and a value the user set stands."""
    env = cfg.env
    if env.backend != "mujoco_warp" or env.warp_processes is not None:
        return []
    if resolve_device(cfg.training.device).type != "cpu":
        return []
    return ["--set", f"env.warp_processes={min(threads, env.num_envs)}"]


def read_eval(out: Path, seed: int) -> list[dict]:
    """The seed's evaluations so far; none before its first (or before it started: `--report` early)."""
    path = out / "runs" / f"seed{seed}" / "eval.csv"
    return [row | {"seed": seed} for row in read_rows(path)] if path.exists() else []


def first_step(rows: list[dict], key: str, target: float | None) -> int | None:
    return next((r["env_step"] for r in rows if target is not None and r[key] is not None and r[key] >= target), None)


def summarise(out: Path, seed: int, seconds: float | None, target: float | None, target_success: float | None) -> dict:
    rows = read_eval(out, seed)
    successes = [r["success"] for r in rows if r["success"] is not None]
    return {"seed": seed, "wall_s": None if seconds is None else round(seconds, 1), "evals": len(rows),
            "final_return": rows[-1]["return"] if rows else None,
            "best_return": max((r["return"] for r in rows), default=None),
            "first_step_at_target": first_step(rows, "return", target),
            "final_success": successes[-1] if successes else None, "best_success": max(successes, default=None),
            "first_step_at_success_target": first_step(rows, "success", target_success)}


if __name__ == "__main__":
    main()
