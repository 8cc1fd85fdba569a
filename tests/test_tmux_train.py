"""scripts/tmux_train.sh with the real tmux, on a private server: training runs in a named session that logs to the run
directory, a second call while it runs starts no duplicate, Ctrl-C in the session saves and logs the exit status, and
a call after the session ended starts a new one that resumes from the checkpoint."""

import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT, sets
from trainer import checkpoint

SCRIPT = str(ROOT / "scripts" / "tmux_train.sh")
CONFIG = "configs/default.yaml"
SESSION = "sac-tmux-train-test"
GUARD_S = 180  # how long to wait for a file or a session before failing; a guard against hangs, never a measurement


@pytest.fixture(scope="module")
def tmux_env(tmp_path_factory):
    """The script's environment: its own tmux server (TMUX_TMPDIR, never a user's), killed at the end."""
    env = {key: value for key, value in os.environ.items() if key not in ("TMUX", "TMUX_PANE")}
    env.update(TMUX_TMPDIR=str(tmp_path_factory.mktemp("tmux")), TMUX_SESSION=SESSION, PYTHON=sys.executable)
    env.setdefault("OMP_NUM_THREADS", "2")
    yield env
    subprocess.run(["tmux", "kill-server"], env=env, capture_output=True)


def launch(env: dict, *args: str) -> subprocess.CompletedProcess:
    """The script as a user calls it, but without a terminal, so it must not attach."""
    return subprocess.run([SCRIPT, CONFIG, *args], cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=GUARD_S)


def tmux(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tmux", *args], env=env, capture_output=True, text=True)


def running(env: dict) -> bool:
    return tmux(env, "has-session", "-t", f"={SESSION}").returncode == 0


def tiny_run(out, episodes: int) -> list[str]:
    return sets(
        training__episodes=episodes, env__max_episode_steps=30, sac__batch_size=8, sac__buffer_size=1000,
        env__image_size=64, sac__hidden_dim=64, sac__feature_dim=16, training__seed_steps=10,
        training__eval_every_episodes=0, checkpoint__every_episodes=1, checkpoint__dir=out / "ckpt",
        logging__tensorboard_dir=out / "runs", logging__progress="false",
    )


def wait_while_running(env: dict, until=lambda: False) -> None:
    """Wait for the session to end, or for `until()` while the session still runs."""
    deadline = time.monotonic() + GUARD_S
    while running(env) and not until():
        assert time.monotonic() < deadline, f"tmux session {SESSION} still running after {GUARD_S} s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def interrupted(tmux_env, tmp_path_factory):
    """A long run started in tmux, a second call once it has saved a checkpoint, then Ctrl-C in its pane."""
    out = tmp_path_factory.mktemp("run")
    args = tiny_run(out, episodes=1000)
    log = out / "runs" / "sac_video" / "train.log"
    first = launch(tmux_env, *args)
    assert first.returncode == 0, first.stderr
    wait_while_running(tmux_env, until=(out / "ckpt" / "sac_video_ep1.pt").exists)
    assert running(tmux_env), log.read_text() if log.exists() else "the session ended before saving a checkpoint"
    second = launch(tmux_env, *args)
    sessions = tmux(tmux_env, "list-sessions", "-F", "#{session_name}").stdout.split()
    tmux(tmux_env, "send-keys", "-t", f"={SESSION}:", "C-c")
    wait_while_running(tmux_env)
    return SimpleNamespace(out=out, args=args, log=log, log_text=log.read_text(), first=first, second=second, sessions=sessions)


def test_first_call_starts_the_named_session_and_says_where_it_logs_and_how_to_attach(interrupted):
    assert f"started tmux session '{SESSION}' (log: {interrupted.log})" in interrupted.first.stdout
    assert f"tmux attach -t {SESSION}" in interrupted.first.stdout


def test_second_call_while_it_runs_says_so_in_one_line_and_starts_no_duplicate(interrupted):
    assert interrupted.second.returncode == 0, interrupted.second.stderr
    assert interrupted.second.stdout.strip().splitlines() == [
        f"tmux session '{SESSION}' is already running (log: {interrupted.log}); attach with: tmux attach -t {SESSION}"
    ]
    assert interrupted.sessions == [SESSION]


def test_the_session_trains_writes_checkpoints_and_logs_the_trainer_output_and_exit_status(interrupted):
    payload, _ = checkpoint.load(interrupted.out / "ckpt" / "sac_video_latest.pt")
    assert payload["progress"]["episode"] >= 1
    lines = interrupted.log_text.splitlines()
    assert lines[0].startswith("== ") and "train_sac.py --config" in lines[0] and "--resume auto" in lines[0]
    assert "run 'sac_video' on cpu" in interrupted.log_text and "resolved config:" in interrupted.log_text
    assert lines[-2].startswith("stopped by signal 2; saved ")
    assert lines[-1] == "exit status 130"


def test_a_call_after_the_session_ended_starts_a_new_one_that_resumes_and_appends_to_the_log(interrupted, tmux_env):
    episodes = checkpoint.load(interrupted.out / "ckpt" / "sac_video_latest.pt")[0]["progress"]["episode"] + 1
    again = launch(tmux_env, *interrupted.args, "--set", f"training.episodes={episodes}")
    assert again.returncode == 0 and f"started tmux session '{SESSION}'" in again.stdout, again.stderr
    wait_while_running(tmux_env)
    log = interrupted.log.read_text()
    assert log.startswith(interrupted.log_text) and log.count("\n== ") == 1
    assert "resumed from " in log and log.endswith("exit status 0\n")
    assert checkpoint.load(interrupted.out / "ckpt" / "sac_video_latest.pt")[0]["progress"]["episode"] == episodes


def test_a_config_error_is_one_line_and_starts_no_session(tmux_env, tmp_path):
    result = launch(tmux_env, *tiny_run(tmp_path, episodes=1), "--set", "sac.nope=1")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "unknown config key 'sac.nope'" in result.stderr
    assert not running(tmux_env)


@pytest.mark.parametrize("args, expected", [
    ([], "error: the first argument must be a config file; usage: scripts/tmux_train.sh CONFIG"),
    (["configs/nope.yaml"], "error: config file not found: configs/nope.yaml; pass an existing file"),
])
def test_bad_arguments_are_a_one_line_error_with_the_usage(args, expected):
    result = subprocess.run([SCRIPT, *args], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(expected)
