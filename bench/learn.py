"""Learning benchmark: train one config for several seeds and report evaluation return (and, for
tasks that report it, success rate) against agent steps.

    python3 bench/learn.py --config configs/inverted_pendulum_state.yaml --seeds 1 2 3 --target 900
    python3 bench/learn.py --config configs/dishwashing_feasible.yaml --seeds 1 2 \\
        --target-success 0.8

Each seed is a separate `train_sac.py --resume auto` process (`--parallel` at a time: on a GPU every
seed at once, on a CPU one per core; `--threads` torch threads each, and as many MuJoCo Warp
processes on the CPU: `warp_share`), so the same command run again continues every seed from its
newest checkpoint (a run that outlives a pod or a day). Ctrl-C or SIGTERM stops every seed, each
saving where it is; killed outright, the seeds get SIGTERM and save. `--minutes` stops them the same
way at a time limit, then writes the files of what they logged and exits 75. A seed that fails
leaves the others going, and the files are written before the failure's line. The runner
(train_runs) is bench/dmc.py's too. Writes <out>/learn.csv with columns frames,seed,return,success
(plus env_step and wall_s, the run's training seconds; success empty for tasks without it),
<out>/learn.png (mean +/- std over seeds, with the published pixel-SAC results as crosses for the
DeepMind Control tasks) and prints one JSON line per seed and a summary. `--report` writes the CSV
and PNG of a run in progress.
"""

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere: the project's modules sit at the repo root

