"""The error type for bad input, at the bottom of the import graph: it imports nothing, so every layer (sac, envs,
encoders, trainer) raises it without depending on the layers above.

Low layers know their own parameters, not the config keys that set them: their messages name a parameter in
backticks (`camera`), and the config layer (`trainer.config.explain`) puts the config key in its place, so renaming
a config key never means editing the replay buffer or an encoder.
"""


class UserError(Exception):
    """Bad input from the user (config, command line, checkpoint, files): the message names the problem and the fix.
    The command line prints it as one line and exits with status 2."""
