"""Shared helpers: run the real command line in a subprocess, and the smoke-run overrides from the pipeline issue."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train_sac.py"), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def popen_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "train_sac.py"), *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def sets(**overrides) -> list[str]:
    """--set arguments from keyword pairs; '__' stands for '.' (checkpoint__dir -> checkpoint.dir)."""
    return [arg for key, value in overrides.items() for arg in ("--set", f"{key.replace('__', '.')}={value}")]


@pytest.fixture
def smoke(tmp_path) -> list[str]:
    """The issue's one-line smoke run, with outputs under tmp_path and a short seed phase so updates happen."""
    return sets(
        training__episodes=2, env__max_episode_steps=50, sac__batch_size=8, sac__buffer_size=2000,
        checkpoint__dir=tmp_path / "ckpt", checkpoint__every_episodes=1,
        logging__tensorboard_dir=tmp_path / "runs", logging__progress="false", training__seed_steps=20,
    )


@pytest.fixture(autouse=True)
def _quiet_threads():
    """Two-core machines: keep each test process from oversubscribing."""
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    yield
