"""Pretrain a run's video encoder on recorded episodes, for a frozen trunk (`encoder.video.weights`,
`freeze: true`):

    python3 -m trainer.tools.pretrain --config configs/dishwashing_video.yaml \\
        --data datasets/dishwashing_scripted datasets/dishwashing_noisy \\
        --out pretrained/dishwashing_simple2dcnn.pt

Supervised pretraining with PRIVILEGED labels: the encoder and an MLP head regress the simulator
state trainer.tools.record stored beside every frame; the policy trained on the frozen encoder acts
from frames alone. On recordings with views (trainer.tools.record --views) every step is also seen
in another scene, and --invariance weighs the squared difference of the two estimates. Held-out R^2
and RMSE are printed and written beside the weights (.json). An existing --out is refused unless
--replace. --init goes on from an earlier file's encoder, head and label units (e.g. on recordings
of states a trained policy reaches). See docs/encoders.md.

Hand-written because no library trains this project's encoders on its replay's stacks: a plain
supervised loop (Adam on a mean squared error) around the project's own builder, store and
augmentation.
"""

import argparse
import dataclasses
import functools
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from encoders import build_encoder
from envs import demos as demo_files
from envs.config import frames_of
from envs.demos import PIXELS, STATE, VIEWS
from envs.rendering import configure
from errors import UserError, check_writable_folder
from file_ops import atomic_write
from sac.augment import random_shift
from sac.demos import fill_store
from sac.replay import ReplayBuffer
from trainer.config.load import Config, load_config
from trainer.process import lock
from trainer.process.cli import prog, run_command
from trainer.process.device import resolve_device
from trainer.run.demo_store import check_fits
from trainer.run.demo_store import read as read_demos
from trainer.run.encoder_setup import (
    HEAD_LAYERS,
    checkpoint_encoder,
    save_encoder_weights,
    untrained,
)

# envs.* is imported where used, after configure(): mujoco's import raises on a bad MUJOCO_GL

DEFAULT_CONFIG = "configs/dishwashing_video.yaml"
DEFAULT_HIDDEN = 256  # the regression head's hidden layer: the frozen trunk's projection width
# a label dimension whose spread is below this (the fixed rack's slot) is not learnt
CONSTANT_STD = 1e-6


@dataclasses.dataclass
class Split:
    """Frame stacks and float32 (n, S) state labels of episodes laid end to end (reset frames
    included); `views` holds the same stacks as other scenes show them, a store per view
    (trainer.tools.record --views), if recorded."""

    store: ReplayBuffer
    labels: np.ndarray
    views: list[ReplayBuffer]

    def __len__(self) -> int:
        return len(self.labels)

    def stacks(self, frames: np.ndarray, device: torch.device, *,
               view: int | None = None) -> torch.Tensor:
        store = self.store if view is None else self.views[view]
        return store.stacks(frames, np.zeros_like(frames), device)


def split_of(episodes: list, cfg: Config, *, views: int) -> Split:
    def store_of(frames_of) -> ReplayBuffer:
        return fill_store([(frames_of(e), e.actions, e.rewards, e.terminations) for e in episodes],
                          frame_stack=cfg.env.frame_stack, seed=cfg.training.seed,
                          discount=cfg.sac.discount,
                          nstep=1, frames_on=None)

    store = store_of(lambda e: e.observations[PIXELS])
    labels = np.concatenate([e.observations[STATE] for e in episodes]).astype(np.float32)
    assert store.count == len(labels), "the store holds one frame per labelled step"
    return Split(store, labels,
                 [store_of(lambda e, k=k: e.observations[VIEWS][:, k]) for k in range(views)])


def read_datasets(paths: list[str], cfg: Config,
                  holdout: float) -> tuple[list, list, tuple[int, ...], int]:
    """(training episodes, held-out episodes, frame-stack shape (T, C, H, W), other scenes per
    step)."""
    # here: mujoco loads after configure() has checked MUJOCO_GL
    from envs.make import make_env

    env = make_env(cfg.env, pixels=True)
    obs_space, action_dim = env.observation_space, env.action_space.shape[0]
    env.close()
    train, held, views = [], [], {}
    for path in paths:
        data = read_demos(cfg, path)
        check_fits(cfg, data, obs_space, action_dim)
        if demo_files.STATE not in data.observation_space.spaces:
            raise UserError(f"dataset {path} holds no state observations to learn from; pretrain "
                            "on recordings of python3 -m trainer.tools.record, which store the "
                            "state beside every frame")
        if len(data.episodes) < 2:
            raise UserError(f"dataset {path} holds {len(data.episodes)} episode; pretraining holds "
                            "out at least one episode of each dataset: record at least 2")
        space = data.observation_space.spaces.get(demo_files.VIEWS)
        views[path] = 0 if space is None else space.shape[0]
        held_out = min(len(data.episodes) - 1, max(1, round(holdout * len(data.episodes))))
        kept = len(data.episodes) - held_out
        train += data.episodes[:kept]
        held += data.episodes[kept:]
    if len(set(views.values())) > 1:
        counts = ", ".join(f"{path}: {count}" for path, count in views.items())
        raise UserError(f"the datasets hold different numbers of other scenes per step ({counts}); "
                        "pretrain on recordings made with the same trainer.tools.record --views")
    return train, held, tuple(obs_space.shape), next(iter(views.values()))


