"""A console that goes away under a run: a tmux session killed while the trainer runs in its
shell's foreground, a terminal that closes under a background job (a pty whose master closes, no
SIGHUP), a pipe whose reader exits. The run trains on and saves as it would with its console; a
stop signal saves and exits 128+signal, with no traceback. The hangups a closed terminal sends
after the first never stop a run before it has saved."""

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest.mock import ANY

import pytest

from tests.conftest import ROOT, fill, sets, tmpfs
from trainer.checkpoints import checkpoint
from trainer.process.signals import GracefulStop, Stopped, stop_at_once

CONFIG = str(ROOT / "configs" / "dmc" / "cartpole_swingup_state.yaml")
RUN = "cartpole_swingup_state"
GUARD_S = 180  # how long to wait for a file or an exit: a guard against hangs, never a measurement


def tiny_run(out: Path, episodes: int) -> list[str]:
    """An evaluation, and its console line, after every episode; `_latest` at the end or a stop."""
    return [sys.executable, str(ROOT / "train_sac.py"), "--config", CONFIG, *sets(
        profile="cpu", training__episodes=episodes, env__max_episode_steps=30, sac__batch_size=8,
        sac__buffer_size=1000, sac__hidden_dim=64, training__seed_steps=10,
        training__eval_every_episodes=1, training__eval_episodes=1,
        checkpoint__every_episodes=1000, checkpoint__dir=out / "ckpt",
        logging__tensorboard_dir=out / "runs", logging__tensorboard="false",
    )]


def evaluations(out: Path) -> list[int]:
    """The episodes after which eval.csv holds an evaluation."""
    path = out / "runs" / RUN / "eval.csv"
    lines = path.read_text().splitlines()[1:] if path.exists() else []
    return [int(line.split(",")[2]) for line in lines]


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} not after {GUARD_S} s"
        time.sleep(0.1)


def saved_progress(out: Path) -> dict:
    return checkpoint.load(out / "ckpt" / f"{RUN}_latest.pt")[0]["progress"]


def assert_saved_at_the_last_finished_episode(out: Path) -> None:
    """`_latest` holds every finished episode: the last one evaluated, or the one after it with
    its evaluation (cut short by the stop) still due."""
    progress, evaluated = saved_progress(out), evaluations(out)[-1]
    assert progress["episode"] == evaluated + progress["evaluation_due"], (progress, evaluated)


def kill_trainer(out: Path) -> None:
    """SIGKILL a trainer that a failed test left behind: the run's lock file names its pid."""
    lock = out / "ckpt" / f".{RUN}.lock"
    words = lock.read_text().split() if lock.exists() else []
    if "pid" in words:
        pid = words[words.index("pid") + 1]
        with contextlib.suppress(OSError):  # it ended meanwhile
            if str(out) in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(int(pid), signal.SIGKILL)


