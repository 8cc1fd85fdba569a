"""Train SAC from MuJoCo camera frames (or states).

    python3 train_sac.py --config configs/dmc/cartpole_swingup.yaml [--resume PATH|auto] [--set key=value ...]

A start without --resume refuses to write over checkpoints of the same run (checkpoint.name); --start-over moves them
aside first. What each case does: docs/checkpoints.md.
"""

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="YAML config file, e.g. configs/dmc/cartpole_swingup.yaml")
    parser.add_argument("--resume", metavar="PATH|auto",
                        help="checkpoint to continue from; auto = the newest that loads (a fresh start if the run has none)")
    parser.add_argument("--start-over", action="store_true",
                        help="start a new run although checkpoints of this one exist: "
                             "they are moved into <dir>/<run>.replaced-<time>/, never deleted")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)")
    args = parser.parse_args(argv)

    from trainer.errors import UserError

    try:
        from trainer.config import load_config

        cfg = load_config(args.config, args.set)
        if args.resume and args.start_over:
            raise UserError("--start-over begins a new run and --resume continues one; pass one of them")
        from trainer import checkpoint
        from trainer.loop import Trainer

        trainer = Trainer(cfg)
        checkpoint.prepare(trainer.checkpoint_dir, cfg.run_name)
        if args.resume:
            trainer.resume(args.resume)
        else:
            checkpoint.start_fresh(trainer.checkpoint_dir, cfg.run_name, trainer.remote, start_over=args.start_over)
        return trainer.train()
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
