"""The DeepMind Control benchmark of the pixel-SAC papers: PlaNet's six tasks at 100k and 500k env
frames, each task x seed a run of its own, from the simulator state or from pixels.

    # a CPU: a run per core; a GPU: every run at once
    python3 bench/dmc.py --input state --tasks all --seeds 1 2 3 --frames 100000
    python3 bench/dmc.py --input pixels --tasks all --seeds 1 2 3 --frames 500000
    # the files from what the runs logged so far
    python3 bench/dmc.py --input state --frames 100000 --report

A run trains configs/dmc/<task>.yaml (pixels) or <task>_state.yaml for --frames / 1000 episodes
(every DMC episode is 1000 frames, whatever the action repeat) with bench/learn.py's runner: a
`train_sac.py --resume auto` process in --runs, so the same command run again continues every run
where it stopped, here or wherever --runs is copied to. A stop (Ctrl-C, SIGTERM; killed outright,
the runs still get SIGTERM) saves every run and writes no files: --report.

Writes docs/dmc/<input>_<frames>.csv (--out) with a row per evaluation up to the last episode (task,
seed, frames, return, wall_s: the run's training seconds, env_step, episode: the episodes before
it), and beside it <same>.png (a panel per task: mean +/- std over seeds, the published figures as
crosses) and <same>.md (each task's return at the benchmark frames, and the mean over the six tasks,
beside the published figures of bench/references.py). `--minutes` stops the runs at a time limit as
a stop signal does, but writes the files of what they logged, then exits 75 (run it again to go
on). The figure at N frames is the evaluation after episode N / 1000: a run resumed from a stop
mid-episode starts a new episode, so its later evaluations land up to an episode's frames past the
round number.

The CSV keeps the rows it holds from other machines (a task's seeds may be trained in different
places), merged by (task, seed, episode). A row this machine's runs log again must have the same
frames and return: another means two runs of one seed, and the command refuses rather than pick one,
as it refuses to train a seed the CSV has from elsewhere.
"""

import argparse
import csv
import functools
import io
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere: the project's modules sit at the repo root

from bench.common import positive
from bench.learn import (
    Run,
    add_runner_arguments,
    check_runner_arguments,
    logged,
    runner_deadline,
    share_machine,
    train_runs,
    warp_share,
)
from bench.references import FRAMES, PUBLISHED, SOURCES
from errors import UserError
from file_ops import atomic_write
from trainer.config.load import Config, load_config
from trainer.process.cli import error_exit
from trainer.run.curves import draw_curves, plt, save_figure

TASKS = ("cartpole_swingup", "reacher_easy", "cheetah_run", "finger_spin", "walker_walk",
         "ball_in_cup_catch")
