"""Checkpoints that survive a kill at any instant and load with `torch.load(..., weights_only=True)`; the files and
what each case guarantees: docs/checkpoints.md. `fetch` callbacks pull files from a remote mirror (trainer/remote.py).
"""

import dataclasses
import errno
import os
import re
import shutil
import sys
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import torch

from encoders.config import ARCH_KEYS
from envs.config import frame_settings
from errors import UserError, atomic_write, new_aside_folder
from sac import agent, replay
from trainer import lock, signals
from trainer.config import Config

FORMAT = 2  # format 1 has no checksums: it loads unverified
READABLE_FORMATS = (1, 2)
PAYLOAD_KEYS = ("format", "config", "agent", "progress", "rng", "replay_file")
RESUME_FIX = "resume from an older <run>_ep<N>.pt or use --resume auto"
PROBE_BYTES = 4096  # one page, so a full disk fails the start-up probe
# Config keys whose change makes a checkpoint meaningless or unloadable for the run being resumed.
STRUCTURAL_KEYS = ("env.id", "env.num_envs", "encoder.type", "sac.hidden_dim", "sac.hidden_depth", "sac.buffer_size",
                   "sac.critic_layer_norm")
PIXEL_KEYS = (
    "env.image_size", "env.frame_stack", "sac.feature_dim", *(f"encoder.video.{key}" for key in ARCH_KEYS),
    "sac.target_encoder", "encoder.video.freeze",  # whether the target critic holds encoder weights
    "encoder.lr",  # null <-> a value changes the critic optimiser's parameter groups
)


class CheckpointError(UserError):
    """A checkpoint file that cannot be read (missing, truncated, corrupt, or from another program)."""


class ReplayDamaged(CheckpointError):
    """A replay sidecar that cannot be read or fails its checksum; it costs the replay, never the weights."""


@dataclass
class Progress:
    """The counters a checkpoint carries (`progress` in its payload)."""

    episode: int = 0
    env_step: int = 0  # agent steps (each is env.action_repeat simulator steps)
    evaluation_due: bool = False  # cut short by a stop signal: the resume runs it first
    # with N > 1 envs, the training seeds (offsets from training.seed) below this went to envs at earlier starts
    next_seed: int = 0


@dataclass
class Saved:
    """What one save changed in the folder, in the order a mirror must apply it."""

    latest: Path
    written: list[Path] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


class _Crc32:
    """CRC-32 against storage damage, fast enough for a SIGTERM save (docs/checkpoints.md#writing)."""

    def __init__(self):
        self.value = 0

    def update(self, data) -> None:
        self.value = zlib.crc32(data, self.value)


def digest(tree) -> str:
    """CRC-32 over a checkpoint's contents (tensor bytes, dtypes, shapes, keys and plain values, in order)."""
    h = _Crc32()
    _feed(h, tree)
    return f"crc32:{h.value:08x}"


def _feed(h, value) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    elif isinstance(value, dict):
        h.update(f"D{len(value)}".encode())
        for key, item in value.items():
            _feed(h, key)
            _feed(h, item)
    elif isinstance(value, (list, tuple)):
        h.update(f"L{len(value)}".encode())
        for item in value:
            _feed(h, item)
    else:
        h.update(f"{type(value).__name__}:{value!r};".encode())


def _tensors(tree, prefix: str = ""):
    if isinstance(tree, torch.Tensor):
        yield prefix, tree
    elif isinstance(tree, dict):
        for key, value in tree.items():
            yield from _tensors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            yield from _tensors(value, f"{prefix}.{i}")


def non_finite(tree) -> str | None:
    """The first floating-point tensor holding NaN or inf, by key; None when all are finite."""
    return next((key for key, t in _tensors(tree) if t.is_floating_point() and not bool(torch.isfinite(t).all())), None)


def _size(n: float) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 2**10:.0f} KB"


