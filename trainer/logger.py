"""Where a run's numbers go, under `<tensorboard_dir>/<run>/`: TensorBoard events, eval.csv, curve.png (redrawn after
each evaluation) and videos/eval_ep<N>.gif (the first eval episode, also as stills in TensorBoard), and the console;
optionally Weights & Biases (`logging.wandb`), whose run id is the run name so a resumed run continues the same W&B run.

On resume the writer purges events past the checkpoint's step, and the CSV drops rows past it, so curves continue
from the checkpoint without a doubled tail from the interrupted run. What was logged at that step stays: a checkpoint
is saved after its step's episodes and evaluation are logged (trainer/loop.py).
"""

import csv
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

from errors import UserError
from trainer.config import Config, to_dict, to_yaml
from trainer.plot import plot_curves, read_rows

# success: empty for tasks without it; wall_s: training seconds since the run began, resumes included, stops not
EVAL_COLUMNS = ("env_step", "frames", "episode", "return", "success", "wall_s")
STRIP_FRAMES = 8  # stills of each eval episode shown in TensorBoard's images tab
# eval GIFs play one frame per agent step at this rate, whatever an agent step lasts in the task (cartpole at action
# repeat 8: 80 ms; dishwashing: 40 ms): faster than real time, at one speed for every task
GIF_FRAMES_PER_S = 30


class Logger:
    def __init__(self, cfg: Config, *, start_step: int, total_episodes: int, start_episode: int):
        self.cfg = cfg
        self.dir = Path(cfg.logging.tensorboard_dir) / cfg.run_name
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / "config.yaml").write_text(to_yaml(cfg))
        except OSError as err:
            raise UserError(f"cannot write the run's logs to {self.dir} ({err.strerror or err}); set "
                            "logging.tensorboard_dir to a folder this process may write to") from None
        self.writer = None
        if cfg.logging.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # TensorBoard hides events at or past purge_step; a fresh run (step 0) hides an earlier run's whole curve
            self.writer = SummaryWriter(str(self.dir), purge_step=start_step + 1 if start_step else 0)
        self.wandb = None
        if cfg.logging.wandb:
            try:
                import wandb
            except ImportError:
                raise UserError("logging.wandb is true but wandb is not installed; "
                                "pip install wandb==0.31.0, or set logging.wandb=false") from None
            self.wandb = wandb.init(project=cfg.logging.wandb_project, name=cfg.run_name, id=cfg.run_name,
                                    resume="allow", config=to_dict(cfg), dir=str(self.dir))
        self.eval_csv = self.dir / "eval.csv"
        # held-out scenes (env.randomize.heldout) in a file of their own, same columns: eval.csv's readers see the
        # in-distribution numbers they always did, and plot/sweep read either file
        for split in ("eval", "eval_heldout"):
            self._truncate_eval_csv(start_step, self.dir / f"{split}.csv")
        self.bar = tqdm(total=total_episodes, initial=start_episode, unit="ep", disable=not cfg.logging.progress,
                        dynamic_ncols=True)

    def scalars(self, metrics: dict, step: int, prefix: str) -> None:
        values = {f"{prefix}/{key}": value.item() if isinstance(value, torch.Tensor) else value
                  for key, value in metrics.items()}
        if self.writer is not None:
            for tag, value in values.items():
                self.writer.add_scalar(tag, value, step)
        if self.wandb is not None and values:
            self.wandb.log(values, step=step)

    def episode(self, metrics: dict, step: int) -> None:
        self.scalars(metrics, step, "train")
        self.bar.update(1)
        self.bar.set_postfix(step=step, ret=f"{metrics['episode_return']:.1f}", sps=f"{metrics['env_steps_per_s']:.1f}")

    def evaluation(self, mean_return: float, success_rate: float | None, *, step: int, frames: int, episode: int,
                   wall_s: float, clip: list[np.ndarray], split: str = "eval") -> None:
        """`success_rate` is None for tasks without success (trainer/loop.py `evaluate`); `clip`: uint8 (H, W, 3)
        frames of the first eval episode (empty when eval videos are off); `split`: eval, or eval_heldout (held-out
        scenes: <split>.csv and <split>/* in TensorBoard)."""
        self.scalars({"return": mean_return} | ({} if success_rate is None else {"success_rate": success_rate}), step,
                     split)
        path = self.dir / f"{split}.csv"
        new = not path.exists()
        with open(path, "a", newline="") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(EVAL_COLUMNS)
            writer.writerow((step, frames, episode, f"{mean_return:.3f}",
                             "" if success_rate is None else f"{success_rate:.3f}", f"{wall_s:.1f}"))
        if self.cfg.logging.curve:
            curves = {self.cfg.run_name: read_rows(self.eval_csv)}
            if (self.dir / "eval_heldout.csv").exists():
                curves[f"{self.cfg.run_name}, held-out scenes"] = read_rows(self.dir / "eval_heldout.csv")
            plot_curves(curves, self.dir / "curve.png", title=self.cfg.run_name)
        if clip:
            if self.writer is not None:  # TensorBoard's video needs moviepy; a strip of stills needs nothing
                picks = np.linspace(0, len(clip) - 1, num=min(len(clip), STRIP_FRAMES)).astype(int)
                self.writer.add_images("eval/frames", np.stack([clip[i] for i in picks]), step, dataformats="NHWC")
            (self.dir / "videos").mkdir(exist_ok=True)
            images = [Image.fromarray(frame) for frame in clip]
            images[0].save(self.dir / "videos" / f"eval_ep{episode}.gif", save_all=True, append_images=images[1:],
                           duration=1000 // GIF_FRAMES_PER_S, loop=0)
        success = "" if success_rate is None else f", success {success_rate:.0%}"
        what = "eval on held-out scenes" if split == "eval_heldout" else "eval"
        self.message(f"{what} after episode {episode} (step {step}): return {mean_return:.1f}{success}")

    def message(self, text: str) -> None:
        """A line on stdout, above the progress bar; flushed, so a log file under tmux shows it at once."""
        tqdm.write(text, file=sys.stdout)
        sys.stdout.flush()

    def warning(self, text: str) -> None:
        tqdm.write(f"warning: {text}", file=sys.stderr)

    def _truncate_eval_csv(self, start_step: int, path: Path) -> None:
        """Keep the evaluations logged up to `start_step`: a resume forgets what came after its checkpoint. Rows that
        do not parse (an edit, a disk that filled mid-row) are dropped with a warning rather than failing the resume."""
        if not path.exists():
            return
        try:
            with open(path, newline="") as f:
                rows = list(csv.reader(f))
        except (OSError, UnicodeDecodeError, csv.Error) as err:
            raise UserError(f"cannot read {path} ({err}); move it aside and the run starts a new one"
                            ) from None

        def step(row: list[str]) -> int | None:
            try:
                return int(row[0])
            except (IndexError, ValueError):
                return None

        steps = [step(row) for row in rows[1:]]
        if None in steps:
            self.warning(f"{path}: dropped {steps.count(None)} rows that do not parse")
        # rows of a run logged before wall_s was a column get it empty: one header for the whole file
        kept = [list(EVAL_COLUMNS)] + [row + [""] * (len(EVAL_COLUMNS) - len(row)) for row, at in zip(rows[1:], steps)
                                       if at is not None and at <= start_step]
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows(kept)

    def close(self) -> None:
        self.bar.close()
        if self.writer is not None:
            self.writer.close()
        if self.wandb is not None:
            self.wandb.finish()
