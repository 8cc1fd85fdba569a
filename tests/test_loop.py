"""The training loop's promises, through the real command line: a run killed and resumed ends
bit-identical to one that never stopped, preemption at any moment leaves a loadable `_latest` that
the next start continues, and parallel env workers store exactly the transitions of sequential envs,
and stop cleanly when a signal reaches their whole process group (a killed worker is one line).
Evaluation reports the deterministic policy's mean return, and the success rate of tasks that put
`success` in info (judged on each episode's last step)."""

import csv
import dataclasses
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest.mock import ANY

import gymnasium
import numpy as np
import pytest
import torch
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from envs.dishwashing.scripted import scripted_action
from envs.make import make_env
from errors import UserError
from tests.conftest import DEFAULT_CONFIG as CONFIG
from tests.conftest import ROOT, TINY, popen_cli, run_cli, sets, wait_for
from trainer.checkpoints import checkpoint
from trainer.config.load import EVAL_SEED_OFFSET, SEED_LIMIT, config_from_dict, load_config
from trainer.process.device import native_bfloat16
from trainer.run import loop
from trainer.run.curves import read_rows
from trainer.run.loop import Trainer


def run_args(tmp_path, episodes: int) -> list[str]:
    return sets(
        training__episodes=episodes, env__max_episode_steps=30, sac__batch_size=8,
        sac__buffer_size=1000,
        checkpoint__dir=tmp_path / "ckpt", checkpoint__every_episodes=1,
        checkpoint__keep_replays=10,
        logging__tensorboard_dir=tmp_path / "runs", logging__progress="false",
        training__seed_steps=15,
        training__eval_every_episodes=2, training__eval_episodes=1,
    ) + TINY


def test_killed_and_resumed_run_ends_with_the_same_parameters_as_an_uninterrupted_one(tmp_path):
    straight = run_cli("--config", CONFIG, *run_args(tmp_path / "straight", 4))
    assert straight.returncode == 0, straight.stderr

    interrupted = tmp_path / "interrupted"
    proc = popen_cli("--config", CONFIG, *run_args(interrupted, 4))
    wait_for(interrupted / "ckpt" / "sac_video_ep2.pt", proc)
    proc.kill()
    proc.communicate()
    resumed = run_cli(
        "--config", CONFIG, *run_args(interrupted, 4), "--resume",
        str(interrupted / "ckpt" / "sac_video_ep2.pt")
    )
    assert resumed.returncode == 0, resumed.stderr

    a, replay_a = checkpoint.load(tmp_path / "straight" / "ckpt" / "sac_video_latest.pt")
    b, replay_b = checkpoint.load(interrupted / "ckpt" / "sac_video_latest.pt")
    progress = {"episode": 4, "env_step": 120, "evaluation_due": False, "next_seed": 0,
                "best_return": ANY}
    assert a["progress"] == b["progress"] == progress, "the best evaluation so far resumes too"
    assert a["agent"]["updates"] == b["agent"]["updates"] > 50
    for net in ("actor", "critic", "critic_target"):
        for name, tensor in a["agent"][net].items():
            assert torch.equal(tensor, b["agent"][net][name]), f"{net}.{name} differs after resume"
    assert torch.equal(a["agent"]["log_alpha"], b["agent"]["log_alpha"])
    assert torch.equal(replay_a["frames"], replay_b["frames"])
    # every episode once, as the run that never stopped logged it; wall_s is the one column that may
    # differ
    logged = []
    for run in (tmp_path / "straight", interrupted):
        with open(run / "runs" / "sac_video" / "episodes.csv", newline="") as f:
            logged.append([row[:-1] for row in csv.reader(f)])
    assert logged[0] == logged[1] and [row[2] for row in logged[0][1:]] == ["1", "2", "3", "4"]


def final_state(latest: Path) -> dict:
    """The progress, update count and weights of a run's `_latest`."""
    data, _ = checkpoint.load(latest)
    nets = {net: data["agent"][net] for net in ("actor", "critic", "critic_target")}
    return {"progress": data["progress"], "updates": data["agent"]["updates"], "nets": nets,
            "log_alpha": data["agent"]["log_alpha"]}


def assert_same_state(a: dict, b: dict) -> None:
    assert a["progress"] == b["progress"] and a["updates"] == b["updates"] > 0
    for net, tensors in a["nets"].items():
        for name, tensor in tensors.items():
            assert torch.equal(tensor, b["nets"][net][name]), f"{net}.{name} differs"
    assert torch.equal(a["log_alpha"], b["log_alpha"])


