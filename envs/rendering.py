"""MuJoCo's GL backend, set up in one place. MuJoCo fixes its backend as it is imported, so
importing `envs` chooses a headless one (MUJOCO_GL: EGL, else OSMesa) when none is set; every env
builder and command calls `configure()`, which says in one line when this process cannot render
(docs/guide.md#how-it-works says why torch._dynamo comes first)."""

import ctypes.util
import functools
import multiprocessing
import os
import sys

from errors import UserError

_BACKEND_LIBRARIES = {"egl": "EGL", "osmesa": "OSMesa"}
_INSTALL = ("'apt-get install libegl1 libgl1 libegl-mesa0 libgl1-mesa-dri' (or libosmesa6), "
            "or run 'make setup'")


def choose() -> str | None:
    """MUJOCO_GL, set to a headless backend found here when unset (None when there is none), and
    PyOpenGL's platform to match. Imports nothing but torch._dynamo, and that for OSMesa only."""
    backend = os.environ.get("MUJOCO_GL")
    if not backend:
        found = (name for name, lib in _BACKEND_LIBRARIES.items() if _installed(lib))
        backend = next(found, None)
        if backend is None:
            return None
        os.environ["MUJOCO_GL"] = backend
    if backend in _BACKEND_LIBRARIES:
        os.environ.setdefault("PYOPENGL_PLATFORM", backend)
    if backend == "osmesa":  # libOSMesa brings Mesa's LLVM in as mujoco is imported
        _compiler_first()
    return backend


def configure() -> str:
    """The backend in use, chosen if unset; a one-line UserError naming the fix when this process
    cannot render with it."""
    backend = choose()
    if backend is None:
        raise UserError("no headless OpenGL found for MuJoCo rendering; "
                        f"install it with {_INSTALL}")
    _check(backend)
    loaded = imported_backend()
    if loaded not in (None, backend):
        raise UserError(f"mujoco was imported before MUJOCO_GL={backend} was set and renders with "
                        f"{loaded}; set MUJOCO_GL before anything imports mujoco (import envs "
                        f"first, or start with MUJOCO_GL={backend} python3 ...)")
    _compiler_first()
    return backend


def imported_backend() -> str | None:
    """The backend mujoco took as it was imported (its GLContext's module), or None before."""
    context = getattr(sys.modules.get("mujoco"), "GLContext", None)
    return context.__module__.rsplit(".", 1)[-1] if context else None


def _compiler_first() -> None:
    """Import torch._dynamo, and with it triton's LLVM, before Mesa's LLVM loads: the other order
    segfaults with this torch build. Env workers only render and skip it; so does a process whose
    libOSMesa is loaded already (too late)."""
    if multiprocessing.current_process().name != "MainProcess" or imported_backend() == "osmesa":
        return
    import torch._dynamo  # noqa: F401  (heavy: only where rendering is set up)


def _check(backend: str) -> None:
    """A MUJOCO_GL this process can render with, or a one-line UserError naming the fix."""
    if backend == "glfw":
        if not os.environ.get("DISPLAY"):
            raise UserError("MUJOCO_GL=glfw needs a display and DISPLAY is unset; "
                            "use MUJOCO_GL=egl or osmesa (headless)")
        return
    if backend not in _BACKEND_LIBRARIES:
        raise UserError(f"MUJOCO_GL={backend} is not a MuJoCo rendering backend; use egl or osmesa "
                        "(headless), glfw (with a display), or unset it to choose automatically")
    library = _BACKEND_LIBRARIES[backend]
    if not _installed(library):
        raise UserError(f"MUJOCO_GL={backend} but lib{library} is not installed; install it with "
                        f"{_INSTALL}, or set MUJOCO_GL to the other headless backend")


@functools.cache
def _installed(library: str) -> bool:
    return ctypes.util.find_library(library) is not None  # runs ldconfig: once a process
