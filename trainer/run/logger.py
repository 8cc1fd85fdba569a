"""Where a run's numbers go, under `<tensorboard_dir>/<run>/` (docs/guide.md, "Watching a run").
Files are rewritten atomically, eval.csv last, so its row means an evaluation was logged whole.
"""

import contextlib
import csv
import errno
import fnmatch
import io
import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from errors import UserError
from file_ops import atomic_write, new_aside_folder
from trainer.config.load import Config, to_dict, to_yaml
from trainer.run.curves import parse_rows, plot_curves
from trainer.run.video import write_videos

# success: empty for tasks without it; wall_s: training seconds since the run began, resumes
# included, stops not
# intervened: the share of the training steps since the row before that a person drove (demos.
# takeover), empty without take-over
EVAL_COLUMNS = ("env_step", "frames", "episode", "return", "success", "wall_s", "intervened")
# one row per training episode, as Stable-Baselines3's monitor.csv: `episode` counts it, env_step
# ends it
EPISODE_COLUMNS = ("env_step", "frames", "episode", "return", "length", "success", "wall_s")
STRIP_FRAMES = 8  # stills of each eval episode shown in TensorBoard's images tab
# what a run writes into its log folder: a fresh start moves these aside, and nothing else (a
# sweep's train.log)
LOG_FILES = ("config.yaml", "eval.csv", "eval_heldout.csv", "episodes.csv", "curve.png", "videos",
             "events.out.tfevents.*", "wandb", ".*.tmp*")


def quiet_writer_thread(args: threading.ExceptHookArgs) -> None:
    """threading.excepthook without the traceback of TensorBoard's writer thread for a failed write:
    the main thread reports it at its next write."""
    if not (isinstance(args.thread, _AsyncWriterThread) and issubclass(args.exc_type, OSError)):
        threading.__excepthook__(args)


class LogWriteError(UserError):
    """A log file that could not be written (a full disk, an I/O error): the trainer saves and stops
    on it."""


def set_aside(folder: Path) -> str | None:
    """Move the logs of an earlier run in `folder` into `<folder>.replaced-<time>/` beside it; what
    to say, or None."""
    old = sorted(n for n in os.listdir(folder)
                 if any(fnmatch.fnmatch(n, pattern) for pattern in LOG_FILES))
    if not old:
        return None
    aside = new_aside_folder(folder.parent, f"{folder.name}.replaced")
    for name in old:
        os.replace(folder / name, aside / name)
    return f"moved the logs of an earlier run '{folder.name}' ({', '.join(old)}) into {aside}/"


