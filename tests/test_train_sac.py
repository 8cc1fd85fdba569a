"""The command line end to end on a real rendered MuJoCo task: checkpoints, TensorBoard, exact resume after a
kill, SIGTERM/SIGINT saving, and clear errors for damaged or incompatible checkpoints."""

import csv
import shutil
import signal
import time

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import ROOT, popen_cli, run_cli, sets
from trainer import checkpoint

CONFIG = str(ROOT / "configs" / "default.yaml")
TINY = sets(env__image_size=64, sac__hidden_dim=64, sac__feature_dim=16, logging__log_every_updates=5)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The issue's smoke run (plus one eval episode per episode so every TensorBoard tag appears)."""
    tmp = tmp_path_factory.mktemp("smoke")
    args = sets(
        training__episodes=2, env__max_episode_steps=50, sac__batch_size=8, sac__buffer_size=2000,
        checkpoint__dir=tmp / "ckpt", checkpoint__every_episodes=1, logging__tensorboard_dir=tmp / "runs",
        logging__progress="false", training__seed_steps=20, training__eval_every_episodes=1, training__eval_episodes=1,
    )
    result = run_cli("--config", CONFIG, *args, *TINY)
    assert result.returncode == 0, result.stderr
    return tmp, args, result


def test_smoke_run_writes_episode_and_latest_checkpoints(smoke_run):
    tmp, _, result = smoke_run
    names = sorted(p.name for p in (tmp / "ckpt").iterdir())
    assert names == ["sac_video_ep1.pt", "sac_video_ep2.pt", "sac_video_latest.pt", "sac_video_step100.replay.pt"]
    data, replay = checkpoint.load(tmp / "ckpt" / "sac_video_latest.pt")
    assert data["progress"] == {"episode": 2, "env_step": 100}
    assert data["config"]["sac"]["batch_size"] == 8 and replay["count"] == 102
    assert data["agent"]["updates"] > 0
    assert "resolved config:" in result.stdout and "batch_size: 8" in result.stdout


def test_smoke_run_logs_every_metric_to_tensorboard(smoke_run):
    tmp, _, _ = smoke_run
    events = EventAccumulator(str(tmp / "runs" / "sac_video"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {"train/episode_return", "train/episode_length", "eval/return", "train/critic_loss", "train/actor_loss",
                "train/alpha_loss", "train/alpha", "train/q_mean", "train/env_steps_per_s", "train/updates_per_s", "train/replay_size"}
    assert expected <= tags, expected - tags
    assert [e.step for e in events.Scalars("train/episode_return")] == [50, 100]
    assert (tmp / "runs" / "sac_video" / "config.yaml").exists() and (tmp / "runs" / "sac_video" / "eval.csv").exists()
    assert "eval/success_rate" not in tags, "cartpole reports no success"


def test_eval_csv_has_a_success_column_filled_only_for_tasks_that_report_success(smoke_run, tmp_path):
    tmp, _, _ = smoke_run
    with open(tmp / "runs" / "sac_video" / "eval.csv", newline="") as f:
        assert [row["success"] for row in csv.DictReader(f)] == ["", ""]

    args = sets(
        training__episodes=2, training__seed_steps=20, training__eval_every_episodes=1, training__eval_episodes=2,
        sac__batch_size=8, sac__buffer_size=2000, sac__hidden_dim=32, checkpoint__dir=tmp_path / "ckpt",
        logging__tensorboard_dir=tmp_path / "runs", logging__progress="false",
    )
    result = run_cli("--config", str(ROOT / "configs" / "dishwashing_feasible.yaml"), *args)
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "runs" / "sac_feasible" / "eval.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["episode"] for row in rows] == ["1", "2"] and all(row["success"] in ("0.000", "0.500", "1.000") for row in rows)
    events = EventAccumulator(str(tmp_path / "runs" / "sac_feasible"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/success_rate")] == [int(row["env_step"]) for row in rows]
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
    assert result.stderr.strip().count("\n") == 0 and "sac_video_latest.pt is unreadable (truncated or corrupt" in result.stderr

    result = run_cli("--config", CONFIG, *args, *TINY, "--set", "training.episodes=3", "--resume", "auto")
    assert result.returncode == 0, result.stderr
    assert "trying an older checkpoint" in result.stderr and "resumed from" in result.stdout and "sac_video_ep2.pt" in result.stdout
    assert checkpoint.load(latest)[0]["progress"]["episode"] == 3


def test_resuming_with_an_incompatible_config_is_a_clear_error(smoke_run, tmp_path):
    tmp, args, _ = smoke_run
    result = run_cli("--config", CONFIG, *args, *TINY, "--set", "env.frame_stack=2", "--set", "training.episodes=3", "--resume", "auto")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "trained with env.frame_stack=3 but the config says env.frame_stack=2" in result.stderr


def run_args(tmp_path, episodes: int) -> list[str]:
    return sets(
        training__episodes=episodes, env__max_episode_steps=30, sac__batch_size=8, sac__buffer_size=1000,
        checkpoint__dir=tmp_path / "ckpt", checkpoint__every_episodes=1, checkpoint__keep_replays=10,
        logging__tensorboard_dir=tmp_path / "runs", logging__progress="false", training__seed_steps=15,
        training__eval_every_episodes=2, training__eval_episodes=1,
    ) + TINY


def wait_for(path, proc, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_killed_and_resumed_run_ends_with_the_same_parameters_as_an_uninterrupted_one(tmp_path):
    straight = run_cli("--config", CONFIG, *run_args(tmp_path / "straight", 4))
    assert straight.returncode == 0, straight.stderr

    interrupted = tmp_path / "interrupted"
    proc = popen_cli("--config", CONFIG, *run_args(interrupted, 4))
    wait_for(interrupted / "ckpt" / "sac_video_ep2.pt", proc)
    proc.kill()
    proc.communicate()
    resumed = run_cli("--config", CONFIG, *run_args(interrupted, 4), "--resume", str(interrupted / "ckpt" / "sac_video_ep2.pt"))
    assert resumed.returncode == 0, resumed.stderr

    a, replay_a = checkpoint.load(tmp_path / "straight" / "ckpt" / "sac_video_latest.pt")
    b, replay_b = checkpoint.load(interrupted / "ckpt" / "sac_video_latest.pt")
    assert a["progress"] == b["progress"] == {"episode": 4, "env_step": 120}
    assert a["agent"]["updates"] == b["agent"]["updates"] > 50
    for net in ("actor", "critic", "critic_target"):
        for name, tensor in a["agent"][net].items():
            assert torch.equal(tensor, b["agent"][net][name]), f"{net}.{name} differs after resume"
    assert torch.equal(a["agent"]["log_alpha"], b["agent"]["log_alpha"])
    assert torch.equal(replay_a["frames"], replay_b["frames"])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_saves_a_loadable_latest_and_exits_128_plus_signal(tmp_path, sig):
    args = run_args(tmp_path, 1000)
    proc = popen_cli("--config", CONFIG, *args)
    wait_for(tmp_path / "ckpt" / "sac_video_ep1.pt", proc)
    time.sleep(0.5)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, stderr
    data, replay = checkpoint.load(tmp_path / "ckpt" / "sac_video_latest.pt")
    steps = data["progress"]["env_step"]
    assert steps >= 30 and replay["count"] >= steps

    resumed = run_cli("--config", CONFIG, *args, "--set", f"training.episodes={data['progress']['episode'] + 1}", "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    assert f"step {steps}," in resumed.stdout
    assert checkpoint.load(tmp_path / "ckpt" / "sac_video_latest.pt")[0]["progress"]["env_step"] > steps
