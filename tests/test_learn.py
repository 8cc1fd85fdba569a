"""bench/learn.py: several seeds of a config, one CSV (frames,seed,return) and a mean +/- std PNG
with the published reference points. Checked on a tiny budget: files and shapes, not returns."""

import csv
import subprocess
import sys
import time

import pytest
from PIL import Image

import bench.learn
from bench.learn import Run, train_runs, warp_share
from tests.conftest import ROOT, out_of_time, sets
from trainer.config.load import load_config
from trainer.run.curves import plot_curves, seed_statistics


def test_runner_trains_each_seed_and_writes_csv_and_png(tmp_path):
    tiny = sets(training__episodes=4, env__max_episode_steps=15, training__eval_every_episodes=2,
                training__eval_episodes=1, training__seed_steps=10, sac__batch_size=8,
                sac__hidden_dim=32,
                logging__eval_video="false")
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "learn.py"),
                             "--config", str(ROOT / "configs/dmc/cartpole_swingup_state.yaml"),
                             "--seeds", "1", "2", "--threads", "2", "--out", str(tmp_path), *tiny],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    with open(tmp_path / "learn.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[:3] == ["frames", "seed", "return"]
    assert [(r["seed"], r["frames"]) for r in rows] == [(s, f) for s in ("1", "2")
                                                        for f in ("240", "480")], (
        "eval every 2 episodes of 15 steps x action repeat 8")
    with Image.open(tmp_path / "learn.png") as png:
        assert png.format == "PNG"
    # the log prints it only with --verbose
    resolved = (tmp_path / "runs" / "seed1" / "config.yaml").read_text()
    assert "warp_processes: null\n" in resolved, (
        "the mujoco backend's runs are not handed a share of warp processes")


@pytest.mark.parametrize("overrides, threads, expected", [
    (["env.backend=mujoco_warp", "env.num_envs=10"], 4, ["--set", "env.warp_processes=4"]),
    (["env.backend=mujoco_warp", "env.num_envs=3"], 4, ["--set", "env.warp_processes=3"]),
    (["env.backend=mujoco_warp", "env.num_envs=10", "env.warp_processes=2"], 4, []),
    (["env.num_envs=1"], 4, []),
])
def test_each_seed_gets_its_share_of_the_cores_as_warp_processes_where_the_key_applies(
    overrides, threads, expected):
    """On the CPU a MuJoCo Warp seed gets as many processes as torch threads, at most one per world;
    a value the user set stands, and the mujoco backend gets none (the key means nothing there)."""
    cfg = load_config(ROOT / "configs/dmc/cartpole_swingup_state.yaml",
                      ["training.device=cpu", *overrides])
    assert warp_share(cfg, threads) == expected
    if expected:
        assert load_config(ROOT / "configs/dmc/cartpole_swingup_state.yaml",
                           [*overrides, expected[1]])


@pytest.mark.parametrize("args, message", [
    (["--parallel", "0", "--threads", "1"],
     "error: --parallel and --threads must be >= 1, got 0 and 1"),
    (["--threads", "0"], "error: --parallel and --threads must be >= 1"),
    (["--seeds", "1", "1"],
     "error: --seeds must be distinct and >= 0 (each is a run of its own), got [1, 1]"),
    (["--report"], "error: no seed has logged an evaluation in {out}/runs: nothing to plot"),
    (["--minutes", "0"], "error: argument --minutes: must be a finite number above 0, got 0"),
])
def test_settings_it_cannot_run_are_refused_before_any_seed_starts(tmp_path, args, message):
    """--parallel 0 with --threads used to wait forever for a free slot; a seed twice would share
    its run."""
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "learn.py"), "--config",
                             str(ROOT / "configs/dmc/cartpole_swingup_state.yaml"), "--out",
                             str(out), *args],
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode == 2
            and message.format(out=out) in result.stderr.strip().splitlines()[-1]), result.stderr
    assert "Traceback" not in result.stderr and not (out / "runs").exists()


