"""Checkpoints that survive a kill at any instant and load with `torch.load(...,
weights_only=True)`: saving a run and choosing what a resume loads or moves aside
(docs/checkpoints.md). `fetch` callbacks pull files from a remote mirror
(trainer/checkpoints/remote.py).

The training loop sees one object, `Checkpoints`: `resume` once, before training, and `branch_off`
once it has restored what resumed; then `save`. A resume reads down this module:
`Checkpoints.resume`, `load` or `load_newest` (the weights through payload.load_weights, then the
replay sidecar), the checks of the run's own checkpoints (`check_resume_into`, `start_fresh`), then
`set_aside_future`.
"""

import contextlib
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from file_ops import new_aside_folder
from sac import replay
from trainer.checkpoints.files import (
    CheckpointError,
    ReplayDamaged,
    atomic_save,
    candidates,
    digest,
    non_finite,
    numbered,
    prepare,
    prune,
    read,
    run_files,
)
from trainer.checkpoints.payload import descends, load_weights, seal
from trainer.checkpoints.remote import RemoteDir, is_remote, staging_dir
from trainer.config import saved as saved_config
from trainer.config.load import Config, to_dict
from trainer.process import signals


@dataclass
class Saved:
    """What one save changed in the folder, in the order a mirror must apply it."""

    latest: Path
    written: list[Path] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


class Checkpoints:
    """A run's checkpoint folder as its training loop uses it, locked while the run is open: a local
    folder, or for a remote `checkpoint.dir` a local staging folder (`directory`) whose saves an
    upload thread mirrors (`remote`)."""

    def __init__(self, cfg: Config, opened: contextlib.ExitStack, report: Callable[[str], None]):
        """Lock the folder and start the uploader, both closed with `opened`; the uploader tells
        `report`."""
        self.cfg, self.name, ckpt = cfg, cfg.run_name, cfg.checkpoint
        remote = is_remote(ckpt.dir)
        self.directory = (staging_dir(ckpt.dir, cfg.run_name, ckpt.local_dir) if remote
                          else Path(ckpt.dir))
        opened.enter_context(prepare(self.directory, cfg.run_name))
        self.remote = None
        if remote:
            self.remote = RemoteDir(ckpt.dir, self.directory, ckpt.upload_retries,
                                    ckpt.upload_backoff_s,
                                    report=report)
            opened.callback(self.remote.close, ckpt.upload_timeout_s)

    def resume(self, target: str | None, *,
               start_over: bool) -> tuple[Path, dict, dict | None] | None:
        """(path, payload, replay state) of the checkpoint to resume: `target`, a file or "auto"
        (the newest that loads); None for a fresh start, which never writes over an earlier run of
        this name."""
        found = self.find(target, start_over) if target else None
        # --start-over --resume PATH: the run's files go aside, PATH continues
        if not target or start_over:
            start_fresh(self.directory, self.name, self.remote, start_over=start_over)
        return found

    def find(self, target: str, start_over: bool) -> tuple[Path, dict, dict | None] | None:
        """(path, payload, replay state) of `target`, a file or "auto", checked against this config
        and, unless `start_over`, against the run's own checkpoints; None: none."""
        if target == "auto":
            names, fetch = (self.remote.listdir(),
                            self.remote.fetch) if self.remote else (None, None)
            found = load_newest(self.directory, self.name, names, fetch)
            if found is None:
                return None
        else:  # a staged file stands for the remote one, which another machine may have advanced
            staged = self.remote and Path(target).resolve().parent == self.directory.resolve()
            fetch = self.remote.fetch if staged else None
            found = (Path(target), *load(Path(target), fetch))
        saved_config.check_compatible(saved=found[1]["config"], current=to_dict(self.cfg),
                                      path=found[0])
        if target != "auto" and not start_over:
            check_resume_into(self.directory, self.name, self.remote, resumed=found[0],
                              payload=found[1],
                              trained_as=saved_config.run_name(found[1]["config"]))
        return found

    def branch_off(self, resumed: Path, *, episode: int, env_step: int) -> str | None:
        """After a resume from `resumed`: the run's files ahead of it go aside (`set_aside_future`);
        what to say."""
        return set_aside_future(self.directory, self.name, self.remote, resumed=resumed,
                                episode=episode,
                                env_step=env_step)

    def save(self, payload: dict, replay_state: dict, *, env_step: int, episode: int | None,
             best: bool = False) -> Saved:
        """The files of one save (`save` below), queued for the remote mirror."""
        ckpt = self.cfg.checkpoint
        saved = save(self.directory, self.name, payload, replay_state, env_step=env_step,
                     episode=episode,
                     best=best, keep_replays=ckpt.keep_replays, keep_last=ckpt.keep_last)
        if self.remote:
            self.remote.upload(saved.written, saved.deleted)
        return saved


