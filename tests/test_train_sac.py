"""The command line end to end on a real rendered MuJoCo task: checkpoints, TensorBoard, exact resume after a
kill, SIGTERM/SIGINT saving, clear errors for damaged or incompatible checkpoints, and parallel env workers that
store exactly the transitions of sequential envs."""

import random
import shutil
import signal
import time

import pytest
import torch
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import ROOT, popen_cli, run_cli, sets
from envs import make_env
from trainer import checkpoint
from trainer.config import config_from_dict
from trainer.errors import UserError
from trainer.loop import replay_frames_device

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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])  # SIGINT: tests/test_tmux_train.py
def test_stop_signal_saves_a_loadable_latest_and_exits_128_plus_signal(tmp_path, sig):
    args = run_args(tmp_path, 1000) + sets(training__auto_shutdown=f"touch {tmp_path / 'finished'}")
    proc = popen_cli("--config", CONFIG, *args)
    wait_for(tmp_path / "ckpt" / "sac_video_ep1.pt", proc)
    time.sleep(0.5)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, stderr
    data, replay = checkpoint.load(tmp_path / "ckpt" / "sac_video_latest.pt")
    steps = data["progress"]["env_step"]
    assert steps >= 30 and replay["count"] >= steps
    assert not (tmp_path / "finished").exists(), "auto_shutdown is for completed runs, not for a reclaimed instance"

    resumed = run_cli("--config", CONFIG, *args, "--set", f"training.episodes={data['progress']['episode'] + 1}", "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    assert f"step {steps}," in resumed.stdout
    assert checkpoint.load(tmp_path / "ckpt" / "sac_video_latest.pt")[0]["progress"]["env_step"] > steps


def test_signals_at_random_moments_always_leave_a_loadable_latest(tmp_path):
    """Preempt the same run four times at random moments (SIGTERM, then SIGKILL, which allows no clean-up),
    each time restarting it with --resume auto, as a spot instance would be."""
    rng = random.Random(0)
    args = run_args(tmp_path, 1000) + sets(env__max_episode_steps=10)  # a checkpoint every 10 steps
    latest = tmp_path / "ckpt" / "sac_video_latest.pt"
    steps = 0
    for trial, sig in enumerate([signal.SIGTERM, signal.SIGKILL] * 2):
        before = latest.stat().st_mtime_ns if latest.exists() else 0
        proc = popen_cli("--config", CONFIG, *args, "--resume", "auto")
        deadline = time.time() + 240
        while not latest.exists() or latest.stat().st_mtime_ns == before:  # this trial has saved at least once
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.5))
        proc.send_signal(sig)
        proc.communicate(timeout=120)
        assert proc.returncode == (128 + sig if sig == signal.SIGTERM else -sig), f"trial {trial}"
        data, _ = checkpoint.load(latest)
        assert data["progress"]["env_step"] > steps, "every trial adds work and keeps it"
        steps = data["progress"]["env_step"]


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


def test_parallel_envs_store_the_transitions_of_sequential_envs_and_resume_loses_or_repeats_none(tmp_path):
    """Two workers against two plain envs stepped one after the other with the same seeds and the replay's own
    actions: every stored frame, reward and flag agrees. A resumed run reseeds the workers (training.seed +
    completed episodes + worker) and appends: one transition per counted agent step, none lost or doubled."""
    args = run_args(tmp_path, 3) + sets(env__num_envs=2, env__max_episode_steps=7, env__image_size=32, training__seed_steps=10**6,
                                        training__eval_every_episodes=100, logging__tensorboard="false")
    first = run_cli("--config", CONFIG, *args)
    assert first.returncode == 0, first.stderr
    latest = tmp_path / "ckpt" / "sac_video_latest.pt"
    saved, saved_replay = checkpoint.load(latest)
    resumed = run_cli("--config", CONFIG, *args, "--set", "training.episodes=5", "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    data, replay = checkpoint.load(latest)
    assert data["progress"]["episode"] == 5 and data["progress"]["env_step"] > saved["progress"]["env_step"]
    assert replay["num_transitions"] == data["progress"]["env_step"], "one stored transition per agent step"
    assert torch.equal(replay["frames"][:saved_replay["count"]], saved_replay["frames"]), "the resumed run appends"

    cfg = config_from_dict(data["config"])
    seed, restart = cfg.training.seed, saved_replay["count"]
    for worker in range(2):
        env = make_env(cfg)
        for slot in range(replay["count"]):
            if replay["pos"][slot, worker] == 0:
                start_seed = {0: seed + worker, restart: seed + saved["progress"]["episode"] + worker}.get(slot)
                obs, _ = env.reset(seed=start_seed)
            else:
                obs, reward, terminated, _, _ = env.step(replay["actions"][slot, worker].numpy())
                assert replay["rewards"][slot, worker].item() == pytest.approx(reward, abs=1e-6)
                assert bool(replay["terminated"][slot, worker]) == terminated
            assert torch.equal(replay["frames"][slot, worker], torch.from_numpy(obs[-1])), f"worker {worker}, slot {slot}"
        env.close()


def test_replay_frames_stay_in_host_memory_without_a_gpu_and_asking_for_cuda_there_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert replay_frames_device("auto", torch.device("cpu"), 10**6) is None
    assert replay_frames_device("cpu", torch.device("cpu"), 10**6) is None
    with pytest.raises(UserError, match="replay.device is cuda but no CUDA device is available; use replay.device=auto or cpu"):
        replay_frames_device("cuda", torch.device("cpu"), 10**6)