def test_a_run_killed_after_a_clock_save_resumes_it_and_ends_as_one_that_never_stopped(tmp_path):
    """checkpoint.every_minutes saves `_latest` at the first episode end past it (here every
    episode end), with no episode checkpoint due: a SIGKILL after it costs only the work since,
    and --resume auto continues from it exactly."""
    args = ["--config", CONFIG, *run_args(tmp_path, 6), *sets(checkpoint__every_episodes=1000)]
    straight = run_cli(*args, *sets(checkpoint__every_minutes=0,
                                    checkpoint__dir=tmp_path / "straight"))
    assert straight.returncode == 0, straight.stderr
    latest = tmp_path / "ckpt" / "sac_video_latest.pt"
    proc = popen_cli(*args, *sets(checkpoint__every_minutes=0.001))
    wait_for(latest, proc)
    proc.kill()
    proc.communicate()
    assert not list((tmp_path / "ckpt").glob("*_ep*.pt")), "no episode checkpoint was due"
    saved = checkpoint.load(latest)[0]["progress"]["episode"]
    assert 1 <= saved < 6
    resumed = run_cli(*args, *sets(checkpoint__every_minutes=0.001), "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {latest}: episode {saved}, " in resumed.stdout
    never_stopped = final_state(tmp_path / "straight" / "sac_video_latest.pt")
    assert_same_state(final_state(latest), never_stopped)


def test_clock_saves_change_nothing_a_run_computes(tmp_path):
    """A run that saves at every episode end by the clock ends with the weights, evaluations and
    episode returns of one that never saves by it."""
    settings = dict(seed_steps=10, episodes=6, eval_every_episodes=2, eval_episodes=2)
    ends = []
    for minutes in (0, 1e-9):  # due at every episode end, new best evaluations' ends included
        run = trainer(tmp_path / str(minutes), "inverted_pendulum_state.yaml", **settings)
        run.cfg.checkpoint.every_minutes, run.cfg.checkpoint.every_episodes = minutes, 1000
        saves = []

        def counted(final_of_episode, *, run=run, save=run.save, saves=saves):
            saves.append((run.progress.episode, run.best_due))
            return save(final_of_episode)

        run.save = counted
        assert run.train() == 0
        folder = tmp_path / str(minutes)
        ends.append((final_state(folder / "ckpt" / f"{run.cfg.run_name}_latest.pt"),
                     curves(folder / "runs" / run.cfg.run_name), saves))
    (off, off_curves, off_saves), (clock, clock_curves, clock_saves) = ends
    assert (2, True) in off_saves, "the first evaluation is a new best, saved at its episode end"
    assert all(best or episode == 6 for episode, best in off_saves) and off_saves[-1][0] == 6, (
        "new bests and the end's save only")
    assert [episode for episode, _ in clock_saves] == [1, 2, 3, 4, 5, 6], (
        "one at every episode end, never two")
    assert_same_state(off, clock)
    assert off_curves == clock_curves


def test_signals_at_random_moments_always_leave_a_loadable_latest(tmp_path):
    """Preempt the same run four times at random moments, each time restarting it with --resume auto
    as a spot instance would be: SIGTERM and SIGHUP save and exit 128+signal; SIGKILL allows no
    clean-up at all. (SIGINT: tests/test_tmux_train.py.) training.auto_shutdown is for completed
    runs and must never fire here."""
    rng = random.Random(0)
    finished = tmp_path / "finished"
    # a checkpoint every 10 steps
    args = run_args(tmp_path, 1000) + sets(env__max_episode_steps=10,
                                           training__eval_every_episodes=0,
                                           training__auto_shutdown=f"touch {finished}")
    latest = tmp_path / "ckpt" / "sac_video_latest.pt"
    steps = 0
    for trial, sig in enumerate([signal.SIGTERM, signal.SIGKILL, signal.SIGHUP, signal.SIGKILL]):
        before = latest.stat().st_mtime_ns if latest.exists() else 0
        proc = popen_cli("--config", CONFIG, *args, "--resume", "auto")
        deadline = time.time() + 240
        # this trial has saved at least once
        while not latest.exists() or latest.stat().st_mtime_ns == before:
            assert proc.poll() is None and time.time() < deadline, proc.communicate()
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 1.5))
        proc.send_signal(sig)
        proc.communicate(timeout=120)
        assert proc.returncode == (-sig if sig == signal.SIGKILL else 128 + sig), f"trial {trial}"
        data, _ = checkpoint.load(latest)
        assert data["progress"]["env_step"] > steps, "every trial adds work and keeps it"
        steps = data["progress"]["env_step"]
    assert not finished.exists()