from bench.common import positive
from bench.references import FRAMES, PUBLISHED
from errors import UserError
from trainer.config.load import Config, load_config
from trainer.process import signals
from trainer.process.cli import error_exit
from trainer.process.device import resolve_device
from trainer.run.curves import plot_curves, read_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--target", type=float,
                        help="report the first agent step whose eval return reaches this")
    parser.add_argument("--target-success", type=float,
                        help="report the first agent step whose eval success rate reaches this")
    add_runner_arguments(parser)
    parser.add_argument("--out", default="runs/bench_learn")
    parser.add_argument("--report", action="store_true",
                        help="train nothing: write the CSV and PNG from what the seeds have "
                             "logged so far")
    args = parser.parse_args()
    deadline = runner_deadline(args)
    check_runner_arguments(parser, args)
    if Path(args.out).exists() and not Path(args.out).is_dir():
        parser.error(f"--out {args.out} is a file; pass a folder for the seeds' runs")

    try:
        # a bad config or --set fails here once, not in every seed
        cfg = load_config(args.config, args.set)
    except UserError as err:
        sys.exit(error_exit(err))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results, ended = [], None
    if not args.report:
        parallel, threads = share_machine(args.parallel, args.threads, runs=len(args.seeds),
                                          cfg=cfg)
        runs = [Run(f"seed{seed}", args.config, seed, warp_share(cfg, threads))
                for seed in args.seeds]

        def finished(run: Run, seconds: float) -> None:
            results.append(summarise(out, run.seed, seconds, args.target, args.target_success))
            print(json.dumps(results[-1]), flush=True)

        ended = train_runs(runs, out, sets=args.set, parallel=parallel, threads=threads,
                           finished=finished, deadline=deadline)
        if ended.stopped:
            ended.exit_if_short(out)
        results += [summarise(out, run.seed, None, args.target, args.target_success)
                    for run in runs if run.name in ended.unfinished]
    else:
        results = [summarise(out, seed, None, args.target, args.target_success)
                   for seed in args.seeds]
        print("\n".join(json.dumps(r) for r in results), flush=True)
    rows = [row for seed in args.seeds for row in read_eval(out, seed)]
    if not rows and ended is not None:
        ended.exit_if_short(out)  # failed or out of time before any evaluation: nothing to write
    if not rows:
        print(f"error: no seed has logged an evaluation in {out / 'runs'}: nothing to plot; train "
              "the seeds (without --report), with evaluations on (training.eval_every_episodes > "
              "0)", file=sys.stderr)
        sys.exit(2)
    with open(out / "learn.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["frames", "seed", "return", "success", "env_step", "wall_s"])
        writer.writerows((r["frames"], r["seed"], r["return"], "" if r["success"] is None
                          else r["success"],
                          r["env_step"], "" if r["wall_s"] is None else r["wall_s"]) for r in rows)
    plot_curves({"this repo": rows}, out / "learn.png", title=Path(args.config).stem,
                references=PUBLISHED.get(cfg.env.id, {}), reference_frames=FRAMES)
    reached = [r for r in results if r["first_step_at_target"] is not None]
    reached_success = [r for r in results if r["first_step_at_success_target"] is not None]
    print(json.dumps({"config": args.config, "seeds": args.seeds, "target": args.target,
                      "seeds_reaching_target": len(reached),
                      "target_success": args.target_success,
                      "seeds_reaching_success_target": len(reached_success),
                      "csv": str(out / "learn.csv"), "png": str(out / "learn.png")}))
    if ended is not None:
        ended.exit_if_short(out)  # failed or out of time: the files of what was logged first


def add_runner_arguments(parser: argparse.ArgumentParser) -> None:
    """The runner's options, bench/learn.py's and bench/dmc.py's alike."""
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--parallel", type=int,
                        help="runs at a time (default: on a GPU every run, sharing the card; on a "
                             "CPU one per core)")
    parser.add_argument("--threads", type=int,
                        help="torch threads per run (default: the cores shared out among "
                             "--parallel)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="for every run")
    parser.add_argument("--minutes", type=positive(float),
                        help="stop every run this long after the command starts, each saving "
                             "where it is; start none after; write the files of what they logged "
                             f"and exit {OUT_OF_TIME}: the same command again continues them (a "
                             "machine that stops a command at a time limit: leave a minute for "
                             "the saves)")


def runner_deadline(args: argparse.Namespace) -> float | None:
    """--minutes from now on time.monotonic()'s clock, train_runs' deadline."""
    return None if args.minutes is None else time.monotonic() + 60 * args.minutes


def check_runner_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Settings the runner cannot run, refused before any run starts: a usage error naming the
    fix."""
    if (args.parallel is not None and args.parallel < 1) or (args.threads is not None
                                                             and args.threads < 1):
        parser.error(
            f"--parallel and --threads must be >= 1, got {args.parallel} and {args.threads}")
    if min(args.seeds) < 0 or len(set(args.seeds)) < len(args.seeds):
        parser.error(
            f"--seeds must be distinct and >= 0 (each is a run of its own), got {args.seeds}")


def share_machine(parallel: int | None, threads: int | None, *, runs: int,
                  cfg: Config) -> tuple[int, int]:
    """(runs at a time, torch threads each): as given, else every run at once where `cfg` trains on
    a GPU (they share the card) and one per core on a CPU; the cores shared out among the runs at a
    time."""
    cores = os.cpu_count() or 1
    if parallel is None:
        parallel = runs if resolve_device(cfg.training.device).type == "cuda" else cores
    return parallel, threads or max(1, cores // max(1, min(parallel, runs)))


@dataclass
class Run:
    """One `train_sac.py --resume auto` process: `name` is its checkpoint.name, so its checkpoints,
    its logs (<out>/runs/<name>/) and its output (<out>/<name>.log); `sets`: its own settings,
    before the command line's."""
    name: str
    config: str
    seed: int
    sets: list[str] = field(default_factory=list)


@dataclass
class Ended:
    """How train_runs ended: the runs that failed ("name (exit N): its last error line"), the stop
    signal that ended them early (None: none), and the runs its deadline stopped (each saved) and
    never started."""
    failed: list[str]
    stopped: int | None = None
    saved: list[str] = field(default_factory=list)
    not_started: list[str] = field(default_factory=list)

    @property
    def unfinished(self) -> list[str]:
        return self.saved + self.not_started

    def exit_if_short(self, out: Path) -> None:
        """Exit with one line if the runs did not all end well: 128+signal after a stop, 1 after a
        failure, OUT_OF_TIME after the deadline."""
        if self.stopped:
            print(f"stopped by signal {self.stopped}: every run saved where it was; run the same "
                  "command again to continue them", file=sys.stderr)
            sys.exit(128 + self.stopped)
        if self.failed:
            sys.exit(f"error: {len(self.failed)} of the runs failed (their output: "
                     f"{out}/<run>.log): "
                     + "; ".join(self.failed))
        if self.unfinished:
            parts = [f"{', '.join(self.saved)} stopped and saved" if self.saved else "",
                     f"{', '.join(self.not_started)} not started" if self.not_started else ""]
            print(f"out of time: {'; '.join(p for p in parts if p)}; run the same command again "
                  "to continue them", file=sys.stderr)
            sys.exit(OUT_OF_TIME)


POLL_S = 1.0
OUT_OF_TIME = 75  # EX_TEMPFAIL: not an error; the same command again goes on


def train_runs(runs: list[Run], out: Path, *, sets: list[str], parallel: int, threads: int,
               finished: Callable[[Run, float], None] = lambda run, seconds: None,
               deadline: float | None = None) -> Ended:
    """Train every run, `parallel` at a time with `threads` torch threads each, `sets` (the command
    line's) last in each; `finished(run, seconds)` as each ends well. A failed run leaves the others
    going. A stop signal, or `deadline` (time.monotonic()) passing, stops them all, each saving
    `_latest`, and returns once they have; after the deadline no run starts."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    pending, running, failed, saved = list(runs), {}, [], []

    def out_of_time() -> bool:
        return deadline is not None and time.monotonic() >= deadline

    def settle(run: Run, process: subprocess.Popen, start: float, *, stopped: bool = False):
        """An ended run: finished, failed, or (`stopped` by the deadline) saved."""
        if process.returncode == 0:  # after a deadline: it ended by itself before the SIGTERM
            finished(run, time.time() - start)
        elif stopped and process.returncode in (128 + signal.SIGTERM, -signal.SIGTERM):
            saved.append(run.name)  # saved, or stopped before it began
        else:
            failed.append(f"{run.name} (exit {process.returncode}): "
                          f"{last_error(out / f'{run.name}.log')}")

    with signals.GracefulStop() as stop:
        while (pending or running) and not stop.requested and not out_of_time():
            while pending and len(running) < parallel:
                run = pending.pop(0)
                log = open(out / f"{run.name}.log", "a")
                # start_new_session: Ctrl-C reaches this process alone, which passes one SIGTERM
                # on (two stop at once)
                process = subprocess.Popen(command(run, out, sets), stdout=log,
                                           stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True,
                                           preexec_fn=signals.die_with_parent)
                running[run.name] = (run, process, time.time(), log)
            for name, (run, process, start, log) in list(running.items()):
                if process.poll() is None:
                    continue
                log.close()
                del running[name]
                settle(run, process, start)
            if running or pending:
                time.sleep(POLL_S)
        for _, process, _, _ in running.values():
            process.send_signal(signal.SIGTERM)
        # after the deadline a first signal only joins the stop under way: the runs save
        while not stop.requested and any(p.poll() is None for _, p, _, _ in running.values()):
            time.sleep(POLL_S / 10)
        try:
            # a second signal stops the wait; the runs, their parent gone, get a second SIGTERM
            with signals.interrupts():
                for _, process, _, log in running.values():
                    process.wait()
                    log.close()
        except signals.Interrupted as again:
            sys.exit(signals.interrupted(again, "the runs were saving, and stop at once now"))
    if stop.requested:
        return Ended(failed, stop.signum)
    for run, process, start, _ in running.values():
        settle(run, process, start, stopped=True)
    return Ended(failed, saved=saved, not_started=[run.name for run in pending])


def command(run: Run, out: Path, sets: list[str]) -> list[str]:
    items = [f"training.seed={run.seed}", *run.sets, f"checkpoint.name={run.name}",
             f"checkpoint.dir={out / 'checkpoints'}", f"logging.tensorboard_dir={out / 'runs'}",
             "logging.progress=false", *sets]
    return [sys.executable, str(ROOT / "train_sac.py"), "--config", run.config, "--resume", "auto",
            *(arg for item in items for arg in ("--set", item))]


def last_error(log: Path) -> str:
    """The run's last `error:` line (the trainer's one-line reason), else where to look."""
    lines = [line for line in log.read_text(errors="replace").splitlines()
             if line.startswith("error:")]
    return lines[-1].removeprefix("error: ") if lines else f"see {log}"


def warp_share(cfg: Config, threads: int) -> list[str]:
    """The `--set` giving a seed its share of the cores as MuJoCo Warp processes, as it gets
    `threads` torch threads: with `env.backend: mujoco_warp` on the CPU and `env.warp_processes`
    left null (one per core, which seeds running side by side would oversubscribe), at most one per
    world. Nothing otherwise: the key means nothing to the `mujoco` backend, a GPU steps every world
    in one process, and a value the user set stands."""
    env = cfg.env
    if env.backend != "mujoco_warp" or env.warp_processes is not None:
        return []
    if resolve_device(cfg.training.device).type != "cpu":
        return []
    return ["--set", f"env.warp_processes={min(threads, env.num_envs)}"]


def logged(out: Path, name: str) -> list[dict]:
    """The run's evaluations so far (read_rows of its eval.csv); none before its first, or before it
    started."""
    path = out / "runs" / name / "eval.csv"
    return read_rows(path) if path.exists() else []


def read_eval(out: Path, seed: int) -> list[dict]:
    return [row | {"seed": seed} for row in logged(out, f"seed{seed}")]


def first_step(rows: list[dict], key: str, target: float | None) -> int | None:
    return next((r["env_step"] for r in rows if target is not None and r[key] is not None
                 and r[key] >= target), None)


def summarise(out: Path, seed: int, seconds: float | None, target: float | None,
              target_success: float | None) -> dict:
    rows = read_eval(out, seed)
    successes = [r["success"] for r in rows if r["success"] is not None]
    return {"seed": seed, "wall_s": None if seconds is None else round(seconds, 1),
            "evals": len(rows),
            "final_return": rows[-1]["return"] if rows else None,
            "best_return": max((r["return"] for r in rows), default=None),
            "first_step_at_target": first_step(rows, "return", target),
            "final_success": successes[-1] if successes else None,
            "best_success": max(successes, default=None),
            "first_step_at_success_target": first_step(rows, "success", target_success)}


if __name__ == "__main__":
    main()
