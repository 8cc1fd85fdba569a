"""Checkpoints that survive a kill at any instant and load with `torch.load(..., weights_only=True)`.

Files in `checkpoint.dir` for a run named <name>:
  <name>_ep<N>.pt             every `checkpoint.every_episodes` episodes, and at the end of training
  <name>_latest.pt            the newest checkpoint (also written on SIGTERM/SIGINT)
  <name>_step<S>.replay.pt    the replay buffer at agent step S, referenced by the .pt files saved at that moment.
                              It is the size of the buffer, so it is written once per save rather than into every
                              file; the newest `checkpoint.keep_replays` are kept.
Every file is written to a temporary name, fsynced and renamed, so a kill leaves the previous good file in place.
"""

import os
import re
import sys
from pathlib import Path

import torch

from trainer.errors import UserError

FORMAT = 1
PAYLOAD_KEYS = ("format", "config", "agent", "progress", "rng", "replay_file")
# Config keys whose change makes a checkpoint meaningless or unloadable for the run being resumed.
STRUCTURAL_KEYS = ("env.id", "encoder.type", "sac.hidden_dim", "sac.hidden_depth", "sac.buffer_size")
PIXEL_KEYS = (
    "env.image_size", "env.frame_stack", "sac.feature_dim", "encoder.video.arch", "encoder.video.num_filters",
    "encoder.video.num_layers", "encoder.video.preset", "encoder.video.input_size",
    "encoder.lr",  # null <-> a value changes the critic optimiser's parameter groups
)


class CheckpointError(UserError):
    """A checkpoint file that cannot be read (missing, truncated, corrupt, or from another program)."""


def atomic_save(obj, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save(directory: Path, name: str, payload: dict, replay_state: dict, env_step: int, episode: int | None, keep_replays: int) -> Path:
    """Write the replay sidecar, then `<name>_ep<episode>.pt` (when `episode` is given), then `<name>_latest.pt`."""
    directory.mkdir(parents=True, exist_ok=True)
    replay_file = f"{name}_step{env_step}.replay.pt"
    atomic_save(replay_state, directory / replay_file)
    payload = {**payload, "format": FORMAT, "replay_file": replay_file}
    if episode is not None:
        atomic_save(payload, directory / f"{name}_ep{episode}.pt")
    latest = directory / f"{name}_latest.pt"
    atomic_save(payload, latest)
    _prune(directory, name, keep_replays)
    return latest


def _prune(directory: Path, name: str, keep_replays: int) -> None:
    """Drop old replay sidecars and the temporary files of writers that were killed."""
    pattern = re.compile(rf"{re.escape(name)}_step(\d+)\.replay\.pt")
    replays = sorted((int(m.group(1)), p) for p in directory.iterdir() if (m := pattern.fullmatch(p.name)))
    for _, path in replays[:-keep_replays]:
        path.unlink(missing_ok=True)
    for path in directory.glob(f".{name}_*.tmp*"):
        if not path.name.endswith(f".tmp{os.getpid()}"):
            path.unlink(missing_ok=True)


def load(path: Path) -> tuple[dict, dict | None]:
    """(payload, replay state or None when its sidecar was pruned); CheckpointError if unreadable."""
    payload = _read(path)
    if not isinstance(payload, dict) or any(key not in payload for key in PAYLOAD_KEYS) or payload["format"] != FORMAT:
        raise CheckpointError(f"{path} is not a checkpoint of this trainer (format {FORMAT}); pass a <run>_latest.pt or <run>_ep<N>.pt file")
    replay_path = path.parent / payload["replay_file"]
    if not replay_path.exists():
        print(f"warning: {replay_path.name} was pruned (checkpoint.keep_replays); resuming {path.name} with an empty replay buffer", file=sys.stderr)
        return payload, None
    return payload, _read(replay_path)


def _read(path: Path):
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}; pass an existing file or --resume auto")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for damaged files; all mean the same to the user
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"checkpoint {path} is unreadable (truncated or corrupt: {reason}); resume from an older <run>_ep<N>.pt or use --resume auto") from None


def candidates(directory: Path, name: str) -> list[Path]:
    """Resume candidates, newest first: `_latest`, then `_ep<N>` by decreasing N."""
    if not directory.is_dir():
        return []
    pattern = re.compile(rf"{re.escape(name)}_ep(\d+)\.pt")
    episodes = sorted(((int(m.group(1)), p) for p in directory.iterdir() if (m := pattern.fullmatch(p.name))), reverse=True)
    latest = directory / f"{name}_latest.pt"
    return ([latest] if latest.exists() else []) + [p for _, p in episodes]


def load_newest(directory: Path, name: str) -> tuple[Path, dict, dict | None] | None:
    """The newest checkpoint that loads, skipping damaged ones with a warning; None if there is none."""
    for path in candidates(directory, name):
        try:
            return (path, *load(path))
        except CheckpointError as err:
            print(f"warning: {err}; trying an older checkpoint", file=sys.stderr)
    return None


def check_compatible(saved: dict, current: dict, path: Path) -> None:
    """Refuse to resume a run whose config changed in a way that breaks the saved networks or replay."""
    keys = STRUCTURAL_KEYS + (PIXEL_KEYS if current["encoder"]["type"] == "video" else ())
    for key in keys:
        old, new = _lookup(saved, key), _lookup(current, key)
        if old != new:
            raise UserError(
                f"checkpoint {path.name} was trained with {key}={old} but the config says {key}={new}; "
                "resume with the config it was trained with, or start a new run with another checkpoint.name"
            )


def _lookup(tree: dict, dotted: str):
    for part in dotted.split("."):
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree
