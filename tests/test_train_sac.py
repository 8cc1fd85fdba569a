"""The command line end to end on a real rendered MuJoCo task: checkpoints, TensorBoard, eval videos
and curves, and clear errors for damaged or incompatible checkpoints: a fresh start never overwrites
a run, damage to a checkpoint or its replay sidecar is one line by hand and a fallback with --resume
auto, and a damaged replay never costs the weights. (Exact resume, preemption and parallel envs:
tests/test_loop.py.)"""

import csv
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import DEFAULT_CONFIG as CONFIG
from tests.conftest import ROOT, TINY, fill, pause, popen_cli, run_cli, sets, tmpfs, wait_for
from tests.test_video import decoded
from trainer.checkpoints import checkpoint


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """A smoke run of 2 episodes (plus one eval episode per episode so every TensorBoard tag
    appears)."""
    tmp = tmp_path_factory.mktemp("smoke")
    args = sets(
        training__episodes=2, env__max_episode_steps=50, sac__batch_size=8, sac__buffer_size=2000,
        checkpoint__dir=tmp / "ckpt", checkpoint__every_episodes=1,
        logging__tensorboard_dir=tmp / "runs",
        logging__progress="false", training__seed_steps=20, training__eval_every_episodes=1,
        training__eval_episodes=1,
    )
    extras = sets(checkpoint__every_steps=30, training__auto_shutdown=f"touch {tmp / 'finished'}")
    result = run_cli("--config", CONFIG, *args, *extras, *TINY)
    assert result.returncode == 0, result.stderr
    return tmp, args, result


def test_smoke_run_writes_episode_and_latest_checkpoints(smoke_run):
    tmp, _, result = smoke_run
    names = sorted(p.name for p in (tmp / "ckpt").iterdir())
    assert names == [".sac_video.lock", "sac_video_best.pt", "sac_video_ep1.pt", "sac_video_ep2.pt",
                     "sac_video_latest.pt", "sac_video_step100.replay.pt"]
    data, replay = checkpoint.load(tmp / "ckpt" / "sac_video_latest.pt")
    with open(tmp / "runs" / "sac_video" / "eval.csv", newline="") as f:
        best = max(float(row["return"]) for row in csv.DictReader(f))
    assert data["progress"] == {"episode": 2, "env_step": 100, "evaluation_due": False,
                                "next_seed": 0,
                                "best_return": pytest.approx(best, abs=1e-3)}
    assert data["config"]["sac"]["batch_size"] == 8 and replay["count"] == 102
    assert data["agent"]["updates"] > 0


