"""Demonstrations: a recording loads back exactly as the env produced it (frames, states, actions,
rewards), batches hold the configured share of them with frame stacks rebuilt as the env stacks
them, a frozen trunk's run stores them as the trunk's features of exactly those stacks, a dataset
that does not fit the run is a one-line error naming both sides, and a run resumed with
demonstrations (from state, or on a frozen trunk's features) re-reads them (saying so, and saying
when the file changed), continuing bit for bit as if it never stopped."""

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from encoders.frozen import FEATURE_DTYPE
from envs import demos
from envs.dishwashing.scripted import scripted_action
from envs.make import make_batched_env, make_env
from errors import UserError
from sac.demos import demo_count, fill_store, mixed_sample
from sac.replay import ReplayBuffer
from tests.conftest import ROOT, interrupt_when_started, pause, run_cli, sets, wait_for_lock
from tests.test_export import saved_trainer
from trainer.checkpoints import checkpoint
from trainer.config.load import load_config
from trainer.policy.trained import Policy
from trainer.run.demo_store import Demos, check_fits
from trainer.run.encoder_setup import build_encoders
from trainer.tools.record import Acting, record, recording_settings

VIDEO, STATE = (str(ROOT / "configs" / "dishwashing_video.yaml"),
                str(ROOT / "configs" / "dishwashing_state.yaml"))
SIZE = 40  # small frames: the tests render every step


def record_dataset(path, episodes: int = 2, seed: int = 0, size: int = SIZE) -> list[demos.Episode]:
    """Record through the command line, as users do; the episodes as the recorder produced them in
    memory too."""
    cfg = load_config(VIDEO, [f"env.image_size={size}"])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer.tools.record",
            "--episodes",
            str(episodes),
            "--out",
            str(path),
            "--seed",
            str(seed),
            "--set",
            f"env.image_size={size}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert f"{episodes} episodes" in done.stdout and f"{episodes} successful" in done.stdout
    return record(cfg, episodes, seed=seed, acting=Acting(noise=0.1), progress=False)[0]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("demos") / "scripted"
    return path, record_dataset(path)


def test_recording_loads_back_exactly_as_the_env_returned_it(dataset):
    path, recorded = dataset
    loaded = demos.read(path)
    assert len(loaded.episodes) == len(recorded) == 2
    settings = recording_settings(load_config(VIDEO, [f"env.image_size={SIZE}"]))
    assert loaded.recording == {**settings, "driver": "solver"}
    for mine, theirs in zip(recorded, loaded.episodes):
        assert theirs.observations.keys() == {demos.STATE, demos.PIXELS}
        for key in mine.observations:
            assert theirs.observations[key].dtype == mine.observations[key].dtype
            assert np.array_equal(theirs.observations[key], mine.observations[key]), key
        for name in ("actions", "rewards", "terminations", "truncations"):
            assert np.array_equal(getattr(theirs, name), getattr(mine, name)), name
        assert theirs.terminations[-1] and not theirs.terminations[:-1].any(), "each ends placed"

    # what was stored is what the trainer's own envs return for the same start and actions, in both
    # modes
    episode = loaded.episodes[1]
    pixel_env = make_env(load_config(VIDEO, [f"env.image_size={SIZE}"]).env, pixels=True)
    state_env = make_env(load_config(STATE).env, pixels=False)
    stacks, states = [pixel_env.reset(seed=1)[0]], [state_env.reset(seed=1)[0]]
    for action in episode.actions:
        stacks.append(pixel_env.step(action)[0])
        states.append(state_env.step(action)[0])
    pixel_env.close()
    frames = episode.observations[demos.PIXELS]
    assert np.array_equal(np.array(stacks)[:, -1], frames)
    assert np.array_equal(np.array(states), episode.observations[demos.STATE])
    # the stacks a frozen trunk encodes, rebuilt from the stored frames by the replay's stacking,
    # are the env's own
    store = fill_store([(frames, episode.actions, episode.rewards, episode.terminations)],
                       frame_stack=len(stacks[0]),
                       seed=0, discount=0.99, nstep=1, frames_on=None)
    ends = np.arange(store.count)
    assert np.array_equal(store.stacks(ends, np.zeros_like(ends)).numpy(), np.array(stacks))


