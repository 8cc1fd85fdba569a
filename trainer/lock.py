"""One writer at a time: an OS lock (flock) on `.<name>.lock` beside what a process writes (a run's checkpoints, a
dataset, a weights file), held for as long as it writes. The OS releases it when the process ends, however it ends
(SIGKILL, the out-of-memory killer, a crash), so a killed writer never blocks the next one. The holder writes who it
is into the file, for the one-line refusal a second process gives. The file stays: removing it would let a process
that opened it a moment before lock a file no one else can see."""

import fcntl
import os
import socket
import time
from pathlib import Path
from typing import TextIO

from errors import UserError


def hold(path: Path, *, what: str, fix: str) -> TextIO:
    """Lock `path` (which need not exist; its folder must) for this process: the open lock file, released by closing
    it or by the process's end. If another process holds it, a UserError "{what} is in use by pid N on host H since
    T (lock <file>); {fix}", and nothing is written."""
    lock = path.with_name(f".{path.name}.lock")
    f = open(lock, "a+")  # a+ creates it, and never truncates the holder's line another process may be reading
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process, still starting"
        f.close()
        raise UserError(f"{what} is in use by {holder} (lock {lock}); {fix}") from None
    try:
        f.truncate(0)
        f.write(f"pid {os.getpid()} on host {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        f.flush()
    except BaseException:  # a full disk: the caller reports it, and the lock goes with the file
        f.close()
        raise
    return f


def hold_output(path: str | Path, *, what: str) -> TextIO:
    """`hold` for a command's --out (a dataset, a weights file): its folder is made first, as the write would."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return hold(path, what=f"{what} {path}", fix="wait for that process to finish, or pass another --out")
