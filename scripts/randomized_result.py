"""The randomisation result as one CSV (docs/dishwashing_randomized.csv): for each arm (trained without or with
visual randomisation) and seed, the mean success of its last five evaluations on its training scenes (eval.csv) and
on the held-out scenes (eval_heldout.csv), from bench/learn.py output folders (<out>/runs/seed<N>/):

    python3 scripts/randomized_result.py --none runs/dish_frozen_heldout --randomized runs/dish_frozen_randomized \
        --seeds 1 2 --out docs/dishwashing_randomized.csv
"""

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainer.plot import read_rows  # noqa: E402

LAST = 5  # evaluations averaged: success swings between evaluations (docs/dishwashing.md)
SCENES = {"train": "eval.csv", "heldout": "eval_heldout.csv"}


def rows(arms: dict[str, Path], seeds: list[int]) -> list[tuple]:
    """(trained_with, seed, scene, success, evaluations averaged, last env_step) per arm, seed and scene."""
    result = []
    for arm, out in arms.items():
        for seed in seeds:
            for scene, name in SCENES.items():
                path = out / "runs" / f"seed{seed}" / name
                if not path.exists():
                    sys.exit(f"error: {path} not found; train that seed with bench/learn.py (a config whose "
                             "env.randomize.heldout is true writes eval_heldout.csv)")
                evals = read_rows(path)[-LAST:]
                if not evals or evals[0]["success"] is None:
                    sys.exit(f"error: {path} holds no success rates; it must be a dishwashing run's")
                success = sum(r["success"] for r in evals) / len(evals)
                result.append((arm, seed, scene, f"{success:.3f}", len(evals), evals[-1]["env_step"]))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--none", type=Path, required=True, help="bench/learn.py --out of the fixed-scene arm")
    parser.add_argument("--randomized", type=Path, required=True, help="the same of the randomised arm")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dishwashing_randomized.csv")
    args = parser.parse_args(argv)
    table = rows({"none": args.none, "randomized": args.randomized}, args.seeds)
    with open(args.out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("trained_with", "seed", "scene", "success", "evaluations", "env_step"))
        writer.writerows(table)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
