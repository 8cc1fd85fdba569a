"""The headline run, timed: dishwashing end to end from 84x84 frames (configs/dishwashing_video.yaml
at a profile, 20 scripted demonstrations), one seed after another alone on the device, each stopped
at its first evaluation at `--target` success or after `--minutes`.

    python3 -m bench.dishwashing_e2e --seeds 1 2 --csv docs/gpu/dishwashing_e2e_<device>.csv

Records the demonstrations first (their seconds are reported, not counted in a run's). Prints one
JSON line per seed: eval.csv's `wall_s` at the first evaluation at the target (the run's own clock:
start-up, acting, updates and evaluations), the agent steps then, the GPU's mean busy share over
the run (NVML), and beside it the agent steps and updates per second while it learned (the mean of
the run's TensorBoard `train/env_steps_per_s` and `train/updates_per_s` over the episodes with
updates). `--csv` writes every evaluation of every seed: eval.csv's columns plus `seed`.
"""

import argparse
import csv
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.common import Utilisation, positive, scalars

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "dishwashing_video.yaml"


def read_evals(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def record(out: Path, episodes: int, sets: list[str] = ()) -> float:
    """Scripted demonstrations into `out` (`sets`: the run's env settings, which the frames must
    match); the seconds it took."""
    start = time.perf_counter()
    command = [sys.executable, "-m", "trainer.tools.record", "--episodes", str(episodes), "--out",
               str(out)]
    recorded = subprocess.run(command + [arg for item in sets for arg in ("--set", item)], cwd=ROOT,
                              capture_output=True, text=True)
    if recorded.returncode != 0:
        sys.exit(
            f"recording the demonstrations failed: {recorded.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - start


def learning_rates(run: Path) -> dict:
    """The mean agent steps and updates per second over the episodes with updates, from the run's
    TensorBoard events (None each before the first update)."""
    logged = scalars(run)
    learning = [(steps, updates) for steps, updates in zip(logged.get("train/env_steps_per_s", []),
                                                           logged.get("train/updates_per_s", []))
                if updates > 0]
    if not learning:
        return {"agent_steps_per_s": None, "updates_per_s": None}
    steps, updates = zip(*learning)
    return {"agent_steps_per_s": round(sum(steps) / len(steps), 1),
            "updates_per_s": round(sum(updates) / len(updates), 1)}


def train(seed: int, demos: Path, workdir: Path, *, profile: str, target: float, minutes: float,
          sets: list[str] = ()) -> tuple[list[dict], dict]:
    """One run to the target or the time limit (then SIGTERM, as a spot reclaim would): its
    evaluations, a summary."""
    settings = {"profile": profile, "training.seed": seed, "demos.path": demos,
                "checkpoint.dir": workdir / "ckpt",
            "logging.tensorboard_dir": workdir / "runs", "logging.progress": False,
                "checkpoint.name": "e2e"}
    command = [sys.executable, str(ROOT / "train_sac.py"), "--config", str(CONFIG)]
    command += [arg for key, value in settings.items() for arg in ("--set", f"{key}={value}")]
    command += [arg for item in sets for arg in ("--set", item)]
    eval_csv = workdir / "runs" / "e2e" / "eval.csv"
    monitor = Utilisation(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    start = time.perf_counter()
    # a file, not a pipe: nobody reads a pipe while the run goes
    with open(workdir / "train.log", "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        while process.poll() is None and time.perf_counter() - start < 60 * minutes:
            time.sleep(0.5)
            if any(float(row["success"] or 0) >= target for row in read_evals(eval_csv)):
                break
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait()
    rows = read_evals(eval_csv)
    reached = [row for row in rows if float(row["success"] or 0) >= target]
    summary = {"seed": seed, "exit": process.returncode,
               "process_s": round(time.perf_counter() - start, 1),
               "gpu_util_pct": monitor.stop(), **learning_rates(workdir / "runs" / "e2e"),
               "evals": len(rows),
               "wall_s_to_target": float(reached[0]["wall_s"]) if reached else None,
               "env_step_at_target": int(reached[0]["env_step"]) if reached else None,
               "best_success": max((float(row["success"] or 0) for row in rows), default=None)}
    if process.returncode not in (0, 128 + signal.SIGTERM):
        summary["error"] = ((workdir / "train.log").read_text().strip().splitlines()
                            or ["no output"])[-1][:300]
    return rows, summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--target", type=float, default=0.8,
                        help="eval success rate that ends a run")
    parser.add_argument("--minutes", type=positive(float), default=4.0, help="longest a run may go")
    parser.add_argument("--profile", default="gpu")
    parser.add_argument("--demos", type=int, default=20,
                        help="scripted demonstrations to record first")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config overrides")
    parser.add_argument("--csv", help="write every evaluation here, with a seed column")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        demos = Path(tmp) / "demos"
        print(json.dumps({"demos": args.demos, "record_s": round(record(demos, args.demos), 1)}),
              flush=True)
        every = []
        for seed in args.seeds:
            workdir = Path(tmp) / f"seed{seed}"
            workdir.mkdir()
            rows, summary = train(seed, demos, workdir, profile=args.profile, target=args.target,
                                  minutes=args.minutes, sets=args.set)
            print(json.dumps(summary | {"settings": args.set}), flush=True)
            every += [row | {"seed": seed} for row in rows]
            # after each seed: a command cut short keeps the seeds it finished
            if args.csv and every:
                with open(args.csv, "w", newline="") as f:
                    writer = csv.DictWriter(f, fieldnames=list(every[0]))
                    writer.writeheader()
                    writer.writerows(every)


if __name__ == "__main__":
    main()
