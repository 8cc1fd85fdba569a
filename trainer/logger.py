"""Where a run's numbers go: TensorBoard events and an eval CSV under `<tensorboard_dir>/<run>/`, and the console.

On resume the writer purges events past the checkpoint's step, and the CSV drops rows past it, so curves continue
from the checkpoint without a doubled tail from the interrupted run.
"""

import csv
from pathlib import Path

import torch
from tqdm import tqdm

from trainer.config import Config, to_yaml

EVAL_COLUMNS = ("env_step", "frames", "episode", "return", "success")  # success: empty for tasks without it


class Logger:
    def __init__(self, cfg: Config, start_step: int, total_episodes: int, start_episode: int):
        self.dir = Path(cfg.logging.tensorboard_dir) / cfg.run_name
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "config.yaml").write_text(to_yaml(cfg))
        self.writer = None
        if cfg.logging.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(self.dir), purge_step=start_step)
        self.eval_csv = self.dir / "eval.csv"
        self._truncate_eval_csv(start_step)
        self.bar = tqdm(total=total_episodes, initial=start_episode, unit="ep", disable=not cfg.logging.progress, dynamic_ncols=True)

    def scalars(self, metrics: dict, step: int, prefix: str) -> None:
        if self.writer is None:
            return
        for key, value in metrics.items():
            self.writer.add_scalar(f"{prefix}/{key}", value.item() if isinstance(value, torch.Tensor) else value, step)

    def episode(self, metrics: dict, step: int) -> None:
        self.scalars(metrics, step, "train")
        self.bar.update(1)
        self.bar.set_postfix(step=step, ret=f"{metrics['episode_return']:.1f}", sps=f"{metrics['env_steps_per_s']:.1f}")

    def evaluation(self, mean_return: float, success_rate: float | None, step: int, frames: int, episode: int) -> None:
        """`success_rate` is None for tasks that report no `info["success"]`."""
        self.scalars({"return": mean_return} | ({} if success_rate is None else {"success_rate": success_rate}), step, "eval")
        new = not self.eval_csv.exists()
        with open(self.eval_csv, "a", newline="") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(EVAL_COLUMNS)
            writer.writerow((step, frames, episode, f"{mean_return:.3f}", "" if success_rate is None else f"{success_rate:.3f}"))
        success = "" if success_rate is None else f", success {success_rate:.0%}"
        self.message(f"eval after episode {episode} (step {step}): return {mean_return:.1f}{success}")

    def message(self, text: str) -> None:
        tqdm.write(text)

    def _truncate_eval_csv(self, start_step: int) -> None:
        if not self.eval_csv.exists():
            return
        with open(self.eval_csv, newline="") as f:
            rows = list(csv.reader(f))
        kept = [rows[0]] + [row for row in rows[1:] if int(row[0]) <= start_step]
        with open(self.eval_csv, "w", newline="") as f:
            csv.writer(f).writerows(kept)

    def close(self) -> None:
        self.bar.close()
        if self.writer is not None:
            self.writer.close()
