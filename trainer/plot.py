"""Learning curves as PNG, from the eval.csv every run writes.

    python3 -m trainer.plot runs/sac_video [runs/other ...] --out curves.png

Each run folder (or eval.csv path) becomes one line of evaluation return against env frames. The trainer calls
`plot_runs` after every evaluation to keep runs/<run>/curve.png current; bench/learn.py calls `plot_seeds` for the
mean and spread over seeds with published reference points.
"""

import argparse
import csv
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only: pods and CI have no display
import matplotlib.pyplot as plt  # noqa: E402


def read_csv(path: Path) -> tuple[list[float], list[float]]:
    """(frames, return) columns of an eval.csv."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return [float(r["frames"]) for r in rows], [float(r["return"]) for r in rows]


def plot_runs(csv_paths: list[Path], out: Path, title: str = "") -> None:
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for path in csv_paths:
        frames, returns = read_csv(path)
        ax.plot(frames, returns, marker=".", label=path.parent.name)
    ax.set_xlabel("env frames")
    ax.set_ylabel("eval return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(csv_paths) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def seed_statistics(rows: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(frames, mean, std) of eval return over seeds, each seed interpolated onto the first seed's eval frames up to
    the last frame every seed reached (frames differ a little between seeds after a mid-episode restart)."""
    seeds = sorted({r["seed"] for r in rows})
    curves = {s: sorted((r["frames"], r["return"]) for r in rows if r["seed"] == s) for s in seeds}
    reached = min(c[-1][0] for c in curves.values())
    grid = np.array(sorted({f for f, _ in curves[seeds[0]] if f < reached} | {reached}))
    values = np.stack([np.interp(grid, *zip(*curves[s])) for s in seeds])
    return grid, values.mean(0), values.std(0)


def plot_seeds(rows: list[dict], out: Path, title: str, references: dict[str, tuple], reference_frames: tuple[int, ...]) -> None:
    """Mean +/- std of eval return over seeds, each seed interpolated onto the frames all seeds reached.
    `rows`: dicts with frames, seed, return; `references`: {label: (return at each of reference_frames)}."""
    grid, mean, std = seed_statistics(rows)
    seeds = {r["seed"] for r in rows}
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(grid, mean, label=f"this repo ({len(seeds)} seeds)")
    ax.fill_between(grid, mean - std, mean + std, alpha=0.25)
    for label, returns in references.items():
        points = [(f, r) for f, r in zip(reference_frames, returns) if r is not None]
        ax.scatter(*zip(*points), marker="x", label=label)
    ax.set_xlabel("env frames")
    ax.set_ylabel("eval return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (runs/<run>) or eval.csv files")
    parser.add_argument("--out", type=Path, default=Path("curves.png"))
    args = parser.parse_args(argv)
    paths = [p / "eval.csv" if p.is_dir() else p for p in args.runs]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error(f"no eval.csv at {', '.join(missing)}; pass run folders such as runs/sac_video")
    plot_runs(paths, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