def state_groups(cfg: Config, state_dim: int) -> dict[str, slice]:
    """Named parts of the state vector for the report: the dishwashing layout, else the vector as
    one part."""
    if cfg.env.id.startswith("Dishwashing"):
        # here: mujoco loads after configure() has checked MUJOCO_GL
        from envs.dishwashing.env import OBS_GROUPS

        if max(part.stop for part in OBS_GROUPS.values()) == state_dim:
            return OBS_GROUPS
    return {"state": slice(0, state_dim)}


class StateRegressor(nn.Module):
    """The encoder and an MLP head: uint8 (B, T, C, H, W) in, the standardised varying state
    dimensions out."""

    def __init__(self, encoder: nn.Module, *, outputs: int, hidden: int):
        super().__init__()
        self.encoder = encoder
        # the first layer and its ReLU become the frozen trunk's projection
        # (encoders/frozen.ProjectedEncoder)
        self.head = nn.Sequential(nn.Linear(encoder.repr_dim, hidden), nn.ReLU(),
                                  nn.Linear(hidden, outputs))

    def forward(self, stacks: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(stacks)).float()


def build_regressor(cfg: Config, obs_shape: tuple[int, ...], *, outputs: int,
                    hidden: int) -> StateRegressor:
    """A fresh, trainable encoder from the config (whatever its freeze and weights say) under a
    head."""
    return StateRegressor(build_encoder(untrained(cfg.encoder, freeze=False), obs_shape),
                          outputs=outputs,
                          hidden=hidden)


def report_path(weights: str | Path) -> Path:
    """Where this command writes the report of a weights file: beside it, as .json."""
    return Path(weights).with_suffix(".json")


def read_report(weights: str) -> dict:
    """The report this command wrote beside a weights file ({} where there is none)."""
    report = report_path(weights)
    return json.loads(report.read_text()) if report.is_file() else {}


def regressor_from(cfg: Config, weights: str):
    """(the encoder and head an earlier pretraining wrote, its labels' Standardiser): to go on
    training them."""
    report = report_path(weights)
    obs_shape = cfg.env.stack_shape
    loaded = checkpoint_encoder(weights, cfg.encoder.video, obs_shape, frames_of(cfg.env))
    labels = read_report(weights).get("labels")
    if loaded is None or set(loaded[1]) != set(HEAD_LAYERS) or labels is None:
        raise UserError(f"--init {weights} is not an encoder weights file with its readout and its "
                        f"report ({report}) beside it; pass a file python3 -m "
                        "trainer.tools.pretrain wrote")
    scaler, (state, head) = Standardiser.of(**labels), loaded
    if head["readout"]["weight"].shape[0] != scaler.outputs:
        raise UserError(f"--init {weights} estimates {head['readout']['weight'].shape[0]} numbers "
                        f"and its report's labels vary in {scaler.outputs}; put back the report it "
                        f"was written with ({report})")
    model = build_regressor(cfg, obs_shape, outputs=scaler.outputs,
                            hidden=head["projection"]["weight"].shape[0])
    model.encoder.load_state_dict(state)
    model.head[0].load_state_dict(head["projection"])
    model.head[2].load_state_dict(head["readout"])
    return model, scaler


