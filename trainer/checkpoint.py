"""Checkpoints that survive a kill at any instant and load with `torch.load(..., weights_only=True)`.

Files in `checkpoint.dir` for a run named <name>:
  <name>_ep<N>.pt             every `checkpoint.every_episodes` episodes, and at the end of training
  <name>_latest.pt            the newest checkpoint (also written on SIGTERM/SIGINT)
  <name>_step<S>.replay.pt    the replay buffer at agent step S, referenced by the .pt files saved at that moment.
                              It is the size of the buffer, so it is written once per save rather than into every
                              file; the newest `checkpoint.keep_replays` are kept.
Every file is written to a temporary name, fsynced and renamed, so a kill leaves the previous good file in place.
`checkpoint.keep_last` > 0 keeps only that many `_ep<N>` files. A remote `checkpoint.dir` (see trainer/remote.py)
mirrors this folder; `fetch` callbacks below pull files from it on demand.
"""

import dataclasses
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from errors import UserError
from trainer.config import Config

FORMAT = 1
PAYLOAD_KEYS = ("format", "config", "agent", "progress", "rng", "replay_file")
# Config keys whose change makes a checkpoint meaningless or unloadable for the run being resumed.
STRUCTURAL_KEYS = ("env.id", "env.num_envs", "encoder.type", "sac.hidden_dim", "sac.hidden_depth", "sac.buffer_size")
PIXEL_KEYS = (
    "env.image_size", "env.frame_stack", "sac.feature_dim", "encoder.video.arch", "encoder.video.num_filters",
    "encoder.video.num_layers", "encoder.video.preset", "encoder.video.input_size",
    "sac.target_encoder", "encoder.video.freeze",  # whether the target critic holds encoder weights
    "encoder.lr",  # null <-> a value changes the critic optimiser's parameter groups
)


class CheckpointError(UserError):
    """A checkpoint file that cannot be read (missing, truncated, corrupt, or from another program)."""


@dataclass
class Saved:
    """What one save changed in the folder, in the order a mirror must apply it."""

    latest: Path
    written: list[Path] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


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


def save(directory: Path, name: str, payload: dict, replay_state: dict, *, env_step: int, episode: int | None,
         keep_replays: int, keep_last: int) -> Saved:
    """Write the replay sidecar, then `<name>_ep<episode>.pt` (when `episode` is given), then `<name>_latest.pt`."""
    directory.mkdir(parents=True, exist_ok=True)
    replay_file = f"{name}_step{env_step}.replay.pt"
    payload = {**payload, "format": FORMAT, "replay_file": replay_file}
    latest = directory / f"{name}_latest.pt"
    written = [directory / replay_file] + ([directory / f"{name}_ep{episode}.pt"] if episode is not None else []) + [latest]
    atomic_save(replay_state, written[0])
    for path in written[1:]:
        atomic_save(payload, path)
    return Saved(latest, written, _prune(directory, name, keep_replays, keep_last))


def _numbered(names: Iterable[str], name: str, kind: str) -> list[tuple[int, str]]:
    """(number, file name) of `<name>_ep<N>.pt` or `<name>_step<S>.replay.pt` files, oldest first."""
    suffix = {"ep": r"\.pt", "step": r"\.replay\.pt"}[kind]
    pattern = re.compile(rf"{re.escape(name)}_{kind}(\d+){suffix}")
    return sorted((int(m.group(1)), n) for n in names if (m := pattern.fullmatch(n)))


def _prune(directory: Path, name: str, keep_replays: int, keep_last: int) -> list[str]:
    """Drop old replay sidecars, `_ep` files beyond `keep_last`, and temporary files of killed writers."""
    names = os.listdir(directory)
    doomed = [n for _, n in _numbered(names, name, "step")[:-keep_replays]]
    if keep_last > 0:
        doomed += [n for _, n in _numbered(names, name, "ep")[:-keep_last]]
    for doomed_name in doomed:
        (directory / doomed_name).unlink(missing_ok=True)
    for path in directory.glob(f".{name}_*.tmp*"):
        if not path.name.endswith(f".tmp{os.getpid()}"):
            path.unlink(missing_ok=True)
    return doomed


def load(path: Path, fetch: Callable[[str], None] | None = None) -> tuple[dict, dict | None]:
    """(payload, replay state or None when its sidecar was pruned); CheckpointError if unreadable.
    `fetch(file_name)` first brings a file into `path.parent` from a remote mirror, when there is one."""
    if fetch:
        fetch(path.name)
    payload = _read(path)
    if not isinstance(payload, dict) or any(key not in payload for key in PAYLOAD_KEYS) or payload["format"] != FORMAT:
        raise CheckpointError(f"{path} is not a checkpoint of this trainer (format {FORMAT}); pass a <run>_latest.pt or <run>_ep<N>.pt file")
    replay_path = path.parent / payload["replay_file"]
    if fetch:
        fetch(replay_path.name)
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


def candidates(names: Iterable[str], name: str) -> list[str]:
    """Resume candidates among file names, newest first: `_latest`, then `_ep<N>` by decreasing N."""
    names = list(names)
    latest = f"{name}_latest.pt"
    return ([latest] if latest in names else []) + [n for _, n in reversed(_numbered(names, name, "ep"))]


def load_newest(directory: Path, name: str, names: Iterable[str] | None = None,
                fetch: Callable[[str], None] | None = None) -> tuple[Path, dict, dict | None] | None:
    """The newest checkpoint that loads, skipping damaged ones with a warning; None if there is none.
    `names` lists the files to choose from (default: the folder's); `fetch` as in `load`."""
    if names is None:
        names = os.listdir(directory) if directory.is_dir() else []
    for candidate in candidates(names, name):
        try:
            return (directory / candidate, *load(directory / candidate, fetch))
        except CheckpointError as err:
            print(f"warning: {err}; trying an older checkpoint", file=sys.stderr)
    return None


def check_compatible(saved: dict, current: dict, path: Path) -> None:
    """Refuse to resume a run whose config changed in a way that breaks the saved networks or replay."""
    keys = STRUCTURAL_KEYS + (PIXEL_KEYS if current["encoder"]["type"] == "video" else ())
    old, new = _saved_settings(saved), _flat(current)
    for key in keys:
        if old[key] != new[key]:
            raise UserError(
                f"checkpoint {path.name} was trained with {key}={old[key]} but the config says {key}={new[key]}; "
                "resume with the config it was trained with, or start a new run with another checkpoint.name"
            )


def changed_settings(saved: dict, current: dict) -> list[str]:
    """The keys a resumed run is allowed to change (batch size, n-step, episodes, ...) that did change, as
    "key old -> new": said on resume, so a changed profile or a forgotten --set never passes unnoticed. The config's
    table of profiles is left out: what counts is the settings the chosen one gave."""
    old, new = _saved_settings(saved), _flat(current)
    return [f"{key} {old.get(key)} -> {value}" for key, value in sorted(new.items())
            if old.get(key) != value and not key.startswith("profiles.")]


def _saved_settings(saved: dict) -> dict:
    """A checkpoint's config as {dotted key: value}; keys added after it was written count as their defaults."""
    return _flat(dataclasses.asdict(Config())) | _flat(saved)


def _flat(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat
