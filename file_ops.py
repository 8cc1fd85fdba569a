"""The file operations every layer's writers share, at the bottom of the import graph beside
errors.py (the standard library only): the atomic write every file the product writes goes through,
and the new folder that files moved aside go into.
"""

import itertools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """`write(f)` into `.<name>.tmp<pid>` beside `path`, fsync, rename over `path`, fsync the
    folder: a kill at any instant leaves the previous file or the new one, whole. On any failure the
    temporary file is removed, `path` is left as it was, and the error propagates."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def new_aside_folder(parent: Path, stem: str) -> Path:
    """A new, empty folder `<stem>-<time>` in `parent` (`-2`, `-3`, ... when that second already has
    one): files moved aside must never land on those an earlier move put there."""
    base = f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    for n in itertools.count(1):
        folder = parent / (base if n == 1 else f"{base}-{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