@dataclasses.dataclass
class Standardiser:
    """Per-dimension (S,) mean and spread of the training labels; a constant one is predicted as its
    constant."""

    mean: np.ndarray
    std: np.ndarray
    varies: np.ndarray

    @classmethod
    def fit(cls, labels: np.ndarray) -> "Standardiser":
        return cls.of(mean=labels.mean(0), std=labels.std(0))

    @classmethod
    def of(cls, *, mean, std) -> "Standardiser":
        """From a mean and spread, e.g. a pretraining report's `labels`."""
        mean, std = np.asarray(mean, np.float32), np.asarray(std, np.float32)
        return cls(mean, std, std >= CONSTANT_STD)

    @property
    def outputs(self) -> int:
        return int(self.varies.sum())

    def targets(self, labels: np.ndarray) -> np.ndarray:
        """float32 (n, S) states -> (n, outputs) standardised targets."""
        return ((labels - self.mean)[:, self.varies] / self.std[self.varies]).astype(np.float32)

    def states(self, outputs: np.ndarray) -> np.ndarray:
        """(n, outputs) predictions -> float32 (n, S) states."""
        states = np.repeat(self.mean[None], len(outputs), axis=0)
        states[:, self.varies] = outputs * self.std[self.varies] + self.mean[self.varies]
        return states


def train(model: StateRegressor, data: Split, scaler: Standardiser, cfg: Config, *, epochs: float,
          batch_size: int,
          lr: float, invariance: float, device: torch.device, progress: bool = True) -> list[float]:
    """Adam on the mean squared error of the standardised labels, random-shifted stacks; with views,
    of both scenes' estimates, plus `invariance` times their squared difference. The loss of every
    step."""
    labels = torch.from_numpy(scaler.targets(data.labels))
    rng = np.random.default_rng(cfg.training.seed)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    steps = max(1, math.ceil(epochs * len(data) / batch_size))
    order = np.empty(0, dtype=np.int64)
    losses = []
    model.train()
    for _ in tqdm(range(steps), unit="step", disable=not progress, desc="pretraining"):
        if len(order) < batch_size:  # epochs: every stack once before any twice
            order = np.concatenate([order, rng.permutation(len(data))])
        frames, order = order[:batch_size], order[batch_size:]
        stacks, targets = random_shift(data.stacks(frames, device),
                                       cfg.sac.augment_pad), labels[frames].to(device)
        if data.views:
            view = int(rng.integers(len(data.views)))
            stacks = torch.cat([stacks,
                                random_shift(data.stacks(frames, device, view=view),
                                             cfg.sac.augment_pad)])
        with torch.autocast(device.type, torch.bfloat16, enabled=cfg.training.autocast):
            predicted = model(stacks)
        if data.views:
            own, other = predicted.chunk(2)
            loss = ((nn.functional.mse_loss(own, targets) + nn.functional.mse_loss(other, targets))
                    / 2)
            loss = loss + invariance * nn.functional.mse_loss(own, other)
        else:
            loss = nn.functional.mse_loss(predicted, targets)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def predict(model: StateRegressor, data: Split, cfg: Config, *, batch_size: int,
            device: torch.device,
            scaler: Standardiser, view: int | None = None) -> np.ndarray:
    """float32 (n, S): the state predicted for every stack of `data` (as `view` shows it), in the
    state's units."""
    model.eval()
    out = []
    for start in range(0, len(data), batch_size):
        frames = np.arange(start, min(start + batch_size, len(data)))
        with torch.autocast(device.type, torch.bfloat16, enabled=cfg.training.autocast):
            out.append(model(data.stacks(frames, device, view=view)).cpu().numpy())
    return scaler.states(np.concatenate(out))


def errors_by_group(predicted: np.ndarray, labels: np.ndarray, groups: dict[str, slice], *,
                    elsewhere: np.ndarray | None = None) -> dict[str, dict]:
    """Per group: R^2 over its varying dimensions (None if none vary) and RMSE in the state's units;
    given the estimates of the same steps in another scene, their root mean squared difference too
    (scene_gap)."""
    report = {}
    for name, part in groups.items():
        error, truth = predicted[:, part] - labels[:, part], labels[:, part]
        varies = truth.std(0) >= CONSTANT_STD
        spread = float(((truth - truth.mean(0))[:, varies] ** 2).sum())
        report[name] = {
            "r2": 1 - float((error[:, varies] ** 2).sum()) / spread if varies.any() else None,
            "rmse": float(np.sqrt((error**2).mean())),
        }
        if elsewhere is not None:
            report[name]["scene_gap"] = float(
                np.sqrt(((predicted - elsewhere)[:, part] ** 2).mean()))
    return report


