"""A run's checkpoint files: written atomically with checksums, read back as torch files, named,
pruned, and the folder readied (lock, probe) before the first save."""

import errno
import os
import pickle
import re
import shutil
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

import torch

from errors import UserError
from file_ops import atomic_write
from trainer.process import lock

PROBE_BYTES = 4096  # one page, so a full disk fails the start-up probe


class CheckpointError(UserError):
    """A checkpoint file that cannot be read (missing, truncated, corrupt, or from another
    program)."""


class NoSuchFolder(CheckpointError):
    """A checkpoint named in a folder that does not exist: a mistyped path, which another checkpoint
    of the run would not mend (its message says so, and takes no other advice)."""


class ReplayDamaged(CheckpointError):
    """A replay sidecar that cannot be read or fails its checksum; it costs the replay, never the
    weights."""


class _Crc32:
    """CRC-32 against storage damage, fast enough for a SIGTERM save
    (docs/checkpoints.md#writing)."""

    def __init__(self):
        self.value = 0

    def update(self, data) -> None:
        self.value = zlib.crc32(data, self.value)


def digest(tree) -> str:
    """CRC-32 over a checkpoint's contents (tensor bytes, dtypes, shapes, keys and plain values, in
    order)."""
    h = _Crc32()
    _feed(h, tree)
    return f"crc32:{h.value:08x}"


def _feed(h, value) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    elif isinstance(value, dict):
        h.update(f"D{len(value)}".encode())
        for key, item in value.items():
            _feed(h, key)
            _feed(h, item)
    elif isinstance(value, (list, tuple)):
        h.update(f"L{len(value)}".encode())
        for item in value:
            _feed(h, item)
    else:
        h.update(f"{type(value).__name__}:{value!r};".encode())


def _tensors(tree, prefix: str = ""):
    if isinstance(tree, torch.Tensor):
        yield prefix, tree
    elif isinstance(tree, dict):
        for key, value in tree.items():
            yield from _tensors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            yield from _tensors(value, f"{prefix}.{i}")


def non_finite(tree) -> str | None:
    """The first floating-point tensor holding NaN or inf, by key; None when all are finite."""
    return next((key for key, t in _tensors(tree) if t.is_floating_point()
                 and not bool(torch.isfinite(t).all())), None)


def _size(n: float) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 2**10:.0f} KB"


def atomic_save(obj, path: Path) -> None:
    """Write `obj` to a temporary file, fsync, rename over `path`; on failure `path` is left as it
    was."""
    try:
        atomic_write(path, lambda f: torch.save(obj, f))
    except BaseException as raised:
        err = _os_error(raised)
        if err is None:
            raise
        if err.errno == errno.ENOSPC:
            need = sum(t.nbytes for _, t in _tensors(obj))
            free = shutil.disk_usage(path.parent).free
            raise CheckpointError(
                f"cannot save {path.name}: the disk holding {path.parent} is full (this file needs "
                f"about {_size(need)}, {_size(free)} free); free space or set checkpoint.dir to a "
                "larger disk, then continue with --resume auto (the previous checkpoint is "
                "intact)") from None
        raise CheckpointError(
            f"cannot save {path} ({err.strerror or err}); make {path.parent} writable or set "
            "checkpoint.dir, then continue with --resume auto (the previous checkpoint is "
            "intact)") from None


def _os_error(err: BaseException | None) -> OSError | None:
    """The OSError behind `err`, if any: torch's zip writer, on closing after a failed write, raises
    a RuntimeError of its own ("unexpected pos") whose context is the OSError (ENOSPC) that
    matters."""
    while err is not None and not isinstance(err, OSError):
        err = err.__cause__ or err.__context__
    return err


def read(path: Path, kind: str):
    if path.is_dir():
        raise CheckpointError(f"{kind} {path} is a folder, not a file")  # "not found" would mislead
    if not path.parent.is_dir():
        raise NoSuchFolder(f"{kind} not found: {path}: there is no folder {path.parent}; check the "
                           "path for a typo")
    if not path.is_file():
        raise CheckpointError(f"{kind} not found: {path}")
    # torch.save writes zip archives; torch unpickles anything else, with warnings
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"{kind} {path} is unreadable (truncated or corrupt: not a zip archive)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:  # torch advises weights_only=False: running the file
        named = re.search(r"GLOBAL (\S+)", str(err))
        if named:
            raise CheckpointError(
                f"{kind} {path} is not from this trainer: it names the Python object {named[1]}, "
                "which loading would call (a crafted file); it was not loaded") from None
        raise CheckpointError(f"{kind} {path} is unreadable (truncated or corrupt: its pickle "
                              "holds more than tensors and plain values)") from None
    except Exception as err:
        # torch raises many types for damaged files; all mean the same to the user
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"{kind} {path} is unreadable (truncated or corrupt: {reason})") from None


