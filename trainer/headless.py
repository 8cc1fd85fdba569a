"""Process-wide set-up for headless rendering: every entry point calls `configure()` before anything imports mujoco
(docs/guide.md#how-it-works says why).
"""

import ctypes.util
import os
import sys

from errors import UserError

_BACKEND_LIBRARIES = {"egl": "EGL", "osmesa": "OSMesa"}
_INSTALL = "'apt-get install libegl1 libgl1 libegl-mesa0 libgl1-mesa-dri' (or libosmesa6), or run 'make setup'"


def configure() -> str:
    """Import torch._dynamo, choose MUJOCO_GL if unset, and return the backend in use."""
    import torch._dynamo  # noqa: F401  (must precede any GL context)

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
    """`configure()` for a script that sets up as it is imported: a bad backend exits with the one-line error."""
    try:
        return configure()
    except UserError as err:
        from trainer.cli import error_exit

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