def atomic_save(obj, path: Path) -> None:
    """Write `obj` to a temporary file, fsync, rename over `path`; on failure `path` is left as it was."""
    try:
        atomic_write(path, lambda f: torch.save(obj, f))
    except BaseException as raised:
        err = _os_error(raised)
        if err is None:
            raise
        if err.errno == errno.ENOSPC:
            need = sum(t.nbytes for _, t in _tensors(obj))
            free = shutil.disk_usage(path.parent).free
            raise CheckpointError(
                f"cannot save {path.name}: the disk holding {path.parent} is full (this file needs about "
                f"{_size(need)}, {_size(free)} free); free space or set checkpoint.dir to a larger disk, then continue "
                "with --resume auto (the previous checkpoint is intact)") from None
        raise CheckpointError(
            f"cannot save {path} ({err.strerror or err}); make {path.parent} writable or set checkpoint.dir, then "
            "continue with --resume auto (the previous checkpoint is intact)") from None


def _os_error(err: BaseException | None) -> OSError | None:
    """The OSError behind `err`, if any: torch's zip writer, on closing after a failed write, raises a RuntimeError
    of its own ("unexpected pos") whose context is the OSError (ENOSPC) that matters."""
    while err is not None and not isinstance(err, OSError):
        err = err.__cause__ or err.__context__
    return err


def save(directory: Path, name: str, payload: dict, replay_state: dict, *, env_step: int, episode: int | None,
         keep_replays: int, keep_last: int) -> Saved:
    """Write the replay sidecar, then `<name>_ep<episode>.pt` (when `episode` is given), then `<name>_latest.pt`,
    each with its checksum (a checkpoint also its sidecar's). A failed write leaves the previous files."""
    directory.mkdir(parents=True, exist_ok=True)
    replay_file = f"{name}_step{env_step}.replay.pt"
    replay_checksum = digest(replay_state)
    payload = {**payload, "format": FORMAT, "replay_file": replay_file, "replay_checksum": replay_checksum}
    payload["checksum"] = digest(payload)
    latest = directory / f"{name}_latest.pt"
    written = (
        [directory / replay_file] + ([directory / f"{name}_ep{episode}.pt"] if episode is not None else []) + [latest]
    )
    replaces_a_sidecar = written[0].exists()  # a second save at the same step, which older files may name
    atomic_save({**replay_state, "checksum": replay_checksum}, written[0])
    try:
        atomic_save(payload, written[1])
    except CheckpointError:
        if not replaces_a_sidecar:
            written[0].unlink()  # no checkpoint names it: it would only hold the space the next try needs
        raise
    for path in written[2:]:
        atomic_save(payload, path)
    return Saved(latest, written, _prune(directory, name, keep_replays, keep_last, keep={n.name for n in written}))


def _numbered(names: Iterable[str], name: str, kind: str) -> list[tuple[int, str]]:
    """(number, file name) of `<name>_ep<N>.pt` or `<name>_step<S>.replay.pt` files, oldest first."""
    suffix = {"ep": r"\.pt", "step": r"\.replay\.pt"}[kind]
    pattern = re.compile(rf"{re.escape(name)}_{kind}(\d+){suffix}")
    return sorted((int(m.group(1)), n) for n in names if (m := pattern.fullmatch(n)))


def run_files(names: Iterable[str], name: str) -> list[str]:
    names = list(names)
    latest = [f"{name}_latest.pt"] if f"{name}_latest.pt" in names else []
    return latest + [n for _, n in _numbered(names, name, "ep")] + [n for _, n in _numbered(names, name, "step")]


def upload_link(path: Path, job: int) -> Path:
    """Where trainer/remote.py hard-links a saved file until its upload `job` sends it."""
    return path.with_name(f".upload{os.getpid()}-{job}-{path.name}")


def _temporaries(directory: Path, name: str) -> list[tuple[Path, int]]:
    """(path, pid) of this run's temporary files: files being written and hard links awaiting upload."""
    file = rf"{re.escape(name)}_(?:latest|ep\d+|step\d+\.replay|probe)\.pt"
    pattern = re.compile(rf"\.{file}\.tmp(\d+)|\.upload(\d+)-\d+-{file}")
    return [(directory / n, int(match.group(1) or match.group(2)))
            for n in os.listdir(directory) if (match := pattern.fullmatch(n))]


