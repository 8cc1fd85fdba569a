"""Train SAC from MuJoCo camera frames (or states).

    python3 train_sac.py --config configs/dmc/cartpole_swingup.yaml [--resume PATH|auto] [--set key=value ...]
"""

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="YAML config file, e.g. configs/dmc/cartpole_swingup.yaml")
    parser.add_argument("--resume", metavar="PATH|auto", help="checkpoint to continue from; auto = newest valid one, or a fresh start")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)")
    args = parser.parse_args(argv)

    from errors import UserError
    from trainer.config import explain, load_config
    from trainer.headless import configure

    try:
        cfg = load_config(args.config, args.set)
        configure()  # before trainer.loop imports the env layer, and with it mujoco
        from trainer.loop import Trainer

        return Trainer(cfg, resume=args.resume).train()
    except UserError as err:
        print(f"error: {explain(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