@pytest.mark.parametrize("damage", ["metadata", "data"])
def test_a_damaged_dataset_is_a_one_line_error(dataset, tmp_path, damage):
    """Cut-off copies (a full disk, an interrupted download): its JSON metadata or its HDF5 file."""
    copy = tmp_path / "copy"
    shutil.copytree(dataset[0], copy)
    files = copy / demos.DATA_DIR
    if damage == "metadata":
        (files / "metadata.json").write_text("{")
    else:
        data = (files / "main_data.hdf5").read_bytes()
        (files / "main_data.hdf5").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError,
                       match=rf"cannot read the Minari dataset at {copy} \(.*\); it is damaged: "
                       "record it again with python3 -m trainer.tools.record") as err:
        demos.read(copy)
    assert "\n" not in str(err.value)


def test_recording_never_overwrites_a_dataset(dataset):
    path, _ = dataset
    done = subprocess.run(
        [sys.executable, "-m", "trainer.tools.record", "--episodes", "1", "--out", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        done.stderr.strip().splitlines()[-1]
        == f"error: a dataset already exists at {path}; pass another --out or delete it first"
    )
    assert len(demos.read(path).episodes) == 2


@pytest.mark.parametrize("args, message", [
    (["--out", ""],
     "error: the dataset folder is empty; pass one to create, e.g. --out datasets/mine"),
    (["--out", "{file}"],
     "error: {file} is a file, not a dataset folder; pass a folder to create as --out"),
    (["--out", "{file}/data"],
     "error: cannot create {file}/data: {file} is not a folder this process may write to"),
    (["--out", "{tmp}/new", "--seed", "-1"],
     "--seed in [0, 1073741824), got 1, 0.1, 0.0, 0.05 and -1"),
    (["--out", "{tmp}/new", "--noise", "nan"], "--noise a number >= 0"),
    (["--out", "{tmp}/new", "--detours", "1.5"],
     "--detours and --handover probabilities in [0, 1]"),
    (["--out", "{tmp}/new", "--handover", "-0.1"], "got 1, 0.1, 0.0, -0.1 and 0"),
    (["--out", "{tmp}/new", "--policy", "{tmp}/missing.pt"], "{tmp}/missing.pt"),
])
def test_a_recording_refuses_a_place_or_setting_it_cannot_use_before_recording(
    tmp_path, args, message):
    """Checked before the episodes are played: an empty --out once wrote a dataset into the working
    folder."""
    (tmp_path / "file").write_text("not a folder")
    names = {"file": tmp_path / "file", "tmp": tmp_path}
    done = subprocess.run([sys.executable, "-m", "trainer.tools.record", "--episodes", "1",
                           "--config", VIDEO,
                           # an empty --out: this folder
                           *(arg.format(**names) for arg in args)], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert message.format(**names) in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["file"], "nothing written"


@pytest.mark.parametrize("detours", [0.0, 0.2])
def test_detours_hand_some_steps_to_random_actions_and_the_solver_takes_back_over(detours):
    """Without noise every action is the solver's on that step's state, but for the detours' uniform
    ones."""
    (episode,), *_ = record(load_config(VIDEO, [f"env.image_size={SIZE}"]), 1, seed=3,
                            acting=Acting(detours=detours),
                            progress=False)
    states = episode.observations[demos.STATE]
    solvers = np.array([scripted_action(state) for state in states[:-1]])
    # the states are stored as float32
    detoured = ~np.isclose(episode.actions, solvers, atol=1e-5).all(axis=1)
    assert np.abs(episode.actions).max() <= 1.0
    if detours == 0:
        assert not detoured.any() and episode.terminations[-1], "the solver alone places the plate"
    else:
        assert 0 < detoured.sum() < len(detoured), (
            "some steps detour, and the solver acts between them")
        assert len(np.unique(episode.actions[detoured, 3])) == detoured.sum(), (
            "uniform fingers, not the solver's +-1")


@pytest.mark.parametrize("backend", ["mujoco", "mujoco_warp"])
def test_a_policy_acts_until_the_solver_takes_over_and_the_states_it_reaches_are_recorded(
    tmp_path, backend):
    """--policy: from the first step the actions are the policy's on the recorded frame stacks, and
    from the handover on the solver's on the recorded states, in OpenGL and in MuJoCo Warp worlds; a
    policy that sees other frames than the config renders is one line, before any episode."""
    _, path = saved_trainer(tmp_path, "dishwashing_video.yaml")  # 32x32 frames, untrained
    policy = Policy.load(path, unit_actions=True)
    cfg = load_config(VIDEO, ["env.image_size=32", f"env.backend={backend}"])
    (episode,), *_ = record(cfg, 1, seed=3, acting=Acting(policy=policy, handover=0.1),
                            progress=False)
    frames, states = episode.observations[demos.PIXELS], episode.observations[demos.STATE]
    steps, depth = len(episode.actions), cfg.env.frame_stack
    # a reset's stack repeats its frame
    index = np.maximum(np.arange(steps)[:, None] + np.arange(1 - depth, 1), 0)
    acted = policy.act(frames[index])
    solvers = np.array([scripted_action(state) for state in states[:-1]])
    by_policy = np.isclose(episode.actions, acted, atol=1e-6).all(axis=1)
    handover = int(np.argmin(by_policy))
    assert 0 < handover < steps and by_policy[:handover].all()
    np.testing.assert_allclose(episode.actions[handover:], solvers[handover:], atol=1e-5)
    with pytest.raises(UserError,
                       match=r"--policy sees frame stacks of shape \(3, 3, 32, 32\) and --config "
                             r"renders \(3, 3, 40, 40\); record with the config the policy was "
                             r"trained on"):
        record(load_config(VIDEO, [f"env.image_size={SIZE}"]), 1, seed=3,
               acting=Acting(policy=policy),
               progress=False)


WARP = ["env.backend=mujoco_warp", f"env.image_size={SIZE}"]
WARP_ARGS = [arg for setting in WARP for arg in ("--set", setting)]


@pytest.fixture(scope="module")
def warp_recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("demos") / "warp"
    done = subprocess.run([sys.executable, "-m", "trainer.tools.record", "--episodes", "2", "--out",
                           str(path),
                           "--seed", "3", *WARP_ARGS],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "2 episodes" in done.stdout and "2 successful" in done.stdout
    return path


def test_a_warp_recording_holds_what_each_world_returns_alone(warp_recording):
    """With env.backend=mujoco_warp the recorder plays the episodes at once, a world each (world i
    from seed + i): the dataset holds the ray tracer's frames and MuJoCo Warp's states, exactly what
    one world started from the same seed returns for the episode's actions, up to the step that ends
    it, and names the look it was rendered with."""
    cfg = load_config(VIDEO, WARP)
    loaded = demos.read(warp_recording)
    assert loaded.recording == {**recording_settings(cfg), "driver": "solver"}
    look = [loaded.recording[key] for key in ("backend", "warp_shadows", "warp_skybox")]
    assert look == ["mujoco_warp", False, False]
    assert len(loaded.episodes) == 2
    for i, episode in enumerate(loaded.episodes):
        assert episode.terminations[-1] and not episode.terminations[:-1].any(), "each ends placed"
        assert not episode.truncations.any()
        world = make_batched_env(dataclasses.replace(cfg.env, num_envs=1, warp_processes=1),
                                 pixels=True,
                                 device=torch.device("cpu"))
        frames = [world.reset(3 + i)[0, -1].numpy()]
        states = [world.states()[0].numpy()]
        for action in episode.actions:
            frames.append(world.step(lambda _: action[None])[1][0, -1].numpy())
            states.append(world.states()[0].numpy())
        assert np.array_equal(np.array(frames), episode.observations[demos.PIXELS])
        assert np.array_equal(np.array(states), episode.observations[demos.STATE])


def test_a_warp_pixel_run_trains_on_a_warp_recording(tmp_path, warp_recording):
    """The dishwashing pixel config switches backends with its demonstrations: recorded through
    MuJoCo Warp, they fit the warp run and fill half of its batches."""
    done = run_cli("--config", VIDEO, *WARP_ARGS, *sets(
        demos__path=warp_recording, env__num_envs=2, env__warp_processes=1,
        env__max_episode_steps=8,
        training__episodes=4, training__max_env_steps="null", training__seed_steps=8,
        training__eval_every_episodes=0,
        sac__batch_size=8, sac__buffer_size=100, sac__hidden_dim=32,
        checkpoint__dir=tmp_path / "ckpt",
        checkpoint__every_episodes=4, logging__tensorboard_dir=tmp_path / "runs",
        logging__progress="false"))
    assert done.returncode == 0, done.stderr
    steps = demos.read(warp_recording).steps
    assert (f"training with 2 demonstration episodes ({steps} steps) from {warp_recording}: 50% "
            "of" in done.stdout)
    # 2 worlds, 8-step episodes; updates from step 8 on
    assert "done: 4 episodes, 32 steps" in done.stdout


def synthetic_store(marker: float, frame_stack: int | None, episodes: int = 3,
                    length: int = 7) -> ReplayBuffer:
    """Episodes whose frame values count up from `marker` and whose actions are all `marker`."""
    data = []
    for e in range(episodes):
        values = marker + 100 * e + np.arange(length + 1)
        obs = (
            np.broadcast_to(values[:, None, None, None], (length + 1, 1, 2, 2)).astype(np.uint8)
            if frame_stack
            else np.repeat(values[:, None], 3, axis=1).astype(np.float32)
        )
        data.append(
            (
                obs,
                np.full((length, 2), marker, np.float32),
                np.ones(length, np.float32),
                np.arange(length) == length - 1,
            )
        )
    return fill_store(data, frame_stack=frame_stack, seed=0, discount=0.99, nstep=1, frames_on=None)


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5])
def test_batches_hold_the_configured_share_of_demonstrations(share):
    replay, shown = synthetic_store(-1.0, None), synthetic_store(1.0, None)
    for _ in range(5):
        batch = mixed_sample(replay, demos=shown, batch_size=64, share=share)
        from_demos = (batch["action"][:, 0] == 1.0).numpy()
        assert (len(from_demos) == 64
                and from_demos.sum() == demo_count(64, share) == round(64 * share))
        assert from_demos[64 - demo_count(64, share) :].all(), (
            "the demonstrations fill the end of the batch")


def test_demonstration_stacks_are_rebuilt_as_the_env_stacks_frames():
    store = synthetic_store(10.0, frame_stack=3, episodes=1)
    batch = store.sample(256)
    obs, next_obs = (
        batch["obs"][:, :, 0, 0, 0].numpy().astype(int),
        batch["next_obs"][:, :, 0, 0, 0].numpy().astype(int),
    )
    step = next_obs[:, -1] - 10  # the frame each transition leads to, 1..7
    assert set(step) == set(range(1, 8)), (
        "every transition of the episode is sampled, none of the padding")
    def expect(last):  # the reset frame repeated before the first step
        return 10 + np.maximum(last[:, None] + np.array([-2, -1, 0]), 0)
    assert np.array_equal(obs, expect(step - 1)) and np.array_equal(next_obs, expect(step))
    assert (batch["discount"][step == 7] == 0).all() and (batch["discount"][step < 7] > 0).all()


def test_a_demonstration_shorter_than_a_frame_stack_is_sampled_all_the_same():
    """Two steps with stacks of 3: both transitions are drawn, their stacks padded with the reset
    frame."""
    store = synthetic_store(10.0, frame_stack=3, episodes=1, length=2)
    next_obs = store.sample(64)["next_obs"][:, :, 0, 0, 0].numpy().astype(int)
    assert {tuple(row) for row in next_obs} == {(10, 10, 11), (10, 11, 12)}


# float32 trunk: float16 storage is the only rounding
FROZEN = ["encoder.video.freeze=true", "profile=cpu"]


@pytest.fixture(scope="module")
def frozen_demos(dataset):
    """The dataset loaded as a frozen trunk's run loads it: (config, trunk, Demos)."""
    cfg = load_config(VIDEO, [f"env.image_size={SIZE}", f"demos.path={dataset[0]}", *FROZEN])
    obs_space = gym.spaces.Box(0, 255, (cfg.env.frame_stack, 3, SIZE, SIZE), np.uint8)
    torch.manual_seed(0)
    _, trunk = build_encoders(cfg, obs_space.shape, torch.device("cpu"))
    return cfg, trunk, Demos(cfg, obs_space, len(dataset[1][0].actions[0]), None, trunk)


def test_a_frozen_trunks_demonstrations_are_its_features_of_the_stacks_the_env_returned(
    frozen_demos):
    """Each demonstration frame's stored vector is what the trunk gives, one stack at a time as when
    acting, for the stack the env returned there (the reset frame repeated at the start: an explicit
    rebuild from the frames)."""
    cfg, trunk, loaded = frozen_demos
    expected = []
    for episode in demos.read(cfg.demos.path).episodes:
        frames = episode.observations[demos.PIXELS]
        for t in range(len(frames)):
            stack = np.stack([frames[max(t - back, 0)]
                              for back in range(cfg.env.frame_stack - 1, -1, -1)])
            expected.append(trunk(stack[None])[0])
    stored = loaded.store.frames[: len(expected), 0]
    assert stored.dtype == FEATURE_DTYPE and stored.shape == (len(expected), trunk.repr_dim)
    assert loaded.store.count == len(expected) == loaded.steps + loaded.episodes
    assert loaded.store.frame_stack is None, "a feature vector holds its stack"
    # the store encoded up to sac.batch_size stacks per pass, here one: float16 rounding apart at
    # most
    np.testing.assert_allclose(stored.astype(np.float32), np.array(expected, np.float32), rtol=2e-3,
                               atol=1e-3)
    assert "stored as the frozen trunk's features (encoded in" in loaded.describe()


@pytest.mark.parametrize("share", [0.25, 0.5])
def test_a_frozen_trunks_batches_hold_the_configured_share_of_demonstration_features(
    frozen_demos, share):
    """A live feature replay (actions all 5, outside the action box) mixed with the demonstration
    features."""
    cfg, trunk, loaded = frozen_demos
    rng = np.random.default_rng(0)
    stacks = rng.integers(0, 256, (30, cfg.env.frame_stack, 3, SIZE, SIZE), dtype=np.uint8)
    own = fill_store([(trunk(stacks), np.full((29, 4), 5.0, np.float32), np.ones(29),
                       np.zeros(29, bool))],
                     frame_stack=None, seed=0, discount=cfg.sac.discount, nstep=cfg.sac.nstep,
                     frames_on=None)
    demo_features = torch.from_numpy(loaded.store.frames[: loaded.store.count, 0])
    for _ in range(3):
        batch = mixed_sample(own, demos=loaded.store, batch_size=64, share=share)
        assert batch["obs"].dtype == torch.float16 and batch["obs"].shape == (64, trunk.repr_dim)
        from_demos = (batch["action"].abs() <= 1).all(1).numpy()
        assert from_demos.sum() == demo_count(64, share) == round(64 * share)
        assert from_demos[64 - demo_count(64, share) :].all(), (
            "the demonstrations fill the end of the batch")
        # every demonstration row is one of the stored demonstration vectors
        for key in ("obs", "next_obs"):
            rows = batch[key][from_demos]
            assert (rows[:, None] == demo_features[None]).all(-1).any(-1).all(), key


def fake(obs_spaces: dict, action_dim: int = 4, **recording) -> demos.Demonstrations:
    return demos.Demonstrations(
        [],
        gym.spaces.Dict(obs_spaces),
        gym.spaces.Box(-1, 1, (action_dim,), np.float32),
        {"env_id": "Dishwashing-v0", "camera": "overview", "image_size": 84,
         "action_repeat": 1} | recording,
        "0",
        "data/x",
    )


STATE_BOX = gym.spaces.Box(-np.inf, np.inf, (26,), np.float32)
FRAME = gym.spaces.Box(0, 255, (3, 84, 84), np.uint8)


@pytest.mark.parametrize(
    "config, data, message",
    [
        (
            STATE,
            fake({"state": STATE_BOX}, env_id="DishwashingFeasible-v0"),
            "env id DishwashingFeasible-v0 there, Dishwashing-v0 here (env.id)",
        ),
        (STATE, fake({"pixels": FRAME}), "observations pixels there, state here (encoder.type)"),
        (
            STATE,
            fake({"state": gym.spaces.Box(-np.inf, np.inf, (26,), np.float64)}),
            "observations float64 (26,) there, float32 (26,) here (env.id)",
        ),
        (STATE, fake({"state": STATE_BOX}, action_dim=3),
         "action dimension 3 there, 4 here (env.id)"),
        (STATE, fake({"state": STATE_BOX}, action_repeat=2),
         "action_repeat 2 there, 1 here (env.action_repeat)"),
        (
            VIDEO,
            fake({"pixels": gym.spaces.Box(0, 255, (3, 64, 64), np.uint8)}),
            "observations uint8 (3, 64, 64) there, uint8 (3, 84, 84) here (env.image_size)",
        ),
        (
            VIDEO,
            fake({"pixels": gym.spaces.Box(0, 255, (4, 3, 84, 84), np.uint8)}),
            "frames stored in stacks of 4 there, single frames stacked 3 at a time here "
            "(env.frame_stack)",
        ),
        (VIDEO, fake({"pixels": FRAME}, camera="close"),
         "camera close there, overview here (env.camera)"),
    ],
)
def test_a_dataset_that_does_not_fit_the_run_names_both_sides(config, data, message):
    cfg = load_config(config)
    env = gym.make("Dishwashing-v0")
    obs_space = (gym.spaces.Box(0, 255, (3, 3, 84, 84), np.uint8) if cfg.encoder.type == "video"
                 else STATE_BOX)
    with pytest.raises(
        UserError,
        match=re.escape(
            f"demonstrations data/x do not fit this run: {message}; record matching ones with")
    ):
        check_fits(cfg, data, obs_space, env.action_space.shape[0])


@pytest.mark.parametrize("recording", [{}, {"backend": "mujoco"}])
def test_opengl_frames_do_not_fit_a_pixel_run_in_warp_worlds_but_states_do(recording):
    """Frames ray-traced by MuJoCo Warp look different from OpenGL's: pixel demonstrations must come
    from the run's renderer (a recording that does not name one is OpenGL's); state vectors mean the
    same on both backends."""
    action_dim = gym.make("Dishwashing-v0").action_space.shape[0]
    data = fake({"pixels": FRAME, "state": STATE_BOX}, **recording)
    video, stacks = (load_config(VIDEO, ["env.backend=mujoco_warp"]),
                     gym.spaces.Box(0, 255, (3, 3, 84, 84), np.uint8))
    with pytest.raises(UserError,
                       match=re.escape("do not fit this run: backend mujoco there, mujoco_warp "
                                       "here (env.backend)")):
        check_fits(video, data, stacks, action_dim)
    assert check_fits(load_config(VIDEO), data, stacks, action_dim) == "pixels"
    assert check_fits(load_config(STATE, ["env.backend=mujoco_warp"]), data, STATE_BOX,
                      action_dim) == "state"


def test_ray_traced_frames_fit_a_warp_pixel_run_of_the_same_look_only():
    """A MuJoCo Warp recording names its look: it fits a warp pixel run that renders the same, not
    an OpenGL run nor a warp run with other shadows or skybox; its states fit a state run on either
    backend."""
    action_dim = gym.make("Dishwashing-v0").action_space.shape[0]
    stacks = gym.spaces.Box(0, 255, (3, 3, 84, 84), np.uint8)
    data = fake({"pixels": FRAME, "state": STATE_BOX}, backend="mujoco_warp", warp_shadows=False,
                warp_skybox=False)
    warp = ["env.backend=mujoco_warp"]
    assert check_fits(load_config(VIDEO, warp), data, stacks, action_dim) == "pixels"
    for overrides, message in [
        ([], "backend mujoco_warp there, mujoco here (env.backend)"),
        ([*warp, "env.warp_shadows=true"],
         "warp_shadows False there, True here (env.warp_shadows)"),
        ([*warp, "env.warp_skybox=true"], "warp_skybox False there, True here (env.warp_skybox)"),
    ]:
        with pytest.raises(UserError,
                           match=re.escape(
                               f"do not fit this run: {message}; record matching ones")):
            check_fits(load_config(VIDEO, overrides), data, stacks, action_dim)
    for backend in ("mujoco", "mujoco_warp"):
        assert check_fits(load_config(STATE, [f"env.backend={backend}"]), data, STATE_BOX,
                          action_dim) == "state"


def test_a_mismatched_dataset_stops_the_trainer_with_one_line(dataset):
    path, _ = dataset  # recorded at SIZE px: the video config renders 84
    done = run_cli("--config", VIDEO, *sets(demos__path=path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    # gymnasium's RescaleAction warns on stderr before it: not ours
    assert done.stderr.count("error:") == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: demonstrations {path} do not fit this run: observations uint8 (3, {SIZE}, {SIZE}) "
        "there, uint8 (3, 84, 84) here (env.image_size); record matching ones with python3 -m "
        "trainer.tools.record --config <this config> [its --set ...] --out PATH, or set "
        "demos.path to another dataset"
    )


# a state run, and a pixel run on a frozen trunk's features (whose demonstrations are encoded at
# every start)
RUNS = {"state": (STATE, [], "sac_dishwashing_state"),
        "frozen": (VIDEO, [f"env.image_size={SIZE}", *FROZEN, "sac.buffer_size=1000"], "sac_video"),
        "frozen_critic_state": (VIDEO, [f"env.image_size={SIZE}", *FROZEN, "sac.buffer_size=1000",
                                        "sac.critic_input=state"], "sac_video")}


def demos_run(tmp_path, mode, run, demos_path, episodes: int) -> list[str]:
    config, settings, _ = RUNS[mode]
    return [
        "--config",
        config,
        *[arg for setting in settings for arg in ("--set", setting)],
        *sets(
            demos__path=demos_path,
            training__episodes=episodes,
            training__max_env_steps="null",
            env__max_episode_steps=30,
            sac__batch_size=16,
            sac__hidden_dim=32,
            training__seed_steps=20,
            training__eval_every_episodes=0,
            checkpoint__dir=tmp_path / run,
            checkpoint__every_episodes=2,
            logging__tensorboard_dir=tmp_path / "runs" / run,
            logging__progress="false",
        ),
    ]


@pytest.mark.parametrize("mode", RUNS)
def test_resume_rereads_the_demonstrations_says_so_and_continues_exactly(tmp_path, dataset, mode):
    demos_path = tmp_path / "demos"
    shutil.copytree(dataset[0], demos_path)
    straight = run_cli(*demos_run(tmp_path, mode, "straight", demos_path, 4))
    assert straight.returncode == 0, straight.stderr
    steps = demos.read(demos_path).steps
    said = f"training with 2 demonstration episodes ({steps} steps) from {demos_path}"
    encoded = ", stored as the frozen trunk's features (encoded in "
    frozen = mode != "state"
    assert f"{said}{encoded if frozen else ': 50% of every batch'}" in straight.stdout

    first = run_cli(*demos_run(tmp_path, mode, "resumed", demos_path, 2))
    assert first.returncode == 0, first.stderr
    latest = f"{RUNS[mode][2]}_latest.pt"
    payload, _ = checkpoint.load(tmp_path / "resumed" / latest)
    assert set(payload["demos"]) == {"path", "fingerprint", "rng"}, (
        "the checkpoint holds no demonstrations")
    resumed = run_cli(*demos_run(tmp_path, mode, "resumed", demos_path, 4), "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    reread = ("re-read and re-encoded 2 demonstration episodes" if frozen
              else "re-read 2 demonstration")
    assert reread in resumed.stdout and "checkpoints do not copy them" in resumed.stdout
    assert "differs" not in resumed.stdout

    a, replay_a = checkpoint.load(tmp_path / "straight" / latest)
    b, replay_b = checkpoint.load(tmp_path / "resumed" / latest)
    assert a["progress"] == b["progress"] and a["agent"]["updates"] == b["agent"]["updates"] > 50
    assert a["trunk"] == b["trunk"] and (a["trunk"] is None) == (not frozen)
    for net in ("actor", "critic"):
        for name, tensor in a["agent"][net].items():
            assert torch.equal(tensor, b["agent"][net][name]), f"{net}.{name} differs after resume"
    assert torch.equal(replay_a["frames"], replay_b["frames"])

    shutil.rmtree(demos_path)
    record_dataset(demos_path, seed=7)
    again = run_cli(*demos_run(tmp_path, mode, "resumed", demos_path, 6), "--resume", "auto")
    assert again.returncode == 0, again.stderr
    assert "the file differs from the one the checkpoint trained with" in again.stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_recording_stopped_by_a_signal_is_one_line_and_leaves_no_dataset(tmp_path, sig):
    """Ctrl-C in trainer.tools.record was a KeyboardInterrupt traceback and EGL errors (67
    lines)."""
    out = tmp_path / "recording"
    status, stderr = interrupt_when_started(
        [sys.executable, "-m", "trainer.tools.record", "--episodes", "50", "--out", str(out),
         "--set",
         f"env.image_size={SIZE}"], sig, started=b" 1/50 ")
    assert status == 128 + sig and "Traceback" not in stderr and "EGL" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"stopped by signal {sig}; no dataset was written to {out}; record it again")
    assert not (out / "data").exists()


def test_a_dataset_write_interrupted_midway_leaves_no_dataset_and_the_same_command_writes_it(
    dataset, tmp_path):
    """Ctrl-C while the dataset was written left a dataset of 0 episodes in place, which a new
    recording refused ("a dataset already exists") and training read into an IndexError. The write
    is stopped here by a real SIGINT after its first episode."""
    data = demos.read(dataset[0])

    class InterruptedAfterOne(list):
        def __iter__(self):
            for i, episode in enumerate(list.__iter__(self)):
                # to this thread: a signal to the process may go to a thread that leaves it pending
                if i == 1:
                    signal.raise_signal(signal.SIGINT)
                yield episode

    # Ctrl-C as Python has it, whatever ran before
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])

    out = tmp_path / "recording"
    args = (data.observation_space, data.action_space, data.recording["env_id"], data.recording)
    with pytest.raises(KeyboardInterrupt):
        demos.write(out, InterruptedAfterOne(data.episodes), *args)
    assert not (out / "data").exists() and sorted(os.listdir(tmp_path)) == ["recording"], (
        "no half dataset, no staging")
    demos.write(out, data.episodes, *args)
    assert len(demos.read(out).episodes) == 2


