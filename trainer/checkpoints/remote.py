"""Checkpoint folders that live elsewhere: any fsspec URL (`s3://bucket/prefix`, `gs://...`,
`file:///mnt/...`).

Files are written locally first (`staging_dir`), then uploaded by a background thread in write
order, so the remote `_latest` never names a missing sidecar. Each queued file is a hard link: a
later save may replace the local one. A staged file stands for the remote one only while both are as
an upload or download left them (`SYNCED`): every checkpoint of a run has the same size, so sizes
tell nothing.
"""

import hashlib
import json
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem

from errors import UserError
from file_ops import atomic_write
from trainer.checkpoints.files import CheckpointError, upload_link
from trainer.checkpoints.payload import load_weights

# in a staging folder, per file name: [remote path, the store's checksum (an S3 ETag), the local
# file's inode, size and mtime], as the upload or download that made them one object left them
SYNCED = ".remote-copies.json"


def is_remote(directory: str) -> bool:
    return "://" in directory


def staging_dir(url: str, run_name: str, local_dir: str | None) -> Path:
    """`local_dir`, else one per URL and run in the user's cache: never `checkpoints/`, which may
    be another run's. The URL, made readable, beside a hash of it: s3://a/b_c and s3://a/b/c read
    alike."""
    if local_dir:
        return Path(local_dir)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    url = url.rstrip("/")  # s3://a/b/ is the same prefix
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", url).strip("_")[:80]
    key = hashlib.sha256(url.encode()).hexdigest()[:12]
    return cache / "pixel-sac" / "staging" / f"{readable}-{key}" / run_name


def _stat(path: Path) -> list[int] | None:
    """What changes when a file is written or replaced; None when it is missing."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def _env_step(path: Path) -> int:
    """A checkpoint's progress, its checksum verified; -1 when it does not load."""
    try:
        return load_weights(path)["progress"]["env_step"]
    except (CheckpointError, KeyError, TypeError):
        return -1


class RemoteDir:
    """`holds_saves`: the local folder is a run's, whose saves may not have reached the remote
    (a failed upload); else it holds only downloads, and the remote's copy is always the one."""

    def __init__(self, url: str, local_dir: Path, retries: int, backoff_s: float,
                 report: Callable[[str], None], *, holds_saves: bool = True):
        try:
            self.fs, self.root = fsspec.core.url_to_fs(url)
        except (ImportError, ValueError) as err:
            raise UserError(f"cannot open checkpoint.dir {url} ({err}); install the filesystem's "
                            "package (s3fs for s3://, gcsfs for gs://)") from None
        if isinstance(self.fs, LocalFileSystem):
            # object stores need no folders; a file:// URL does
            self.fs.makedirs(self.root, exist_ok=True)
        self.url, self.local_dir, self.retries, self.backoff_s, self.report = (url, local_dir,
                                                                               retries, backoff_s,
                                                                               report)
        self.holds_saves = holds_saves
        self.failures = 0
        self._jobs = 0
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None  # the first upload starts it
        self._synced_lock = threading.Lock()  # uploads and fetches both note what they synced

    def _remote(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def listdir(self) -> list[str]:
        self.fs.invalidate_cache(self.root)  # s3fs keeps listings; another machine may have written
        try:
            return [Path(p).name for p in self.fs.ls(self.root, detail=False)]
        except FileNotFoundError:
            return []

    def fetch(self, name: str) -> bool:
        """Download the remote `name` unless the local file is a copy of that object; False, doing
        nothing, if the remote lacks it. A save here that never reached the remote (a failed
        upload) stays when it is a checkpoint further ahead than the remote's."""
        remote, local = self._remote(name), self.local_dir / name
        self.fs.invalidate_cache(remote)
        try:
            checksum = str(self.fs.checksum(remote))
        except FileNotFoundError:
            return False
        noted = self._synced().get(name)
        copy = noted is not None and noted[0] == remote and noted[2:] == _stat(local)
        if copy and noted[1] == checksum:
            return True
        self.local_dir.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(f".{name}.download{os.getpid()}")
        try:
            self.fs.get_file(remote, str(partial))
            unsent = self.holds_saves and not copy and not name.endswith(".replay.pt")
            if unsent and local.exists() and _env_step(local) > _env_step(partial):
                print(f"warning: keeping {local}, a save that never reached {self.url}: it is "
                      f"further ahead than the {name} there, which the next save replaces",
                      file=sys.stderr)
                return True
            partial.replace(local)
        finally:
            partial.unlink(missing_ok=True)
        self._note(name, checksum, local)
        return True

    def _synced(self) -> dict[str, list]:
        try:
            return json.loads((self.local_dir / SYNCED).read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _note(self, name: str, checksum: str, copy: Path) -> None:
        """`copy` (the local `name`, or a hard link to it) is the remote object of `checksum`."""
        with self._synced_lock:
            synced = {n: e for n, e in self._synced().items() if e[2:] == _stat(self.local_dir / n)}
            synced[name] = [self._remote(name), checksum, *_stat(copy)]
            try:
                atomic_write(self.local_dir / SYNCED,
                             lambda f: f.write(json.dumps(synced).encode()))
            except OSError:
                pass  # a lost note costs a download at the next fetch, never a wrong file

    def move_aside(self, names: list[str], folder: str) -> None:
        """Move remote files into `folder` beside them (copy, then delete the original: object
        stores cannot rename)."""
        for name in names:
            self.fs.mv(self._remote(name), self._remote(f"{folder}/{name}"))

    def upload(self, written: list[Path], deleted: list[str]) -> None:
        """Queue one save's files (uploaded in this order) and the names it pruned (deleted remotely
        after)."""
        staged = []
        for path in written:
            snapshot = upload_link(path, self._jobs)
            os.link(path, snapshot)
            staged.append((snapshot, path.name))
        self._jobs += 1
        self._queue.put((staged, deleted))
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="checkpoint-upload",
                                            daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            staged, deleted = job
            for snapshot, name in staged:
                def put() -> str:
                    self.fs.put_file(str(snapshot), self._remote(name))
                    return str(self.fs.checksum(self._remote(name)))  # s3fs re-reads what it wrote

                checksum = self._retry(f"upload {name}", put)
                if checksum is not None:
                    self._note(name, checksum, snapshot)
                snapshot.unlink()
            for name in deleted:
                remote = self._remote(name)
                self._retry(f"delete {name}", lambda: self.fs.rm_file(remote)
                            if self.fs.exists(remote) else None)
            self._queue.task_done()
        self._queue.task_done()

    def _retry(self, what: str, action: Callable[[], object]) -> object:
        """`action()`'s result; None once every try failed."""
        for attempt in range(1, self.retries + 1):
            try:
                return action()
            except Exception as err:
                # network and permission errors come in many types; all are retried alike
                if attempt == self.retries:
                    self.failures += 1
                    self.report(
                        f"warning: could not {what} to {self.url} after {attempt} tries ({err}); "
                        f"the local copy in {self.local_dir} is intact"
                    )
                    return None
                delay = self.backoff_s * 2 ** (attempt - 1)
                self.report(
                    f"warning: {what} to {self.url} failed ({err}); retry "
                    f"{attempt}/{self.retries - 1} in {delay:.0f} s"
                )
                time.sleep(delay)

    def close(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for pending uploads; True when all were uploaded."""
        if self._thread:
            self._queue.put(None)
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self.report(
                    f"warning: uploads to {self.url} still pending after {timeout_s:.0f} s; "
                    f"local copies are in {self.local_dir}"
                )
                return False
        return self.failures == 0
