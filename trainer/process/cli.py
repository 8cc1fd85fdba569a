"""Every command's way out: its exit status, bad input as one line and 2, a stop signal as one line
and 128+signal; and a console that may go away under it."""

import atexit
import contextlib
import gc
import io
import os
import re
import sys
from collections.abc import Callable

from envs import rendering
from errors import Diverged, UserError
from trainer.process.signals import Interrupted, interrupted, interrupts

# the parameters that low layers name in their messages (in backticks, see errors.py) -> the config
# keys that set them
PARAMETER_KEYS = {
    "env_id": "env.id", "camera": "env.camera", "backend": "env.backend",
    "num_envs": "env.num_envs",
    "warp_processes": "env.warp_processes",
    "parts": "env.randomize.parts", "light_tilt_deg": "env.randomize.light_tilt_deg",
    "camera_pos": "env.randomize.camera_pos", "camera_rot_deg": "env.randomize.camera_rot_deg",
    "camera_fov_deg": "env.randomize.camera_fov_deg",
    "capacity": "sac.buffer_size",
    "arch": "encoder.video.arch", "pretrained": "encoder.video.pretrained",
    "weights": "encoder.video.weights",
    "preset": "encoder.video.preset", "input_size": "encoder.video.input_size",
    "freeze": "encoder.video.freeze",
}

# argparse's status for a usage error: bad input from the command line or a file
USER_ERROR_STATUS = 2
DIVERGED_STATUS = 3  # the run stopped before saving a NaN or inf state: its settings need a change


def prog(module: str) -> str:
    """A command's name in its usage line, as it was started (sys.argv[0]): `python3 -m <module>`,
    a clone's script as typed (`python3 train_sac.py`), or an installed console script's name
    (`pixel-sac-evaluate`)."""
    typed = sys.argv[0] if sys.argv else ""
    name = os.path.basename(typed)
    ran_as_module = getattr(sys.modules.get("__main__"), "__spec__", None) is not None
    if ran_as_module or not name or name.startswith("-"):  # -m; -c or a REPL: no script's name
        return f"python3 -m {module}"
    return f"python3 {typed}" if name.endswith(".py") else name


def explain(err: UserError) -> str:
    """The error's message with config keys in place of the parameters low layers name in
    backticks."""
    return re.sub(r"`(\w+)`", lambda m: PARAMETER_KEYS.get(m.group(1), m.group(0)), str(err))


def error_exit(err: UserError) -> int:
    """Every command's way out on bad input: the explained message as one line on stderr, and the
    exit status."""
    print(f"error: {explain(err)}", file=sys.stderr)
    return DIVERGED_STATUS if isinstance(err, Diverged) else USER_ERROR_STATUS


def configure_script() -> str:
    """`rendering.configure()` for a script that sets up as it is imported: a bad backend exits
    with the one-line error."""
    try:
        return rendering.configure()
    except UserError as err:
        sys.exit(error_exit(err))


class Console(io.TextIOBase):
    """sys.stdout or sys.stderr of a command: every write goes straight to the file descriptor,
    and one that fails is dropped. A terminal that went away (EIO), a pipe whose reader exited
    (EPIPE) or a redirect onto a full disk would otherwise stop a run at its next line, and
    Python's exit would report what it could not flush."""

    def __init__(self, stream: io.TextIOBase):
        self.stream = stream  # its file descriptor, encoding and terminal

    def write(self, text: str) -> int:
        data = text.encode(self.stream.encoding, self.stream.errors)
        with contextlib.suppress(OSError):
            while data:
                data = data[os.write(self.stream.fileno(), data):]
        return len(text)

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self) -> str:
        return self.stream.encoding

    @property
    def errors(self) -> str:
        return self.stream.errors


def guard_console() -> None:
    """sys.stdout and sys.stderr as Consoles where they are files (not a test's capture): the
    first thing a command does, so that every print, progress bar and library writes through
    them."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, Console):
            continue
        try:
            stream.fileno()
        except (AttributeError, OSError, ValueError):  # none, or not a file (UnsupportedOperation)
            continue
        with contextlib.suppress(OSError, ValueError):  # already broken: what it holds is dropped
            stream.flush()
        setattr(sys, name, Console(stream))


def skip_final_collections() -> None:
    """At exit the interpreter's last garbage collections walk every object the run made: seconds
    for a trainer. Frozen first, they are skipped; atexit handlers and finalizers still run, and the
    memory goes back to the system when the process ends. Env workers do the same
    (envs/workers.py)."""
    atexit.unregister(gc.freeze)  # once, however many commands a process runs
    atexit.register(gc.freeze)


def run_command(body: Callable[[], int | None], *, cut_short: str | Callable[[], str]) -> int:
    """`body()`'s exit status (None is 0); a UserError is one `error:` line and 2; a stop signal is
    one line saying what the command left (`cut_short`, or what it returns then) and 128+signal."""
    guard_console()
    skip_final_collections()
    try:
        with interrupts():
            return body() or 0
    except UserError as err:
        return error_exit(err)
    except Interrupted as stop:
        return interrupted(stop, cut_short() if callable(cut_short) else cut_short)