def test_a_start_is_a_few_lines_naming_the_task_the_budget_and_where_the_whole_config_went(
    smoke_run, tmp_path):
    tmp, _, result = smoke_run
    logs = tmp / "runs" / "sac_video"
    assert result.stdout.splitlines()[:3] == [
        "run 'sac_video' on cpu, profile cpu: dm_control/cartpole-swingup-v0 from 64x64 frames "
        "through simple2dcnn, batch 8, 2 episodes, 1 env",
        f"logs in {logs} (the whole config: {logs / 'config.yaml'}), checkpoints in {tmp / 'ckpt'}",
        "a fresh start"]
    assert ("resolved config:" not in result.stdout
            and "batch_size: 8" in (logs / "config.yaml").read_text())
    args, ckpt = copy_of(smoke_run, tmp_path)  # done already: the resume prints its start and ends
    verbose = run_cli("--config", CONFIG, *args, *TINY, "--resume", "auto", "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    assert f"resumed from {ckpt / 'sac_video_latest.pt'}: episode 2, step 100" in verbose.stdout
    assert "resolved config:\n" in verbose.stdout and "  batch_size: 8\n" in verbose.stdout


def test_episodes_csv_logs_every_training_episode_as_monitor_csv_does(smoke_run):
    tmp, _, _ = smoke_run
    with open(tmp / "runs" / "sac_video" / "episodes.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(row["env_step"], row["frames"], row["episode"], row["length"], row["success"])
            for row in rows] == [
        ("50", "400", "1", "50", ""), ("100", "800", "2", "50", "")], "cartpole has no success"
    assert 0 < float(rows[0]["wall_s"]) < float(rows[1]["wall_s"])


def test_every_steps_saves_latest_mid_episode_and_auto_shutdown_runs_after_completion(smoke_run):
    tmp, _, result = smoke_run
    assert ("saved sac_video_step30.replay.pt, sac_video_latest.pt (episode 0, step "
            "30)" in result.stdout)
    assert ("saved sac_video_step60.replay.pt, sac_video_latest.pt (episode 1, step "
            "60)" in result.stdout)
    assert (tmp / "finished").exists()


def test_smoke_run_logs_every_metric_to_tensorboard(smoke_run):
    tmp, _, _ = smoke_run
    events = EventAccumulator(str(tmp / "runs" / "sac_video"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {"train/episode_return", "train/episode_length", "eval/return", "train/critic_loss",
                "train/actor_loss",
                "train/alpha_loss", "train/alpha", "train/q_mean", "train/env_steps_per_s",
                "train/updates_per_s",
                "train/replay_size"}
    assert expected <= tags, expected - tags
    assert [e.step for e in events.Scalars("train/episode_return")] == [50, 100]
    assert ((tmp / "runs" / "sac_video" / "config.yaml").exists()
            and (tmp / "runs" / "sac_video" / "eval.csv").exists())
    assert "eval/success_rate" not in tags, "cartpole reports no success"


def test_eval_csv_has_a_success_column_filled_only_for_tasks_that_report_success(
    smoke_run, tmp_path):
    tmp, _, _ = smoke_run
    with open(tmp / "runs" / "sac_video" / "eval.csv", newline="") as f:
        assert [row["success"] for row in csv.DictReader(f)] == ["", ""]

    args = sets(
        training__episodes=2, training__seed_steps=20, training__eval_every_episodes=1,
        training__eval_episodes=2,
        sac__batch_size=8, sac__buffer_size=2000, sac__hidden_dim=32,
        checkpoint__dir=tmp_path / "ckpt",
        logging__tensorboard_dir=tmp_path / "runs", logging__progress="false",
    )
    result = run_cli("--config", str(ROOT / "configs" / "dishwashing_feasible.yaml"), *args)
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "runs" / "sac_feasible" / "eval.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert ([row["episode"] for row in rows] == ["1", "2"]
            and all(row["success"] in ("0.000", "0.500", "1.000") for row in rows))
    events = EventAccumulator(str(tmp_path / "runs" / "sac_feasible"))
    events.Reload()
    assert [e.step
            for e in events.Scalars("eval/success_rate")] == [int(row["env_step"]) for row in rows]
    assert "success " in result.stdout


def test_truncated_checkpoint_is_a_one_line_error_and_auto_falls_back(smoke_run, tmp_path):
    tmp, args, _ = smoke_run
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tmp / "ckpt", ckpt)
    latest = ckpt / "sac_video_latest.pt"
    latest.write_bytes(latest.read_bytes()[:1000])
    args = args + sets(checkpoint__dir=ckpt, logging__tensorboard_dir=tmp_path / "runs")

    result = run_cli("--config", CONFIG, *args, *TINY, "--resume", str(latest))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (result.stderr.strip().count("\n") == 0
            and "sac_video_latest.pt is unreadable (truncated or corrupt" in result.stderr)

    result = run_cli("--config", CONFIG, *args, *TINY, "--set", "training.episodes=3", "--resume",
                     "auto")
    assert result.returncode == 0, result.stderr
    assert ("trying an older checkpoint" in result.stderr and "resumed from" in result.stdout
            and "sac_video_ep2.pt" in result.stdout)
    assert checkpoint.load(latest)[0]["progress"]["episode"] == 3


def test_resuming_with_an_incompatible_config_is_a_clear_error(smoke_run, tmp_path):
    tmp, args, _ = smoke_run
    result = run_cli("--config", CONFIG, *args, *TINY, "--set", "env.frame_stack=2", "--set",
                     "training.episodes=3",
                     "--resume", "auto")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "trained with env.frame_stack=3 but the config says env.frame_stack=2" in result.stderr


def test_resuming_under_another_profile_names_the_changed_settings_and_how_to_keep_the_saved_ones(
    smoke_run, tmp_path):
    tmp, args, _ = smoke_run
    shutil.copytree(tmp / "ckpt", tmp_path / "ckpt")
    args = args + sets(checkpoint__dir=tmp_path / "ckpt",
                       logging__tensorboard_dir=tmp_path / "runs",
                       training__episodes=3)
    result = run_cli("--config", CONFIG, *args, *TINY, "--set", "profile=gpu", "--set",
                     "training.device=cpu",
                     "--set", "env.num_envs=1", "--resume", "auto")
    assert result.returncode == 0, result.stderr
    [changed] = [line for line in result.stdout.splitlines()
                 if line.startswith("settings changed since that checkpoint:")]
    assert "profile cpu -> gpu" in changed
    assert ("the checkpoint trained with profile cpu; --set profile=cpu keeps its "
            "settings" in result.stdout)


def test_each_evaluation_writes_a_decodable_gif_and_mp4_and_the_run_a_learning_curve(smoke_run):
    tmp, _, _ = smoke_run
    run = tmp / "runs" / "sac_video"
    for episode in (1, 2):
        with Image.open(run / "videos" / f"eval_ep{episode}.gif") as gif:
            assert gif.size == (128, 128) and 10 < gif.n_frames <= 50, (
                "a frame per step of the 50-step episode (GIF merges repeats)")
        _, frames = decoded(run / "videos" / f"eval_ep{episode}.mp4")
        assert [frame.shape for frame in frames] == [(128, 128, 3)] * 50, "every step, repeats too"
    with Image.open(run / "curve.png") as curve:
        assert curve.format == "PNG" and curve.size[0] > 300


def test_without_cuda_gpu_monitoring_is_silent_and_no_crash(smoke_run):
    _, _, result = smoke_run
    assert "GPU monitoring" not in result.stdout + result.stderr


def copy_of(smoke_run, tmp_path) -> tuple[list[str], object]:
    """The smoke run's arguments pointed at a copy of its checkpoints (so each test damages its
    own)."""
    tmp, args, _ = smoke_run
    shutil.copytree(tmp / "ckpt", tmp_path / "ckpt")
    return args + sets(checkpoint__dir=tmp_path / "ckpt",
                       logging__tensorboard_dir=tmp_path / "runs"), tmp_path / "ckpt"


def contents(folder) -> dict:
    """The run's files; not the lock file, which each process that takes the lock writes its name
    into."""
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.suffix != ".lock"}