def _prune(directory: Path, name: str, keep_replays: int, keep_last: int, keep: set[str]) -> list[str]:
    """Drop old sidecars, `_ep` files beyond `keep_last` and killed writers' files; never `keep`, this save's."""
    names = os.listdir(directory)
    doomed = _oldest_beyond(_numbered(names, name, "step"), keep_replays, keep)
    if keep_last > 0:
        doomed += _oldest_beyond(_numbered(names, name, "ep"), keep_last, keep)
    for doomed_name in doomed:
        (directory / doomed_name).unlink(missing_ok=True)
    for path, pid in _temporaries(directory, name):
        if pid != os.getpid():
            path.unlink(missing_ok=True)
    return doomed
def _oldest_beyond(numbered: list[tuple[int, str]], count: int, keep: set[str]) -> list[str]:
    return [n for _, n in numbered if n not in keep][:max(0, len(numbered) - count)]


def prepare(directory: Path, name: str) -> TextIO:
    """At start: create the folder, take the run's lock, remove temporary files killed writers left, and write a
    probe, so an unwritable or full folder fails now. Returns the lock, held until closed or the process ends."""
    probe, held = directory / f".{name}_probe.pt.tmp{os.getpid()}", None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        held = lock.hold(directory / name, what=f"run '{name}'", fix=(
            "wait for it to end, or stop it (its checkpoints are whole at any instant) and continue with --resume "
            "auto; or train a separate run with --set checkpoint.name=<new name>"))
        for path, _ in _temporaries(directory, name):
            path.unlink()
        with open(probe, "wb") as f:
            f.write(bytes(PROBE_BYTES))
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        if held:
            held.close()
        reason = "the disk is full" if err.errno == errno.ENOSPC else err.strerror or str(err)
        raise CheckpointError(f"cannot write checkpoints to {directory} ({reason}); free space or make it writable, "
                              "or set checkpoint.dir to another folder") from None
    finally:
        if probe.exists():  # unlink on a read-only mount fails even for a missing file
            probe.unlink()
    return held


def load(path: Path, fetch: Callable[[str], None] | None = None) -> tuple[dict, dict | None]:
    """(payload, replay state or None when its sidecar was pruned) of a checkpoint named by hand; CheckpointError
    if either is damaged. `fetch(file_name)` brings a file into `path.parent` from a remote mirror."""
    payload = load_weights(path, fetch)
    try:
        return payload, load_replay(path.parent, payload, fetch)
    except ReplayDamaged as err:
        raise ReplayDamaged(f"{err}; move it aside to resume {path.name} with an empty replay buffer, "
                            "or use --resume auto") from None


def load_weights(path: Path, fetch: Callable[[str], None] | None = None) -> dict:
    """A checkpoint's payload, its checksum verified and its tensors finite; CheckpointError otherwise."""
    if fetch:
        fetch(path.name)
    try:
        payload = _read(path, "checkpoint")
    except CheckpointError as err:
        raise CheckpointError(f"{err}; {RESUME_FIX}") from None
    if not is_checkpoint(payload):
        raise CheckpointError(
            f"{path} is not a checkpoint of this trainer (format {FORMAT}); "
            "pass a <run>_latest.pt or <run>_ep<N>.pt file"
        )
    problem = damage(payload)
    if problem:
        raise CheckpointError(f"checkpoint {path} {problem}; {RESUME_FIX}")
    return payload


def is_checkpoint(payload) -> bool:
    """Whether a loaded file is a checkpoint of this trainer, of a format it reads (`damage` says if it is intact)."""
    known = isinstance(payload, dict) and all(key in payload for key in PAYLOAD_KEYS)
    return known and payload["format"] in READABLE_FORMATS