@pytest.mark.parametrize("overlap", ["false", "true"])  # a worker acted for alone, or all at once
def test_parallel_envs_store_the_transitions_of_sequential_envs_and_resume_loses_or_repeats_none(
    tmp_path, overlap):
    """Two workers against two plain envs stepped one after the other with the same seeds and the
    replay's own actions: every stored frame, reward and flag agrees. The first run stops at its
    first episode, while the other worker is mid-episode; the resumed run reseeds the workers from
    the first seeds the first start did not give out (training.seed + 2 + worker: completed episodes
    + worker would hand worker 0 worker 1's seed) and appends: one transition per counted agent
    step, none lost or doubled."""
    args = run_args(tmp_path, 1) + sets(env__num_envs=2, env__max_episode_steps=7,
                                        env__image_size=32,
                                        training__seed_steps=10**6, training__overlap=overlap,
                                        training__eval_every_episodes=100,
                                        logging__tensorboard="false")
    first = run_cli("--config", CONFIG, *args)
    assert first.returncode == 0, first.stderr
    latest = tmp_path / "ckpt" / "sac_video_latest.pt"
    saved, saved_replay = checkpoint.load(latest)
    assert saved["progress"]["episode"] == 1 and saved["progress"]["next_seed"] == 2
    resumed = run_cli("--config", CONFIG, *args, "--set", "training.episodes=5", "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    data, replay = checkpoint.load(latest)
    assert (data["progress"]["episode"] == 5
            and data["progress"]["env_step"] > saved["progress"]["env_step"])
    assert replay["num_transitions"] == data["progress"]["env_step"], (
        "one stored transition per agent step")
    assert torch.equal(replay["frames"][:saved_replay["count"]],
                       saved_replay["frames"]), "the resumed run appends"

    cfg = config_from_dict(data["config"])
    seed, restart = cfg.training.seed, saved_replay["count"]
    for worker in range(2):
        env = make_env(cfg.env, cfg.pixels)
        for slot in range(replay["count"]):
            if replay["pos"][slot, worker] == 0:
                start_seed = {0: seed + worker, restart: seed + 2 + worker}.get(slot)
                obs, _ = env.reset(seed=start_seed)
            else:
                obs, reward, terminated, _, _ = env.step(replay["actions"][slot, worker].numpy())
                assert replay["rewards"][slot, worker].item() == pytest.approx(reward, abs=1e-6)
                assert bool(replay["terminated"][slot, worker]) == terminated
            assert torch.equal(replay["frames"][slot, worker], torch.from_numpy(obs[-1])), (
                f"worker {worker}, slot {slot}"
            )
        env.close()


def trainer(tmp_path, config: str, *, updates_per_step: float = 1.0, **training) -> Trainer:
    overrides = ["sac.hidden_dim=32", "sac.batch_size=8", "sac.buffer_size=1000",
                 "logging.eval_video=false",
                 f"logging.tensorboard_dir={tmp_path / 'runs'}", "logging.progress=false",
                 f"checkpoint.dir={tmp_path / 'ckpt'}", f"sac.updates_per_step={updates_per_step}",
                 *(f"training.{k}={v}" for k, v in training.items())]
    return Trainer(load_config(ROOT / "configs" / config, overrides))


def test_run_advances_a_trainer_by_the_agent_steps_asked_across_episodes_and_saves_on_schedule(
        tmp_path):
    run = trainer(tmp_path, "inverted_pendulum_state.yaml", seed_steps=10, eval_every_episodes=0)
    run.run(25)
    assert run.progress.env_step == 25 and run.progress.episode >= 1, (
        "the pendulum falls within a few random steps")
    assert run.agent.updates > 0 and len(run.replay) == 25
    run.run(10)
    assert run.progress.env_step == 35
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == [".inverted_pendulum_state.lock"], (
        "no checkpoint falls due in 35 steps (the folder was only probed, and holds the run's "
        "lock)")
    run.close()


def test_the_eta_counts_from_the_first_update_not_from_the_faster_seed_steps(tmp_path, monkeypatch):
    """tqdm's ETA extrapolated the seed episodes (no updates, many times faster): 20 minutes, then
    26-40 hours."""
    run = trainer(tmp_path, "inverted_pendulum_state.yaml", seed_steps=20, eval_every_episodes=0,
                  episodes=50)
    run.run(20)
    assert run.seeding() is False and run.eta() is None, "no update yet: no speed to go by"
    clock = iter(range(1000, 10**6, 2))  # 2 s per reading from here: what the updates cost
    monkeypatch.setattr(loop.time, "perf_counter", lambda: next(clock))
    run.run(10)
    since, step = run.learning_since
    progress = run.progress
    per_step = (loop.time.perf_counter() + 2 - since) / (progress.env_step - step)
    left = (50 - progress.episode) * progress.env_step / progress.episode
    assert run.eta() == pytest.approx(per_step * left)
    run.close()


def test_without_evaluation_no_eval_env_is_built_and_a_due_one_waits_for_evaluation_back_on(
    tmp_path):
    """training.eval_every_episodes 0 builds no evaluation env (a MuJoCo Warp pixel run's would hold
    a renderer of eval_episodes worlds all run). An evaluation a stop left due is kept due across a
    resume without evaluation, and runs first when one resumes with it back on."""
    settings = dict(seed_steps=10, episodes=4, eval_every_episodes=2, eval_episodes=2)
    run = trainer(tmp_path, "inverted_pendulum_state.yaml", **settings)
    run.eval_env.env = SignalAtReset(run.eval_env.env, at=1)  # the first evaluation, at episode 2
    assert run.train() == 128 + signal.SIGTERM
    latest = tmp_path / "ckpt" / "inverted_pendulum_state_latest.pt"
    off = dataclasses.replace(run.cfg,
                              training=dataclasses.replace(run.cfg.training, eval_every_episodes=0))
    quiet = Trainer(off, resume="auto")
    assert quiet.eval_env is None and quiet.eval_camera is None
    with pytest.raises(UserError, match="no evaluation env"):
        quiet.evaluate()
    assert quiet.train() == 0
    assert checkpoint.load(latest)[0]["progress"]["evaluation_due"] is True
    assert not (tmp_path / "runs" / run.cfg.run_name / "eval.csv").exists()
    longer = dataclasses.replace(run.cfg,
                                 training=dataclasses.replace(run.cfg.training, episodes=6))
    assert Trainer(longer, resume="auto").train() == 0
    assert [episode for _, episode, _ in curves(tmp_path / "runs" / run.cfg.run_name)[0]] == [4, 6]


def test_updates_begin_once_the_replay_holds_a_batch(tmp_path):
    """learn() waits for sac.batch_size stored transitions and no more: a pixel run with stacks of 3
    frames and a batch of 2 updates from its second agent step (it once waited for env.frame_stack +
    2 = 5 transitions)."""
    cfg = load_config(ROOT / "configs" / "inverted_pendulum_video.yaml", [
        "profile=cpu", "sac.hidden_dim=32", "sac.batch_size=2", "sac.buffer_size=100",
        "env.frame_stack=3",
        "training.seed_steps=0", "training.eval_every_episodes=0", "logging.progress=false",
        f"logging.tensorboard_dir={tmp_path / 'runs'}", f"checkpoint.dir={tmp_path / 'ckpt'}"])
    run = Trainer(cfg)
    run.run(1)
    assert len(run.replay) == 1 and run.agent.updates == 0
    run.run(1)
    assert len(run.replay) == 2 and run.agent.updates == 1
    run.close()


def test_evaluation_starts_stay_clear_of_training_starts_and_within_dm_control_s_seed_bound(
    tmp_path):
    """Evaluation episode i starts from training.seed + EVAL_SEED_OFFSET + i: training starts
    (training.seed + episodes + env) reach the first only after 2**30 episodes, and at the largest
    training.seed the config takes, dm_control's RandomState (seeds below 2**32) accepts every eval
    seed."""
    assert EVAL_SEED_OFFSET >= 2**30
    run = trainer(tmp_path, "dmc/cartpole_swingup_state.yaml", seed=SEED_LIMIT - 1,
                  eval_episodes=10)
    mean_return, success_rate, _ = run.evaluate()
    run.close()
    assert 0 <= mean_return <= 1000 and success_rate is None


def test_training_wall_time_carries_over_a_resume_and_reaches_eval_csv(tmp_path):
    run = trainer(tmp_path, "inverted_pendulum_state.yaml", seed_steps=10, eval_every_episodes=1,
                  eval_episodes=1)
    run.run(30)
    path = run.save(final_of_episode=False)
    run.close()
    saved = checkpoint.load(path)[0]["wall_s"]
    walls = [row["wall_s"] for row in read_rows(tmp_path / "runs" / run.cfg.run_name / "eval.csv")]
    assert walls and walls == sorted(walls) and 0 < walls[-1] <= saved
    before = time.perf_counter()
    resumed = Trainer(run.cfg, resume=str(path))
    assert saved <= resumed.wall_seconds() <= saved + time.perf_counter() - before, (
        "stopped time does not count")
    resumed.close()


@pytest.mark.parametrize("ratio", [0.5, 3.0, 0.1])
def test_updates_per_step_is_a_ratio_of_updates_to_agent_steps_once_learning_begins(
    tmp_path, ratio):
    """Learning begins at the step that reaches the seed steps (10), which counts: 31 learning steps
    by step 40."""
    run = trainer(tmp_path, "inverted_pendulum_state.yaml", updates_per_step=ratio, seed_steps=10,
                  eval_every_episodes=0)
    run.run(40)
    assert run.progress.env_step == 40 and run.agent.updates == int(ratio * 31)
    run.close()


def test_success_rate_is_the_share_of_eval_episodes_that_end_in_success(tmp_path):
    run = trainer(tmp_path, "dishwashing_feasible.yaml", eval_episodes=3)
    run.agent.act = lambda obs, sample: scripted_action(obs[0])[None]  # act takes a batch
    mean_return, success_rate, _ = run.evaluate()
    assert success_rate == 1.0 and -20 < mean_return < 0

    # carries the plate away from the rack
    run.agent.act = lambda obs, sample: np.array([[-1, 0, 0, 1]], np.float32)
    assert run.evaluate()[1] == 0.0


def test_evaluation_spread_over_worker_processes_gives_the_in_process_episodes(tmp_path):
    """training.eval_envs > 1 runs the same episodes (episode i from the same seed, each action from
    a batch of one frame stack) in worker processes: the same returns and success rate, also on
    held-out scenes; the GIF shows the frames env 0 observes, at logging.video_size as the eval
    camera films."""
    def scripted(obs, sample):
        return np.stack([scripted_action(state) for state in obs])

    results = []
    for envs in (1, 2):
        run = trainer(tmp_path / f"state{envs}", "dishwashing_feasible.yaml", eval_episodes=3,
                      eval_envs=envs)
        run.agent.act = scripted
        results.append(run.evaluate()[:2])
        run.close()
    assert results[0] == results[1] and results[0][1] == 1.0

    pixels, clips = [], []
    for envs in (1, 3):
        cfg = load_config(ROOT / "configs" / "dishwashing_video.yaml", [
            "profile=cpu", "demos.path=null", "env.image_size=64", "env.max_episode_steps=6",
            "sac.hidden_dim=32",
            "sac.feature_dim=16", "env.randomize.heldout=true", f"training.eval_envs={envs}",
            "training.eval_episodes=4", f"logging.tensorboard_dir={tmp_path / 'runs'}",
            "logging.progress=false",
            f"checkpoint.dir={tmp_path / f'ckpt{envs}'}"])
        run = Trainer(cfg)
        mean_return, success, clip = run.evaluate()
        pixels.append((mean_return, success, run.evaluate(run.heldout_env)[:2]))
        clips.append(clip)
        run.close()
    assert pixels[0] == pixels[1], "bit for bit: the same frames and actions"
    assert abs(pixels[0][0] - pixels[0][2][0]) > 1e-5, (
        "held-out scenes: other frames, other actions, other returns")
    first = make_env(cfg.env, pixels=True).reset(seed=cfg.training.seed + EVAL_SEED_OFFSET)[0]
    seen = (Image.fromarray(
        np.ascontiguousarray(first[-1].transpose(1, 2, 0))).resize((128, 128), Image.NEAREST))
    assert len(clips[1]) == 6 and np.array_equal(clips[1][0], np.asarray(seen))
    assert clips[0][0].shape == (128, 128, 3), (
        "in this process the eval camera films at logging.video_size")


def test_tasks_without_success_report_no_success_rate(tmp_path):
    run = trainer(tmp_path, "inverted_pendulum_state.yaml", eval_episodes=1)
    mean_return, success_rate, _ = run.evaluate()
    assert success_rate is None and mean_return > 0


def test_autocast_where_bfloat16_is_emulated_warns_with_the_fix(tmp_path, monkeypatch, capsys):
    warning = (
        "has no native bfloat16, so every update is emulated and several times slower; set "
        "training.autocast=false here"
    )
    trainer(tmp_path, "inverted_pendulum_state.yaml", autocast="true")
    assert (warning in capsys.readouterr().err) != native_bfloat16(torch.device("cpu")), (
        "this machine's own answer")
    monkeypatch.setattr(loop, "native_bfloat16", lambda device: False)
    trainer(tmp_path, "inverted_pendulum_state.yaml", autocast="true")
    assert warning in capsys.readouterr().err
    trainer(tmp_path, "inverted_pendulum_state.yaml", autocast="false")
    assert "autocast" not in capsys.readouterr().err


def test_compile_without_a_cpu_compiler_warns_with_the_fix_and_builds_the_agent_uncompiled(
    tmp_path, monkeypatch, capsys
):
    warning = "training.compile is on but no C++ compiler was found"
    monkeypatch.setenv("CXX", "no-such-compiler")
    run = trainer(tmp_path, "inverted_pendulum_state.yaml", compile="true")
    assert warning in capsys.readouterr().err and run.agent.critic._compiled_call_impl is None
    run.close()  # the run's lock: one trainer per run, in this process too
    monkeypatch.setattr(loop, "can_compile", lambda device: True)
    run = trainer(tmp_path, "inverted_pendulum_state.yaml", compile="true")
    assert (warning not in capsys.readouterr().err
            and run.agent.critic._compiled_call_impl is not None)


def start_in_own_group(*args: str) -> subprocess.Popen:
    """The command line as tmux or a scheduler runs it: the leader of its own process group."""
    return subprocess.Popen([sys.executable, str(ROOT / "train_sac.py"), *args], cwd=ROOT,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def workers_args(tmp_path) -> list[str]:
    return run_args(tmp_path, 1000) + sets(env__num_envs=2, env__max_episode_steps=10,
                                           training__eval_every_episodes=0)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_process_group_with_two_workers_saves_and_exits_128_plus_signal(
    tmp_path, sig):
    """Ctrl-C in tmux and `kill -TERM -<pgid>` reach the env workers too; they used to die of it,
    and the trainer, closing them after its save, ended in BrokenPipeError/EOFError and exit status
    1."""
    latest = tmp_path / "ckpt" / "sac_video_latest.pt"
    proc = start_in_own_group("--config", CONFIG, *workers_args(tmp_path))
    wait_for(latest, proc)
    time.sleep(0.5)
    os.killpg(proc.pid, sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert err == "", "no traceback, no warning"
    assert f"stopped by signal {sig.value}; saved {latest}" in out
    assert checkpoint.load(latest)[0]["progress"]["env_step"] > 0


def processes_started_with(leader: int) -> list[str]:
    """The command lines of the live processes that `start_in_own_group` started as `leader` (the
    trainer and its workers)."""
    ps = subprocess.run(["ps", "-ww", "-s", str(leader), "-o", "args="], capture_output=True,
                        text=True)
    # ended, not yet reaped; or in its last moment of exit, memory and command line gone ([python])
    return [line for line in ps.stdout.splitlines()
            if not line.endswith("<defunct>") and not (line.startswith("[") and line.endswith("]"))]


@pytest.mark.parametrize("delay", [0.0, 1.0, 2.5])
def test_sigterm_to_the_trainer_alone_while_its_workers_start_is_one_line_and_leaves_no_process(
    tmp_path, delay):
    """`kill -TERM <trainer pid>` (not the group) at moments from the first worker's start to
    training: a stop during start-up used to leave the workers behind, which printed BrokenPipeError
    tracebacks and leaked semaphores once the trainer had gone."""
    proc = start_in_own_group("--config", CONFIG, *workers_args(tmp_path))
    deadline = time.time() + 240
    while not any("spawn_main" in args for args in processes_started_with(proc.pid)):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.02)
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and "leaked" not in err and err.count("\n") <= 1, err
    assert ("stopped by signal 15 while starting, before training began: nothing was saved; run "
            "the same command again" in err) or "stopped by signal 15; saved " in out, (out, err)
    time.sleep(1)  # a worker left behind would outlive the trainer
    assert processes_started_with(proc.pid) == [], "every worker ended with the trainer"


def test_a_stop_request_cuts_a_long_evaluation_short(tmp_path):
    """SIGTERM inside a long evaluation (the update loop listens the same way): the run saves and
    exits within seconds, as a spot reclaim (30-120 s of notice) needs; it used to finish the loop
    first, or need SIGKILL."""
    latest = tmp_path / "ckpt" / "sac_video_latest.pt"
    args = run_args(tmp_path, 1000) + sets(checkpoint__every_steps=2, env__max_episode_steps=4,
                                           training__eval_every_episodes=1,
                                           training__eval_episodes=10_000)
    proc = popen_cli("--config", CONFIG, *args)
    wait_for(latest, proc)
    time.sleep(2)  # well inside the long loop
    proc.send_signal(signal.SIGTERM)
    start = time.time()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert time.time() - start < 30, "the stop waited for the loop to finish"
    assert f"stopped by signal {signal.SIGTERM.value}; saved {latest}" in out
    checkpoint.load(latest)



def test_a_stop_during_an_evaluation_on_workers_ends_every_process_within_seconds(tmp_path):
    """SIGTERM while two eval workers run a long evaluation beside two train workers: the trainer
    saves and it and its four workers are gone within 5 s. The interpreter's last garbage
    collections, in the trainer and in each worker as they closed one after another, made it 11 s
    under load."""
    latest = tmp_path / "ckpt" / "sac_video_latest.pt"
    args = workers_args(tmp_path) + sets(checkpoint__every_steps=2, env__max_episode_steps=4,
                                         training__eval_envs=2, training__eval_every_episodes=1,
                                         training__eval_episodes=10_000)
    proc = start_in_own_group("--config", CONFIG, *args)
    wait_for(latest, proc)
    deadline = time.time() + 240
    while len(processes_started_with(proc.pid)) < 5:  # the trainer, 2 train and 2 eval workers
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.1)
    time.sleep(1)  # the evaluation under way
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=5)  # TimeoutExpired: the stop took longer
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert f"stopped by signal {signal.SIGTERM.value}; saved {latest}" in out
    assert processes_started_with(proc.pid) == [], "every worker ended with the trainer"
    checkpoint.load(latest)

