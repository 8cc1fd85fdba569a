"""Learning curves of evaluation return (and success, where a task reports it) over seeds, from
eval.csv files and bench/learn.py CSVs: what a run's logger draws as it goes and what `python3 -m
trainer.tools.plot` draws on demand."""

import csv
from collections.abc import Iterable
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only: pods and CI have no display
import matplotlib.pyplot as plt  # noqa: E402

from file_ops import atomic_write  # noqa: E402

X_AXES = {"frames": "env frames", "wall_s": "training wall time (s)"}


def read_rows(path: Path) -> list[dict]:
    """(env_step, frames, episode, seed, return, success, wall_s) rows of an eval.csv (seed 0) or a
    bench/learn.py CSV (no episode: None)."""
    with open(path, newline="") as f:
        return parse_rows(f)


def parse_rows(lines: Iterable[str]) -> list[dict]:
    return [{"env_step": int(r["env_step"]), "frames": int(r["frames"]),
             "episode": int(r["episode"]) if r.get("episode") else None,
             "seed": int(r.get("seed") or 0),
             "return": float(r["return"]),
             "success": float(r["success"]) if r.get("success") else None,
             "wall_s": float(r["wall_s"]) if r.get("wall_s") else None}
            for r in csv.DictReader(lines)]


def seed_statistics(rows: list[dict], key: str = "return", x: str = "frames") -> tuple[np.ndarray,
                                                                                       np.ndarray,
                                                                                        np.ndarray]:
    """(x, mean, std) of `key` over seeds, interpolated onto the first seed's eval points: seeds' x
    values differ."""
    seeds = sorted({r["seed"] for r in rows})
    curves = {s: sorted((r[x], r[key]) for r in rows if r["seed"] == s) for s in seeds}
    reached = min(c[-1][0] for c in curves.values())
    grid = np.array(sorted({f for f, _ in curves[seeds[0]] if f < reached} | {reached}))
    values = np.stack([np.interp(grid, *zip(*curves[s])) for s in seeds])
    return grid, values.mean(0), values.std(0)


def plot_curves(curves: dict[str, list[dict]], out: Path, title: str = "",
                references: dict[str, tuple] | None = None,
                reference_frames: tuple[int, ...] = (), x: str = "frames") -> None:
    """One curve per label, mean over seeds +/- std; `references`: {label: returns at
    reference_frames or None}."""
    success = all(r.get("success") is not None for rows in curves.values() for r in rows)
    panels = [("return", "eval return")] + ([("success", "eval success rate")] if success else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), dpi=100, squeeze=False)
    for ax, (key, name) in zip(axes[0], panels):
        draw_curves(ax, curves, key=key, x=x, references=references if key == "return" else None,
                    reference_frames=reference_frames)
        if key == "success":
            ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel(X_AXES[x])
        ax.set_ylabel(name)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if len(curves) + len(references or {}) > 1:
            ax.legend()
    fig.tight_layout()
    save_figure(fig, out)


def draw_curves(ax, curves: dict[str, list[dict]], *, key: str = "return", x: str = "frames",
                references: dict[str, tuple] | None = None,
                reference_frames: tuple[int, ...] = ()) -> None:
    """Into `ax`: each label's mean over seeds +/- std of `key`, then the references as crosses.
    Colours go by position, kept by a label with no rows or points: panels given the same labels
    colour them alike."""
    for i, (label, rows) in enumerate(curves.items()):
        if not rows:
            continue
        grid, mean, std = seed_statistics(rows, key, x)
        seeds = len({r["seed"] for r in rows})
        ax.plot(grid, mean, marker=".", color=f"C{i}", label=label if seeds == 1
                else f"{label} ({seeds} seeds)")
        if seeds > 1:
            ax.fill_between(grid, mean - std, mean + std, color=f"C{i}", alpha=0.25)
    for i, (label, returns) in enumerate((references or {}).items(), start=len(curves)):
        points = [(f, r) for f, r in zip(reference_frames, returns) if r is not None]
        if points:  # a method that reported neither frame count: no cross, and no legend entry
            ax.scatter(*zip(*points), marker="x", color=f"C{i}", label=label)


def save_figure(fig, out: Path) -> None:
    """Write and close `fig` (its format from `out`'s suffix), atomically."""
    try:
        atomic_write(out, lambda f: fig.savefig(f, format=out.suffix.lstrip(".").lower()))
    finally:
        plt.close(fig)
