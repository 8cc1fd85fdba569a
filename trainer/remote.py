"""Checkpoint folders that live elsewhere: any fsspec URL (`s3://bucket/prefix`, `gs://...`, `file:///mnt/...`).

Files are written locally first (`staging_dir`), then uploaded by a background thread in write order, so the remote
`_latest` never names a missing sidecar. Each queued file is a hard link: a later save may replace the local one.
"""

import hashlib
import os
import queue
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem

from errors import UserError
from trainer.checkpoint_files import upload_link


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


class RemoteDir:
    def __init__(self, url: str, local_dir: Path, retries: int, backoff_s: float, report: Callable[[str], None]):
        try:
            self.fs, self.root = fsspec.core.url_to_fs(url)
        except (ImportError, ValueError) as err:
            raise UserError(f"cannot open checkpoint.dir {url} ({err}); "
                            "install the filesystem's package (s3fs for s3://, gcsfs for gs://)") from None
        if isinstance(self.fs, LocalFileSystem):
            self.fs.makedirs(self.root, exist_ok=True)  # object stores need no folders; a file:// URL does
        self.url, self.local_dir, self.retries, self.backoff_s, self.report = url, local_dir, retries, backoff_s, report
        self.failures = 0
        self._jobs = 0
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._work, name="checkpoint-upload", daemon=True)
        self._thread.start()

    def _remote(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def listdir(self) -> list[str]:
        try:
            return [Path(p).name for p in self.fs.ls(self.root, detail=False)]
        except FileNotFoundError:
            return []

    def fetch(self, name: str) -> None:
        """Bring `name` into the local folder unless an identical-size copy is there; no-op if the remote lacks it."""
        local = self.local_dir / name
        try:
            size = self.fs.size(self._remote(name))
        except FileNotFoundError:
            return
        if local.exists() and local.stat().st_size == size:
            return
        self.local_dir.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(f".{name}.download")
        self.fs.get_file(self._remote(name), str(partial))
        partial.replace(local)

    def move_aside(self, names: list[str], folder: str) -> None:
        """Move remote files into `folder` beside them (copy, then delete the original: object stores cannot rename)."""
        for name in names:
            self.fs.mv(self._remote(name), self._remote(f"{folder}/{name}"))

    def upload(self, written: list[Path], deleted: list[str]) -> None:
        """Queue one save's files (uploaded in this order) and the names it pruned (deleted remotely after)."""
        staged = []
        for path in written:
            snapshot = upload_link(path, self._jobs)
            os.link(path, snapshot)
            staged.append((snapshot, path.name))
        self._jobs += 1
        self._queue.put((staged, deleted))

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            staged, deleted = job
            for snapshot, name in staged:
                self._retry(f"upload {name}", lambda: self.fs.put_file(str(snapshot), self._remote(name)))
                snapshot.unlink()
            for name in deleted:
                remote = self._remote(name)
                self._retry(f"delete {name}", lambda: self.fs.rm_file(remote) if self.fs.exists(remote) else None)
            self._queue.task_done()
        self._queue.task_done()

    def _retry(self, what: str, action: Callable[[], object]) -> None:
        for attempt in range(1, self.retries + 1):
            try:
                action()
                return
            except Exception as err:  # network and permission errors come in many types; all are retried alike
                if attempt == self.retries:
                    self.failures += 1
                    self.report(
                        f"warning: could not {what} to {self.url} after {attempt} tries ({err}); "
                        f"the local copy in {self.local_dir} is intact"
                    )
                    return
                delay = self.backoff_s * 2 ** (attempt - 1)
                self.report(
                    f"warning: {what} to {self.url} failed ({err}); retry {attempt}/{self.retries - 1} in {delay:.0f} s"
                )
                time.sleep(delay)

    def close(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for pending uploads; True when all were uploaded."""
        self._queue.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.report(
                f"warning: uploads to {self.url} still pending after {timeout_s:.0f} s; "
                f"local copies are in {self.local_dir}"
            )
            return False
        return self.failures == 0