class Logger:
    def __init__(self, cfg: Config, *, start_step: int, total_episodes: int, start_episode: int):
        self.cfg = cfg
        self.dir = Path(cfg.logging.tensorboard_dir) / cfg.run_name
        self.failed = False  # a write failed: closing does not report the same disk again
        self.said_no_mp4 = False
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            # step 0: a fresh start (checkpoints come later)
            moved = set_aside(self.dir) if start_step == 0 else None
            atomic_write(self.dir / "config.yaml", lambda f: f.write(to_yaml(cfg).encode()))
        except OSError as err:
            raise UserError(f"cannot write the run's logs to {self.dir} ({err.strerror or err}); "
                            "set logging.tensorboard_dir to a folder this process may write "
                            "to") from None
        if moved:
            self.message(moved)
        self.writer = None
        if cfg.logging.tensorboard:
            threading.excepthook = quiet_writer_thread
            # TensorBoard hides events at or past purge_step: on resume, those of the interrupted
            # run's tail
            self.writer = SummaryWriter(str(self.dir), purge_step=start_step + 1 if start_step
                                        else None)
        self.wandb = None
        if cfg.logging.wandb:
            try:
                import wandb
            except ImportError:
                raise UserError("logging.wandb is true but wandb is not installed; "
                                "pip install wandb==0.31.0, or set logging.wandb=false") from None
            self.wandb = wandb.init(project=cfg.logging.wandb_project, name=cfg.run_name,
                                    id=cfg.run_name,
                                    resume="allow", config=to_dict(cfg), dir=str(self.dir))
        self.eval_csv = self.dir / "eval.csv"
        self.heldout_csv = self.dir / "eval_heldout.csv"
        self.eval_rows = self._kept_rows(start_step)
        self.heldout_rows = self._kept_rows(start_step, self.heldout_csv)
        for path, rows in ((self.eval_csv, self.eval_rows), (self.heldout_csv, self.heldout_rows)):
            if path.exists():  # a resume: without the rows past its checkpoint
                with self.writing(path):
                    self._write_csv(path, rows)
        # appended, a row per episode: rewriting it whole would cost a long run more with every
        # episode. Once here, without the rows past the checkpoint and any row a power cut left
        # short (a fresh start: the header alone)
        self.episodes_csv = self.dir / "episodes.csv"
        kept = self._kept_rows(start_step, self.episodes_csv, EPISODE_COLUMNS)
        with self.writing(self.episodes_csv):
            self._write_csv(self.episodes_csv, kept, EPISODE_COLUMNS)
            self.episode_log = open(self.episodes_csv, "a", newline="")
        # no tqdm ETA: it extrapolates from recent episodes, seed episodes included, which run many
        # times faster than those with updates; the trainer's `eta` counts from the first update
        self.bar = tqdm(total=total_episodes, initial=start_episode, unit="ep",
                        disable=not cfg.logging.progress,
                        dynamic_ncols=True,
                        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")

    @contextmanager
    def writing(self, what: str | Path):
        """An OSError of the writes inside (a full disk, an I/O error) as a one-line LogWriteError
        naming `what`."""
        try:
            yield
        except OSError as err:
            self.failed = True
            reason = (f"the disk holding {self.dir} is full" if err.errno == errno.ENOSPC
                      else err.strerror or str(err))
            raise LogWriteError(f"cannot write {what} ({reason})") from None

    def scalars(self, metrics: dict, step: int, prefix: str) -> None:
        values = {f"{prefix}/{key}": value.item() if isinstance(value, torch.Tensor) else value
                  for key, value in metrics.items()}
        if self.writer is not None:
            # the writer's thread raises its error here
            with self.writing(f"the TensorBoard events in {self.dir}"):
                for tag, value in values.items():
                    self.writer.add_scalar(tag, value, step)
        if self.wandb is not None and values:
            self.wandb.log(values, step=step)

    def episode(self, metrics: dict, *, step: int, frames: int, episode: int, success: bool | None,
                wall_s: float, eta_s: float | None) -> None:
        """A training episode ended at `step`; `episode`: how many have, this one included; `eta_s`:
        the run's seconds left, None while unknown."""
        self.scalars(metrics, step, "train")
        row = [step, frames, episode, f"{metrics['episode_return']:.3f}", metrics["episode_length"],
               "" if success is None else int(success), f"{wall_s:.1f}"]
        with self.writing(self.episodes_csv):
            csv.writer(self.episode_log).writerow(row)
            self.episode_log.flush()
        eta = "after the seed steps" if eta_s is None else tqdm.format_interval(eta_s)
        self.bar.set_postfix(eta=eta, step=step, ret=f"{metrics['episode_return']:.1f}",
                             # update draws it, once
                             sps=f"{metrics['env_steps_per_s']:.1f}", refresh=False)
        self.bar.update(1)

    def evaluation(self, mean_return: float, success_rate: float | None, *, step: int, frames: int,
                   episode: int,
                   wall_s: float, clip: list[np.ndarray], split: str = "eval",
                   intervened: float | None = None) -> None:
        """`clip`: uint8 (H, W, 3) frames of the first eval episode, or none; `split`: eval, or
        eval_heldout; `intervened`: EVAL_COLUMNS' share, None without take-over."""
        self.scalars({"return": mean_return}
                     | ({} if success_rate is None else {"success_rate": success_rate})
                     | ({} if intervened is None else {"intervened_share": intervened}), step,
                     split)
        heldout = split == "eval_heldout"
        success = "" if success_rate is None else f"{success_rate:.3f}"
        rows = (self.heldout_rows if heldout else self.eval_rows) + [
            [str(step), str(frames), str(episode), f"{mean_return:.3f}", success, f"{wall_s:.1f}",
             "" if intervened is None else f"{intervened:.3f}"]]
        if self.cfg.logging.curve:
            curve = self.dir / "curve.png"
            ours, held = (self.eval_rows, rows) if heldout else (rows, self.heldout_rows)
            curves = {self.cfg.run_name: parse_rows(_csv_text(ours).splitlines())}
            if held:
                curves[f"{self.cfg.run_name}, held-out scenes"] = parse_rows(
                    _csv_text(held).splitlines())
            with self.writing(curve):
                plot_curves({name: found for name, found in curves.items() if found}, curve,
                            title=self.cfg.run_name)
        if clip:
            # TensorBoard's video needs moviepy; a strip of stills needs nothing
            if self.writer is not None:
                picks = np.linspace(0, len(clip) - 1, num=min(len(clip), STRIP_FRAMES)).astype(int)
                with self.writing(f"the TensorBoard events in {self.dir}"):
                    self.writer.add_images("eval/frames", np.stack([clip[i] for i in picks]), step,
                                           dataformats="NHWC")
            gif = self.dir / "videos" / f"eval_ep{episode}.gif"
            with self.writing(f"{gif} and its MP4"):
                gif.parent.mkdir(exist_ok=True)
                no_mp4 = write_videos(clip, gif)
            # once a run: every evaluation after it would say the same
            if no_mp4 and not self.said_no_mp4:
                self.said_no_mp4 = True
                self.warning(no_mp4)
        if heldout:
            with self.writing(self.heldout_csv):
                self.heldout_rows = rows
                self._write_csv(self.heldout_csv, rows)
        else:
            with self.writing(self.eval_csv):  # last: its row says the evaluation's files are whole
                self.eval_rows = rows
                self._write_csv(self.eval_csv, rows)
        success = "" if success_rate is None else f", success {success_rate:.0%}"
        what = "eval on held-out scenes" if heldout else "eval"
        self.message(
            f"{what} after episode {episode} (step {step}): return {mean_return:.1f}{success}")

    def message(self, text: str) -> None:
        """A line on stdout, above the progress bar; flushed, so a log file under tmux shows it at
        once."""
        tqdm.write(text, file=sys.stdout)
        sys.stdout.flush()

    def warning(self, text: str) -> None:
        tqdm.write(f"warning: {text}", file=sys.stderr)

    def _write_csv(self, path: Path, rows: list[list[str]],
                   columns: tuple[str, ...] = EVAL_COLUMNS) -> None:
        atomic_write(path, lambda f: f.write(_csv_text(rows, columns).encode()))

    def _kept_rows(self, start_step: int, path: Path | None = None,
                   columns: tuple[str, ...] = EVAL_COLUMNS) -> list[list[str]]:
        """The rows of `path` (default eval.csv) up to `start_step`; rows that do not parse are
        dropped, warned."""
        path = path or self.eval_csv
        if not path.exists():
            return []
        try:
            with open(path, newline="") as f:
                rows = list(csv.reader(f))
        except (OSError, UnicodeDecodeError, csv.Error) as err:
            raise UserError(f"cannot read {path} ({err}); move it aside and the run starts a new "
                            "one"
                            ) from None

        def step(row: list[str]) -> int | None:
            """The row's step; None for a row shorter than the header too (a power cut mid-line)."""
            try:
                return int(row[0]) if len(row) >= len(rows[0]) else None
            except (IndexError, ValueError):
                return None

        steps = [step(row) for row in rows[1:]]
        if None in steps:
            self.warning(f"{path}: dropped {steps.count(None)} rows that do not parse")
        return [row + [""] * (len(columns) - len(row)) for row, at in zip(rows[1:], steps)
                if at is not None and at <= start_step]

    def close(self) -> None:
        """Flush and close without masking the error the run may be stopping on: a failed flush is a
        warning."""
        self.bar.close()
        with contextlib.suppress(OSError):  # flushed at every row: nothing is lost here
            self.episode_log.close()
        failed = self.failed
        try:
            with self.writing(f"the TensorBoard events in {self.dir}"):
                if self.writer is not None:
                    self.writer.close()
        except LogWriteError as err:
            if not failed:
                self.warning(f"{err}: the events logged since its last flush are missing")
        if self.wandb is not None:
            self.wandb.finish()


def _csv_text(rows: list[list[str]], columns: tuple[str, ...] = EVAL_COLUMNS) -> str:
    """A log CSV's contents (default eval.csv's): the header, then `rows`."""
    text = io.StringIO()
    csv.writer(text).writerows([list(columns), *rows])
    return text.getvalue()