def numbered(names: Iterable[str], name: str, kind: str) -> list[tuple[int, str]]:
    """(number, file name) of `<name>_ep<N>.pt` or `<name>_step<S>.replay.pt` files, oldest
    first."""
    suffix = {"ep": r"\.pt", "step": r"\.replay\.pt"}[kind]
    pattern = re.compile(rf"{re.escape(name)}_{kind}(\d+){suffix}")
    return sorted((int(m.group(1)), n) for n in names if (m := pattern.fullmatch(n)))


def run_files(names: Iterable[str], name: str) -> list[str]:
    names = list(names)
    named = [n for n in (f"{name}_latest.pt", f"{name}_best.pt") if n in names]
    return named + [n for _, n in numbered(names, name, "ep")] + [n
                                                                  for _, n in numbered(names, name,
                                                                                       "step")]


def upload_link(path: Path, job: int) -> Path:
    """Where trainer/checkpoints/remote.py hard-links a saved file until its upload `job` sends
    it."""
    return path.with_name(f".upload{os.getpid()}-{job}-{path.name}")


def _temporaries(directory: Path, name: str) -> list[tuple[Path, int]]:
    """(path, pid) of this run's temporary files: files being written and hard links awaiting
    upload."""
    file = rf"{re.escape(name)}_(?:latest|best|ep\d+|step\d+\.replay|probe)\.pt"
    pattern = re.compile(rf"\.{file}\.tmp(\d+)|\.upload(\d+)-\d+-{file}")
    return [(directory / n, int(match.group(1) or match.group(2)))
            for n in os.listdir(directory) if (match := pattern.fullmatch(n))]


def prune(directory: Path, name: str, keep_replays: int, keep_last: int,
          keep: set[str]) -> list[str]:
    """Drop old sidecars, `_ep` files beyond `keep_last` and killed writers' files; never `keep`,
    this save's."""
    names = os.listdir(directory)
    doomed = _oldest_beyond(numbered(names, name, "step"), keep_replays, keep)
    if keep_last > 0:
        doomed += _oldest_beyond(numbered(names, name, "ep"), keep_last, keep)
    for doomed_name in doomed:
        (directory / doomed_name).unlink(missing_ok=True)
    for path, pid in _temporaries(directory, name):
        if pid != os.getpid():
            path.unlink(missing_ok=True)
    return doomed


def _oldest_beyond(files: list[tuple[int, str]], count: int, keep: set[str]) -> list[str]:
    return [n for _, n in files if n not in keep][:max(0, len(files) - count)]


def prepare(directory: Path, name: str) -> TextIO:
    """At start: create the folder, take the run's lock, remove temporary files killed writers left,
    and write a probe, so an unwritable or full folder fails now. Returns the lock, held until
    closed or the process ends."""
    probe, held = directory / f".{name}_probe.pt.tmp{os.getpid()}", None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        held = lock.hold(directory / name, what=f"run '{name}'", fix=(
            "wait for it to end, or stop it (its checkpoints are whole at any instant) and "
            "continue with --resume auto; or train a separate run with --set checkpoint.name=<new "
            "name>"))
        for path, _ in _temporaries(directory, name):
            path.unlink()
        with open(probe, "wb") as f:
            f.write(bytes(PROBE_BYTES))
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        if held:
            held.close()
        reason = "the disk is full" if err.errno == errno.ENOSPC else err.strerror or str(err)
        raise CheckpointError(f"cannot write checkpoints to {directory} ({reason}); free space or "
                              "make it writable, or set checkpoint.dir to another "
                              "folder") from None
    finally:
        if probe.exists():  # unlink on a read-only mount fails even for a missing file
            probe.unlink()
    return held


def candidates(names: Iterable[str], name: str) -> list[str]:
    """Resume candidates among file names, newest first: `_latest`, then `_ep<N>` by decreasing N;
    never `_best`, which is older than `_latest` whenever a later evaluation did not beat it."""
    names = list(names)
    latest = f"{name}_latest.pt"
    return ([latest] if latest in names else []) + [n
                                                    for _, n in reversed(numbered(names, name,
                                                                                  "ep"))]
