"""The one exception type the command line turns into a one-line message and exit status 2."""


class UserError(Exception):
    """Bad input from the user (config, command line, checkpoint): the message names the problem and the fix."""