def pretrain(cfg: Config, paths: list[str], out: Path, *, epochs: float, batch_size: int, lr: float,
             holdout: float, hidden: int | None = None, invariance: float | None = None,
             init: str | None = None,
             progress: bool = True) -> dict:
    """`invariance`: the weight of the scene pairs' squared difference, 1 if None; only for
    recordings with views. `init`: an earlier weights file to go on from (its head's width, not
    `hidden`)."""
    started = time.monotonic()
    torch.manual_seed(cfg.training.seed)
    model, scaler = regressor_from(cfg, init) if init else (None, None)  # before minutes of reading
    train_episodes, held_episodes, obs_shape, views = read_datasets(paths, cfg, holdout)
    if invariance is not None and not views:
        raise UserError("--invariance weighs the same step seen in two scenes, and these datasets "
                        "hold one scene per step; record them with trainer.tools.record --views "
                        "2, or drop --invariance")
    invariance = 1.0 if invariance is None else invariance
    training, held = (split_of(train_episodes, cfg, views=views),
                      split_of(held_episodes, cfg, views=views))
    device = resolve_device(cfg.training.device)
    if init and len(scaler.mean) != training.labels.shape[1]:
        raise UserError(f"--init {init} learnt a state of {len(scaler.mean)} numbers and these "
                        f"recordings hold {training.labels.shape[1]}; pass recordings of the task "
                        "it learnt")
    if not init:
        scaler = Standardiser.fit(training.labels)
        model = build_regressor(cfg, obs_shape, outputs=scaler.outputs, hidden=hidden
                                or DEFAULT_HIDDEN)
    model = model.to(device)
    losses = train(model, training, scaler, cfg, epochs=epochs, batch_size=batch_size, lr=lr,
                   invariance=invariance,
                   device=device, progress=progress)
    estimate = functools.partial(predict, model, held, cfg, batch_size=batch_size, device=device,
                                 scaler=scaler)
    predicted, elsewhere = estimate(), estimate(view=0) if views else None
    per_epoch = max(1, math.ceil(len(training) / batch_size))
    report = {
        "weights": str(out),
        "supervision": "privileged: the simulator state recorded beside each frame (the policy "
                       "acts from frames)",
        "data": [str(p) for p in paths], "init": init,
        "encoder": dataclasses.asdict(cfg.encoder.video) | {"obs_shape": list(obs_shape)},
        "episodes": {"train": len(train_episodes), "held_out": len(held_episodes)},
        "stacks": {"train": len(training), "held_out": len(held)},
        "epochs": epochs, "steps": len(losses), "batch_size": batch_size, "lr": lr,
        "head_hidden": model.head[0].out_features,
        "views": views, "invariance": invariance if views else None,
        "augment_pad": cfg.sac.augment_pad, "autocast": cfg.training.autocast,
        "device": str(device),
        "train_loss": {"first_epoch": float(np.mean(losses[:per_epoch])),
                       "last_epoch": float(np.mean(losses[-per_epoch:]))},
        # the estimate's units
        "labels": {"mean": scaler.mean.tolist(), "std": scaler.std.tolist()},
        "held_out_loss": float(np.mean((scaler.targets(predicted)
                                        - scaler.targets(held.labels)) ** 2)),
        "held_out": errors_by_group(predicted, held.labels,
                                    state_groups(cfg, training.labels.shape[1]),
                                    elsewhere=elsewhere),
    }
    if not all(torch.isfinite(p).all() for p in model.parameters()):
        raise UserError(f"pretraining diverged (training loss {losses[-1]:.3g}): its weights are "
                        f"not finite; lower --lr (was {lr}); {out} was not written")
    report["wall_s"] = round(time.monotonic() - started, 1)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        report["replaced"] = [str(path) for path in keep_aside(out)]
        save_encoder_weights(out, cfg.encoder, obs_shape, model.encoder, projection=model.head[0],
                             readout=model.head[2], frames=frames_of(cfg.env))
        atomic_write(report_path(out),
                     lambda f: f.write((json.dumps(report, indent=2) + "\n").encode()))
    except OSError as err:
        raise UserError(f"cannot write {err.filename or out} ({err.strerror or err}); free space "
                        "or pass another --out (an earlier file there is intact)") from None
    return report