@pytest.mark.parametrize("resume", [[], ["--resume", ""]])
def test_a_fresh_start_over_an_existing_run_refuses_and_changes_nothing(
    smoke_run, tmp_path, resume):
    """The command from shell history, without --resume: it used to replace the run's _latest and
    _ep1."""
    args, ckpt = copy_of(smoke_run, tmp_path)
    before = contents(ckpt)
    result = run_cli("--config", CONFIG, *args, *TINY, *resume)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "error: run 'sac_video' already has checkpoints in" in result.stderr
    assert ("continue it with --resume auto" in result.stderr
            and "--set checkpoint.name=<new name>" in result.stderr)
    assert contents(ckpt) == before


def test_start_over_moves_the_old_run_aside_and_trains_a_new_one(smoke_run, tmp_path):
    args, ckpt = copy_of(smoke_run, tmp_path)
    before = contents(ckpt)
    result = run_cli("--config", CONFIG, *args, *TINY, "--set", "training.episodes=1",
                     "--start-over")
    assert result.returncode == 0, result.stderr
    [folder] = [p for p in ckpt.iterdir() if p.is_dir()]
    assert folder.name.startswith("sac_video.replaced-") and contents(folder) == before
    assert f"moved 5 files of run 'sac_video' into {folder}/" in result.stdout
    assert checkpoint.load(ckpt / "sac_video_latest.pt")[0]["progress"]["episode"] == 1


def test_start_over_into_logs_it_cannot_write_refuses_before_moving_the_old_run(
    smoke_run, tmp_path):
    """The log folder is checked before --start-over moves the run aside: else the run is moved,
    then the new one fails, and --resume auto no longer finds the old one."""
    args, ckpt = copy_of(smoke_run, tmp_path)
    before = contents(ckpt)
    (tmp_path / "file").write_text("not a folder")
    logs = tmp_path / "file" / "runs"
    result = run_cli("--config", CONFIG, *args, *TINY, "--set", f"logging.tensorboard_dir={logs}",
                     "--start-over")
    assert result.returncode == 2 and result.stderr == (
        f"error: cannot log to logging.tensorboard_dir {logs}: {tmp_path / 'file'} is not a folder "
        "this process may "
        "write to; set it to a folder under one\n")
    assert contents(ckpt) == before and not [p for p in ckpt.iterdir() if p.is_dir()]


def test_a_truncated_shared_sidecar_resumes_the_weights_with_an_empty_replay(smoke_run, tmp_path):
    """_ep2 and _latest share the one sidecar: truncating it must not make --resume auto start fresh
    and overwrite both."""
    args, ckpt = copy_of(smoke_run, tmp_path)
    sidecar = ckpt / "sac_video_step100.replay.pt"
    sidecar.write_bytes(sidecar.read_bytes()[:5000])
    trained = torch.load(ckpt / "sac_video_ep2.pt", weights_only=True)["agent"]["updates"]
    result = run_cli("--config", CONFIG, *args, *TINY, "--set", "training.episodes=3", "--resume",
                     "auto")
    assert result.returncode == 0, result.stderr
    assert "resuming the weights at step 100 with an empty replay buffer" in result.stderr
    assert ("resumed from" in result.stdout
            and "episode 2, step 100, 0 transitions in replay" in result.stdout)
    data, _ = checkpoint.load(ckpt / "sac_video_latest.pt")
    assert data["progress"]["episode"] == 3 and data["agent"]["updates"] > trained, (
        "continued, not restarted")


