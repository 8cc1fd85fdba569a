"""SIGTERM (spot reclaim, `docker stop`), SIGINT (Ctrl-C) and SIGHUP (a dropped ssh session, a killed terminal) become
a flag the training loop checks between steps, so it can save `_latest` and exit with 128+signal. A second signal
gets the previous handler back, so an impatient user can still kill at once; the atomic checkpoint writes make that
safe too.

Before the loop takes them over (start-up: imports, envs, loading a checkpoint) and after it saved (shutdown),
there is nothing to save: `stop_at_once` makes a stop signal raise Stopped there. It takes all three whatever the
process inherited: a trainer started in the background by a script (SIGINT ignored) used to save on a first Ctrl-C
and ignore the second.

Commands with nothing to save on the way out (record, pretrain, plot, sweep before its trials) use `interrupts`
instead: the signal unwinds the command, closing what it opened, to one line and 128+signal.
"""

import signal
import sys
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal where there is nothing to save. A BaseException, so that no library's `except Exception` takes
    it for an error of its own."""

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
    """Around a step that must not be cut in half (moving a run's files aside): a stop signal raises Stopped after it
    (a second one at once)."""
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
    print(f"{stop}; {outcome}", file=sys.stderr)
    return 128 + stop.signum
