"""Stop signals (SIGTERM, SIGINT, SIGHUP): GracefulStop makes them a flag the training loop checks
so it can save `_latest` (a second signal stops at once); elsewhere they unwind to one line and exit
status 128+signal. Once a stop is under way SIGHUP is ignored: a closed terminal sends several (its
shell passes one on, the kernel another as the shell exits), and a hangup never means "at once". A
SIGHUP ignored from the start (nohup) stays ignored. A child started with die_with_parent gets
SIGTERM when its parent dies.
"""

import ctypes
import signal
import sys
from contextlib import contextmanager

from tqdm import tqdm

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Stopped(BaseException):
    """A stop signal where there is nothing to save; a BaseException, so no library's `except
    Exception` takes it."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


def _take_over(handler) -> dict:
    """`handler` for the stop signals; the handlers they had. An ignored SIGHUP stays so."""
    return {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS if not _hangups_ignored(sig)}


def _put_back(handlers: dict) -> None:
    for sig, handler in handlers.items():
        if not _hangups_ignored(sig):
            signal.signal(sig, handler)


def _hangups_ignored(sig: int) -> bool:
    return sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN


def _under_way() -> None:
    """A stop is under way: the hangups after it only repeat that the terminal is gone."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _raise_stopped(signum, frame) -> None:
    _under_way()
    raise Stopped(signum)


def die_with_parent() -> None:
    """A child's preexec_fn: SIGTERM (a trainer saves and exits) when the process that started it
    dies, even by SIGKILL, so no run goes on unwatched holding its lock."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def stop_at_once() -> None:
    """From now on, outside GracefulStop: a stop signal raises Stopped wherever the main thread
    is."""
    _take_over(_raise_stopped)


@contextmanager
def deferred():
    """Around a step that must not be cut in half: a stop signal raises Stopped after it (a second
    one at once)."""
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
        self._previous = _take_over(self._handle)
        return self

    def __exit__(self, *exc) -> None:
        self._restore()

    def _handle(self, signum, frame) -> None:
        self.signum = signum
        self._restore()
        _under_way()

    def _restore(self) -> None:
        _put_back(self._previous)
        self._previous = {}


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


@contextmanager
def interrupts():
    """While inside, a stop signal raises Interrupted (Ctrl-C too: KeyboardInterrupt would end in a
    traceback)."""
    def handle(signum, frame):
        _under_way()
        raise Interrupted(signum)

    previous = _take_over(handle)
    try:
        yield
    finally:
        _put_back(previous)


def interrupted(stop: Interrupted, outcome: str) -> int:
    """A command's way out on a stop signal: one line saying what it leaves (`outcome`), and the
    exit status."""
    end_progress_bars()
    print(f"{stop}; {outcome}", file=sys.stderr)
    return 128 + stop.signum


def end_progress_bars() -> None:
    """Live progress bars end their line, so that a stop's message has one of its own."""
    for bar in list(tqdm._instances):
        if hasattr(bar, "start_t"):
            bar.close()
        elif getattr(bar, "sp", None) is not None:
            # the signal came while the bar drew itself the first time
            bar.fp.write("\n")