def save(directory: Path, name: str, payload: dict, replay_state: dict, *, env_step: int,
         episode: int | None,
         keep_replays: int, keep_last: int, best: bool = False) -> Saved:
    """Write the replay sidecar, then `<name>_ep<episode>.pt` (when `episode` is given),
    `<name>_best.pt` (when `best`: a new best evaluation), then `<name>_latest.pt`, each with its
    checksum (a checkpoint also its sidecar's). A failed write leaves the previous files."""
    bad = non_finite(payload["agent"]) or non_finite(replay_state)
    if bad:  # such a file never loads, and its pruning would delete loadable ones
        raise CheckpointError(f"refusing to save run '{name}' at step {env_step}: {bad} holds NaN "
                              "or inf; continue from its last checkpoint with --resume auto")
    directory.mkdir(parents=True, exist_ok=True)
    replay_file = f"{name}_step{env_step}.replay.pt"
    replay_checksum = digest(replay_state)
    payload = seal(payload, replay_file=replay_file, replay_checksum=replay_checksum)
    latest = directory / f"{name}_latest.pt"
    # `_best` is this save's payload under a second name, sharing its sidecar as `_ep<N>` does: one
    # more payload (MBs), where a save of its own would write the replay (GBs) again; once
    # keep_replays prunes that sidecar it resumes with an empty replay, as `_ep` does. Before
    # `_latest`, whose progress names it the best.
    written = ([directory / replay_file] + ([directory / f"{name}_ep{episode}.pt"]
                                            if episode is not None else [])
               + ([directory / f"{name}_best.pt"] if best else []) + [latest])
    # a second save at the same step, which older files may name
    replaces_a_sidecar = written[0].exists()
    atomic_save({**replay_state, "checksum": replay_checksum}, written[0])
    try:
        atomic_save(payload, written[1])
    except CheckpointError:
        if not replaces_a_sidecar:
            # no checkpoint names it: it would only hold the space the next try needs
            written[0].unlink()
        raise
    for path in written[2:]:
        atomic_save(payload, path)
    return Saved(latest, written,
                 prune(directory, name, keep_replays, keep_last, keep={n.name for n in written}))


def load(path: Path, fetch: Callable[[str], None] | None = None) -> tuple[dict, dict | None]:
    """(payload, replay state or None when its sidecar was pruned) of a checkpoint named by hand;
    CheckpointError if either is damaged. `fetch(file_name)` brings a file into `path.parent` from a
    remote mirror."""
    payload = load_weights(path, fetch)
    try:
        return payload, load_replay(path.parent, payload, fetch)
    except ReplayDamaged as err:
        raise ReplayDamaged(f"{err}; move it aside to resume {path.name} with an empty replay "
                            "buffer, or use --resume auto") from None


def load_replay(directory: Path, payload: dict,
                fetch: Callable[[str], None] | None = None) -> dict | None:
    """The replay state of a loaded checkpoint, verified; None when its sidecar is gone;
    ReplayDamaged if damaged."""
    replay_path = directory / payload["replay_file"]
    if fetch:
        fetch(replay_path.name)
    if not replay_path.exists():
        # keep_replays prunes only sidecars older than a kept one: without a newer one, it went
        # missing otherwise
        named = re.fullmatch(r"(.+)_step(\d+)\.replay\.pt", replay_path.name)
        pruned = named and any(step > int(named[2])
                               for step, _ in numbered(os.listdir(directory), named[1], "step"))
        why = ("was pruned (checkpoint.keep_replays)" if pruned else
               f"is not in {directory} (a checkpoint copied without its sidecar? copy it there and "
               "resume again to keep the replay)")
        print(f"warning: {replay_path.name} {why}; resuming with an empty replay buffer",
              file=sys.stderr)
        return None
    return _read_replay(replay_path, payload.get("replay_checksum"))