def corrupt_latest(ckpt):
    flip = ckpt / "sac_video_latest.pt"
    data = bytearray(flip.read_bytes())
    data[len(data) // 2:len(data) // 2 + 8] = b"\xff" * 8
    flip.write_bytes(bytes(data))


def random_bytes(ckpt):
    (ckpt / "sac_video_latest.pt").write_bytes(os.urandom(4096))


def zero_bytes(ckpt):
    (ckpt / "sac_video_latest.pt").write_bytes(b"\0" * 4096)


def test_a_damaged_latest_beside_a_good_episode_file(smoke_run, tmp_path):
    """By hand: one line, exit 2, nothing changed, for flipped bytes, random bytes and zero bytes.
    With --resume auto: the good _ep2 continues, with its replay."""
    args, ckpt = copy_of(smoke_run, tmp_path)
    good = (ckpt / "sac_video_latest.pt").read_bytes()
    for damage in (random_bytes, zero_bytes, corrupt_latest):
        (ckpt / "sac_video_latest.pt").write_bytes(good)
        damage(ckpt)
        before = contents(ckpt)
        result = run_cli("--config", CONFIG, *args, *TINY, "--resume",
                         str(ckpt / "sac_video_latest.pt"))
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert "sac_video_latest.pt is" in result.stderr and "use --resume auto" in result.stderr
        assert contents(ckpt) == before

    result = run_cli("--config", CONFIG, *args, *TINY, "--set", "training.episodes=3", "--resume",
                     "auto")
    assert result.returncode == 0, result.stderr
    assert ("checksum does not match" in result.stderr
            and "trying an older checkpoint" in result.stderr)
    assert re.search(r"resumed from .*sac_video_ep2.pt: episode 2, step 100, [1-9]\d* transitions",
                     result.stdout)


def test_a_corrupt_or_missing_sidecar_named_by_hand(smoke_run, tmp_path):
    args, ckpt = copy_of(smoke_run, tmp_path)
    sidecar = ckpt / "sac_video_step100.replay.pt"
    sidecar.write_bytes(os.urandom(sidecar.stat().st_size))
    result = run_cli("--config", CONFIG, *args, *TINY, "--resume", str(ckpt / "sac_video_ep2.pt"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "replay sidecar" in result.stderr
    assert "move it aside to resume sac_video_ep2.pt with an empty replay" in result.stderr

    sidecar.unlink()  # as the message says
    result = run_cli("--config", CONFIG, *args, *TINY, "--set", "training.episodes=3",
                     "--resume", str(ckpt / "sac_video_ep2.pt"))
    assert result.returncode == 0, result.stderr
    assert ("resuming with an empty replay buffer" in result.stderr
            and "0 transitions in replay" in result.stdout)


def test_a_checkpoint_of_another_config_is_one_line_and_stays_loadable(smoke_run, tmp_path):
    args, ckpt = copy_of(smoke_run, tmp_path)
    before = contents(ckpt)
    result = run_cli("--config", CONFIG, *args, *TINY, "--set", "sac.hidden_dim=32",
                     "--resume", str(ckpt / "sac_video_latest.pt"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "trained with sac.hidden_dim=64 but the config says sac.hidden_dim=32" in result.stderr
    assert contents(ckpt) == before


def test_an_unwritable_checkpoint_folder_is_one_line_at_start(smoke_run, tmp_path):
    _, args, _ = smoke_run
    (tmp_path / "file").write_text("not a folder")
    result = run_cli("--config", CONFIG, *args, *TINY, "--set",
                     f"checkpoint.dir={tmp_path / 'file' / 'ckpt'}")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"error: cannot write checkpoints to {tmp_path / 'file' / 'ckpt'} (" in result.stderr


def test_a_disk_that_fills_mid_run_is_one_line_and_keeps_the_previous_checkpoint(
    smoke_run, tmp_path):
    """A real tmpfs sized so the first episode's save fits and the second's replay does not (it
    needs root to mount, as this machine and CI containers have; elsewhere tests/test_checkpoint.py
    covers the save with a simulated ENOSPC)."""
    tmp, args, _ = smoke_run
    weights = (tmp / "ckpt" / "sac_video_latest.pt").stat().st_size
    # the second save's sidecar
    replay = (tmp / "ckpt" / "sac_video_step100.replay.pt").stat().st_size
    # holds episode 1's files (_ep1, _best: its evaluation is the first, _latest), not also episode
    # 2's replay
    size = replay + 3 * weights + 256 * 1024
    with tmpfs(tmp_path / "disk", str(size)) as disk:
        result = run_cli("--config", CONFIG, *args, *TINY, "--set", f"checkpoint.dir={disk}",
                         "--set", f"logging.tensorboard_dir={tmp_path / 'runs'}")
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert "error: cannot save sac_video_step100.replay.pt: the disk holding" in result.stderr
        assert "is full" in result.stderr and "the previous checkpoint is intact" in result.stderr
        files = [".sac_video.lock", "sac_video_best.pt", "sac_video_ep1.pt", "sac_video_latest.pt",
                 "sac_video_step50.replay.pt"]
        assert sorted(p.name for p in disk.iterdir()) == files, "no temporary file left"
        data, replay_state = checkpoint.load(disk / "sac_video_latest.pt")
        assert data["progress"]["episode"] == 1 and replay_state["count"] > 0


@pytest.mark.parametrize("inherited", [signal.SIG_DFL, signal.SIG_IGN])
def test_a_second_ctrl_c_during_shutdown_is_one_line_not_a_traceback(tmp_path, inherited):
    """The first Ctrl-C saves and shuts down; a second one (the user's, impatient) used to end in a
    KeyboardInterrupt traceback from wherever shutdown was, e.g. joining a MuJoCo Warp process. Sent
    here deterministically, by the run's own auto_shutdown command, after the run has finished and
    saved. A trainer started in the background by a script inherits SIGINT ignored (as did this test
    under such a CI job): the run took the first Ctrl-C and ignored this one, exit status 0."""
    config = str(ROOT / "configs" / "inverted_pendulum_state.yaml")
    command = [sys.executable, str(ROOT / "train_sac.py"), "--config", config, *sets(
        training__episodes=1, env__max_episode_steps=10, training__seed_steps=5,
        checkpoint__dir=tmp_path / "ckpt",
        logging__tensorboard_dir=tmp_path / "runs", logging__progress="false",
        training__auto_shutdown="kill -INT $PPID",  # the shell's parent: the trainer
    )]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, inherited))
    assert result.returncode == 130 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "interrupted before the run finished shutting down; every checkpoint written is whole "
        "(atomic writes): continue with --resume auto")
    assert (checkpoint.load(tmp_path / "ckpt"
                            / "inverted_pendulum_state_latest.pt")[0]["progress"]["episode"] == 1)


def files_under(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("fresh_start",
                         [["--start-over"], sets(checkpoint__dir="{tmp}/other_ckpt")])
def test_a_fresh_start_moves_the_old_runs_logs_aside_whole(smoke_run, tmp_path, fresh_start):
    """--start-over moved the checkpoints aside but left eval.csv with its header only, overwrote
    config.yaml and hid the old TensorBoard events (purge_step 0); so did a fresh start into the
    same log folder from another checkpoint.dir."""
    args, _ = copy_of(smoke_run, tmp_path)
    shutil.copytree(smoke_run[0] / "runs", tmp_path / "runs")
    (tmp_path / "runs" / "sac_video" / "train.log").write_text("a sweep's log, not the logger's\n")
    before = files_under(tmp_path / "runs" / "sac_video")
    result = run_cli("--config", CONFIG, *args, *TINY, "--set", "training.episodes=1",
                     *(arg.format(tmp=tmp_path) for arg in fresh_start))
    assert result.returncode == 0, result.stderr
    [aside] = (tmp_path / "runs").glob("sac_video.replaced-*")
    assert files_under(aside) | {"train.log": before["train.log"]} == before, (
        "moved whole, nothing rewritten")
    assert ("moved the logs of an earlier run 'sac_video' (config.yaml, curve.png, episodes.csv, "
            "eval.csv, events.out.tfevents." in result.stdout and f"into {aside}/" in result.stdout)
    logs = tmp_path / "runs" / "sac_video"
    assert (logs / "train.log").read_bytes() == before["train.log"], (
        "files the logger does not write stay")
    with open(logs / "eval.csv", newline="") as f:
        assert [row["episode"]
                for row in csv.DictReader(f)] == ["1"], "the new run's own evaluation"
    with open(logs / "episodes.csv", newline="") as f:
        assert [row["episode"] for row in csv.DictReader(f)] == ["1"], "the new run's own episode"


def test_resuming_an_older_checkpoint_by_hand_moves_the_newer_ones_aside_whole(tmp_path):
    """`--resume _ep4.pt` of a run that went on to 6 episodes: the branch overwrote `_latest`, the
    sidecar `_ep6.pt` names where steps coincide, and its keep_last pruning deleted `_ep4.pt`, the
    checkpoint it resumed from."""
    ckpt = tmp_path / "ckpt"
    args = ["--config", str(ROOT / "configs" / "inverted_pendulum_state.yaml"), *sets(
        checkpoint__dir=ckpt, checkpoint__every_episodes=2, checkpoint__keep_last=2,
        training__seed_steps=20,
        logging__tensorboard_dir=tmp_path / "runs", logging__progress="false")]
    first = run_cli(*args, "--set", "training.episodes=6")
    assert first.returncode == 0, first.stderr
    name = "inverted_pendulum_state"
    ep4 = checkpoint.load(ckpt / f"{name}_ep4.pt")[0]["progress"]
    before = contents(ckpt)
    # the best evaluation's checkpoint too, where it came after episode 4
    best = (checkpoint.load_weights(ckpt / f"{name}_best.pt")["progress"]["env_step"]
            > ep4["env_step"])
    future = {n: data for n, data in before.items() if n in (f"{name}_ep6.pt", f"{name}_latest.pt")
              or n == f"{name}_best.pt" and best
              or n.endswith(".replay.pt")
              and int(re.search(r"step(\d+)", n).group(1)) > ep4["env_step"]}
    assert len(future) == 3 + best, sorted(before)

    branch = run_cli(*args, "--set", "training.episodes=5", "--resume",
                     str(ckpt / f"{name}_ep4.pt"))
    assert branch.returncode == 0, branch.stderr
    [aside] = [p for p in ckpt.iterdir() if p.is_dir()]
    assert aside.name.startswith(f"{name}.abandoned-") and contents(aside) == future, "moved whole"
    assert (f"{name}_ep4.pt (episode 4, step {ep4['env_step']}) is older than the newest "
            f"checkpoints of run '{name}': this run branches off it, and the {3 + best} newer "
            "files") in branch.stdout
    assert (ckpt / f"{name}_ep4.pt").read_bytes() == before[f"{name}_ep4.pt"], (
        "the checkpoint it resumed from")
    assert checkpoint.load(aside / f"{name}_ep6.pt")[1] is not None, (
        "the abandoned future resumes with its replay")
    assert checkpoint.load(ckpt / f"{name}_latest.pt")[0]["progress"]["episode"] == 5


@pytest.mark.parametrize("checkpoints_on_it", [False, True])
def test_a_disk_that_fills_under_the_logs_stops_the_run_in_one_line_after_saving_what_it_can(
        tmp_path, checkpoints_on_it):
    """Logs (and checkpoints) on a real tmpfs, filled after the first save: the next evaluation's
    eval.csv write raised ENOSPC, a traceback, and no `_latest` was attempted. The resume runs the
    evaluation whose logging failed, so eval.csv holds every evaluation once. (64 MiB: room for this
    run's 10 MB checkpoints once the disk is freed.)"""
    with tmpfs(tmp_path / "disk", "64m") as disk:
        ckpt = (disk if checkpoints_on_it else tmp_path) / "ckpt"
        args = ["--config", CONFIG, *TINY, *sets(
            training__episodes=3, env__max_episode_steps=50, sac__batch_size=8,
            sac__buffer_size=2000,
            checkpoint__dir=ckpt, checkpoint__every_episodes=1,
            logging__tensorboard_dir=disk / "runs",
            logging__progress="false", training__seed_steps=20, training__eval_every_episodes=1,
            training__eval_episodes=1)]
        run = popen_cli(*args)
        for line in run.stdout:
            # after episode 1's best save
            if line.startswith("saved sac_video_step50.replay.pt, sac_video_ep1.pt"):
                fill(disk)
                break
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 2 and stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
        assert re.match(
            rf"error: cannot write .* \(the disk holding {disk / 'runs' / 'sac_video'} is full\)",
            stderr)
        if checkpoints_on_it:
            assert (", and the run could not be saved either: the steps after 50 (the last "
                    "checkpoint) were not saved; cannot save sac_video_step") in stderr
            files = [".sac_video.lock", "sac_video_best.pt", "sac_video_ep1.pt",
                     "sac_video_latest.pt", "sac_video_step50.replay.pt"]
            assert sorted(p.name for p in ckpt.iterdir()) == files, "no temporary file"
        else:
            assert f"; saved {ckpt / 'sac_video_latest.pt'} at step " in stderr
            assert checkpoint.load(ckpt / "sac_video_latest.pt")[0]["progress"]["env_step"] > 50
        (disk / "filler").unlink()
        resumed = run_cli(*args, "--resume", "auto")
        assert resumed.returncode == 0, resumed.stderr
        with open(disk / "runs" / "sac_video" / "eval.csv", newline="") as f:
            assert [row["episode"] for row in csv.DictReader(f)] == ["1", "2", "3"]


def test_a_second_trainer_on_a_run_in_use_refuses_in_one_line_and_touches_nothing(tmp_path):
    """The same command twice (two tmux windows, a relaunched job while the old process runs): both
    trained into one folder, and the second's --start-over moved the first's files away under it.
    The first is paused (SIGSTOP) so its files stand still while the second tries; killed, it leaves
    no lock in the way of the next start."""
    ckpt = tmp_path / "ckpt"
    args = ["--config", str(ROOT / "configs" / "inverted_pendulum_state.yaml"), "--resume", "auto",
            *sets(
        training__episodes=10**6, training__seed_steps=20, checkpoint__dir=ckpt,
        checkpoint__every_episodes=1,
        logging__tensorboard_dir=tmp_path / "runs", logging__progress="false",
        training__eval_every_episodes=0)]
    first = popen_cli(*args)
    try:
        wait_for(ckpt / "inverted_pendulum_state_ep1.pt", first)
        pause(first)
        before = contents(ckpt) | {"lock": (ckpt / ".inverted_pendulum_state.lock").read_bytes()}
        fresh = [arg for arg in args if arg not in ("--resume", "auto")]
        for second in (args, [*fresh, "--start-over"]):
            result = run_cli(*second, "--set", "training.episodes=2")
            assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
            assert result.stderr.startswith("error: run 'inverted_pendulum_state' is in use by "
                                            f"pid {first.pid} on host {socket.gethostname()} "
                                            "since ")
            assert f"(lock {ckpt / '.inverted_pendulum_state.lock'})" in result.stderr
            assert "--set checkpoint.name=<new name>" in result.stderr
            after = contents(ckpt) | {"lock": (ckpt / ".inverted_pendulum_state.lock").read_bytes()}
            assert after == before and not [p for p in ckpt.iterdir() if p.is_dir()]
    finally:
        first.kill()
        first.communicate()
    result = run_cli(*args, "--set", "training.episodes=2")
    assert result.returncode == 0 and "resumed from" in result.stdout, result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_while_starting_is_one_line_and_128_plus_the_signal(tmp_path, signum):
    """Held in start-up for as long as it takes: the checkpoint folder is on an S3 endpoint that
    accepts the connection and never answers, so listing it blocks. The signal reaches the whole
    process group, as Ctrl-C or a scheduler sends it. SIGTERM and SIGHUP used to kill the trainer
    without a word (status -15, -1), SIGINT to say that it was shutting down."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
               "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.getsockname()[1]}"}
        config = str(ROOT / "configs" / "inverted_pendulum_state.yaml")
        args = sets(checkpoint__dir="s3://bucket/runs", checkpoint__local_dir=tmp_path / "staged",
                    logging__tensorboard_dir=tmp_path / "runs")
        trainer = subprocess.Popen([sys.executable, str(ROOT / "train_sac.py"), "--config", config,
                                    "--resume", "auto",
                                    *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
        # the trainer is listing the folder now, and waits for an answer
        connection, _ = server.accept()
        os.killpg(trainer.pid, signum)
        out, err = trainer.communicate(timeout=60)
        connection.close()
    assert trainer.returncode == 128 + signum and out == "", err
    assert err == (f"stopped by signal {signum} while starting, before training began: nothing was "
                   "saved; run the "
                   "same command again\n")


STATE_CARTPOLE = str(ROOT / "configs" / "dmc" / "cartpole_swingup_state.yaml")
PENDULUM = str(ROOT / "configs" / "inverted_pendulum_state.yaml")


def test_a_diverged_run_stops_in_one_line_and_leaves_only_checkpoints_that_load(tmp_path):
    """Absurd learning rates blow the critic's Adam state up within a few episodes. The run used to
    train on, evaluate NaN actions ("return 0.0"), write inf into every `_ep<N>`, `_latest` and
    sidecar, let keep_last prune the good ones for them, and exit 0: no file of it resumed,
    evaluated or exported."""
    ckpt, name = tmp_path / "ckpt", "cartpole_swingup_state"
    args = ["--config", STATE_CARTPOLE, *sets(
        checkpoint__dir=ckpt, checkpoint__every_episodes=1, checkpoint__keep_last=2,
        env__max_episode_steps=20,
        training__seed_steps=10, sac__batch_size=8, sac__buffer_size=1000,
        training__eval_every_episodes=1,
        training__eval_episodes=1, logging__tensorboard_dir=tmp_path / "runs",
        logging__progress="false")]
    good = run_cli(*args, *sets(training__episodes=3))
    assert good.returncode == 0, good.stderr
    diverged = run_cli(*args, "--resume", "auto",
                       *sets(training__episodes=30, sac__lr=1, sac__alpha_lr=1,
                             sac__updates_per_step=20, sac__discount=1))
    assert diverged.returncode == 3, diverged.stderr
    [line] = diverged.stderr.strip().splitlines()
    latest = checkpoint.load(ckpt / f"{name}_latest.pt")[0]["progress"]
    assert re.fullmatch(
        r"error: training diverged by step \d+: \S+ became NaN or inf, and nothing of it was "
        rf"saved; the last good checkpoint is {re.escape(str(ckpt))}/{name}_latest.pt \(episode "
        rf"{latest['episode']}, step {latest['env_step']}\): lower sac.lr \(now 1\) or "
        r"sac.alpha_lr \(now 1\), e.g. --set sac.lr=0.1, and continue with --resume "
        r"auto", line), line
    assert 3 <= latest[
        "episode"] < 30 and f"after episode {latest['episode'] + 1} " not in diverged.stdout, (
        "no evaluation of the diverged policy")
    assert checkpoint.load(ckpt / f"{name}_latest.pt")[1] is not None, "with its replay"
    kept = [p for p in ckpt.glob(f"{name}_ep*.pt")]
    assert len(kept) == 2 and all(checkpoint.load_weights(p)
                                  for p in kept), "keep_last's two, both good"
    assert checkpoint.load_weights(ckpt / f"{name}_best.pt")["progress"]["episode"] <= latest[
        "episode"], (
        "the best evaluation was saved before it diverged, and loads")
    resumed = run_cli(*args, "--resume", "auto", *sets(training__episodes=latest["episode"] + 1))
    assert resumed.returncode == 0, resumed.stderr


def two_runs(tmp_path, *names: str) -> tuple[list[str], Path]:
    """Two-episode inverted-pendulum runs of each name, in one checkpoint folder; (command line less
    the run's name, folder)."""
    ckpt = tmp_path / "ckpt"
    args = ["--config", PENDULUM,
            *sets(checkpoint__dir=ckpt, checkpoint__every_episodes=1, training__seed_steps=20,
                  training__episodes=2, training__eval_every_episodes=0,
                  env__max_episode_steps=20,
                  logging__tensorboard_dir=tmp_path / "runs", logging__progress="false")]
    for name in names:
        done = run_cli(*args, *sets(checkpoint__name=name))
        assert done.returncode == 0, done.stderr
    return args, ckpt


def test_resuming_another_runs_checkpoint_into_a_run_with_its_own_refuses_and_changes_nothing(
    tmp_path):
    """`--set checkpoint.name=B --resume <A's _latest>` replaced B's only `_latest` and pruned its
    sidecar."""
    args, ckpt = two_runs(tmp_path, "A", "B")
    before, b_step = (contents(ckpt),
                      checkpoint.load(ckpt / "B_latest.pt")[0]["progress"]["env_step"])
    more = sets(checkpoint__name="B", training__episodes=3)
    refused = run_cli(*args, *more, "--resume", str(ckpt / "A_latest.pt"))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"error: {ckpt}/A_latest.pt is a checkpoint of run 'A', and run 'B' already has "
        f"checkpoints in {ckpt} (B_latest.pt: episode 2, step {b_step}) that its saves would "
        "overwrite; resume it as a separate run with --set checkpoint.name=<new name>, or add "
        "--start-over to move run 'B''s files aside first (deletes nothing)")
    assert contents(ckpt) == before

    into_new = run_cli(*args, *sets(checkpoint__name="C", training__episodes=3), "--resume",
                       str(ckpt / "A_latest.pt"))
    # a run without checkpoints may start from another's weights
    assert into_new.returncode == 0, into_new.stderr
    over = run_cli(*args, *more, "--resume", str(ckpt / "A_latest.pt"), "--start-over")
    assert over.returncode == 0, over.stderr
    [aside] = [p for p in ckpt.iterdir() if p.is_dir() and p.name.startswith("B.replaced-")]
    assert contents(aside) == {n: data for n, data in before.items()
                               if n.startswith("B_")}, "moved whole"
    assert checkpoint.load(ckpt / "B_latest.pt")[0]["progress"]["episode"] == 3


def test_a_run_of_the_same_name_from_another_machine_or_an_abandoned_future_is_no_ancestor(
    tmp_path):
    """Same run name, another history: its saves would overwrite this run's newest. A resume of the
    run's own older file branches off it as before, and its abandoned future comes back only with
    --start-over."""
    args, ckpt = two_runs(tmp_path, "A")
    _, other = two_runs(tmp_path / "elsewhere", "A")  # the same run name trained on another machine
    args += sets(checkpoint__name="A")
    before = contents(ckpt)
    refused = run_cli(*args, *sets(training__episodes=3), "--resume", str(other / "A_latest.pt"))
    assert (refused.returncode == 2
            and "is not on the way to run 'A''s newest" in refused.stderr), refused.stderr
    assert contents(ckpt) == before

    branch = run_cli(*args, *sets(training__episodes=2), "--resume", str(ckpt / "A_ep1.pt"))
    assert branch.returncode == 0, branch.stderr
    [future] = [p for p in ckpt.iterdir() if p.is_dir() and p.name.startswith("A.abandoned-")]
    back = run_cli(*args, *sets(training__episodes=3), "--resume", str(future / "A_ep2.pt"))
    assert back.returncode == 2 and "is not on the way to run 'A''s newest" in back.stderr, (
        back.stderr)
    back = run_cli(*args, *sets(training__episodes=3), "--resume", str(future / "A_ep2.pt"),
                   "--start-over")
    assert back.returncode == 0, back.stderr
    assert checkpoint.load(ckpt / "A_latest.pt")[0]["progress"]["episode"] == 3
