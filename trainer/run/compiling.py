"""A compiled run (`training.compile`) that a stop cannot break: compilers shielded from stop
signals, and kernel libraries a killed compile cut short (torch loads them unchecked) removed from
the cache (docs/guide.md#configs)."""

import fcntl
import logging
import os
import signal
import struct
from collections.abc import Callable
from pathlib import Path

from trainer.process.signals import STOP_SIGNALS

HEADER_BYTES = 64  # an ELF64 header; a file shorter than this is no library


def prepare(report: Callable[[str], None]) -> None:
    """Before the run's first compile: shield the compilers, repair the cache and say what was
    removed."""
    # torch's CUDA build says "No CUDA runtime is found" on stderr at every compile on a CPU: not
    # this run's news
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    shield_compilers()
    folder = cache_folder()
    removed = repair(folder)
    if removed:
        report(f"removed {len(removed)} damaged kernel libraries from torch's compile cache "
               f"{folder} (left by a compile that was cut short); they are compiled again")


def shield_compilers() -> None:
    """Block the stop signals while a thread compiles, so the compiler processes it starts never see
    a signal sent to the process group; the trainer takes it after the compile, as usual."""
    # private, and torch._dynamo loads for seconds: only a run that compiles pays for it
    from torch._dynamo.callback import callback_handler

    if _block not in callback_handler.start_callbacks:
        callback_handler.register_start_callback(_block)
        callback_handler.register_end_callback(_unblock)


def _block(_) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def _unblock(_) -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def cache_folder() -> Path:
    from torch._inductor.runtime.cache_dir_utils import cache_dir  # as above: compiling runs only

    return Path(cache_dir())


def repair(folder: Path) -> list[Path]:
    """Remove (and return) the libraries in `folder` shorter than their headers say, unless being
    built now."""
    removed = []
    for library in sorted(folder.glob("*/*.so")):
        # torch's, named by the library's key
        lock = folder / "locks" / f"{library.name.split('.')[0]}.lock"
        if cut_short(library) and _remove_unless_building(library, lock):
            removed.append(library)
    return removed


def cut_short(path: Path) -> bool:
    """Whether a shared library ends before its section table, which the linker writes last."""
    with open(path, "rb") as f:
        header = f.read(HEADER_BYTES)
        size = os.fstat(f.fileno()).st_size
    if len(header) < HEADER_BYTES:
        return True
    if header[:5] != b"\x7fELF\x02":
        return False
    order = "<" if header[5] == 1 else ">"
    table, = struct.unpack_from(order + "Q", header, 0x28)  # e_shoff, then e_shentsize and e_shnum
    entry, count = struct.unpack_from(order + "HH", header, 0x3A)
    return size < table + entry * count


def _remove_unless_building(library: Path, lock: Path) -> bool:
    """Unlink `library` under torch's lock for it (flock, as the `filelock` package takes it); False
    if it is held."""
    try:
        f = open(lock, "a")
    except FileNotFoundError:  # no locks folder: nothing was ever built there
        library.unlink(missing_ok=True)
        return True
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        library.unlink(missing_ok=True)
        return True
