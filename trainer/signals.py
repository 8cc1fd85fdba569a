"""SIGTERM (spot reclaim, `docker stop`), SIGINT (Ctrl-C) and SIGHUP (a dropped ssh session, a killed terminal) become
a flag the training loop checks between steps, so it can save `_latest` and exit with 128+signal. A second signal
gets the previous handler back, so an impatient user can still kill at once; the atomic checkpoint writes make that
safe too.

Commands with nothing to save on the way out (record, pretrain, plot, sweep before its trials) use `interrupts`
instead: the signal unwinds the command, closing what it opened, to one line and 128+signal.
"""

import signal
import sys
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


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
