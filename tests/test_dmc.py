"""bench/dmc.py: the DMC benchmark as one command, tasks x seeds of resumable runs into one CSV, a
figure with a panel per task and a table beside the published figures; rows from other machines
merged in. Checked on tiny budgets of full 1000-frame episodes (cartpole's 125 agent steps,
reacher's and ball_in_cup's 250): files, rows and resumes, not returns."""

import csv
import fcntl
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from bench.references import PUBLISHED
from tests.conftest import ROOT, out_of_time, sets

TINY = sets(training__eval_episodes=1, training__seed_steps=10, sac__batch_size=8,
            sac__hidden_dim=32,
            logging__eval_video="false")


def dmc(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, str(ROOT / "bench" / "dmc.py"), "--input", "state", "--runs",
            str(tmp_path / "runs"),
            "--out", str(tmp_path / "state.csv"), *args]


def read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def keys(rows: list[dict]) -> list[tuple[str, str, str]]:
    return [(r["task"], r["seed"], r["frames"]) for r in rows]


def test_a_tiny_benchmark_writes_the_csv_a_panel_per_task_and_the_table_beside_published_ones(
        tmp_path):
    result = subprocess.run(dmc(tmp_path, "--tasks", "cartpole_swingup", "reacher_easy", "--seeds",
                                "1", "2",
                                "--frames", "2000", "--parallel", "4", *TINY,
                                *sets(training__eval_every_episodes=1)),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = read(tmp_path / "state.csv")
    assert list(rows[0]) == ["task", "seed", "frames", "return", "wall_s", "env_step", "episode"]
    expected = [(t, s, f) for t in ("cartpole_swingup", "reacher_easy") for s in ("1", "2")
                for f in ("1000", "2000")]
    assert keys(rows) == expected, "2000 frames are 2 episodes, whatever the action repeat"
    assert [r["env_step"] for r in rows[:2]] == ["125", "250"], (
        "cartpole's action repeat 8: 125 agent steps each")
    with Image.open(tmp_path / "state.png") as png:
        assert png.format == "PNG" and png.size == (1500, 850), "six panels, three by two"

    table = (tmp_path / "state.md").read_text()
    at_2000 = {r["seed"]: float(r["return"]) for r in rows if r["task"] == "reacher_easy"
               and r["frames"] == "2000"}
    mean = sum(at_2000.values()) / 2
    line = next(line for line in table.splitlines() if line.startswith("| reacher easy | 2,000 |"))
    assert f"**{mean:.0f} +/- {abs(at_2000['1'] - at_2000['2']) / 2:.0f}** | 2 |" in line, (
        "mean +/- std of 2 seeds")
    assert f"1: {at_2000['1']:.0f}, 2: {at_2000['2']:.0f}" in line
    assert "| walker walk | 2,000 | - | 0 | - |" in table, "every task has its row, run or not"
    assert "--report" in table and "DrQ: Kostrikov et al. 2020" in table, (
        "how to make it again, and the sources")


def test_the_table_sets_each_task_s_returns_at_100k_beside_the_published_figures(tmp_path):
    """No training: a CSV of two seeds' evaluations (from another machine, say) and --report."""
    (tmp_path / "state.csv").write_text("task,seed,frames,return,wall_s,env_step,episode\n"
                                        + "".join(
        f"walker_walk,{seed},{frames + 56 * seed},{ret},10.0,{frames // 2},{frames // 1000}\n"
        for seed, ret in ((1, 900.0), (2, 800.0)) for frames in (50_000, 100_000)))
    result = subprocess.run(dmc(tmp_path, "--report"), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    table = (tmp_path / "state.md").read_text()
    state, pytorch_sac, drq, drqv2, simoun = (
        PUBLISHED["dm_control/walker-walk-v0"][m][0]
        for m in ("SAC State", "pytorch_sac", "DrQ", "DrQ-v2", "Simoun"))
    assert (f"| walker walk | 100,000 | **850 +/- 50** | 2 | 1: 900, 2: 800 | {state} | "
            f"{pytorch_sac} | {drq} | {drqv2} | {simoun} | 403 | - |"
            in table.splitlines()), "the evaluation after episode 100; no SAC-AE at 100k"
    assert ("| cartpole swingup | 100,000 | - | 0 | - | 835 | 829 | 759 | 626 | 851 | 582 | 311 "
            "|" in table.splitlines())
    assert ("| mean of the 6 tasks | 100,000 | - | - | - | 774 | 742 | 688 | 334 | 832 | 560 | - |"
            in table.splitlines()), "no mean of ours before all six tasks have one; DrQ's: 688"


def test_the_six_task_mean_is_the_mean_of_each_task_s_seed_mean(tmp_path):
    returns = {"cartpole_swingup": (800.0, 700.0), "reacher_easy": (900.0,),
               "cheetah_run": (300.0,), "finger_spin": (600.0,), "walker_walk": (500.0,),
               "ball_in_cup_catch": (950.0, 850.0, 1000.0)}
    (tmp_path / "state.csv").write_text(
        "task,seed,frames,return,wall_s,env_step,episode\n" + "".join(
            f"{task},{seed},100000,{ret},10.0,25000,100\n"
            for task, rets in returns.items() for seed, ret in enumerate(rets, start=1)))
    result = subprocess.run(dmc(tmp_path, "--report"), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    mean = (750 + 900 + 300 + 600 + 500 + 933.33) / 6  # cartpole's two seeds, cup's three
    assert f"| mean of the 6 tasks | 100,000 | **{mean:.0f}** | 1-3 | - | 774 |" in (
        (tmp_path / "state.md").read_text()), "each task counts once, whatever its seeds"


def runs_free(checkpoints: Path, timeout: float = 120) -> None:
    """Until no process holds a run's lock: killed outright, the benchmark leaves its runs saving a
    moment longer."""
    deadline = time.monotonic() + timeout
    for lock in checkpoints.glob(".*.lock"):
        with open(lock) as f:
            while True:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, f"{lock} still held"
                    time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_benchmark_resumes_every_run_and_logs_each_evaluation_once(tmp_path, sig):
    """SIGTERM: the benchmark stops its runs, each saving where it is; SIGKILL: each run gets
    SIGTERM as its parent dies. Either way the same command continues them all, and the CSV holds
    each evaluation once."""
    command = dmc(tmp_path, "--tasks", "reacher_easy", "ball_in_cup_catch", "--seeds", "1",
                  "--frames", "9000",
                  *TINY, *sets(training__eval_every_episodes=3))
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    evals = [tmp_path / "runs" / "runs" / f"{task}_state_seed1" / "eval.csv"
             for task in ("reacher_easy",
                          "ball_in_cup_catch")]
    deadline = time.monotonic() + 240
    while not all(path.exists() and len(read(path)) >= 1 for path in evals):  # both runs under way
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    first.send_signal(sig)
    _, stderr = first.communicate(timeout=120)
    if sig == signal.SIGTERM:
        assert (first.returncode == 128 + sig
                and stderr.strip().endswith("run the same command again to continue them"))
    runs_free(tmp_path / "runs" / "checkpoints")
    assert all(len(read(path)) < 3 for path in evals), "stopped mid-way: no run had finished"

    second = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    rows = read(tmp_path / "state.csv")
    assert [(r["task"], r["episode"]) for r in rows] == [(t, str(e))
                                                         for t in ("reacher_easy",
                                                                   "ball_in_cup_catch")
                                                         for e in (3, 6, 9)]
    assert all(0 <= int(r["frames"]) - 1000 * int(r["episode"]) < 1000 for r in rows), (
        "the episode a stop cut short adds its frames, less than an episode's")
    for task in ("reacher_easy", "ball_in_cup_catch"):
        assert "resumed from" in (tmp_path / "runs" / f"{task}_state_seed1.log").read_text()


def test_out_of_time_the_runs_stop_saved_and_the_files_hold_what_they_logged(tmp_path):
    """--minutes: at the limit the runs under way stop as on SIGTERM, each saving where it is, none
    starts after, and the CSV, figure and table are written from the evaluations so far; exit 75
    says to run the same command again."""
    command = dmc(tmp_path, "--tasks", "cartpole_swingup", "reacher_easy", "--seeds", "1",
                  "--frames", "1000000", "--parallel", "1", *TINY,
                  *sets(training__eval_every_episodes=1))
    evals = tmp_path / "runs" / "runs" / "cartpole_swingup_state_seed1" / "eval.csv"
    result = out_of_time(command, evals)
    last = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"out of time: (cartpole_swingup_state_seed1 stopped and saved; "
                        r"reacher_easy_state_seed1 not started|cartpole_swingup_state_seed1, "
                        r"reacher_easy_state_seed1 not started); run the same command again to "
                        r"continue them", last), last
    runs_free(tmp_path / "runs" / "checkpoints")
    assert [(r["episode"], r["frames"]) for r in read(tmp_path / "state.csv")] == [
        (r["episode"], r["frames"]) for r in read(evals)], "every evaluation the run logged"
    assert (tmp_path / "state.md").exists() and (tmp_path / "state.png").exists()
    log = (tmp_path / "runs" / "cartpole_swingup_state_seed1.log").read_text()
    assert "stopped by signal 15; saved" in log, "the run saved on the way out"
    assert (tmp_path / "runs" / "checkpoints" / "cartpole_swingup_state_seed1_latest.pt").exists()


def run_logged(tmp_path: Path, task: str, seed: int, returns: dict[int, float]) -> None:
    """A run of this machine as its eval.csv shows it, without training it."""
    folder = tmp_path / "runs" / "runs" / f"{task}_state_seed{seed}"
    folder.mkdir(parents=True)
    (folder / "eval.csv").write_text("env_step,frames,episode,return,success,wall_s\n" + "".join(
        f"{frames // 2},{frames},{frames // 1000},{ret:.3f},,{frames / 100:.1f}\n"
        for frames, ret in returns.items()))


ELSEWHERE = (
    "task,seed,frames,return,wall_s,env_step,episode\nwalker_walk,3,10000,300.000,99.0,5000,10\n")


def test_rows_from_another_machine_are_kept_and_this_machine_s_runs_merged_in(tmp_path):
    (tmp_path / "state.csv").write_text(ELSEWHERE + "walker_walk,1,10000,200.000,,5000,10\n")
    run_logged(tmp_path, "walker_walk", 1, {10000: 200.0, 20000: 400.0})
    run_logged(tmp_path, "walker_walk", 2, {10000: 100.0})
    result = subprocess.run(dmc(tmp_path, "--tasks", "walker_walk", "--seeds", "1", "2",
                                "--report"),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = read(tmp_path / "state.csv")
    assert [(r["seed"], r["frames"], r["return"], r["wall_s"]) for r in rows] == [
        ("1", "10000", "200.000", "100.0"), ("1", "20000", "400.000", "200.0"),
        ("2", "10000", "100.000", "100.0"),
        ("3", "10000", "300.000",
         "99.0")], "seed 1's 10k once, its wall_s from this run; seed 3 as it came"


def test_two_runs_of_one_seed_are_refused_not_merged(tmp_path):
    (tmp_path / "state.csv").write_text(ELSEWHERE)
    run_logged(tmp_path, "walker_walk", 3, {10000: 350.0})
    result = subprocess.run(dmc(tmp_path, "--tasks", "walker_walk", "--seeds", "3", "--report"),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.strip() == (
        f"error: walker_walk seed 3 after episode 10: {tmp_path / 'state.csv'} has return 300.000 "
        "at 10000 frames, this machine's run logged 350.000 at 10000, so two runs trained that "
        "seed; train another seed here (--seeds), or delete walker_walk seed 3's rows from "
        f"{tmp_path / 'state.csv'} to keep this run's")
    assert (tmp_path / "state.csv").read_text() == ELSEWHERE


def test_a_seed_the_csv_has_from_another_machine_is_not_trained_again(tmp_path):
    (tmp_path / "state.csv").write_text(ELSEWHERE)
    result = subprocess.run(dmc(tmp_path, "--tasks", "walker_walk", "--seeds", "3"),
                            capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and result.stderr.startswith(
        f"error: walker_walk seed 3 is in {tmp_path / 'state.csv'} (1 evaluations, to 10000 "
        f"frames) but has none in {tmp_path / 'runs'}: another machine trained it; leave seed 3 "
        "out here (--seeds)"), result.stderr
    assert not (tmp_path / "runs" / "checkpoints").exists()


@pytest.mark.parametrize("args, message", [
    (["--frames", "2500"],
     "error: --frames must be whole episodes of 1000 frames, got 2500; pass 2000"),
    (["--set", "training.episodes=5"],
     "error: --set training.episodes=5: --frames sets the episodes, each DMC's "
                                       "1000 frames; drop that --set"),
    (["--frames", "15000"],
     "error: cartpole_swingup: no evaluation would land on 15000 frames (15 episodes): its config "
     "evaluates every 10 episodes (0: never), 1 envs ending theirs at a time; pass --frames a "
     "multiple of 10000, or --set training.eval_every_episodes to a divisor of 15"),
    (["--out", "x.txt"],
     "error: --out x.txt must name a .csv file (its .png and .md go beside it)"),
])
def test_budgets_the_benchmark_cannot_report_are_refused_before_any_run_starts(
    tmp_path, args, message):
    command = [sys.executable, str(ROOT / "bench" / "dmc.py"), "--input", "state", "--runs",
               str(tmp_path / "runs"),
               "--out", str(tmp_path / "state.csv"), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and message in result.stderr.strip().splitlines()[-1], (
        result.stderr)
    assert not (tmp_path / "runs").exists()