INPUTS = {"state": "the simulator state", "pixels": "pixels"}
# every DMC episode, whatever the action repeat: the frames budget is a count of episodes
EPISODE_FRAMES = 1000
COLUMNS = ("task", "seed", "frames", "return", "wall_s", "env_step", "episode")
# the table's columns and every panel's colours
METHODS = ("SAC State", "pytorch_sac", "DrQ", "DrQ-v2", "Simoun", "CURL", "SAC-AE")
# --frames decides these; a --set of them would train other frames than the CSV's name says
BENCHMARK_KEYS = ("training.episodes", "training.max_env_steps", "env.max_episode_steps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, choices=INPUTS)
    parser.add_argument("--tasks", nargs="+", default=["all"], choices=[*TASKS, "all"],
                        metavar="TASK",
                        help=f"among {', '.join(TASKS)}, or all (the default)")
    parser.add_argument("--frames", type=positive(int), default=100_000,
                        help="env frames per run, a multiple of 1000 (default 100000; the papers' "
                             "other is 500000)")
    add_runner_arguments(parser)
    parser.add_argument("--runs", type=Path, default=Path("runs/dmc"),
                        help="the runs' checkpoints and logs (default runs/dmc)")
    parser.add_argument("--out", type=Path,
                        help="the CSV (default docs/dmc/<input>_<frames>.csv); .png, .md beside")
    parser.add_argument("--report", action="store_true",
                        help="train nothing: the CSV, figure and table of what is logged so far")
    args = parser.parse_args()
    deadline = runner_deadline(args)
    check_runner_arguments(parser, args)
    if args.frames % EPISODE_FRAMES:
        parser.error(f"--frames must be whole episodes of {EPISODE_FRAMES} frames, got "
                     f"{args.frames}; pass "
                     f"{args.frames // EPISODE_FRAMES * EPISODE_FRAMES or EPISODE_FRAMES}")
    for item in args.set:
        if item.partition("=")[0].strip() in BENCHMARK_KEYS:
            parser.error(
                f"--set {item}: --frames sets the episodes, each DMC's 1000 frames; drop that "
                "--set")
    out = args.out or ROOT / "docs" / "dmc" / f"{args.input}_{args.frames}.csv"
    if out.suffix != ".csv":
        parser.error(f"--out {out} must name a .csv file (its .png and .md go beside it)")
    tasks = TASKS if "all" in args.tasks else tuple(t for t in TASKS if t in args.tasks)
    try:
        sys.exit(benchmark(args, tasks=tasks, out=out, deadline=deadline))
    except UserError as err:
        sys.exit(error_exit(err))


def benchmark(args: argparse.Namespace, *, tasks: tuple[str, ...], out: Path,
              deadline: float | None) -> int:
    episodes = args.frames // EPISODE_FRAMES
    configs = {task: load_config(config_path(task, args.input),
                                 [f"training.episodes={episodes}", *args.set])
               for task in tasks}  # a bad config or --set fails here once, not in every run
    for task, cfg in configs.items():
        check_evaluates(task, cfg, args.frames)
    kept = read_csv(out) if out.exists() else []
    # seed by seed: a whole seed's panels come first
    seeds = [(task, seed) for seed in args.seeds for task in tasks]
    rows = gather(args, seeds)
    merge(kept, rows, out=out)  # a conflict is refused before hours of training, not after
    ended = None
    if not args.report:
        check_not_elsewhere(kept, rows, seeds, out=out, runs=args.runs)
        parallel, threads = share_machine(args.parallel, args.threads, runs=len(seeds),
                                          cfg=configs[tasks[0]])
        runs = [Run(run_name(task, args.input, seed), str(config_path(task, args.input)), seed,
                    [f"training.episodes={episodes}", *warp_share(configs[task], threads)])
                for task, seed in seeds]
        args.runs.mkdir(parents=True, exist_ok=True)
        print(f"{len(runs)} runs of {args.frames} frames, {parallel} at a time, torch threads "
              f"each: {threads}; their output in {args.runs}/<run>.log", flush=True)
        def finished(run: Run, seconds: float) -> None:
            print(json.dumps({"run": run.name, "wall_s": round(seconds)}), flush=True)

        ended = train_runs(runs, args.runs, sets=args.set, parallel=parallel, threads=threads,
                           finished=finished, deadline=deadline)
        if ended.stopped:
            ended.exit_if_short(args.runs)
        rows = gather(args, seeds)
    merged = merge(kept, rows, out=out)
    if not merged and ended is not None:
        ended.exit_if_short(args.runs)  # failed or out of time before any evaluation
    if not merged:
        raise UserError(f"no run has logged an evaluation in {args.runs / 'runs'}, nor does {out} "
                        "hold one: nothing to report; train the runs (without --report)")
    write(merged, out=out, input=args.input, frames=args.frames, default_out=args.out is None)
    print(json.dumps({"csv": str(out), "png": str(out.with_suffix(".png")),
                      "md": str(out.with_suffix(".md")),
                      "evaluations": len(merged),
                      "runs": len({(r["task"], r["seed"]) for r in merged})}))
    if ended is not None:
        # the failures' line last, after the files of what the others logged
        ended.exit_if_short(args.runs)
    return 0


def config_path(task: str, input: str) -> Path:
    return ROOT / "configs" / "dmc" / f"{task}{'_state' if input == 'state' else ''}.yaml"


def run_name(task: str, input: str, seed: int) -> str:
    return f"{config_path(task, input).stem}_seed{seed}"


def check_evaluates(task: str, cfg: Config, frames: int) -> None:
    """The benchmark's figure is the evaluation at `frames`: refuse a config whose evaluations would
    miss it. Episodes end num_envs at a time, so the count reaches the budget only if num_envs
    divides it."""
    episodes, every, envs = (frames // EPISODE_FRAMES, cfg.training.eval_every_episodes,
                             cfg.env.num_envs)
    if every and not episodes % every and not episodes % envs:
        return
    step = math.lcm(every or 1, envs) * EPISODE_FRAMES
    raise UserError(f"{task}: no evaluation would land on {frames} frames ({episodes} episodes): "
                    f"its config evaluates every {every} episodes (0: never), {envs} envs ending "
                    f"theirs at a time; pass --frames a multiple of {step}, or --set "
                    f"training.eval_every_episodes to a divisor of {episodes}")


def gather(args: argparse.Namespace, seeds: list[tuple[str, int]]) -> list[dict]:
    """The evaluations the runs of `seeds` have logged in --runs, up to the budget's last
    episode."""
    return [{"task": task, "seed": seed, "frames": r["frames"], "return": r["return"],
             "wall_s": r["wall_s"],
             "env_step": r["env_step"], "episode": r["episode"]}
            for task, seed in seeds for r in logged(args.runs, run_name(task, args.input, seed))
            if r["episode"] <= args.frames // EPISODE_FRAMES]


def read_csv(path: Path) -> list[dict]:
    """The rows a bench/dmc.py CSV holds, from this machine or another."""
    try:
        with open(path, newline="") as f:
            rows = [{"task": r["task"], "seed": int(r["seed"]), "frames": int(r["frames"]),
                     "return": float(r["return"]), "wall_s": float(r["wall_s"]) if r["wall_s"]
                     else None,
                     "env_step": int(r["env_step"]), "episode": int(r["episode"])}
                    for r in csv.DictReader(f)]
    except (OSError, UnicodeDecodeError, csv.Error, KeyError, TypeError, ValueError) as err:
        raise UserError(f"cannot read {path} as a bench/dmc.py CSV ({type(err).__name__}: {err}); "
                        "fix it, or pass another --out") from None
    unknown = sorted({r["task"] for r in rows} - set(TASKS))
    if unknown:
        raise UserError(f"{path} names tasks that are none of the benchmark's "
                        f"({', '.join(unknown)}); fix it, or pass another --out")
    return rows


def merge(kept: list[dict], logged_here: list[dict], *, out: Path) -> list[dict]:
    """`kept` (the CSV's rows) with `logged_here` (this machine's runs'), one row per (task, seed,
    episode): by episode, since frames move with a resume; the same evaluation twice must agree on
    its frames and return, its wall_s then taken from this machine's run."""
    rows = {key(r): r for r in kept}
    for row in logged_here:
        old = rows.get(key(row))
        if (old is not None
            and (old["frames"], round(old["return"], 3))
            != (row["frames"], round(row["return"], 3))):
            task, seed, episode = key(row)
            raise UserError(f"{task} seed {seed} after episode {episode}: {out} has return "
                            f"{old['return']:.3f} at {old['frames']} frames, this machine's run "
                            f"logged {row['return']:.3f} at {row['frames']}, so two runs trained "
                            f"that seed; train another seed here (--seeds), or delete {task} seed "
                            f"{seed}'s rows from {out} to keep this run's")
        rows[key(row)] = row
    return sorted(rows.values(), key=lambda r: (TASKS.index(r["task"]), *key(r)[1:]))


def key(row: dict) -> tuple[str, int, int]:
    return row["task"], row["seed"], row["episode"]


def check_not_elsewhere(kept: list[dict], logged_here: list[dict], seeds: list[tuple[str, int]], *,
                        out: Path,
                        runs: Path) -> None:
    """Refuse to train a seed the CSV has from another machine: this machine's run of it would start
    from scratch and end in a conflict hours later."""
    here = {(r["task"], r["seed"]) for r in logged_here}
    for task, seed in seeds:
        found = [r["frames"] for r in kept if (r["task"], r["seed"]) == (task, seed)]
        if found and (task, seed) not in here:
            raise UserError(f"{task} seed {seed} is in {out} ({len(found)} evaluations, to "
                            f"{max(found)} frames) but has none in {runs}: another machine trained "
                            f"it; leave seed {seed} out here (--seeds), copy that machine's {runs} "
                            f"here to continue it, or delete its rows from {out}")


def write(rows: list[dict], *, out: Path, input: str, frames: int, default_out: bool) -> None:
    """The CSV, the figure and the table, each written whole or not at all."""
    out.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows((r["task"], r["seed"], r["frames"], f"{r['return']:.3f}",
                      "" if r["wall_s"] is None else f"{r['wall_s']:.1f}", r["env_step"],
                      r["episode"]) for r in rows)
    atomic_write(out, lambda f: f.write(text.getvalue().encode()))
    plot(rows, out.with_suffix(".png"), input=input, frames=frames)
    command = (
        f"python3 bench/dmc.py --input {input} --frames "
        f"{frames}{'' if default_out else f' --out {out}'} --report")
    table = markdown(rows, input=input, frames=frames, csv_name=out.name, command=command)
    atomic_write(out.with_suffix(".md"), lambda f: f.write(table.encode()))


def references(task: str, frames: int) -> dict[str, tuple]:
    """Every method's published returns for `task` at FRAMES (None where not reported, or past
    `frames`)."""
    published = PUBLISHED[env_id(task)]
    return {method: tuple(r if f <= frames else None
                          for f, r in zip(FRAMES, published.get(method, (None,) * 2)))
            for method in METHODS}


@functools.cache
def env_id(task: str) -> str:
    return load_config(config_path(task, "state")).env.id


def plot(rows: list[dict], path: Path, *, input: str, frames: int) -> None:
    """A panel per task, its seeds' mean +/- std against env frames, the published figures as
    crosses."""
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5), dpi=100)
    for ax, task in zip(axes.flat, TASKS):
        ours = [r for r in rows if r["task"] == task]
        draw_curves(ax, {"this repo": ours}, references=references(task, frames),
                    reference_frames=FRAMES)
        if not ours:
            ax.text(0.5, 0.5, "no evaluations yet", transform=ax.transAxes, ha="center",
                    va="center", color="0.5")
        ax.set_xlim(0, frames * 1.02)
        ax.set_ylim(-20, 1020)  # a DMC return is at most 1000
        ax.set_title(task.replace("_", " "))
        ax.set_xlabel("env frames")
        ax.set_ylabel("eval return")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small", loc="best")
    fig.suptitle(f"DeepMind Control from {INPUTS[input]} to {frames:,} frames: eval return, mean "
                 "+/- std over seeds; crosses: published")
    fig.tight_layout()
    save_figure(fig, path)