class SignalAtReset(gymnasium.Wrapper):
    """An env that sends this process SIGTERM at its `at`-th reset: a spot reclaim at a chosen
    moment."""

    def __init__(self, env: gymnasium.Env, *, at: int):
        super().__init__(env)
        self.at, self.resets = at, 0

    def reset(self, **kwargs):
        self.resets += 1
        if self.resets == self.at:
            os.kill(os.getpid(), signal.SIGTERM)
        return self.env.reset(**kwargs)


def curves(run_dir: Path) -> tuple[list[tuple], dict[str, list[tuple]]]:
    """eval.csv's (step, episode, return) rows and TensorBoard's (step, value) events of the eval
    and episode returns of a run."""
    with open(run_dir / "eval.csv", newline="") as f:
        rows = [(int(row["env_step"]), int(row["episode"]), row["return"])
                for row in csv.DictReader(f)]
    events = EventAccumulator(str(run_dir))
    events.Reload()
    return rows, {tag: [(event.step, event.value) for event in events.Scalars(tag)]
                  for tag in ("eval/return", "train/episode_return")}


def test_a_stop_during_an_evaluation_leaves_it_due_and_the_resume_runs_it_first(tmp_path):
    """SIGTERM inside the second evaluation (episode 4): the checkpoint records that evaluation as
    due and the resume runs it before acting, so eval.csv and TensorBoard end with every scheduled
    evaluation, with the returns of a run that never stopped. (The episode used to be saved as done
    and its evaluation lost for good; and a resume hid from TensorBoard what was logged at the
    checkpoint's own step.)"""
    settings = dict(seed_steps=10, episodes=8, eval_every_episodes=2, eval_episodes=2)
    straight = trainer(tmp_path / "straight", "inverted_pendulum_state.yaml", **settings)
    assert straight.train() == 0

    run = trainer(tmp_path / "stopped", "inverted_pendulum_state.yaml", **settings)
    # the first episode of the second evaluation
    run.eval_env.env = SignalAtReset(run.eval_env.env, at=3)
    assert run.train() == 128 + signal.SIGTERM
    saved = (checkpoint.load(tmp_path / "stopped" / "ckpt"
                             / "inverted_pendulum_state_latest.pt")[0]["progress"])
    assert saved["episode"] == 4 and saved["evaluation_due"]
    resumed = Trainer(run.cfg, resume="auto")
    assert resumed.train() == 0

    stopped = curves(tmp_path / "stopped" / "runs" / run.cfg.run_name)
    assert [episode for _, episode, _ in stopped[0]] == [2, 4, 6, 8]
    assert stopped == curves(tmp_path / "straight" / "runs" / run.cfg.run_name)


