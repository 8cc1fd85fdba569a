"""Resolved config values for shell scripts, read as the trainer reads them:

    python3 -m trainer.config CONFIG [--set key=value ...] --print run_name --print KEY
"""

import argparse
import dataclasses
import sys

from errors import UserError
from trainer.config.load import Config, load_config
from trainer.process.cli import error_exit, prog


def main(argv: list[str] | None = None) -> int:
    """Print resolved config values, one per line; a bad config or key is the trainer's one-line
    error, exit 2."""
    parser = argparse.ArgumentParser(prog=prog("trainer.config"), description=main.__doc__)
    parser.add_argument("config", help="YAML config file")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a config key (repeatable)"
    )
    parser.add_argument("--print", action="append", required=True, dest="keys", metavar="KEY",
                        help="dotted key (logging.tensorboard_dir) or run_name (repeatable)")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.set)
        values = [_resolved(cfg, key) for key in args.keys]
    except UserError as err:
        return error_exit(err)
    print("\n".join(str(value) for value in values))
    return 0


def _resolved(cfg: Config, key: str):
    """The value of a dotted config key or `run_name`; no other attribute (`sac.lr.real`) is a
    key."""
    value = cfg
    for part in key.split("."):
        names = {f.name
                 for f in dataclasses.fields(value)} if dataclasses.is_dataclass(value) else set()
        if value is cfg:
            names.add("run_name")
        if part not in names:
            raise UserError(f"unknown config key {key!r}; pass a dotted key such as "
                            "logging.tensorboard_dir, or run_name")
        value = getattr(value, part)
    return value


if __name__ == "__main__":
    sys.exit(main())
