"""scripts/tmux_train.sh with the real tmux, on a private server: training runs in a named session
that logs to the run directory, a second call while it runs starts no duplicate, Ctrl-C in the
session and tmux kill-session save and log the exit status, and the same call after the session
ended starts a new one that resumes from the checkpoint."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from tests.conftest import ROOT, sets
from trainer.checkpoints import checkpoint

SCRIPT = str(ROOT / "scripts" / "tmux_train.sh")
CONFIG = "configs/default.yaml"
SESSION = "sac-tmux-train-test"
# how long to wait for a file or a session before failing; a guard against hangs, never a
# measurement
GUARD_S = 180


class PrivateTmux:
    """The script run as a user runs it, but without a terminal (so it must not attach), against its
    own tmux server (TMUX_TMPDIR, never a user's)."""

    def __init__(self, socket_dir, base_dir):
        self.base_dir = str(base_dir)  # every path the tests give the script lies under it
        self.env = {key: value for key, value in os.environ.items()
                    if key not in ("TMUX", "TMUX_PANE")}
        self.env.update(TMUX_TMPDIR=str(socket_dir), TMUX_SESSION=SESSION, PYTHON=sys.executable)
        self.env.setdefault("OMP_NUM_THREADS", "2")
        self.panes: list[str] = []  # the session ids (pane pids) of the sessions the script started

    def launch(self, *args: str) -> subprocess.CompletedProcess:
        result = subprocess.run([SCRIPT, CONFIG, *args], cwd=ROOT, env=self.env,
                                stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=GUARD_S)
        if result.stdout.startswith("started"):
            self.panes.append(self.tmux("display-message", "-p", "-t", f"={SESSION}:",
                                        "#{pane_pid}").stdout.strip())
        return result

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", *args], env=self.env, capture_output=True, text=True)

    def running(self) -> bool:
        return self.tmux("has-session", "-t", f"={SESSION}").returncode == 0

    def close(self) -> None:
        """Kill the server, and a trainer left orphaned if the pane shell's signal forwarding broke
        (a test then fails): it keeps its pane's session id, and its arguments name this test's
        directory."""
        self.tmux("kill-server")
        for sid in filter(None, self.panes):
            found = subprocess.run(["pgrep", "-a", "-s", sid], capture_output=True,
                                   text=True).stdout.splitlines()
            for pid, cmdline in (line.split(" ", 1) for line in found):
                if self.base_dir in cmdline:
                    with contextlib.suppress(ProcessLookupError):  # it may end by itself meanwhile
                        os.kill(int(pid), signal.SIGKILL)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmux = PrivateTmux(tmp_path_factory.mktemp("tmux"), tmp_path_factory.getbasetemp())
    yield tmux
    tmux.close()


def tiny_run(out, episodes: int) -> list[str]:
    return sets(
        training__episodes=episodes, env__max_episode_steps=30, sac__batch_size=8,
        sac__buffer_size=1000,
        env__image_size=64, sac__hidden_dim=64, sac__feature_dim=16, training__seed_steps=10,
        training__eval_every_episodes=0, checkpoint__every_episodes=1, checkpoint__dir=out / "ckpt",
        logging__tensorboard_dir=out / "runs", logging__progress="false",
    )


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} not after {GUARD_S} s"
        time.sleep(0.2)


def wait_while_running(server: PrivateTmux, until=lambda: False) -> None:
    """Wait for the session to end, or for `until()` while the session still runs."""
    wait_until(lambda: not server.running() or until(), f"tmux session {SESSION} ended")


@pytest.fixture(scope="module")
def interrupted(server, tmp_path_factory):
    """A long run started in tmux, a second call once it has saved a checkpoint, then Ctrl-C in its
    pane."""
    out = tmp_path_factory.mktemp("run")
    args = tiny_run(out, episodes=1000)
    log = out / "runs" / "sac_video" / "train.log"
    first = server.launch(*args)
    assert first.returncode == 0, first.stderr
    wait_while_running(server, until=(out / "ckpt" / "sac_video_ep1.pt").exists)
    assert server.running(), (log.read_text() if log.exists()
                              else "the session ended before saving a checkpoint")
    second = server.launch(*args)
    sessions = server.tmux("list-sessions", "-F", "#{session_name}").stdout.split()
    server.tmux("send-keys", "-t", f"={SESSION}:", "C-c")
    wait_while_running(server)
    return SimpleNamespace(out=out, args=args, log=log, log_text=log.read_text(), first=first,
                           second=second,
                           sessions=sessions)


