"""LeRobot datasets, against the real `lerobot` package in its own venv (make lerobot): one that
lerobot's API created is read here as demonstrations and trains a run; a recording written here
is read back by lerobot with the same frames (bit-exact: PNG), states, actions and rewards; and a
dataset that does not fit is a one-line error naming the key to set."""

import dataclasses
import json
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

from envs import demos, lerobot_format
from errors import UserError
from tests.conftest import ROOT, run_cli
from tests.test_demos import SIZE, STATE, VIDEO, demos_run, record_dataset
from trainer.config.load import load_config
from trainer.run.demo_store import check_fits, read

LEROBOT = ROOT / ".lerobot-venv" / "bin" / "python"
STATE_DIM, ACTION_DIM = 26, 4  # configs/dishwashing_state.yaml's observation and action sizes


def lerobot(script: str, *args) -> str:
    assert LEROBOT.is_file(), "the LeRobot venv is missing: run make lerobot"
    done = subprocess.run([str(LEROBOT), "-c", textwrap.dedent(script), *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


MAKE = """
    import sys
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root, out, dtype = sys.argv[1:4]
    size, state_dim, action_dim = map(int, sys.argv[4:])
    features = {
        "observation.images.top": {"dtype": dtype, "shape": (size, size, 3),
                                   "names": ["height", "width", "channels"]},
        "observation.state": {"dtype": "float32", "shape": (state_dim,), "names": None},
        "action": {"dtype": "float32", "shape": (action_dim,), "names": None},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
    }
    ds = LeRobotDataset.create("local/made_by_lerobot", fps=10, features=features, root=root,
                               use_videos=dtype == "video")
    rng = np.random.default_rng(0)
    # smooth frames that change every step: what a video codec is made for
    y, x = np.mgrid[:size, :size]
    saved = {"frames": [], "states": [], "actions": [], "rewards": [], "dones": []}
    for episode, length in enumerate((6, 4)):
        for t in range(length):
            frame = 2 * x + 2 * y + 10 * t + 30 * episode
            step = {"observation.images.top": np.stack([frame, frame[::-1], frame.T], -1)
                                              .astype(np.uint8),
                    "observation.state": rng.standard_normal(state_dim).astype(np.float32),
                    "action": rng.uniform(-1, 1, action_dim).astype(np.float32),
                    "next.reward": np.array([t / 10], np.float32),
                    "next.done": np.array([episode == 0 and t == length - 1]), "task": "wash"}
            ds.add_frame(step)
            for key, name in (("frames", "observation.images.top"),
                              ("states", "observation.state"), ("actions", "action"),
                              ("rewards", "next.reward"), ("dones", "next.done")):
                saved[key].append(step[name])
        ds.save_episode()
    ds.finalize()
    np.savez(out, **{k: np.stack(v) for k, v in saved.items()})
"""


def made(folder, dtype: str):
    lerobot(MAKE, folder / "made", folder / "made.npz", dtype, SIZE, STATE_DIM, ACTION_DIM)
    return folder / "made", dict(np.load(folder / "made.npz"))


@pytest.fixture(scope="module")
def made_by_lerobot(tmp_path_factory):
    return made(tmp_path_factory.mktemp("lerobot"), "image")


def test_a_dataset_lerobot_made_reads_as_its_episodes_with_its_exact_frames(made_by_lerobot):
    path, saved = made_by_lerobot
    data = read(load_config(VIDEO, [f"env.image_size={SIZE}"]), str(path))
    assert [len(e) for e in data.episodes] == [6, 4]
    frames = np.concatenate([e.observations[demos.PIXELS][:-1] for e in data.episodes])
    np.testing.assert_array_equal(frames, saved["frames"].transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(
        np.concatenate([e.observations[demos.STATE][:-1] for e in data.episodes]), saved["states"])
    np.testing.assert_array_equal(np.concatenate([e.actions for e in data.episodes]),
                                  saved["actions"])
    np.testing.assert_array_equal(np.concatenate([e.rewards for e in data.episodes]),
                                  saved["rewards"][:, 0])
    # the first episode ends in a termination, the second is cut short; each last step's
    # observation after it is its own again (no row holds it)
    first, second = data.episodes
    assert first.terminations.tolist() == [False] * 5 + [True] and not first.truncations.any()
    assert second.truncations.tolist() == [False] * 3 + [True] and not second.terminations.any()
    np.testing.assert_array_equal(first.observations[demos.PIXELS][-1],
                                  first.observations[demos.PIXELS][-2])


def test_a_camera_lerobot_stored_as_video_reads_as_its_frames_within_the_codecs_loss(tmp_path):
    path, saved = made(tmp_path, "video")
    info = json.loads((path / "meta" / "info.json").read_text())
    codec = info["features"]["observation.images.top"]["info"]["video.codec"]
    data = read(load_config(VIDEO, [f"env.image_size={SIZE}"]), str(path))
    frames = np.concatenate([e.observations[demos.PIXELS][:-1] for e in data.episodes])
    error = np.abs(frames.astype(int) - saved["frames"].transpose(0, 3, 1, 2)).mean()
    # lossy (AV1 at lerobot's default quality): near, not equal; a frame off by one step of 10
    # levels, or another episode's, would be far
    assert codec == "av1" and 0 < error < 3, (codec, error)


def test_a_larger_camera_is_resized_to_the_tasks_frames(made_by_lerobot):
    path, saved = made_by_lerobot
    data = read(load_config(VIDEO, [f"env.image_size={32}"]), str(path))
    frames = data.episodes[0].observations[demos.PIXELS]
    assert frames.shape[1:] == (3, 32, 32) and frames.dtype == np.uint8


def test_a_state_run_trains_from_a_dataset_lerobot_made_and_resumes(tmp_path, made_by_lerobot):
    path, _ = made_by_lerobot
    first = run_cli(*demos_run(tmp_path, "state", "run", path, 2))
    assert first.returncode == 0, first.stderr
    assert f"training with 2 demonstration episodes (10 steps) from {path}" in first.stdout
    resumed = run_cli(*demos_run(tmp_path, "state", "run", path, 4), "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    assert f"re-read 2 demonstration episodes (10 steps) from {path}" in resumed.stdout


@pytest.mark.parametrize("setting, message", [
    ("demos.lerobot.reward=reward",
     "has no feature 'reward' (it has observation.images.top, observation.state, action, "
     "next.reward, next.done); set demos.lerobot.reward to one of them"),
    ("demos.lerobot.camera=observation.images.wrist",
     "has no feature 'observation.images.wrist'"),
])
def test_a_missing_key_is_one_line_naming_the_setting(made_by_lerobot, setting, message):
    path, _ = made_by_lerobot
    with pytest.raises(UserError, match="^the LeRobot dataset .*" + message.replace("(", r"\(")
                       .replace(")", r"\)")):
        read(load_config(VIDEO, [f"env.image_size={SIZE}", setting]), str(path))


def test_a_camera_only_dataset_reads_as_frames_for_a_pixel_run_and_no_state_run(made_by_lerobot):
    """demos.lerobot.state: null, as for a robot that records its camera and actions alone."""
    path, saved = made_by_lerobot
    pixels = load_config(VIDEO, [f"env.image_size={SIZE}", "demos.lerobot.state=null"])
    data = read(pixels, str(path))
    assert list(data.observation_space.spaces) == [demos.PIXELS]
    assert all(list(e.observations) == [demos.PIXELS] for e in data.episodes)
    frames = np.concatenate([e.observations[demos.PIXELS][:-1] for e in data.episodes])
    np.testing.assert_array_equal(frames, saved["frames"].transpose(0, 3, 1, 2))
    states = load_config(STATE, ["demos.lerobot.state=null"])
    with pytest.raises(UserError, match=r"observations pixels there, state here \(encoder.type\)"):
        check_fits(states, read(states, str(path)), gym.spaces.Box(-1, 1, (STATE_DIM,)),
                   ACTION_DIM)


def changed(data: demos.Demonstrations, *, actions) -> demos.Demonstrations:
    """`data` with every episode's actions replaced by actions(episode)."""
    episodes = [dataclasses.replace(e, actions=actions(e)) for e in data.episodes]
    space = gym.spaces.Box(-np.inf, np.inf, episodes[0].actions.shape[1:], np.float32)
    return dataclasses.replace(data, episodes=episodes, action_space=space)


def widened(episode: demos.Episode) -> np.ndarray:
    actions = episode.actions.copy()
    actions[2, 1] = 3.0
    return actions


@pytest.mark.parametrize("actions, message", [
    (widened, "hold actions outside the task's [-1, 1] (episode 0, step 2: "),
    (lambda episode: episode.actions[:, :3], "do not fit this run: action dimension 3 there, 4 "
                                             "here (env.id)"),
])
def test_actions_of_the_wrong_size_or_out_of_bounds_stop_the_run_in_one_line(
        tmp_path, made_by_lerobot, actions, message):
    path, _ = made_by_lerobot
    wrong = tmp_path / "wrong"
    lerobot_format.write(wrong, changed(read(load_config(STATE), str(path)), actions=actions),
                         fps=10, task="wash", robot_type="test", camera="top")
    done = run_cli(*demos_run(tmp_path, "state", "wrong", wrong, 2))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"error: demonstrations {wrong} {message}"), done.stderr


READ_BACK = """
    import sys
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/written_here", root=sys.argv[1])
    rows, (camera,) = [ds[i] for i in range(len(ds))], ds.meta.camera_keys
    np.savez(sys.argv[2],
             frames=np.stack([(r[camera].numpy() * 255).round()
                              for r in rows]).astype(np.uint8),
             states=np.stack([r["observation.state"].numpy() for r in rows]),
             actions=np.stack([r["action"].numpy() for r in rows]),
             rewards=np.stack([r["next.reward"].numpy() for r in rows]),
             episodes=np.array([int(r["episode_index"]) for r in rows]),
             tasks=np.array([r["task"] for r in rows]))
    print(ds.fps, ds.num_episodes, ds.meta.total_frames, camera)
"""


def test_a_recording_written_as_lerobot_reads_back_in_lerobot_bit_exact(tmp_path):
    recording, out = tmp_path / "recording", tmp_path / "shared"
    record_dataset(recording, episodes=2)
    wrote = subprocess.run([sys.executable, "-m", "trainer.tools.to_lerobot", str(recording),
                            "--out", str(out), "--task", "wash the plate"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert wrote.returncode == 0, wrote.stderr
    assert f"wrote {out}: 2 episodes" in wrote.stdout and "(LeRobot v3.0)" in wrote.stdout
    ours = demos.read(recording)
    printed = lerobot(READ_BACK, out, tmp_path / "back.npz")
    back = np.load(tmp_path / "back.npz")
    fps, episodes, frames, camera = printed.split()
    assert camera == f"observation.images.{ours.recording['camera']}"
    assert (int(episodes), int(frames)) == (2, ours.steps)
    np.testing.assert_array_equal(
        back["frames"], np.concatenate([e.observations[demos.PIXELS][:-1] for e in ours.episodes]))
    np.testing.assert_array_equal(
        back["states"], np.concatenate([e.observations[demos.STATE][:-1] for e in ours.episodes]))
    for key in ("actions", "rewards"):
        np.testing.assert_array_equal(
            back[key], np.concatenate([getattr(e, key) for e in ours.episodes]))
    assert set(back["tasks"]) == {"wash the plate"}
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["robot_type"] == ours.recording["env_id"] and info["fps"] == int(fps)


def test_a_hub_dataset_that_cannot_be_fetched_is_one_line(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="^cannot fetch the LeRobot dataset "
                       "hf://datasets/nobody/nothing from the Hugging Face Hub .*; check the id"):
        read(load_config(STATE), "hf://datasets/nobody/nothing")
