"""A compiled run (`training.compile=true`) stopped during its first torch.compile, and torch's
compile cache holding kernel libraries cut short: real compiles of the inverted pendulum's networks,
into a cache folder of each test's own (TORCHINDUCTOR_CACHE_DIR)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, sets

LATEST = "inverted_pendulum_state_latest.pt"


def command(folder: Path) -> list[str]:
    config = str(ROOT / "configs" / "inverted_pendulum_state.yaml")
    return [sys.executable, str(ROOT / "train_sac.py"), "--config", config, "--resume", "auto",
            *sets(
        training__compile="true", training__episodes=3, training__seed_steps=20,
        training__eval_every_episodes=0,
        sac__batch_size=8, sac__hidden_dim=32, checkpoint__dir=folder / "ckpt",
        logging__tensorboard_dir=folder / "runs", logging__progress="false")]


def cache_env(cache: Path) -> dict:
    return {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}


def train(folder: Path, cache: Path) -> subprocess.CompletedProcess:
    """The run in `folder` to its end, compiling into (and from) the cache folder `cache`."""
    return subprocess.run(command(folder), cwd=ROOT, env=cache_env(cache), capture_output=True,
                          text=True, timeout=600)


def building_kernels(group: int) -> bool:
    """Whether a C++ compiler in process group `group` is building a kernel library (`-o
    <cache>/../<key>.main.so`), the compiler itself or a compile worker's."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:  # ended meanwhile
            continue
        if int(fields[2]) == group and b".main.so" in cmdline:
            return True
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_to_the_group_during_the_first_compile_saves_and_the_next_start_works(
    tmp_path, signum):
    """The signal reaches the compilers too, as `timeout`, Ctrl-C and schedulers send it: it killed
    them, and the run ended in a CppCompileError traceback with the compiler's output instead of a
    save."""
    trainer = subprocess.Popen(command(tmp_path), cwd=ROOT, env=cache_env(tmp_path / "cache"),
                               stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    while not building_kernels(trainer.pid):
        assert trainer.poll() is None, trainer.communicate()
    os.killpg(trainer.pid, signum)
    out, err = trainer.communicate(timeout=600)
    assert trainer.returncode == 128 + signum and err == "", err
    assert out.splitlines()[-1] == (
        f"stopped by signal {signum}; saved {tmp_path / 'ckpt' / LATEST}; continue with --resume "
        "auto")

    resumed = train(tmp_path, tmp_path / "cache")
    assert resumed.returncode == 0 and resumed.stderr == "", resumed.stderr
    assert (f"resumed from {tmp_path / 'ckpt' / LATEST}" in resumed.stdout
            and "done: 3 episodes" in resumed.stdout)


def test_kernel_libraries_cut_short_in_the_compile_cache_are_removed_and_compiled_again(tmp_path):
    """Cut short by hand as a killed compiler leaves them: one shorter than a header (torch's load
    raised an ImportError, "file too short"), one a third of its length (a bus error once its code
    ran)."""
    cache = tmp_path / "cache"
    first = train(tmp_path / "first", cache)
    assert first.returncode == 0, first.stderr
    short, prefix = sorted(cache.glob("*/*.main.so"))[:2]
    sizes = short.stat().st_size, prefix.stat().st_size
    short.write_bytes(short.read_bytes()[:6])
    prefix.write_bytes(prefix.read_bytes()[:sizes[1] // 3])

    result = train(tmp_path / "second", cache)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert (f"removed 2 damaged kernel libraries from torch's compile cache {cache} (left by a "
            "compile that was cut short); they are compiled again") in result.stdout
    assert (short.stat().st_size, prefix.stat().st_size) == sizes, "built again, whole"
