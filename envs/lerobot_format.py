"""LeRobot datasets (format v3.0, the one robot-learning data on the Hugging Face Hub is shared in)
as demonstrations, and this product's recordings written as one.

Written by hand, with pyarrow and PyAV: the `lerobot` package cannot share this project's
environment (lerobot 0.4.4 pins torch < 2.11), so this reads and writes its documented layout
itself, and tests/test_lerobot.py checks both directions against the real package in a venv of
its own (`make lerobot`):

    meta/info.json                            fps, features (dtype, shape), paths
    meta/tasks.parquet                        the task strings (a pandas index)
    meta/stats.json                           per-feature min/max/mean/std/count/quantiles
    meta/episodes/chunk-000/file-000.parquet  per episode: length, rows, video timestamps
    data/chunk-000/file-000.parquet           a row per step: observation.*, action, next.*
    videos/<camera>/chunk-000/file-000.mp4    cameras stored as video (read here, not written)

A row holds the observation an action was taken in, the action, and `next.reward` / `next.done`
after it, as LeRobot's own SAC (HIL-SERL) records them: the observation after an episode's last
action has no row, so an episode of N rows is N steps whose last one ends in its own observation
again (harmless for a termination, whose target does not bootstrap). Cameras written here are
`image` features, PNG inside the parquet: frames come back bit-exact."""

import io
import json
import os
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
from PIL import Image

from envs.demos import PIXELS, STATE, Demonstrations, Episode, digest
from errors import UserError, check_writable_folder

CODEBASE_VERSION = "v3.0"
INFO = "meta/info.json"
TASKS = "meta/tasks.parquet"
STATS = "meta/stats.json"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"
DATA = "data/chunk-000/file-000.parquet"
DATA_PATTERN = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
INDEX_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def is_dataset(path: str | Path) -> bool:
    return (Path(path).expanduser() / INFO).is_file()


HUB = "hf://datasets/"  # the Hub's own URL form: a mistyped folder never goes to the network


def is_hub_id(path: str) -> bool:
    return str(path).startswith(HUB)


def download(url: str) -> Path:
    """The Hub dataset's local copy (the Hub's cache; HF_HUB_OFFLINE=1 reads the cache alone)."""
    from huggingface_hub import snapshot_download  # only for a Hub id: it loads requests & co
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    repo_id = url.removeprefix(HUB).strip("/")
    try:
        return Path(snapshot_download(repo_id, repo_type="dataset"))
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError, ValueError) as err:
        reason = " ".join(str(err).split())[:160]
        raise UserError(f"cannot fetch the LeRobot dataset {url} from the Hugging Face Hub "
                        f"({type(err).__name__}: {reason}); check the id and the network, or "
                        "download it first (huggingface-cli download --repo-type dataset "
                        f"{repo_id}) and set demos.path to its folder") from None


def read(path: str | Path, keys, *, image_size: int | None) -> Demonstrations:
    """The dataset's episodes as demonstrations. `keys` (DemosConfig.lerobot) names its camera,
    state, action, reward and done features; frames are resized to `image_size` (None: as
    stored), stored (C, H, W) uint8 like a recording's."""
    root = download(str(path)) if is_hub_id(str(path)) else Path(path).expanduser()
    info = json.loads((root / INFO).read_text())
    features = info["features"]
    cameras = [k for k, f in features.items() if f["dtype"] in ("image", "video")]

    def key(name: str, wanted: str | None) -> str:
        if wanted in features:
            return wanted
        listed = ", ".join(k for k in features if k not in INDEX_FEATURES)
        raise UserError(f"the LeRobot dataset {path} has no feature {wanted!r} (it has {listed}); "
                        f"set demos.lerobot.{name} to one of them")

    if keys.camera is None and len(cameras) > 1:
        raise UserError(f"the LeRobot dataset {path} has {len(cameras)} cameras "
                        f"({', '.join(cameras)}); set demos.lerobot.camera to the one to train on")
    # no camera at all: a dataset for state-only runs
    camera = key("camera", keys.camera or cameras[0]) if cameras or keys.camera else None
    state = key("state", keys.state) if keys.state else None
    if camera is None and state is None:
        raise UserError(f"demos.lerobot.state is null and the LeRobot dataset {path} has no "
                        "camera: nothing to observe; set demos.lerobot.state to its state feature")
    action = key("action", keys.action)
    reward, done = key("reward", keys.reward), key("done", keys.done)
    table = _table(root / "data")
    column = {name: table.column(name) for name in (action, reward, done, "episode_index")}
    actions = np.asarray(column[action].to_pylist(), np.float32)
    rewards = np.asarray(column[reward].to_pylist(), np.float32).reshape(-1)
    dones = np.asarray(column[done].to_pylist(), bool).reshape(-1)
    episode_of = np.asarray(column["episode_index"].to_pylist())
    observed, space = {}, gym.spaces.Dict()
    if state:
        observed[STATE] = np.asarray(table.column(state).to_pylist(), np.float32)
        space[STATE] = gym.spaces.Box(-np.inf, np.inf, observed[STATE].shape[1:], np.float32)
    if camera and features[camera]["dtype"] == "image":
        frames = [_png(cell["bytes"]) for cell in table.column(camera).to_pylist()]
    elif camera:
        frames = _video_frames(root, info, camera, episode_of)
    if camera:
        observed[PIXELS] = np.stack([_resized(f, image_size) for f in frames]).transpose(0, 3, 1, 2)

    episodes = []
    for number in dict.fromkeys(episode_of.tolist()):
        rows = np.flatnonzero(episode_of == number)
        # the observation after the last action has no row: the last one stands in for it
        after = np.append(rows, rows[-1])
        terminated, truncated = dones[rows], np.zeros(len(rows), bool)
        truncated[-1] = not terminated[-1]
        episodes.append(Episode({k: v[after] for k, v in observed.items()},
                                actions[rows], rewards[rows], terminated, truncated))
    if camera:
        space[PIXELS] = gym.spaces.Box(0, 255, observed[PIXELS].shape[1:], np.uint8)
    actions_space = gym.spaces.Box(-np.inf, np.inf, actions.shape[1:], np.float32)
    files = (p for p in root.rglob("*") if p.is_file() and ".cache" not in p.parts)
    return Demonstrations(episodes, space, actions_space, {}, digest(root, files),
                          Path(str(path)))


