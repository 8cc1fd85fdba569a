"""Every command's way out: its exit status, bad input as one line and 2, a stop signal as one line and
128+signal."""

import re
import sys
from collections.abc import Callable

from errors import Diverged, UserError
from trainer.signals import Interrupted, interrupted, interrupts

# the parameters that low layers name in their messages (in backticks, see errors.py) -> the config keys that set them
PARAMETER_KEYS = {
    "env_id": "env.id", "camera": "env.camera", "backend": "env.backend", "num_envs": "env.num_envs",
    "warp_processes": "env.warp_processes",
    "parts": "env.randomize.parts", "light_tilt_deg": "env.randomize.light_tilt_deg",
    "camera_pos": "env.randomize.camera_pos", "camera_rot_deg": "env.randomize.camera_rot_deg",
    "camera_fov_deg": "env.randomize.camera_fov_deg",
    "capacity": "sac.buffer_size",
    "arch": "encoder.video.arch", "pretrained": "encoder.video.pretrained", "weights": "encoder.video.weights",
    "preset": "encoder.video.preset", "input_size": "encoder.video.input_size", "freeze": "encoder.video.freeze",
}

USER_ERROR_STATUS = 2  # argparse's status for a usage error: bad input from the command line or a file
DIVERGED_STATUS = 3  # the run stopped before saving a NaN or inf state: its settings need a change


def explain(err: UserError) -> str:
    """The error's message with config keys in place of the parameters low layers name in backticks."""
    return re.sub(r"`(\w+)`", lambda m: PARAMETER_KEYS.get(m.group(1), m.group(0)), str(err))


def error_exit(err: UserError) -> int:
    """Every command's way out on bad input: the explained message as one line on stderr, and the exit status."""
    print(f"error: {explain(err)}", file=sys.stderr)
    return DIVERGED_STATUS if isinstance(err, Diverged) else USER_ERROR_STATUS


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
