"""Headless rendering: MUJOCO_GL=egl and osmesa both work, an unset MUJOCO_GL picks one by itself in
a plain Python script as in the commands, and one that cannot render here is a one-line error.
Each case is a fresh process, since MuJoCo fixes its GL backend at import."""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import ROOT

# a user's own script: no set-up before the env builder, no display
RENDER = """
import os, sys, numpy as np
from envs.config import EnvConfig
from envs.make import make_env
obs, _ = make_env(EnvConfig(image_size=64), pixels=True).reset(seed=0)
np.save(sys.argv[1], obs)
print(os.environ["MUJOCO_GL"])
"""
UNSET = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")


def plain_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in UNSET}


def render_with(backend: str | None, path) -> str:
    env = plain_env() | ({"MUJOCO_GL": backend} if backend else {})
    result = subprocess.run([sys.executable, "-c", RENDER, str(path)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="module")
def egl_frame(tmp_path_factory):
    path = tmp_path_factory.mktemp("gl") / "egl.npy"
    assert render_with("egl", path) == "egl"
    return np.load(path)


def test_egl_renders_the_scene(egl_frame):
    assert egl_frame.shape == (3, 3, 64, 64) and egl_frame.std() > 5


# None: a plain python3 with no MUJOCO_GL, PYOPENGL_PLATFORM or DISPLAY, as a user starts one
@pytest.mark.parametrize("backend, chosen", [("osmesa", "osmesa"), (None, "egl")])
def test_other_backends_render_the_same_pixels(egl_frame, tmp_path, backend, chosen):
    assert render_with(backend, tmp_path / "frame.npy") == chosen
    assert np.array_equal(np.load(tmp_path / "frame.npy"), egl_frame)


def test_importing_the_env_layer_chooses_the_backend_and_loads_nothing():
    """Importing `envs` chooses MUJOCO_GL, once a side effect it did not have: MuJoCo fixes its
    backend as it is imported and every envs module imports it, so the package's import is the one
    point before mujoco that a plain script passes through. It loads neither mujoco nor torch."""
    probe = ("import os, sys, envs; "
             "print(os.environ.get('MUJOCO_GL'), 'mujoco' in sys.modules, 'torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=plain_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["egl", "False", "False"]


def test_mujoco_imported_first_with_another_backend_is_one_line():
    probe = ("import mujoco\nfrom envs.config import EnvConfig\nfrom envs.make import make_env\n"
             "make_env(EnvConfig(image_size=64), pixels=True)")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=plain_env(),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "errors.UserError: mujoco was imported before MUJOCO_GL=egl was set and renders with glfw; "
        "set MUJOCO_GL before anything imports mujoco (import envs first, or start with "
        "MUJOCO_GL=egl python3 ...)")


@pytest.mark.parametrize("backend, message", [
    ("foo", "error: MUJOCO_GL=foo is not a MuJoCo rendering backend; use egl or osmesa"),
    ("glfw", "error: MUJOCO_GL=glfw needs a display and DISPLAY is unset"),
])
# the trainer sets up in main, the scripts as they are imported
@pytest.mark.parametrize("command", [
    ["train_sac.py", "--config", "configs/default.yaml"], ["bench/mjwarp.py"],
    ["scripts/frame_grid.py"],
    ["scripts/backend_frames.py"],
])
def test_a_backend_that_cannot_render_here_is_one_line(backend, message, command):
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"} | {"MUJOCO_GL": backend}
    result = subprocess.run([sys.executable, *command], cwd=ROOT, env=env, capture_output=True,
                            text=True,
                            timeout=120, check=False)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(message)
