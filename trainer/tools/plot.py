"""Learning curves as PNG, from the CSVs runs and bench/learn.py write.

    python3 -m trainer.tools.plot runs/sac_video [runs/other ...] --out curves.png
    python3 -m trainer.tools.plot docs/cartpole_swingup.csv docs/cartpole_swingup_nstep3.csv \\
        --out compare.png

One curve of evaluation return per input (a bench/learn.py CSV: mean +/- std over its seeds),
against env frames or --x wall_s; tasks that report success get a success rate panel beside it.
"""

import argparse
import sys
from pathlib import Path

from matplotlib.backend_bases import FigureCanvasBase

from trainer.process.cli import prog, run_command
from trainer.run.curves import X_AXES, plot_curves, read_rows


def main(argv: list[str] | None = None) -> int:
    return run_command(lambda: plot(argv),
                       cut_short="the image was not written (an earlier file there is intact)")


def plot(argv: list[str] | None) -> None:
    parser = argparse.ArgumentParser(prog=prog("trainer.tools.plot"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "runs", nargs="+", type=Path,
        help="run folders (runs/<run>), their eval.csv, or bench/learn.py CSVs"
    )
    parser.add_argument("--out", type=Path, default=Path("curves.png"))
    parser.add_argument("--x", choices=X_AXES, default="frames",
                        help="the horizontal axis (default: frames)")
    args = parser.parse_args(argv)
    paths = [p / "eval.csv" if p.is_dir() else p for p in args.runs]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        parser.error(
            f"no eval.csv at {', '.join(missing)}; pass run folders such as runs/sac_video")
    formats = FigureCanvasBase.get_supported_filetypes()
    if args.out.suffix.lstrip(".").lower() not in formats or not args.out.parent.is_dir():
        parser.error(f"--out {args.out}: pass an image file in an existing folder, with a suffix "
                     f"matplotlib writes ({', '.join('.' + f for f in formats)}), e.g. curves.png")
    rows = []
    for path in paths:
        try:
            rows.append(read_rows(path))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
            parser.error(f"cannot read {path} as an eval.csv or bench/learn.py CSV "
                         f"({type(err).__name__}: {err}); pass the file a run or bench/learn.py "
                         "wrote")
    empty = [str(p) for p, r in zip(paths, rows) if not r]
    if empty:
        parser.error(
            f"no evaluations yet in {', '.join(empty)}; plot it after the run's first evaluation")
    untimed = [str(p) for p, r in zip(paths, rows) if args.x == "wall_s"
               and any(row["wall_s"] is None for row in r)]
    if untimed:
        parser.error(
            f"{', '.join(untimed)} logged no wall_s (runs before it was a column); plot them with "
            "--x frames")
    labels = [p.parent.name if p.name == "eval.csv" else p.stem for p in paths]
    # runs/a/seed1 and runs/b/seed1: the full paths tell them apart
    if len(set(labels)) < len(labels):
        labels = [str(p) for p in paths]
    plot_curves(dict(zip(labels, rows)), args.out, x=args.x)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