def test_an_evaluation_stopped_at_the_last_episode_runs_once_on_resume_and_is_saved_as_done(
    tmp_path):
    """The stop cuts the run's last evaluation short: the resume runs it, the run is complete, and
    `_latest` records it done, so extending the run later (a resume may raise training.episodes)
    does not log it a second time."""
    run = trainer(tmp_path, "inverted_pendulum_state.yaml", seed_steps=10, episodes=4,
                  eval_every_episodes=2,
                  eval_episodes=2)
    # the second evaluation, after the last episode
    run.eval_env.env = SignalAtReset(run.eval_env.env, at=3)
    assert run.train() == 128 + signal.SIGTERM
    assert Trainer(run.cfg, resume="auto").train() == 0
    latest = tmp_path / "ckpt" / "inverted_pendulum_state_latest.pt"
    assert checkpoint.load(latest)[0]["progress"]["evaluation_due"] is False

    longer = dataclasses.replace(run.cfg,
                                 training=dataclasses.replace(run.cfg.training, episodes=6))
    assert Trainer(longer, resume="auto").train() == 0
    episodes = [episode for _, episode, _ in curves(tmp_path / "runs" / run.cfg.run_name)[0]]
    assert episodes == [2, 4, 6]


def scripted(run: Trainer, returns: list[float]) -> Trainer:
    """`run`, its evaluations returning `returns` in turn (as mean returns, with no success rate and
    no frames)."""
    left = iter(returns)
    run.evaluate = lambda env=None: (next(left), None, [])
    return run


