"""Process-wide set-up for headless rendering. Every entry point calls `configure()` first, before anything imports
mujoco (train_sac.py's main, the benchmarks and scripts that render, tests/conftest.py): the env layer leaves it to
them, as Gymnasium and dm_control do, so importing it has no side effect.

Two facts of this torch build and headless Mesa drive it:
- torch imports triton lazily (torch._dynamo, e.g. inside the first torch.optim.Adam). Loading triton's LLVM
  after Mesa's EGL/OSMesa context exists segfaults the process (two LLVMs in one process); importing
  torch._dynamo first, here and nowhere else, avoids it.
- MuJoCo picks its GL backend from MUJOCO_GL when it is imported; without a display it must be egl or osmesa. A
  value it cannot use fails only at the first render, deep in a traceback, so it is checked here. Env worker
  processes inherit the choice through the environment.
"""

import ctypes.util
import os
import sys

from errors import UserError

_BACKEND_LIBRARIES = {"egl": "EGL", "osmesa": "OSMesa"}
_INSTALL = "'apt-get install libegl1 libgl1 libegl-mesa0 libgl1-mesa-dri' (or libosmesa6), or run 'make setup'"


def configure() -> str:
    """Import torch._dynamo, choose MUJOCO_GL if unset, and return the backend in use."""
    import torch._dynamo  # noqa: F401  (must precede any GL context: see the module docstring)

    backend = os.environ.get("MUJOCO_GL")
    if not backend:
        backend = next((name for name, lib in _BACKEND_LIBRARIES.items() if ctypes.util.find_library(lib)), None)
        if backend is None:
            raise UserError(
                f"no headless OpenGL found for MuJoCo rendering; install it with {_INSTALL}")
        os.environ["MUJOCO_GL"] = backend
    _check(backend)
    if backend in _BACKEND_LIBRARIES:
        os.environ.setdefault("PYOPENGL_PLATFORM", backend)
    return backend


def configure_script() -> str:
    """`configure()` for a script that sets up as it is imported, before its imports load mujoco: a backend that
    cannot render here ends the process with the one-line error, as the commands' `main`s do, not a traceback."""
    try:
        return configure()
    except UserError as err:
        from trainer.config import error_exit

        sys.exit(error_exit(err))


def _check(backend: str) -> None:
    """A MUJOCO_GL this process can render with, or a one-line UserError naming the fix."""
    if backend == "glfw":
        if not os.environ.get("DISPLAY"):
            raise UserError("MUJOCO_GL=glfw needs a display and DISPLAY is unset; "
                            "use MUJOCO_GL=egl or osmesa (headless)")
        return
    if backend not in _BACKEND_LIBRARIES:
        raise UserError(f"MUJOCO_GL={backend} is not a MuJoCo rendering backend; use egl or osmesa (headless), "
                        "glfw (with a display), or unset it to choose automatically")
    if not ctypes.util.find_library(_BACKEND_LIBRARIES[backend]):
        raise UserError(f"MUJOCO_GL={backend} but lib{_BACKEND_LIBRARIES[backend]} is not installed; install it with "
                        f"{_INSTALL}, or set MUJOCO_GL to the other headless backend")