def _read_replay(path: Path, expected: str | None) -> dict:
    try:
        state = read(path, "replay sidecar")
    except CheckpointError as err:
        raise ReplayDamaged(str(err)) from None
    if not isinstance(state, dict):
        raise ReplayDamaged(f"replay sidecar {path} is not a replay buffer of this trainer")
    stored = state.pop("checksum", None)
    if (stored is not None and stored != digest(state) or expected is not None
        and stored != expected):
        raise ReplayDamaged(
            f"replay sidecar {path} is corrupt or from another save (its checksum does not match)")
    problem = replay.state_problem(state)
    if problem:
        raise ReplayDamaged(
            f"replay sidecar {path} is damaged or not from this trainer: it {problem}")
    bad = non_finite(state)
    if bad:
        raise ReplayDamaged(f"replay sidecar {path} holds NaN or inf in {bad}")
    return state


def load_newest(directory: Path, name: str, names: Iterable[str] | None = None,
                fetch: Callable[[str], None] | None = None) -> tuple[
                    Path, dict, dict | None] | None:
    """The newest checkpoint whose weights load and the newest intact replay for it, skipping
    damaged files with a warning; None if the run has no checkpoint; CheckpointError if none
    loads."""
    if names is None:
        names = os.listdir(directory) if directory.is_dir() else []
    names = list(names)
    found = newest_weights(directory, name, names, fetch)
    if found is None:
        return None
    return *found, _newest_replay(directory, name, found[1], names, fetch)


def newest_weights(directory: Path, name: str, names: list[str],
                   fetch: Callable[[str], None] | None = None) -> tuple[Path, dict] | None:
    """(path, payload) of the newest checkpoint of run `name` among `names` whose weights load,
    skipping damaged files with a warning; None if the run has none; CheckpointError if none
    loads."""
    tried = candidates(names, name)
    for candidate in tried:
        try:
            return directory / candidate, load_weights(directory / candidate, fetch)
        except CheckpointError as err:
            print(f"warning: {err}; trying an older checkpoint", file=sys.stderr)
    if tried:
        raise CheckpointError(
            f"none of the {len(tried)} checkpoints of run '{name}' in {directory} loads "
            f"({', '.join(tried)}); pass one with --resume PATH to see why, or start over with "
            "--start-over (moves them aside, deletes nothing)")
    return None


def check_resume_into(directory: Path, name: str, remote=None, *, resumed: Path, payload: dict,
                      trained_as: str) -> None:
    """Refuse `--resume resumed` (a checkpoint of run `trained_as`) into run `name` when the run has
    checkpoints that did not come from it (another run's, or another branch's): its saves would
    overwrite and prune them."""
    names = remote.listdir() if remote else os.listdir(directory) if directory.is_dir() else []
    newest = newest_weights(directory, name, names, remote.fetch if remote else None)
    if newest is None:
        return  # a new run that starts from another's weights
    newest_path, newest_payload = newest
    if newest_path.resolve() == resumed.resolve():
        return
    # on the way to the run's newest, or ahead of it on the same way (a `_latest` a kill left behind
    # the `_ep<N>` written just before it)
    ancestor = descends(newest_payload, payload)
    if ancestor or descends(payload, newest_payload) or ancestor is None and trained_as == name:
        return
    progress, where = newest_payload["progress"], remote.url if remote else str(directory)
    whose = (f"a checkpoint of run '{trained_as}'" if trained_as != name
             else f"not on the way to run '{name}''s newest")
    raise CheckpointError(
        f"{resumed} is {whose}, and run '{name}' already has checkpoints in {where} "
        f"({newest_path.name}: episode {progress['episode']}, step {progress['env_step']}) that "
        "its saves would overwrite; resume it as a separate run with --set checkpoint.name=<new "
        f"name>, or add --start-over to move run '{name}''s files aside first (deletes nothing)")