def markdown(rows: list[dict], *, input: str, frames: int, csv_name: str, command: str) -> str:
    """Each task's return at the benchmark frames (--frames, and the papers' 100k on the way to
    500k): the mean and std over the seeds evaluated there, each seed's, and the published
    figures."""
    points = sorted({f for f in FRAMES if f < frames} | {frames})
    lines = [f"# DeepMind Control from {INPUTS[input]}: eval return at "
             f"{', '.join(f'{f:,}' for f in points)} frames",
             "",
             f"Generated from [{csv_name}]({csv_name}) by `{command}`: run that again rather than "
             "edit this file.",
             "Eval return of the deterministic policy after episode frames / 1000 (a run resumed "
             "mid-episode evaluates up to an episode's frames later: the CSV has its frames); "
             "mean +/- std over the seeds evaluated there (std of the seeds' returns). '-': no "
             "evaluation there yet, or no published figure. The last rows: the mean over the six "
             "tasks of each task's mean (its seeds: the fewest-most a task has), once every task "
             "has one.",
             "",
             f"| task | frames | this repo | seeds | per seed | {' | '.join(METHODS)} |",
             "|" + " --- |" * (5 + len(METHODS))]
    task_means = {point: [] for point in points}
    for task in TASKS:
        published = references(task, max(FRAMES))
        for point in points:
            at = {r["seed"]: r["return"] for r in rows
                  if r["task"] == task and r["episode"] == point // EPISODE_FRAMES}
            values = list(at.values())
            if values:
                task_means[point].append((statistics.fmean(values), len(values)))
            mean = "-" if not values else f"{statistics.fmean(values):.0f}" + (
                f" +/- {statistics.pstdev(values):.0f}" if len(values) > 1 else "")
            cells = [task.replace("_", " "), f"{point:,}", f"**{mean}**" if values else mean,
                     str(len(values)),
                     ", ".join(f"{seed}: {value:.0f}" for seed, value in sorted(at.items())) or "-",
                     *(published_cell(published[m], point) for m in METHODS)]
            lines.append("| " + " | ".join(cells) + " |")
    # the benchmark's headline: the mean over the six tasks, only where every task has a figure
    for point in points:
        ours = task_means[point]
        every = len(ours) == len(TASKS)
        mean = f"**{statistics.fmean(m for m, _ in ours):.0f}**" if every else "-"
        fewest, most = min((n for _, n in ours), default=0), max((n for _, n in ours), default=0)
        seeds = "-" if not every else str(most) if fewest == most else f"{fewest}-{most}"
        cells = [f"mean of the {len(TASKS)} tasks", f"{point:,}", mean, seeds, "-",
                 *(six_task_mean(method, point) for method in METHODS)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Published figures (bench/references.py):", ""]
    lines += [f"- {method}: {SOURCES[method]}" for method in METHODS]
    return "\n".join(lines) + "\n"


def six_task_mean(method: str, point: int) -> str:
    """`method`'s published mean over the six tasks at `point` ('-' where a task lacks one)."""
    if point not in FRAMES:
        return "-"
    returns = [references(task, max(FRAMES))[method][FRAMES.index(point)] for task in TASKS]
    return "-" if None in returns else f"{statistics.fmean(returns):.0f}"


def published_cell(returns: tuple, point: int) -> str:
    value = returns[FRAMES.index(point)] if point in FRAMES else None
    return "-" if value is None else str(value)


if __name__ == "__main__":
    main()