def test_best_follows_the_best_evaluation_outlives_keep_last_and_resumes_only_by_name(
    tmp_path, capsys):
    """Evaluations after episodes 1 to 5 return 1, 3, 2, 3, 0: `<run>_best.pt` is episode 2's
    checkpoint (the tie at 4 keeps the earlier), saved with a line each time it changes, and
    keep_last=1 leaves it. --resume auto takes `_latest`; --resume `_best.pt` continues episode 2
    (its sidecar pruned: an empty replay, as an `_ep<N>` file gets) with its best return, which the
    branch's evaluations must beat: 2.5 does not, 4 does."""
    run = scripted(trainer(tmp_path, "inverted_pendulum_state.yaml", seed_steps=10, episodes=5,
                           eval_every_episodes=1),
                   [1.0, 3.0, 2.0, 3.0, 0.0])
    run.cfg.checkpoint.every_episodes, run.cfg.checkpoint.keep_last = 1, 1
    assert run.train() == 0
    name, ckpt = run.cfg.run_name, tmp_path / "ckpt"
    best = ckpt / f"{name}_best.pt"
    out = capsys.readouterr().out
    assert re.findall(rf"{name}_best\.pt, {name}_latest\.pt \(episode (\d+), step \d+; the best "
                      r"evaluation so far, return (\S+)\)", out) == [("1", "1.0"), ("2", "3.0")]
    assert re.findall(r"^saved .*\(episode (\d+), step", out, re.M) == ["1", "2", "3", "4", "5"], (
        "one save per episode end, a new best's included")
    assert sorted(p.name for p in ckpt.glob("*.pt") if not p.name.endswith(".replay.pt")) == [
        f"{name}_best.pt", f"{name}_ep5.pt", f"{name}_latest.pt"]
    assert {key: checkpoint.load_weights(best)["progress"][key]
            for key in ("episode", "best_return")} == {
        "episode": 2, "best_return": 3.0}
    assert checkpoint.load_weights(ckpt / f"{name}_latest.pt")["progress"]["best_return"] == 3.0

    longer = dataclasses.replace(run.cfg,
                                 training=dataclasses.replace(run.cfg.training, episodes=7))
    auto = Trainer(longer, resume="auto")
    auto.close()
    assert auto.progress.episode == 5
    branch = scripted(Trainer(longer, resume=str(best)), [2.5, 4.0, 1.0, 1.0, 1.0])
    assert (branch.progress.episode, branch.progress.best_return) == (2, 3.0)
    assert ("was pruned (checkpoint.keep_replays); resuming with an empty replay "
            "buffer" in capsys.readouterr().err)
    [aside] = [p for p in ckpt.iterdir() if p.is_dir()]
    assert (f"{name}_ep5.pt" in os.listdir(aside)
            and f"{name}_best.pt" not in os.listdir(aside)), "the branch's own"
    assert branch.train() == 0
    assert checkpoint.load_weights(best)["progress"]["episode"] == 4


def test_a_killed_env_worker_is_one_line(tmp_path):
    latest = tmp_path / "ckpt" / "sac_video_latest.pt"
    proc = start_in_own_group("--config", CONFIG, *workers_args(tmp_path))
    wait_for(latest, proc)
    tasks = Path(f"/proc/{proc.pid}/task").glob("*/children")
    children = [int(pid) for path in tasks for pid in path.read_text().split()]
    [worker, *_] = [pid for pid in children
                    if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
                    and b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
    os.kill(worker, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and err.count("\n") == 1, err
    assert f"(pid {worker}) died (killed by signal 9" in err
    assert "continue with --resume auto, with fewer env.num_envs if memory ran out" in err
    assert checkpoint.load(latest)[0]["progress"]["env_step"] > 0