def damage(payload: dict) -> str | None:
    """Why a loaded checkpoint is unusable (checksum, layout, NaN or inf), as the end of "checkpoint <file> ...";
    None when intact. Removes the checksum from `payload`."""
    if payload["format"] >= 2:
        stored = payload.pop("checksum", None)
        if stored != digest(payload):
            return "is corrupt (its checksum does not match its contents)"
    problem = _payload_problem(payload)
    if problem:  # format 1 has no checksum: a damaged or hand-made file would fail deep in the trainer
        return f"is damaged or not from this trainer: {problem}"
    bad = non_finite(payload["agent"])
    if bad:
        return f"holds NaN or inf in {bad} (damaged, or the run diverged before this save)"
    return None


def _payload_problem(payload: dict) -> str | None:
    """What in a payload is not what `save` writes (None: nothing), checked before the trainer reads it."""
    progress, rng = payload["progress"], payload["rng"]
    sections = [name for name, value in dataclasses.asdict(Config()).items() if isinstance(value, dict)]
    if not isinstance(payload["config"], dict) or any(
            not isinstance(payload["config"].get(name, {}), dict) for name in sections):
        return "its config is not a config of sections"
    if not isinstance(payload["agent"], dict):
        return "its agent is not a dict of weights"
    if problem := agent.state_problem(payload["agent"]):
        return f"its agent {problem}"
    kinds = {f.name: type(f.default) for f in dataclasses.fields(Progress)}
    if not isinstance(progress, dict) or not set(progress) <= kinds.keys():
        return f"its progress is not {{{', '.join(kinds)}}}"
    for name, value in progress.items():
        if type(value) is not kinds[name] or value < 0:
            return f"progress.{name} is {value!r}, not a {'bool' if kinds[name] is bool else 'count'}"
    if not isinstance(rng, dict) or _rng_problem(rng):
        return "its random generators' states are not torch's and numpy's"
    name = payload["replay_file"]
    if not isinstance(name, str) or not name.endswith(".replay.pt") or Path(name).name != name:
        return f"its replay_file {name!r} is not the name of a .replay.pt file beside it"
    steps = payload.get("learning_steps", 0)
    if type(steps) is not int or steps < 0:
        return f"learning_steps is {steps!r}, not a count"
    wall = payload.get("wall_s", 0.0)
    if not isinstance(wall, (int, float)) or not 0 <= wall < float("inf"):
        return f"wall_s is {wall!r}, not seconds"
    demos = payload.get("demos")
    if demos is not None and (not isinstance(demos, dict) or not {"rng", "fingerprint", "path"} <= set(demos)
                              or replay.numpy_state_problem(demos["rng"])):
        return "its demonstrations' sampling state is not the trainer's"
    return None


def _rng_problem(rng: dict) -> bool:
    """True unless `rng` holds torch's CPU generator state, CUDA's (a list, empty without CUDA) and numpy's."""
    torch_state, cuda = rng.get("torch"), rng.get("cuda")
    return (not _byte_tensor(torch_state) or torch_state.shape != torch.get_rng_state().shape
            or not isinstance(cuda, list) or not all(map(_byte_tensor, cuda))
            or replay.numpy_state_problem(rng.get("numpy")))