def _table(folder: Path):
    """The parquet files of `folder`'s chunks as one pyarrow table."""
    # pyarrow loads in ~0.3 s: only runs that read or write LeRobot datasets pay it
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa.concat_tables([pq.read_table(f) for f in sorted(folder.glob("*/*.parquet"))])


def _png(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _resized(frame: np.ndarray, size: int | None) -> np.ndarray:
    if size is None or frame.shape[:2] == (size, size):
        return frame
    # squashed, not cropped, to the task's square frames
    return np.asarray(Image.fromarray(frame).resize((size, size), Image.Resampling.BILINEAR))


def _video_frames(root: Path, info: dict, camera: str, episode_of: np.ndarray) -> list:
    """Every row's frame of `camera`, decoded with PyAV from the episodes' video files."""
    import av  # PyAV: only a dataset with video cameras decodes any

    meta = _table(root / "meta/episodes").to_pylist()
    by_episode = {m["episode_index"]: m for m in meta}
    fps, decoded, frames = info["fps"], {}, []
    for number in dict.fromkeys(episode_of.tolist()):
        m = by_episode[number]
        where = root / info["video_path"].format(
            video_key=camera, chunk_index=m[f"videos/{camera}/chunk_index"],
            file_index=m[f"videos/{camera}/file_index"])
        if where not in decoded:
            with av.open(str(where)) as container:
                decoded[where] = [(f.time, f.to_ndarray(format="rgb24"))
                                  for f in container.decode(video=0)]
        start = m[f"videos/{camera}/from_timestamp"]
        # a frame per row: the one nearest each row's time from the episode's start
        times = np.array([t for t, _ in decoded[where]])
        for i in range(int((episode_of == number).sum())):
            frames.append(decoded[where][int(np.abs(times - start - i / fps).argmin())][1])
    return frames


def write(path: str | Path, data: Demonstrations, *, fps: int, task: str, robot_type: str,
          camera: str) -> None:
    """`data` as a new LeRobot dataset at `path` (an existing one is an error): its state as
    `observation.state`, its frames as `observation.images.<camera>` (PNG), and `action`,
    `next.reward`, `next.done` (a termination). Each episode's observation after its last action is
    not stored (see the module's note)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = Path(path).expanduser()
    if target.exists() and any(target.iterdir()):
        raise UserError(f"{path} already holds files; pass another --out or delete it first")
    check_writable_folder(target, what=f"create {path}", fix="pass --out under one")
    image_key = f"observation.images.{camera}"
    columns: dict[str, list] = {}
    frames = None  # (N, H, W, C)
    if PIXELS in data.observation_space.spaces:
        frames = np.concatenate([e.observations[PIXELS][:-1]
                                 for e in data.episodes]).transpose(0, 2, 3, 1)
        columns[image_key] = [{"bytes": _png_bytes(frame), "path": None} for frame in frames]
    if STATE in data.observation_space.spaces:
        columns["observation.state"] = np.concatenate(
            [e.observations[STATE][:-1] for e in data.episodes]).astype(np.float32)
    columns["action"] = np.concatenate([e.actions for e in data.episodes]).astype(np.float32)
    columns["next.reward"] = np.concatenate([e.rewards for e in data.episodes]).astype(np.float32)
    columns["next.done"] = np.concatenate([e.terminations for e in data.episodes])
    lengths = [len(e) for e in data.episodes]
    columns["frame_index"] = np.concatenate([np.arange(n) for n in lengths])
    columns["timestamp"] = (columns["frame_index"] / fps).astype(np.float32)
    columns["episode_index"] = np.repeat(np.arange(len(lengths)), lengths)
    columns["index"] = np.arange(sum(lengths))
    columns["task_index"] = np.zeros(sum(lengths), np.int64)

    features = {}
    for name, values in columns.items():
        if name == image_key:
            features[name] = {"dtype": "image", "shape": list(frames.shape[1:]),
                              "names": ["height", "width", "channels"]}
        else:
            values = np.asarray(values)
            features[name] = {"dtype": str(values.dtype), "shape": list(values.shape[1:] or (1,)),
                              "names": None}
    arrays = {name: _arrow(pa, values, features[name]) for name, values in columns.items()}
    table = pa.table(arrays).replace_schema_metadata(
        {"huggingface": json.dumps({"info": {"features": {
            name: _hf_feature(feature) for name, feature in features.items()}}})})

    ends = np.cumsum(lengths)
    episodes = pa.table({
        "episode_index": pa.array(range(len(lengths)), pa.int64()),
        "tasks": pa.array([[task]] * len(lengths), pa.list_(pa.string())),
        "length": pa.array(lengths, pa.int64()),
        "data/chunk_index": pa.array([0] * len(lengths), pa.int64()),
        "data/file_index": pa.array([0] * len(lengths), pa.int64()),
        "dataset_from_index": pa.array(ends - lengths, pa.int64()),
        "dataset_to_index": pa.array(ends, pa.int64()),
        "meta/episodes/chunk_index": pa.array([0] * len(lengths), pa.int64()),
        "meta/episodes/file_index": pa.array([0] * len(lengths), pa.int64()),
    })
    # a pandas DataFrame indexed by the task string, as lerobot reads it (pandas.read_parquet)
    tasks = pa.table({"task_index": pa.array([0], pa.int64()),
                      "__index_level_0__": pa.array([task], pa.large_string())})
    tasks = tasks.replace_schema_metadata({"pandas": json.dumps({
        "index_columns": ["__index_level_0__"], "column_indexes": [],
        "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                     "numpy_type": "int64", "metadata": None},
                    {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode",
                     "numpy_type": "object", "metadata": None}]})})
    info = {
        "codebase_version": CODEBASE_VERSION, "robot_type": robot_type,
        "total_episodes": len(lengths), "total_frames": int(sum(lengths)), "total_tasks": 1,
        "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 200,
        "fps": fps, "splits": {"train": f"0:{len(lengths)}"}, "data_path": DATA_PATTERN,
        "video_path": None, "features": features,
    }
    stats = {name: _stats(frames if name == image_key else np.asarray(values),
                          image=name == image_key)
             for name, values in columns.items()}

    # written whole beside it, then renamed into place: an interrupted write leaves no dataset
    staging = target.parent / f".{target.name}.tmp{os.getpid()}"
    try:
        for relative, write_one in ((DATA, lambda f: pq.write_table(table, f)),
                                    (EPISODES, lambda f: pq.write_table(episodes, f)),
                                    (TASKS, lambda f: pq.write_table(tasks, f)),
                                    (INFO, lambda f: f.write_text(json.dumps(info, indent=4))),
                                    (STATS, lambda f: f.write_text(json.dumps(stats, indent=4)))):
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            write_one(staging / relative)
        if target.exists():
            target.rmdir()
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _png_bytes(frame: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(frame).save(out, format="PNG")
    return out.getvalue()


def _arrow(pa, values, feature: dict):
    if feature["dtype"] == "image":
        return pa.array(values, pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    values = np.asarray(values)
    if values.ndim == 1:
        return pa.array(values)
    # a vector per row: datasets' fixed-length List, as lerobot writes it
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])


def _hf_feature(feature: dict) -> dict:
    """The `datasets` library's description of a column (the parquet's "huggingface" metadata,
    which the Hub's viewer reads)."""
    if feature["dtype"] == "image":
        return {"_type": "Image"}
    value = {"dtype": feature["dtype"], "_type": "Value"}
    if feature["shape"] == [1]:
        return value
    return {"feature": value, "length": feature["shape"][0], "_type": "List"}


def _stats(values: np.ndarray, *, image: bool) -> dict:
    """LeRobot's per-feature statistics: images per channel in [0, 1], shaped (C, 1, 1)."""
    count = len(values)
    if image:
        values = values.reshape(-1, values.shape[-1]) / 255.0
    values = values.reshape(len(values), -1).astype(np.float64)
    shape = (-1, 1, 1) if image else (-1,)
    stats = {"min": values.min(0), "max": values.max(0), "mean": values.mean(0),
             "std": values.std(0)}
    stats.update({f"q{round(q * 100):02d}": np.quantile(values, q, axis=0) for q in QUANTILES})
    out = {name: v.reshape(shape).tolist() for name, v in stats.items()}
    out["count"] = [count]
    return out
