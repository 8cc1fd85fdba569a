"""One writer at a time: an flock on `.<name>.lock` beside what a process writes, which the OS
releases however the process ends. The file stays: removing it would let a process that opened it a
moment before lock a file no one sees."""

import fcntl
import os
import socket
import time
from pathlib import Path
from typing import TextIO

from errors import UserError


def hold(path: Path, *, what: str, fix: str) -> TextIO:
    """Lock `path` (its folder must exist) for this process; returns the open lock file. If another
    process holds it, a UserError naming that process, and nothing is written."""
    lock = path.with_name(f".{path.name}.lock")
    # a+ creates it, and never truncates the holder's line another process may be reading
    f = open(lock, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process, still starting"
        f.close()
        raise UserError(f"{what} is in use by {holder} (lock {lock}); {fix}") from None
    try:
        f.truncate(0)
        f.write(f"pid {os.getpid()} on host {socket.gethostname()} since "
                f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        f.flush()
    except BaseException:  # a full disk: the caller reports it, and the lock goes with the file
        f.close()
        raise
    return f


def hold_output(path: str | Path, *, what: str) -> TextIO:
    """`hold` for a command's --out (a dataset, a weights file): its folder is made first, as the
    write would."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return hold(path, what=f"{what} {path}",
                fix="wait for that process to finish, or pass another --out")