def test_first_call_starts_the_named_session_and_says_where_it_logs_and_how_to_attach(interrupted):
    assert f"started tmux session '{SESSION}' (log: {interrupted.log})" in interrupted.first.stdout
    assert f"tmux attach -t {SESSION}" in interrupted.first.stdout


def test_second_call_while_it_runs_says_so_in_one_line_and_starts_no_duplicate(interrupted):
    assert interrupted.second.returncode == 0, interrupted.second.stderr
    assert interrupted.second.stdout.strip().splitlines() == [
        f"tmux session '{SESSION}' is already running (log: {interrupted.log}); attach with: tmux "
        f"attach -t {SESSION}"
    ]
    assert interrupted.sessions == [SESSION]


def test_the_session_trains_writes_checkpoints_and_logs_the_trainer_output_and_exit_status(
    interrupted):
    payload, _ = checkpoint.load(interrupted.out / "ckpt" / "sac_video_latest.pt")
    assert payload["progress"]["episode"] >= 1
    lines = interrupted.log_text.splitlines()
    assert (lines[0].startswith("== ") and "train_sac.py --config" in lines[0]
            and "--resume auto" in lines[0])
    assert ("run 'sac_video' on " in interrupted.log_text
            and "(the whole config: " in interrupted.log_text)
    assert lines[-2].startswith("stopped by signal 2; saved ")
    assert lines[-1] == "exit status 130"


def test_the_same_call_after_the_session_ended_resumes_and_tmux_kill_session_saves(
    interrupted, server):
    ckpt = interrupted.out / "ckpt"
    stopped_at = checkpoint.load(ckpt / "sac_video_latest.pt")[0]["progress"]["episode"]
    next_checkpoint = ckpt / f"sac_video_ep{stopped_at + 1}.pt"
    assert not next_checkpoint.exists()
    again = server.launch(*interrupted.args)
    assert again.returncode == 0 and f"started tmux session '{SESSION}'" in again.stdout, (
        again.stderr)
    wait_while_running(server, until=next_checkpoint.exists)
    assert server.tmux("kill-session", "-t", f"={SESSION}").returncode == 0
    wait_until(lambda: interrupted.log.read_text().endswith("exit status 143\n"),
               "the trainer's exit logged")
    log = interrupted.log.read_text()
    assert log.startswith(interrupted.log_text) and log.count("\n== ") == 1
    assert f"resumed from {ckpt / 'sac_video_latest.pt'}: episode {stopped_at}," in log
    assert "stopped by signal 15; saved " in log
    assert checkpoint.load(ckpt / "sac_video_latest.pt")[0]["progress"]["episode"] > stopped_at


@pytest.mark.parametrize("override",
                         [["--set", "sac.nope=1"], ["--set=sac.nope=1"], ["sac.nope=1"]])
def test_a_config_error_is_one_line_and_starts_no_session(server, tmp_path, override):
    """However the override is written (train_sac.py takes all three), the script resolves the
    config with it."""
    result = server.launch(*tiny_run(tmp_path, episodes=1), *override)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "unknown config key 'sac.nope'" in result.stderr
    assert not server.running()


@pytest.mark.parametrize("args, expected", [
    ([], "error: the first argument must be a config file; usage: scripts/tmux_train.sh CONFIG"),
    (["configs/nope.yaml"],
     "error: config file not found: configs/nope.yaml; pass an existing file"),
])
def test_bad_arguments_are_a_one_line_error_with_the_usage(args, expected):
    result = subprocess.run([SCRIPT, *args], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(expected)
