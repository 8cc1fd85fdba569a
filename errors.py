"""The error type for bad input, at the bottom of the import graph: it imports only the standard
library, so every layer (sac, envs, encoders, trainer) raises it without depending on the layers
above; with it, the check of the folder a file will be written under, which the env and trainer
layers make before work a failed write would lose.

Low layers know their own parameters, not the config keys that set them: their messages name a
parameter in backticks (`camera`), and the config layer (`trainer.process.cli.explain`) puts the
config key in its place, so renaming a config key never means editing the replay buffer or an
encoder.
"""

import errno
import os
from pathlib import Path


class UserError(Exception):
    """Bad input from the user (config, command line, checkpoint, files): the message names the
    problem and the fix. The command line prints it as one line and exits with status 2."""


class Diverged(UserError):
    """Training whose losses, weights or optimiser states went NaN or inf: one line, exit status 3
    (a sweep counts the trial as pruned and goes on)."""


def check_writable_folder(folder: str | Path, *, what: str, fix: str) -> None:
    """`folder` exists or can be made: the nearest of it and its parents that exists is a folder
    this process may write to. Else a UserError "cannot {what}: <that one> is not a folder this
    process may write to; {fix}"."""
    # as the writer will take it: "~" is expanded, if at all, by the caller for both
    folder = Path(folder)
    try:
        # a relative path ends in "."
        existing = next(path for path in (folder, *folder.parents) if path.exists())
    except OSError as err:  # a folder on the way that this process may not search
        raise UserError(
            f"cannot {what}: {err.filename} cannot be searched ({err.strerror}); {fix}") from None
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(
            f"cannot {what}: {existing.resolve()} is not a folder this process may write to; {fix}")


# a full disk, a quota, a file size limit: each means "make room, or write elsewhere"
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def no_room(err: BaseException | None) -> OSError | None:
    """The OSError behind `err` (itself, or one it was raised from or during) that refused a
    write for want of room, if any: writers such as PIL's raise their own error while handling
    the first."""
    while err is not None and not (isinstance(err, OSError) and err.errno in NO_ROOM):
        err = err.__cause__ or err.__context__
    return err
