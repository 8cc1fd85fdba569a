"""The command line end to end on a real rendered MuJoCo task: checkpoints, TensorBoard, eval videos and curves,
and clear errors for damaged or incompatible checkpoints. (Exact resume, preemption and parallel envs:
tests/test_loop.py.)"""

import csv
import shutil

import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import DEFAULT_CONFIG as CONFIG
from tests.conftest import ROOT, TINY, run_cli, sets
from trainer import checkpoint


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The issue's smoke run (plus one eval episode per episode so every TensorBoard tag appears)."""
    tmp = tmp_path_factory.mktemp("smoke")
    args = sets(
        training__episodes=2, env__max_episode_steps=50, sac__batch_size=8, sac__buffer_size=2000,
        checkpoint__dir=tmp / "ckpt", checkpoint__every_episodes=1, logging__tensorboard_dir=tmp / "runs",
        logging__progress="false", training__seed_steps=20, training__eval_every_episodes=1, training__eval_episodes=1,
    )
    extras = sets(checkpoint__every_steps=30, training__auto_shutdown=f"touch {tmp / 'finished'}")
    result = run_cli("--config", CONFIG, *args, *extras, *TINY)
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


def test_every_steps_saves_latest_mid_episode_and_auto_shutdown_runs_after_completion(smoke_run):
    tmp, _, result = smoke_run
    assert "saved sac_video_step30.replay.pt, sac_video_latest.pt (episode 0, step 30)" in result.stdout
    assert "saved sac_video_step60.replay.pt, sac_video_latest.pt (episode 1, step 60)" in result.stdout
    assert (tmp / "finished").exists()


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


def test_resuming_under_another_profile_names_the_changed_settings_and_how_to_keep_the_saved_ones(smoke_run, tmp_path):
    tmp, args, _ = smoke_run
    shutil.copytree(tmp / "ckpt", tmp_path / "ckpt")
    args = args + sets(checkpoint__dir=tmp_path / "ckpt", logging__tensorboard_dir=tmp_path / "runs", training__episodes=3)
    result = run_cli("--config", CONFIG, *args, *TINY, "--set", "profile=gpu", "--set", "training.device=cpu",
                     "--set", "env.num_envs=1", "--resume", "auto")
    assert result.returncode == 0, result.stderr
    [changed] = [line for line in result.stdout.splitlines() if line.startswith("settings changed since that checkpoint:")]
    assert "profile cpu -> gpu" in changed
    assert "the checkpoint trained with profile cpu; --set profile=cpu keeps its settings" in result.stdout


def test_each_evaluation_writes_a_decodable_gif_and_the_run_a_learning_curve(smoke_run):
    tmp, _, _ = smoke_run
    run = tmp / "runs" / "sac_video"
    for episode in (1, 2):
        with Image.open(run / "videos" / f"eval_ep{episode}.gif") as gif:
            assert gif.size == (128, 128) and 10 < gif.n_frames <= 50, "a frame per step of the 50-step episode (GIF merges repeats)"
    with Image.open(run / "curve.png") as curve:
        assert curve.format == "PNG" and curve.size[0] > 300


def test_without_cuda_gpu_monitoring_is_one_notice_and_no_crash(smoke_run):
    _, _, result = smoke_run
    assert result.stdout.count("GPU monitoring off") == 1