def keep_aside(out: Path) -> list[Path]:
    """Hard links `<name>.replaced-<time>.pt` and `.json`: runs trained frozen on the old weights
    need that file."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    kept = []
    for path in (out, report_path(out)):
        if path.is_file():
            kept.append(path.with_name(f"{path.stem}.replaced-{stamp}{path.suffix}"))
            os.link(path, kept[-1])
    return kept


def check_writable(out: Path, *, replace: bool) -> None:
    """Checked before minutes of training: `out` can take the weights file, an existing one only
    with `replace`."""
    if not out.name or out.is_dir():
        raise UserError(
            f"--out {out} names a folder; pass the weights file to write, e.g. pretrained/mine.pt")
    if out.exists() and not replace:
        raise UserError(f"--out {out} already exists, and runs trained frozen on it resume only "
                        "with that exact file; pass another --out, or --replace to write over it "
                        "(the old file is kept beside it as "
                        f"{out.stem}.replaced-<time>{out.suffix})")
    check_writable_folder(out.parent, what=f"write {out}", fix="pass --out under one")


def describe(report: dict) -> str:
    # the column: the same step's estimates in two scenes, root mean squared difference
    gap = report["views"] > 0
    rows = [f"{'held-out':<18} {'R^2':>7} {'RMSE':>9}" + (f" {'scene gap':>10}" if gap else "")]
    for name, row in report["held_out"].items():
        r2 = "-" if row["r2"] is None else f"{row['r2']:.3f}"
        rows.append(f"{name:<18} {r2:>7} {row['rmse']:>9.4f}" + (f" {row['scene_gap']:>10.4f}"
                                                                 if gap else ""))
    loss = report["train_loss"]
    replaced = ([f"kept the file it replaced as {', '.join(report['replaced'])}"]
                if report["replaced"] else [])
    return "\n".join([
        f"wrote {report['weights']} ({report['steps']} steps, {report['wall_s']} s): training loss "
        f"{loss['first_epoch']:.3f} in the first epoch, {loss['last_epoch']:.3f} in the last; "
        f"held-out loss {report['held_out_loss']:.3f} (standardised state, mean squared error)",
        *rows,
        *replaced,
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog("trainer.tools.pretrain"), description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", default=DEFAULT_CONFIG,
                        help="pixel config whose encoder and frames are used")
    parser.add_argument("--data", nargs="+", required=True, metavar="DATASET",
                        help="Minari datasets (trainer.tools.record)")
    parser.add_argument("--out", required=True,
                        help="encoder weights file to write (and its report, .json)")
    parser.add_argument("--replace", action="store_true",
                        help="write over an existing --out, keeping the old file beside it as "
                             "<name>.replaced-<time>.pt")
    parser.add_argument("--epochs", type=float, default=10,
                        help="passes over the training stacks (fractions allowed)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate")
    parser.add_argument("--holdout", type=float, default=0.1,
                        help="share of each dataset's episodes held out (at least one, at most "
                             "all but one)")
    parser.add_argument("--head-hidden", type=int,
                        help="units of the regression head's hidden layer (default "
                             f"{DEFAULT_HIDDEN}; with --init, that file's)")
    parser.add_argument("--init", metavar="WEIGHTS",
                        help="go on from this earlier weights file (its encoder, head and label "
                             "units) instead of a fresh network")
    parser.add_argument("--invariance", type=float, default=None,
                        help="on recordings with views (trainer.tools.record --views): weight of "
                             "the squared difference between the estimates of one step in two "
                             "scenes (default 1)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key")
    args = parser.parse_args(argv)

    def pretrain_and_report() -> None:
        configure()  # before mujoco loads: its import raises on a bad MUJOCO_GL
        if not (0 < args.epochs < math.inf and args.batch_size >= 1 and 0 < args.lr < math.inf
                and 0 < args.holdout < 1 and (args.head_hidden is None or args.head_hidden >= 1)
                and (args.invariance is None or 0 <= args.invariance < math.inf)):
            raise UserError("--epochs and --lr must be finite and > 0, --batch-size and "
                            "--head-hidden >= 1, --holdout in (0, 1), --invariance finite and >= "
                            f"0; got {args.epochs}, {args.lr}, {args.batch_size}, "
                            f"{args.head_hidden}, {args.holdout}, {args.invariance}")
        if args.init and args.head_hidden is not None:
            raise UserError(
                f"--head-hidden is the width of --init {args.init}'s head; drop --head-hidden")
        check_writable(Path(args.out), replace=args.replace)
        cfg = load_config(args.config, [*args.set, "encoder.type=video"])
        # one pretraining into a file at a time
        with lock.hold_output(args.out, what="weights file"):
            report = pretrain(cfg, args.data, Path(args.out), epochs=args.epochs,
                              batch_size=args.batch_size,
                              lr=args.lr, holdout=args.holdout, hidden=args.head_hidden,
                              invariance=args.invariance, init=args.init)
        print(describe(report))

    return run_command(pretrain_and_report,
                       cut_short=f"{args.out} was not written (an earlier file there is intact)")


if __name__ == "__main__":
    sys.exit(main())
