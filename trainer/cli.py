"""Every command's way out: its exit status, bad input as one line and 2, a stop signal as one line and
128+signal."""

from collections.abc import Callable

from errors import UserError
from trainer.config import error_exit
from trainer.signals import Interrupted, interrupted, interrupts


def run_command(body: Callable[[], int | None], *, cut_short: str | Callable[[], str]) -> int:
    """`body()`'s exit status (None is 0); a UserError is one `error:` line and 2; a stop signal is one line saying
    what the command left (`cut_short`, or what it returns then) and 128+signal."""
    try:
        with interrupts():
            return body() or 0
    except UserError as err:
        return error_exit(err)
    except Interrupted as stop:
        return interrupted(stop, cut_short() if callable(cut_short) else cut_short)
