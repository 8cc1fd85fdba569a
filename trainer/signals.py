"""SIGTERM (spot reclaim, `docker stop`), SIGINT (Ctrl-C) and SIGHUP (a dropped ssh session, a killed terminal) become
a flag the training loop checks between steps, so it can save `_latest` and exit with 128+signal. A second signal
gets the previous handler back, so an impatient user can still kill at once; the atomic checkpoint writes make that
safe too."""

import signal

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