@pytest.fixture
def tmux(tmp_path):
    """A private tmux server (TMUX_TMPDIR, never a user's): `tmux(*args)` runs a command on it."""
    env = {key: value for key, value in os.environ.items() if key not in ("TMUX", "TMUX_PANE")}
    env.update(TMUX_TMPDIR=str(tmp_path / "tmux"), OMP_NUM_THREADS="1",
               HISTFILE=str(tmp_path / "history"))  # an interactive shell's, never the user's
    (tmp_path / "tmux").mkdir()

    def tmux(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", *args], env=env, capture_output=True, text=True, timeout=60)

    yield tmux
    tmux("kill-server")
    kill_trainer(tmp_path)


def test_tmux_kill_session_with_the_trainer_in_the_shells_foreground_saves_and_exits_129(
        tmux, tmp_path):
    """The pane's interactive shell runs the trainer as its foreground job, then tmux
    kill-session closes the terminal: the shell passes a SIGHUP on to the job and exits, the
    kernel sends the job another, and every line the trainer writes fails with EIO. It used to
    save and then die at its next line (exit 1, a traceback; an evaluation's line before the save
    lost the save), or stop at the second SIGHUP before saving. The job's `sh` only records the
    exit status: it traps SIGHUP, so the trainer gets the signals as it would alone."""
    status = tmp_path / "status"
    job = tmp_path / "job.sh"
    run = shlex.join(tiny_run(tmp_path, episodes=1000))
    job.write_text(f"trap : HUP\n{run}\necho $? > {shlex.quote(str(status))}\n")
    started = tmux("new-session", "-d", "-s", "train", "-x", "150", "-y", "40", "-c", str(ROOT),
                   "bash --norc --noprofile -i")
    assert started.returncode == 0, started.stderr
    typed = tmux("send-keys", "-t", "=train:", f"sh {shlex.quote(str(job))}", "Enter")
    assert typed.returncode == 0, typed.stderr
    wait_until(lambda: len(evaluations(tmp_path)) >= 2, "two evaluations")
    assert not status.exists(), status.read_text()
    assert tmux("kill-session", "-t", "=train").returncode == 0
    wait_until(lambda: status.exists() and status.read_text().endswith("\n"), "the trainer's exit")
    assert status.read_text() == "129\n"
    assert saved_progress(tmp_path)["episode"] >= 2
    assert_saved_at_the_last_finished_episode(tmp_path)


def test_a_terminal_that_closes_under_a_background_job_loses_only_its_lines(tmp_path):
    """A background job's terminal closes (its shell exited, then the ssh session dropped): no
    SIGHUP, and every write to it fails with EIO, the progress bar's too. The run used to die at
    its next evaluation's line; it trains to its episode budget and saves."""
    master, terminal = os.openpty()
    trainer = subprocess.Popen(tiny_run(tmp_path, episodes=4), cwd=ROOT, stdin=subprocess.DEVNULL,
                               stdout=terminal, stderr=terminal, start_new_session=True)
    os.close(terminal)
    try:
        shown = b""
        while b"eval after episode 1 " not in shown:
            shown += os.read(master, 4096)  # an EIO here: the trainer ended, its terminal with it
    finally:
        os.close(master)
    try:
        assert trainer.wait(timeout=GUARD_S) == 0
    finally:
        trainer.kill()
    assert evaluations(tmp_path) == [1, 2, 3, 4]
    assert saved_progress(tmp_path) == {"episode": 4, "env_step": 120, "evaluation_due": False,
                                        "next_seed": 0, "best_return": ANY}


def test_a_pipe_whose_reader_exited_then_ctrl_c_saves_and_exits_130_without_a_traceback(
        tmp_path):
    """`train_sac.py ... | tee log` and Ctrl-C, which reaches tee too: the trainer's lines then
    meet a closed pipe (EPIPE). It used to die at its next line with a BrokenPipeError traceback
    (and Python's exit added "Exception ignored"); it trains on, and the SIGINT saves and exits
    130 with nothing on stderr (a file here) but what it said before."""
    command = tiny_run(tmp_path, episodes=1000) + ["--set", "logging.progress=false"]
    with open(tmp_path / "stderr.log", "w") as log:
        trainer = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    try:
        for line in trainer.stdout:
            if line.startswith(b"eval after episode 1 "):
                break
        trainer.stdout.close()  # the reader exits
        wait_until(lambda: len(evaluations(tmp_path)) >= 3 or trainer.poll() is not None,
                   "two more evaluations")
        assert trainer.poll() is None, (tmp_path / "stderr.log").read_text()
        trainer.send_signal(signal.SIGINT)
        assert trainer.wait(timeout=GUARD_S) == 130
    finally:
        trainer.kill()
    err = (tmp_path / "stderr.log").read_text()
    assert "Traceback" not in err and "Error" not in err and "Exception ignored" not in err, err
    assert saved_progress(tmp_path)["episode"] >= 3
    assert_saved_at_the_last_finished_episode(tmp_path)


def test_a_redirect_onto_a_disk_that_fills_loses_only_its_lines(tmp_path):
    """`train_sac.py ... > train.log 2>&1` on a disk that fills mid-run (a real tmpfs): the
    run's flush of its next line raised ENOSPC; it trains to its budget, its checkpoints being on
    another disk."""
    with tmpfs(tmp_path / "disk", "1M") as disk, open(disk / "train.log", "w") as log:
        trainer = subprocess.Popen(tiny_run(tmp_path, episodes=4), cwd=ROOT,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   start_new_session=True)
        try:
            wait_until(lambda: evaluations(tmp_path) or trainer.poll() is not None,
                       "an evaluation")
            fill(disk)
            assert trainer.wait(timeout=GUARD_S) == 0, (disk / "train.log").read_text()
        finally:
            trainer.kill()
        assert "Traceback" not in (disk / "train.log").read_text()
    assert evaluations(tmp_path) == [1, 2, 3, 4]
    assert saved_progress(tmp_path)["episode"] == 4


def test_an_evaluation_whose_stdout_pipe_closed_still_writes_its_episodes(tmp_path):
    """The other long commands share the guard (trainer.process.cli): trainer.policy.evaluate with
    its stdout a pipe nobody reads any more used to end in a BrokenPipeError traceback at its first
    result line, before it wrote episodes.csv."""
    trained = subprocess.run(tiny_run(tmp_path, episodes=1), cwd=ROOT, capture_output=True,
                             text=True, timeout=GUARD_S)
    assert trained.returncode == 0, trained.stderr
    read_end, write_end = os.pipe()
    os.close(read_end)
    latest = tmp_path / "ckpt" / f"{RUN}_latest.pt"
    command = [sys.executable, "-m", "trainer.policy.evaluate", str(latest), "--episodes", "2",
               "--out",
               str(tmp_path / "eval")]
    result = subprocess.run(command, cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE, text=True,
                            timeout=GUARD_S)
    os.close(write_end)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert len((tmp_path / "eval" / "episodes.csv").read_text().splitlines()) == 3


@pytest.mark.parametrize("first", [signal.SIGHUP, signal.SIGTERM])
def test_the_hangups_after_a_stop_never_stop_at_once_and_a_second_sigterm_still_does(first):
    """Real signals to this process, taken as the trainer takes them (stop_at_once, then
    GracefulStop around the run): a closed terminal's second SIGHUP, or a logout's SIGHUP after
    its SIGTERM, used to stop the run before it saved."""
    stop_at_once()
    with GracefulStop() as stop:
        signal.raise_signal(first)
        signal.raise_signal(signal.SIGHUP)
        assert stop.signum == first
        with pytest.raises(Stopped):  # the impatient user's second one
            signal.raise_signal(signal.SIGTERM)
    signal.raise_signal(signal.SIGHUP)  # nor while the run shuts down


def test_a_hangup_ignored_from_the_start_stays_ignored():
    """`nohup train_sac.py ... &`: the run goes on after its terminal closes. The trainer took
    SIGHUP over whatever it inherited, so a run under nohup stopped when its ssh session dropped."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    stop_at_once()
    with GracefulStop() as stop:
        signal.raise_signal(signal.SIGHUP)
    assert not stop.requested and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
