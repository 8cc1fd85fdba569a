"""The randomisation result as one CSV (docs/dishwashing_randomized.csv): for each arm (trained
without or with visual randomisation) and seed, the mean success of its last five evaluations on the
training scene (the task's own, scene.xml), on held-out scenes, and for the randomised arm also on
its own randomised training scenes. Reads bench/learn.py output folders (<out>/runs/seed<N>/):
eval.csv, eval_heldout.csv, and for the randomised arm fixed_scene/episodes.csv,
trainer.policy.evaluate's episodes of the run's last five checkpoints with randomisation off
(docs/log.md gives the command, in its 2026-11-29 randomisation entry):

    python3 scripts/randomized_result.py --none runs/dish_frozen_heldout \
        --randomized runs/dish_frozen_randomized --seeds 1 2 --out docs/dishwashing_randomized.csv

An arm left out keeps its rows from --out, so a new recipe for one arm does not retrain the other.
"""

import argparse
import csv
import math
import re
import sys
from pathlib import Path
from statistics import mean

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainer.run.curves import read_rows

LAST = 5  # evaluations averaged: success swings between evaluations (docs/dishwashing.md)
FIXED_SCENE = Path("fixed_scene") / "episodes.csv"
# scene -> the file of each arm's seed folder its evaluations come from
SCENES = {
    "none": {"train": "eval.csv", "heldout": "eval_heldout.csv"},
    "randomized": {"train": FIXED_SCENE, "heldout": "eval_heldout.csv",
                   "train_randomized": "eval.csv"},
}


def successes(path: Path) -> list[float]:
    """Each evaluation's success rate in order: eval.csv's rows, or each checkpoint's episodes in
    episodes.csv."""
    if path.name != "episodes.csv":
        return [row["success"] for row in read_rows(path)]
    by_checkpoint: dict[str, list[float]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            by_checkpoint.setdefault(row["checkpoint"], []).append(float(row["success"])
                                                                   if row["success"] else None)
    ordered = sorted(by_checkpoint, key=training_order)
    return [None if None in by_checkpoint[name] else mean(by_checkpoint[name]) for name in ordered]


def training_order(checkpoint: str) -> float:
    """<run>_ep<N>.pt: N; <run>_latest.pt: after every _ep<N> (whatever order the command line named
    them in)."""
    found = re.search(r"_ep(\d+)\.pt$", checkpoint)
    return int(found.group(1)) if found else math.inf


def rows(arm: str, out: Path, seeds: list[int]) -> list[tuple]:
    """(trained_with, seed, scene, success, evaluations averaged, the run's last env_step) per seed
    and scene."""
    result = []
    for seed in seeds:
        folder = out / "runs" / f"seed{seed}"
        for scene, name in SCENES[arm].items():
            path = folder / name
            if not path.exists():
                fix = (f"evaluate the run's last {LAST} checkpoints on the task's own scene: "
                       "python3 -m trainer.policy.evaluate CHECKPOINT ... --episodes 20 --set "
                       "env.randomize.enabled=false --set env.randomize.heldout=false --out "
                       f"{path.parent}" if name == FIXED_SCENE
                       else
                       "train that seed with bench/learn.py (a config whose env.randomize.heldout "
                       "is true writes eval_heldout.csv)")
                sys.exit(f"error: {path} not found; {fix}")
            evals = successes(path)[-LAST:]
            if not evals or None in evals:
                sys.exit(f"error: {path} holds no success rates; it must be a dishwashing run's")
            last_step = read_rows(folder / "eval.csv")[-1]["env_step"]
            result.append((arm, seed, scene, f"{mean(evals):.3f}", len(evals), last_step))
    return result


def kept(out: Path, arm: str) -> list[tuple]:
    """The rows `out` already holds for an arm this call does not measure."""
    table = []
    if out.exists():
        with open(out, newline="") as f:
            table = [tuple(row.values()) for row in csv.DictReader(f) if row["trained_with"] == arm]
    if not table:
        sys.exit(
            f"error: {out} holds no '{arm}' rows to keep; pass --{arm} with that arm's "
            "bench/learn.py folder")
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
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
        table += rows(arm, folder, args.seeds) if folder else kept(args.out, arm)
    with open(args.out, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(("trained_with", "seed", "scene", "success", "evaluations", "env_step"))
        writer.writerows(table)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
