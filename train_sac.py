"""Train SAC from MuJoCo camera frames (or states).

    python3 train_sac.py --config configs/dmc/cartpole_swingup.yaml [--resume PATH|auto] \\
        [--set key=value ...]
    [key=value ...]

A bare key=value is the same as --set key=value: it is what `wandb agent` passes a sweep trial
(${args_no_hyphens}).

A start without --resume refuses to write over checkpoints of the same run (checkpoint.name);
--start-over moves them aside first. What each case does: docs/checkpoints.md.
"""

import argparse
import sys

from envs.rendering import configure
from errors import UserError
from trainer.config.load import load_config
from trainer.process import signals
from trainer.process.cli import error_exit, guard_console, prog, skip_final_collections


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; `set` holds the --set overrides followed by the bare key=value ones."""
    parser = argparse.ArgumentParser(prog=prog("train_sac"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True,
                        help="YAML config file, e.g. configs/dmc/cartpole_swingup.yaml")
    parser.add_argument("--resume", metavar="PATH|auto",
                        help="checkpoint to continue from; auto = the newest that loads "
                             "(a fresh start if the run has none)")
    parser.add_argument("--start-over", action="store_true",
                        help="start a new run although checkpoints of this one exist (with "
                             "--resume PATH: continue PATH into it): they are moved into "
                             "<dir>/<run>.replaced-<time>/, never deleted")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key (repeatable)")
    parser.add_argument("--verbose", action="store_true",
                        help="print the whole resolved config at the start (it is always written "
                             "to the run folder's config.yaml)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="the same as --set KEY=VALUE")
    args = parser.parse_intermixed_args(argv)
    args.set += args.overrides
    return args


def main(argv: list[str] | None = None) -> int:
    guard_console()  # a terminal, pipe or disk that cannot take a line stops nothing
    skip_final_collections()  # a stopped run exits in seconds, not after its last collections
    args = parse_args(argv)

    # nothing to save before the run takes stop signals over, nor after it has saved
    signals.stop_at_once()
    started = False
    try:
        cfg = load_config(args.config, args.set)
        if args.resume == "auto" and args.start_over:
            raise UserError("--start-over begins a new run and --resume auto continues this one; "
                            "pass one of them (--start-over --resume PATH continues PATH after "
                            "moving this run's files aside)")
        configure()  # before trainer.run.loop loads mujoco: its import raises on a bad MUJOCO_GL
        from trainer.run.loop import Trainer

        trainer = Trainer(cfg, resume=args.resume, start_over=args.start_over, verbose=args.verbose)
        started = True
        return trainer.train()
    except UserError as err:
        return error_exit(err)
    except signals.Stopped as stop:
        # a second signal while the first one's save or shutdown ran, or one after the run ended
        if started:
            print("interrupted before the run finished shutting down; every checkpoint written is "
                  "whole (atomic writes): continue with --resume auto", file=sys.stderr)
        else:
            print(f"stopped by signal {stop.signum} while starting, before training began: nothing "
                  "was saved; run the same command again", file=sys.stderr)
        return 128 + stop.signum


if __name__ == "__main__":
    sys.exit(main())