def test_a_dataset_of_no_episodes_is_a_one_line_error(dataset, tmp_path):
    """What an interrupted recording of earlier versions left: training on it ended in an IndexError
    traceback."""
    data = demos.read(dataset[0])
    demos.write(tmp_path / "empty", [], data.observation_space, data.action_space,
                data.recording["env_id"],
                data.recording)
    with pytest.raises(UserError,
                       match=r"^the Minari dataset at .*empty holds no episodes \(a recording "
                             r"that was interrupted\?\); move it aside and record it again"):
        demos.read(tmp_path / "empty")


def test_a_recording_into_a_folder_another_recording_is_writing_refuses_in_one_line(tmp_path):
    """Both recorded (a command run twice), and the later write went over the earlier one's
    dataset."""
    out = tmp_path / "datasets" / "scripted"
    first = subprocess.Popen([sys.executable, "-m", "trainer.tools.record", "--episodes", "1000",
                              "--out", str(out)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_lock(out.with_name(".scripted.lock"), first)
        pause(first)
        second = subprocess.run([sys.executable, "-m", "trainer.tools.record", "--episodes", "1",
                                 "--out", str(out)],
                                cwd=ROOT, capture_output=True, text=True)
        assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
        assert second.stderr.startswith(
            f"error: dataset {out} is in use by pid {first.pid} on host ")
        assert second.stderr.endswith("; wait for that process to finish, or pass another --out\n")
        assert not out.exists()
    finally:
        first.kill()
        first.communicate()


def test_a_person_like_solver_reacts_late_and_moves_slower():
    """--lag 2 --gain 0.5: each action is the solver's for the state two steps back (the first
    state until there is one), its moves halved, its fingers as the solver set them."""
    cfg = load_config(VIDEO, [f"env.image_size={SIZE}", "env.max_episode_steps=12"])
    (episode,), *_ = record(cfg, 1, seed=4, acting=Acting(lag=2, gain=0.5), progress=False)
    states = episode.observations[demos.STATE]
    for t, action in enumerate(episode.actions):
        solver = scripted_action(states[max(t - 2, 0)])
        np.testing.assert_allclose(action, [*(0.5 * solver[:3]), solver[3]], atol=1e-6)
    assert np.abs(episode.actions[:, :3]).max() <= 0.5