def _byte_tensor(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.uint8


def load_replay(directory: Path, payload: dict, fetch: Callable[[str], None] | None = None) -> dict | None:
    """The replay state of a loaded checkpoint, verified; None when its sidecar is gone; ReplayDamaged if damaged."""
    replay_path = directory / payload["replay_file"]
    if fetch:
        fetch(replay_path.name)
    if not replay_path.exists():
        # keep_replays prunes only sidecars older than a kept one: without a newer one, it went missing otherwise
        named = re.fullmatch(r"(.+)_step(\d+)\.replay\.pt", replay_path.name)
        pruned = named and any(step > int(named[2]) for step, _ in _numbered(os.listdir(directory), named[1], "step"))
        why = ("was pruned (checkpoint.keep_replays)" if pruned else
               f"is not in {directory} (a checkpoint copied without its sidecar? copy it there and resume again to "
               "keep the replay)")
        print(f"warning: {replay_path.name} {why}; resuming with an empty replay buffer", file=sys.stderr)
        return None
    return _read_replay(replay_path, payload.get("replay_checksum"))


def _read_replay(path: Path, expected: str | None) -> dict:
    try:
        state = _read(path, "replay sidecar")
    except CheckpointError as err:
        raise ReplayDamaged(str(err)) from None
    if not isinstance(state, dict):
        raise ReplayDamaged(f"replay sidecar {path} is not a replay buffer of this trainer")
    stored = state.pop("checksum", None)
    if stored is not None and stored != digest(state) or expected is not None and stored != expected:
        raise ReplayDamaged(f"replay sidecar {path} is corrupt or from another save (its checksum does not match)")
    problem = replay.state_problem(state)
    if problem:
        raise ReplayDamaged(f"replay sidecar {path} is damaged or not from this trainer: it {problem}")
    bad = non_finite(state)
    if bad:
        raise ReplayDamaged(f"replay sidecar {path} holds NaN or inf in {bad}")
    return state


def _read(path: Path, kind: str):
    if path.is_dir():
        raise CheckpointError(f"{kind} {path} is a folder, not a file")  # "not found" would mislead
    if not path.is_file():
        raise CheckpointError(f"{kind} not found: {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for damaged files; all mean the same to the user
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"{kind} {path} is unreadable (truncated or corrupt: {reason})") from None


def candidates(names: Iterable[str], name: str) -> list[str]:
    """Resume candidates among file names, newest first: `_latest`, then `_ep<N>` by decreasing N."""
    names = list(names)
    latest = f"{name}_latest.pt"
    return ([latest] if latest in names else []) + [n for _, n in reversed(_numbered(names, name, "ep"))]


def load_newest(directory: Path, name: str, names: Iterable[str] | None = None,
                fetch: Callable[[str], None] | None = None) -> tuple[Path, dict, dict | None] | None:
    """The newest checkpoint whose weights load and the newest intact replay for it, skipping damaged files with a
    warning; None if the run has no checkpoint; CheckpointError if none loads."""
    if names is None:
        names = os.listdir(directory) if directory.is_dir() else []
    names = list(names)
    tried = candidates(names, name)
    for candidate in tried:
        try:
            payload = load_weights(directory / candidate, fetch)
        except CheckpointError as err:
            print(f"warning: {err}; trying an older checkpoint", file=sys.stderr)
            continue
        return directory / candidate, payload, _newest_replay(directory, name, payload, names, fetch)
    if tried:
        raise CheckpointError(
            f"none of the {len(tried)} checkpoints of run '{name}' in {directory} loads ({', '.join(tried)}); pass one "
            "with --resume PATH to see why, or start over with --start-over (moves them aside, deletes nothing)")
    return None


def _newest_replay(directory: Path, name: str, payload: dict, names: list[str],
                   fetch: Callable[[str], None] | None) -> dict | None:
    try:
        return load_replay(directory, payload, fetch)
    except ReplayDamaged as err:
        damage = str(err)
    own_step = payload["progress"]["env_step"]
    for step, sidecar in reversed(_numbered(names, name, "step")):
        if step >= own_step:
            continue  # a replay never runs ahead of the counters it is resumed with
        if fetch:
            fetch(sidecar)
        try:
            state = _read_replay(directory / sidecar, None)
        except ReplayDamaged:
            continue
        print(f"warning: {damage}; resuming the weights at step {own_step} with the older replay {sidecar} "
              f"({step} steps)", file=sys.stderr)
        return state
    print(f"warning: {damage}; resuming the weights at step {own_step} with an empty replay buffer", file=sys.stderr)
    return None


def move_aside(directory: Path, remote, *, local: list[str], mirrored: list[str], stem: str) -> str:
    """Move files here (`local`) and in the `remote` mirror into a new folder `<stem>-<time>`; its name."""
    folder = new_aside_folder(directory, stem).name
    with signals.deferred():  # a stop waits for the last file: a run split over two folders would resume from neither
        for file in local:
            os.replace(directory / file, directory / folder / file)
        if remote:
            remote.move_aside(mirrored, folder)
    return folder


def start_fresh(directory: Path, name: str, remote=None, *, start_over: bool) -> None:
    """Refuse to start over an earlier run of this name, unless `start_over`: then move its files aside."""
    local = run_files(os.listdir(directory) if directory.is_dir() else [], name)
    mirrored = run_files(remote.listdir(), name) if remote else []
    where = remote.url if remote else str(directory)
    if not local and not mirrored:
        return
    if not start_over:
        found = mirrored or local
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise CheckpointError(
            f"run '{name}' already has checkpoints in {where} ({shown}); continue it with --resume auto, start a "
            "separate run with --set checkpoint.name=<new name>, or start over with --start-over (moves its files "
            "aside, deletes nothing)")
    folder = move_aside(directory, remote, local=local, mirrored=mirrored, stem=f"{name}.replaced")
    moved = len(set(local) | set(mirrored))
    print(f"--start-over: moved {moved} files of run '{name}' into {where.rstrip('/')}/{folder}/")


def set_aside_future(directory: Path, name: str, remote=None, *, resumed: Path, episode: int,
                     env_step: int) -> str | None:
    """A resume from a checkpoint older than the run's newest saves would write over and prune them: move the files
    ahead of `resumed` into `<name>.abandoned-<time>/` beside them. Returns what to say, or None."""
    def ahead(names: list[str]) -> list[str]:
        newer = ([n for number, n in _numbered(names, name, "ep") if number > episode]
                 + [n for number, n in _numbered(names, name, "step") if number > env_step])
        latest = f"{name}_latest.pt"  # written with every save: part of the future, unless it is what resumes
        if newer and latest in names and resumed.resolve() != (directory / latest).resolve():
            newer.append(latest)
        return newer

    local = ahead(os.listdir(directory))
    mirrored = ahead(remote.listdir()) if remote else []
    if not local and not mirrored:
        return None
    folder = move_aside(directory, remote, local=local, mirrored=mirrored, stem=f"{name}.abandoned")
    moved = sorted(set(local) | set(mirrored))
    where = (remote.url if remote else str(directory)).rstrip("/")
    return (f"{resumed.name} (episode {episode}, step {env_step}) is older than the newest checkpoints of run "
            f"'{name}': this run branches off it, and the {len(moved)} newer files ({', '.join(moved)}) are moved "
            f"into {where}/{folder}/, where its saves cannot overwrite or prune them (--resume one of them there to "
            "go back to that future)")


def check_compatible(*, saved: dict, current: dict, path: Path) -> None:
    """Refuse to resume with a config that breaks the saved networks or replay, or draws other frames."""
    frames = tuple(f"env.{key}" for key in frame_settings(current["env"]["backend"]))
    keys = STRUCTURAL_KEYS + (PIXEL_KEYS + frames if current["encoder"]["type"] == "video" else ())
    old, new = _saved_settings(saved), _flat(current)
    for key in keys:
        if old[key] != new[key]:
            raise UserError(
                f"checkpoint {path.name} was trained with {key}={old[key]} but the config says {key}={new[key]}; "
                "resume with the config it was trained with, or start a new run with another checkpoint.name"
            )


def check_trunk(*, saved: str | None, current: str | None, path: Path) -> None:
    """Refuse to resume a replay of stored features with another frozen trunk (None: no trunk, frames stored)."""
    if saved != current:
        def stored(trunk: str | None) -> str:
            return f"the features of frozen trunk {trunk}" if trunk else "frames"

        raise UserError(
            f"checkpoint {path.name} stored {stored(saved)} but this config stores {stored(current)}; resume with "
            "the encoder.video arch, input_size, weights and freeze it was trained with (a weights file that "
            "trainer.pretrain --replace wrote over is kept beside it as <name>.replaced-<time>.pt)"
        )


def changed_settings(*, saved: dict, current: dict) -> list[str]:
    """The settings a resume changed, as "key old -> new" (the table of profiles left out)."""
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
