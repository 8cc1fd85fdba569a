"""Stop signals (SIGTERM, SIGINT, SIGHUP): GracefulStop makes them a flag the training loop checks so it can save
`_latest` (a second signal stops at once); elsewhere they unwind to one line and exit status 128+signal.
"""

import signal
import sys
from contextlib import contextmanager

from tqdm import tqdm

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal where there is nothing to save; a BaseException, so no library's `except Exception` takes it."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


def _raise_stopped(signum, frame) -> None:
    raise Stopped(signum)


def stop_at_once() -> None:
    """From now on, outside GracefulStop: a stop signal raises Stopped wherever the main thread is."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _raise_stopped)


@contextmanager
def deferred():
    """Around a step that must not be cut in half: a stop signal raises Stopped after it (a second one at once)."""
    with GracefulStop() as stop:
        yield
    if stop.requested:
        raise Stopped(stop.signum)


class GracefulStop:
    def __init__(self):
        self.signum: int | None = None
        self._previous: dict = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> "GracefulStop":
        self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        self._restore()

    def _handle(self, signum, frame) -> None:
        self.signum = signum
        self._restore()

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


@contextmanager
def interrupts():
    """While inside, a stop signal raises Interrupted (Ctrl-C too: KeyboardInterrupt would end in a traceback)."""
    def handle(signum, frame):
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def interrupted(stop: Interrupted, outcome: str) -> int:
    """A command's way out on a stop signal: one line saying what it leaves (`outcome`), and the exit status."""
    end_progress_bars()
    print(f"{stop}; {outcome}", file=sys.stderr)
    return 128 + stop.signum


def end_progress_bars() -> None:
    """Live progress bars end their line, so that a stop's message has one of its own."""
    for bar in list(tqdm._instances):
        if hasattr(bar, "start_t"):
            bar.close()
        elif getattr(bar, "sp", None) is not None:  # the signal came while the bar drew itself the first time
            bar.fp.write("\n")
