"""The randomisation result as one CSV (docs/dishwashing_randomized.csv): for each arm (trained without or with
visual randomisation) and seed, the mean success of its last five evaluations on its training scenes (eval.csv) and
on the held-out scenes (eval_heldout.csv), from bench/learn.py output folders (<out>/runs/seed<N>/):

    python3 scripts/randomized_result.py --none runs/dish_frozen_heldout --randomized runs/dish_frozen_randomized \
        --seeds 1 2 --out docs/dishwashing_randomized.csv

An arm left out keeps its rows from --out, so a new recipe for one arm does not retrain the other.
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


def kept(out: Path, arm: str) -> list[tuple]:
    """The rows `out` already holds for an arm this call does not measure."""
    table = []
    if out.exists():
        with open(out, newline="") as f:
            table = [tuple(row.values()) for row in csv.DictReader(f) if row["trained_with"] == arm]
    if not table:
        sys.exit(f"error: {out} holds no '{arm}' rows to keep; pass --{arm} with that arm's bench/learn.py folder")
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--none", type=Path, help="bench/learn.py --out of the fixed-scene arm")
    parser.add_argument("--randomized", type=Path, help="the same of the randomised arm")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dishwashing_randomized.csv")
    args = parser.parse_args(argv)
    arms = {"none": args.none, "randomized": args.randomized}
    if not any(arms.values()):
        sys.exit("error: nothing to measure; pass --none, --randomized or both")
    table = []
    for arm, folder in arms.items():
        table += rows({arm: folder}, args.seeds) if folder else kept(args.out, arm)
    with open(args.out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("trained_with", "seed", "scene", "success", "evaluations", "env_step"))
        writer.writerows(table)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