def test_running_the_same_command_again_continues_every_seed_from_its_checkpoint(tmp_path):
    """Learning outlasts a pod or a day: the second command picks each seed up where the first
    stopped."""
    tiny = sets(env__max_episode_steps=15, training__eval_every_episodes=2,
                training__eval_episodes=1,
                training__seed_steps=10, sac__batch_size=8, sac__hidden_dim=32,
                checkpoint__every_episodes=2)
    command = [sys.executable, str(ROOT / "bench" / "learn.py"),
               "--config", str(ROOT / "configs/dmc/cartpole_swingup_state.yaml"),
               "--seeds", "1", "2", "--out", str(tmp_path), *tiny]
    for episodes in (2, 4):
        result = subprocess.run(command + ["--set", f"training.episodes={episodes}"],
                                capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
    with open(tmp_path / "learn.csv", newline="") as f:
        assert ([(r["seed"], r["frames"]) for r in csv.DictReader(f)]
                == [(s, f) for s in ("1", "2") for f in ("240", "480")])
    (tmp_path / "learn.csv").unlink()
    result = subprocess.run(command + ["--report"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and (tmp_path / "learn.csv").exists(), (
        "--report rewrites the CSV without training")
    for seed in (1, 2):
        log = (tmp_path / f"seed{seed}.log").read_text()
        assert "episode 2," in log.split("resumed from", 1)[1], (
            "the second run resumed at episode 2, the log kept both runs")
        assert "settings changed since that checkpoint: training.episodes 2 -> 4\n" in log


def test_seed_curves_on_different_frames_are_interpolated_and_references_drawn(tmp_path):
    rows = [{"seed": 1, "frames": f, "return": f / 10} for f in (0, 100, 200, 300)]
    rows += [{"seed": 2, "frames": f, "return": f / 5} for f in (0, 150, 250)]
    plot_curves({"this repo": rows}, tmp_path / "seeds.png", "t",
                {"DrQ": (759, 868), "SAC-AE": (None, 735)},
                (100, 500))
    with Image.open(tmp_path / "seeds.png") as png:
        assert png.size == (600, 400)
    grid, mean, std = seed_statistics(rows)
    assert list(grid) == [0, 100, 200, 250], (
        "seed 1's frames, up to the last frame both seeds reached")
    assert mean[-1] == pytest.approx((25 + 50) / 2) and std[-1] == pytest.approx(12.5), (
        "seed 1 interpolated at 250")


def test_out_of_time_the_seeds_stop_saved_and_the_csv_holds_what_they_logged(tmp_path):
    """--minutes: a GPU rented by the hour, or a machine that kills a command at a limit, gets the
    curves so far and checkpoints to continue from, not a killed command's nothing."""
    tiny = sets(training__episodes=100_000, env__max_episode_steps=15,
                training__eval_every_episodes=1, training__eval_episodes=1,
                training__seed_steps=10, sac__batch_size=8, sac__hidden_dim=32,
                logging__eval_video="false")
    command = [sys.executable, str(ROOT / "bench" / "learn.py"),
               "--config", str(ROOT / "configs/dmc/cartpole_swingup_state.yaml"),
               "--seeds", "1", "--out", str(tmp_path), *tiny]
    result = out_of_time(command, tmp_path / "runs" / "seed1" / "eval.csv")
    assert result.stderr.strip().splitlines()[-1] in (
        f"out of time: seed1 {how}; run the same command again to continue them"
        for how in ("stopped and saved", "not started"))
    with open(tmp_path / "learn.csv", newline="") as f:
        assert [r["seed"] for r in csv.DictReader(f)][:1] == ["1"], "the evaluations so far"
    assert (tmp_path / "learn.png").exists()
    assert "stopped by signal 15; saved" in (tmp_path / "seed1.log").read_text()


# stand-ins for train_sac.py: each waits for the runner's SIGTERM, then ends as a trainer might
ON_SIGTERM = """
import signal, sys, time
def stop(*_):
    {}
signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(0.02)
"""
STAND_INS = {
    "ends": "pass",  # finishes at once, before the deadline
    "saves": ON_SIGTERM.format("sys.exit(128 + signal.SIGTERM)"),  # what a trainer does
    "breaks": ON_SIGTERM.format("print('error: no space left to save', flush=True); sys.exit(1)"),
    "just_ended": ON_SIGTERM.format("sys.exit(0)"),  # ended by itself as the SIGTERM came
    "waits": "pass",  # never starts: no slot frees before the deadline
}


def test_at_the_deadline_each_run_is_saved_finished_failed_or_never_started(tmp_path,
                                                                           monkeypatch):
    """The runner at a deadline, with stand-ins that end as trainers can: a save (exit 143) is
    unfinished, an exit 0 finished, any other exit a failure with its error line, and a run no slot
    took is not started."""
    monkeypatch.setattr(bench.learn, "command",
                        lambda run, out, sets: [sys.executable, "-c", STAND_INS[run.name]])
    finished = []
    ended = train_runs([Run(name, "unused.yaml", seed) for seed, name in enumerate(STAND_INS)],
                       tmp_path, sets=[], parallel=3, threads=1,
                       finished=lambda run, seconds: finished.append(run.name),
                       deadline=time.monotonic() + 5)
    assert finished == ["ends", "just_ended"]
    assert ended.failed == ["breaks (exit 1): no space left to save"]
    assert (ended.saved, ended.not_started, ended.stopped) == (["saves"], ["waits"], None)
