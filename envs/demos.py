"""Demonstrations on disk as Minari datasets, so any Minari dataset of the same env plugs into
training the same way.

Observations: a plain Box (state vector or one uint8 (C, H, W) frame) or, as
`trainer/tools/record.py` writes them, {"state": float32 (S,), "pixels": uint8 (C, H, W)} and,
recorded with --views K, "views": uint8 (K - 1, C, H, W), the same step in other scenes. Frames are
stored singly and losslessly (no JPEG)."""

import hashlib
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import minari
import numpy as np
from minari import MinariDataset
from minari.data_collector.episode_buffer import EpisodeBuffer
from minari.dataset.minari_storage import MinariStorage

from errors import UserError, check_writable_folder

# metadata entry: {"env_id", "camera", "image_size", "action_repeat", "backend"}
RECORDING_KEY = "recording"
STATE, PIXELS, VIEWS = "state", "pixels", "views"
DATA_DIR = "data"


@dataclass
class Episode:
    """`observations` {key: (L + 1, ...)} (the reset observation first); the rest (L, ...)."""

    observations: dict[str, np.ndarray]
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray

    def __len__(self) -> int:
        return len(self.actions)


@dataclass
class Demonstrations:
    episodes: list[Episode]
    observation_space: gym.spaces.Dict
    action_space: gym.spaces.Box
    recording: dict  # RECORDING_KEY's settings; {} for datasets recorded elsewhere
    fingerprint: str  # sha256 of the data files: resume says when the file changed
    path: Path

    @property
    def steps(self) -> int:
        return sum(len(e) for e in self.episodes)


def data_path(path: str | Path) -> Path:
    path = Path(path).expanduser()
    return path if (path / "metadata.json").is_file() else path / DATA_DIR


def fingerprint(path: str | Path) -> str:
    return digest(data_path(path), data_path(path).iterdir())


def digest(root: Path, files) -> str:
    """sha256 of `files` (under `root`): their paths from it and their bytes."""
    sha = hashlib.sha256()
    for file in sorted(files):
        sha.update(str(file.relative_to(root)).encode())
        sha.update(file.read_bytes())
    return sha.hexdigest()


def check_new(path: str | Path) -> None:
    """`path` can take a new dataset: checked before minutes of recording."""
    if not str(path).strip():
        raise UserError("the dataset folder is empty; pass one to create, e.g. --out datasets/mine")
    target = Path(path).expanduser()
    if (target / DATA_DIR).exists():
        raise UserError(
            f"a dataset already exists at {path}; pass another --out or delete it first")
    if target.exists() and not target.is_dir():
        raise UserError(f"{path} is a file, not a dataset folder; pass a folder to create as --out")
    check_writable_folder(target, what=f"create {path}", fix="pass --out under one")


def write(
    path: str | Path,
    episodes: list[Episode],
    observation_space: gym.spaces.Dict,
    action_space: gym.spaces.Box,
    env_id: str,
    recording: dict,
) -> None:
    """A new Minari dataset at `path` (an existing one is an error, never overwritten)."""
    check_new(path)
    target = Path(path).expanduser().resolve()  # Minari joins relative paths twice
    target.mkdir(parents=True, exist_ok=True)
    # written whole beside it, then renamed into place: an interrupted write leaves no dataset, not
    # a partial one
    staging = target.parent / f".{target.name}.tmp{os.getpid()}"
    try:
        staging.mkdir()
        storage = MinariStorage.new(
            staging / DATA_DIR,
            observation_space,
            action_space,
            env_spec=gym.spec(env_id),
            data_format="hdf5",
            jpeg_encoding=False,
        )
        storage.update_metadata({"dataset_id": target.name, "minari_version": minari.__version__,
                                 RECORDING_KEY: recording})
        storage.update_episodes(
            EpisodeBuffer(
                id=i,
                observations=e.observations,
                actions=e.actions,
                rewards=list(e.rewards),
                terminations=list(e.terminations),
                truncations=list(e.truncations),
            )
            for i, e in enumerate(episodes)
        )
        for file in (staging / DATA_DIR).iterdir():
            with open(file, "rb+") as f:
                os.fsync(f.fileno())
        os.rename(staging / DATA_DIR, target / DATA_DIR)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def read(path: str | Path) -> Demonstrations:
    """The whole dataset in memory (demonstrations are small: 20 episodes of 84x84 frames are ~20
    MB)."""
    where = data_path(path).resolve()
    if not (where / "metadata.json").is_file():
        raise UserError(
            f"no Minari dataset at {path} (no {where / 'metadata.json'}); record one with "
            "python3 -m trainer.tools.record --out PATH, or fix the path"
        )
    try:
        # Minari reads Box bounds back as float64 lists: gymnasium warns on the cast
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32")
            dataset = MinariDataset(where)
        space, metadata = dataset.observation_space, dataset.storage.metadata
        raw = list(dataset.iterate_episodes())
    except (OSError, ValueError, KeyError, TypeError) as err:
        reason = " ".join(str(err).split())[:200]
        raise UserError(f"cannot read the Minari dataset at {path} ({type(err).__name__}: "
                        f"{reason}); it is damaged: record it again with python3 -m "
                        "trainer.tools.record") from None
    if not raw:
        raise UserError(f"the Minari dataset at {path} holds no episodes (a recording that was "
                        "interrupted?); move it aside and record it again with python3 -m "
                        "trainer.tools.record")
    # a single observation: a frame if it is an image, else a state vector
    if isinstance(space, gym.spaces.Box):
        key = PIXELS if space.dtype == np.uint8 and len(space.shape) == 3 else STATE
        space = gym.spaces.Dict({key: space})
        unwrap = lambda obs: {key: np.asarray(obs)}  # noqa: E731
    elif isinstance(space, gym.spaces.Dict):
        unwrap = lambda obs: {k: np.asarray(v) for k, v in obs.items()}  # noqa: E731
    else:
        raise UserError(
            f"dataset {path} has {type(space).__name__} observations; the trainer reads Box or "
            "Dict(state, pixels)"
        )
    episodes = [
        Episode(
            unwrap(e.observations),
            np.asarray(e.actions, np.float32),
            np.asarray(e.rewards, np.float32),
            np.asarray(e.terminations, bool),
            np.asarray(e.truncations, bool),
        )
        for e in raw
    ]
    return Demonstrations(
        episodes, space, dataset.action_space, dict(metadata.get(RECORDING_KEY) or {}),
        fingerprint(path), Path(path)
    )