def _newest_replay(directory: Path, name: str, payload: dict, names: list[str],
                   fetch: Callable[[str], None] | None) -> dict | None:
    try:
        return load_replay(directory, payload, fetch)
    except ReplayDamaged as err:
        damage = str(err)
    own_step = payload["progress"]["env_step"]
    for step, sidecar in reversed(numbered(names, name, "step")):
        if step >= own_step:
            continue  # a replay never runs ahead of the counters it is resumed with
        if fetch:
            fetch(sidecar)
        try:
            state = _read_replay(directory / sidecar, None)
        except ReplayDamaged:
            continue
        print(f"warning: {damage}; resuming the weights at step {own_step} with the older replay "
              f"{sidecar} ({step} steps)", file=sys.stderr)
        return state
    print(f"warning: {damage}; resuming the weights at step {own_step} with an empty replay buffer",
          file=sys.stderr)
    return None


def move_aside(directory: Path, remote, *, local: list[str], mirrored: list[str], stem: str) -> str:
    """Move files here (`local`) and in the `remote` mirror into a new folder `<stem>-<time>`; its
    name."""
    folder = new_aside_folder(directory, stem).name
    # a stop waits for the last file: a run split over two folders would resume from neither
    with signals.deferred():
        for file in local:
            os.replace(directory / file, directory / folder / file)
        if remote:
            remote.move_aside(mirrored, folder)
    return folder


def start_fresh(directory: Path, name: str, remote=None, *, start_over: bool) -> None:
    """Refuse to start over an earlier run of this name, unless `start_over`: then move its files
    aside."""
    local = run_files(os.listdir(directory) if directory.is_dir() else [], name)
    mirrored = run_files(remote.listdir(), name) if remote else []
    where = remote.url if remote else str(directory)
    if not local and not mirrored:
        return
    if not start_over:
        found = mirrored or local
        shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise CheckpointError(
            f"run '{name}' already has checkpoints in {where} ({shown}); continue it with --resume "
            "auto, start a separate run with --set checkpoint.name=<new name>, or start over with "
            "--start-over (moves its files aside, deletes nothing)")
    folder = move_aside(directory, remote, local=local, mirrored=mirrored, stem=f"{name}.replaced")
    moved = len(set(local) | set(mirrored))
    print(f"--start-over: moved {moved} files of run '{name}' into {where.rstrip('/')}/{folder}/")


def saved_after(path: Path, env_step: int, fetch: Callable[[str], None] | None) -> bool:
    """Whether checkpoint `path`, whose name carries no step (`_best`), was saved past `env_step`;
    one that does not load counts as past it, so it goes aside (which deletes nothing) rather than
    be replaced."""
    try:
        return load_weights(path, fetch)["progress"]["env_step"] > env_step
    except CheckpointError:
        return True


def set_aside_future(directory: Path, name: str, remote=None, *, resumed: Path, episode: int,
                     env_step: int) -> str | None:
    """A resume from a checkpoint older than the run's newest saves would write over and prune them:
    move the files ahead of `resumed` into `<name>.abandoned-<time>/` beside them. Returns what to
    say, or None."""
    def ahead(names: list[str]) -> list[str]:
        newer = ([n for number, n in numbered(names, name, "ep") if number > episode]
                 + [n for number, n in numbered(names, name, "step") if number > env_step])
        # written with every save: part of the future, unless it is what resumes
        latest = f"{name}_latest.pt"
        if newer and latest in names and resumed.resolve() != (directory / latest).resolve():
            newer.append(latest)
        return newer

    here, there = os.listdir(directory), remote.listdir() if remote else []
    local, mirrored = ahead(here), ahead(there)
    if not local and not mirrored:
        return None
    # a best saved past `resumed` wrote a sidecar past it too, so there is a future
    best = f"{name}_best.pt"
    if best in here + there and saved_after(directory / best, env_step, remote.fetch
                                            if best in there else None):
        local += [best] if (directory / best).exists() else []  # the fetch may have brought it
        mirrored += [best] if best in there else []
    folder = move_aside(directory, remote, local=local, mirrored=mirrored, stem=f"{name}.abandoned")
    moved = sorted(set(local) | set(mirrored))
    where = (remote.url if remote else str(directory)).rstrip("/")
    return (f"{resumed.name} (episode {episode}, step {env_step}) is older than the newest "
            f"checkpoints of run '{name}': this run branches off it, and the {len(moved)} newer "
            f"files ({', '.join(moved)}) are moved into {where}/{folder}/, where its saves cannot "
            "overwrite or prune them (--resume one of them there with --start-over to go back to "
            "that future)")
