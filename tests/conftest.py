"""Shared helpers: run the real command line in a subprocess with `--set` overrides, tiny network
sizes for speed, and encoder config blocks. Rendering is configured here, as the command line does,
before any test module imports mujoco."""

import errno
import importlib.util
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from encoders.config import EncoderConfig
from envs.rendering import configure
from sac.replay import ReplayBuffer
from trainer.checkpoints.payload import Progress, build_payload
from trainer.config.load import AUTO_PROFILE_VARIABLE, Config, to_dict
from trainer.process.signals import STOP_SIGNALS


@pytest.fixture(autouse=True)
def stop_signals_as_found():
    """Every test gets the stop signals' handlers and mask as the process had them: a test that ran
    a command in this process (which takes them over) or a compile (which blocks them while it runs)
    leaves nothing to the next."""
    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


configure()
# every config's `profile: auto` is cpu here, in this process and the commands it starts: a test
# must not train another profile (compiled, in bfloat16) on a CPU that has bfloat16 units; tests of
# auto itself unset it
os.environ[AUTO_PROFILE_VARIABLE] = "cpu"
# a hangup stops a run as a terminal delivers it; a suite started under nohup would inherit SIGHUP
# ignored, and the trainer rightly keeps a nohup's choice (tests of nohup itself set SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_DFL)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = str(ROOT / "configs" / "default.yaml")


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train_sac.py"), *args], cwd=ROOT,
                          capture_output=True, text=True,
                          timeout=timeout)


def popen_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "train_sac.py"), *args], cwd=ROOT,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 240) -> None:
    """Until `path` exists; fails if `proc` ends first."""
    deadline = time.time() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def out_of_time(command: list[str], evals: Path) -> subprocess.CompletedProcess:
    """A runner's `command` (bench/learn.py, bench/dmc.py) stopped by SIGTERM once `evals` (a run's
    eval.csv) has a row, then run again with a limit shorter than any start: at the limit on an
    idle machine and a loaded one, with evaluations logged."""
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not (evals.exists() and len(evals.read_text().splitlines()) > 1):
        assert first.poll() is None, first.communicate()
        assert time.time() < deadline, f"{evals} never had a row"
        time.sleep(0.05)
    first.send_signal(signal.SIGTERM)
    first.communicate(timeout=120)
    assert first.returncode == 128 + signal.SIGTERM
    result = subprocess.run([*command, "--minutes", "0.05"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 75, result.stdout + result.stderr
    return result


def wait_for_lock(lock: Path, proc: subprocess.Popen, timeout: float = 240) -> None:
    """Until `proc` holds the lock file `lock` (trainer/process/lock.py: the holder writes its pid
    into it)."""
    deadline = time.time() + timeout
    while not (lock.exists() and f"pid {proc.pid} " in lock.read_text()):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, f"{lock} never named pid {proc.pid}"
        time.sleep(0.05)


def pause(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGSTOP `proc`, then wait until the kernel shows it stopped: the signal lands a moment later,
    and a file it writes until then would change under a test's snapshot."""
    proc.send_signal(signal.SIGSTOP)
    stat = Path(f"/proc/{proc.pid}/stat")
    deadline = time.time() + timeout
    while stat.read_text().rsplit(")", 1)[1].split()[0] != "T":
        assert time.time() < deadline, f"pid {proc.pid} never stopped"
        time.sleep(0.01)


def sets(**overrides) -> list[str]:
    """--set arguments from keyword pairs; '__' stands for '.' (checkpoint__dir ->
    checkpoint.dir)."""
    return [arg for key, value in overrides.items()
            for arg in ("--set", f"{key.replace('__', '.')}={value}")]


TINY = sets(env__image_size=64, sac__hidden_dim=64, sac__feature_dim=16,
            logging__log_every_updates=5)  # fast networks


def encoder_config(arch: str, **video) -> EncoderConfig:
    """An `encoder` config block for a video arch, with `encoder.video` keys overridden."""
    cfg = EncoderConfig(type="video")
    cfg.video.arch = arch
    for key, value in video.items():
        setattr(cfg.video, key, value)
    return cfg


def checkpoint_payload(step: int) -> dict:
    """A payload for checkpoint.save as the trainer builds it, at `step`."""
    return build_payload(config=to_dict(Config()), agent_state=agent_state(step),
                         progress=Progress(episode=step, env_step=step), trunk=None, demos=None,
                         learning_steps=step, wall_s=0.0, rng=np.random.default_rng(0))


class Unpickled:
    """Unpickled in full (torch.load without weights_only), it runs a command leaving `trace`."""

    def __init__(self, trace: Path):
        self.trace = trace

    def __reduce__(self):
        return os.system, (f"touch {self.trace}",)


def agent_state(step: int) -> dict:
    """Laid out as SAC.state_dict, with one weight tensor per network: `step` three times."""
    network, optimiser = {"w": torch.full((3,), float(step))}, {"state": {}, "param_groups": []}
    return {"critic": network, "critic_target": dict(network), "actor": dict(network),
            "log_alpha": torch.zeros(()),
            "critic_opt": optimiser, "actor_opt": dict(optimiser), "alpha_opt": dict(optimiser),
            "updates": step}


def replay_state(step: int) -> dict:
    """A replay of one env's `step` state frames 0, 1, ..., step - 1."""
    replay = ReplayBuffer(capacity=step + 8, frame_shape=(1,), frame_dtype=np.float32, action_dim=1,
                          frame_stack=None,
                          seed=0, discount=0.99)
    for i in range(step):
        replay.add_batch(np.full((1, 1), i, np.float32), np.zeros((1, 1)), np.zeros(1),
                         np.zeros(1, bool),
                         np.array([i == 0]))
    return replay.state_dict()


@contextmanager
def tmpfs(folder: Path, size: str):
    """A real tmpfs of `size` mounted at `folder` (made if missing) while inside. Mounting needs
    root, which CI runs as: without it the test fails here, loudly, rather than skipping what it
    exists to show."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.fail(
            f"cannot mount a tmpfs at {folder} ({mounted.stderr.strip()}): this test needs root, "
            "as CI has")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def fill(disk: Path) -> None:
    """Write zeros into disk/filler until the disk is full."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, bytes(2**16)):
            pass
    except OSError as err:
        assert err.errno == errno.ENOSPC, err
    finally:
        os.close(fd)


def start_until(command: list[str], started: bytes) -> tuple[subprocess.Popen, bytes]:
    """Start a command and wait until its stderr shows `started` (its progress bar); (the process,
    its stderr so far)."""
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = b""
    while started not in seen:
        chunk = os.read(process.stderr.fileno(), 4096)
        assert chunk, seen.decode()
        seen += chunk
    return process, seen


def interrupt_when_started(command: list[str], sig: int, started: bytes) -> tuple[int, str]:
    """Run a command, send it `sig` (a real signal) once its stderr shows `started` (its progress
    bar); (exit status, stderr)."""
    process, seen = start_until(command, started)
    process.send_signal(sig)
    _, rest = process.communicate(timeout=120)
    return process.returncode, (seen + rest).decode()


def script(name: str):
    """scripts/<name>.py as a module: the scripts are run by path, not imported as a package."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
