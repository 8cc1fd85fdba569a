"""Environments: real MuJoCo tasks (Gymnasium and dm_control) in state and video mode, rendered
headless."""

import multiprocessing
import os
import re
import warnings

import numpy as np
import pytest

from envs.action_repeat import ActionRepeat
from envs.config import EnvConfig
from envs.make import make_env, make_task, make_worker_env
from envs.pixels import Camera
from errors import UserError
from trainer.process.cli import explain


def config(env_id: str, **settings) -> EnvConfig:
    return EnvConfig(id=env_id, **settings)


@pytest.mark.parametrize("env_id, camera",
                         [("dm_control/cartpole-swingup-v0", None), ("InvertedPendulum-v5", None),
                          ("HalfCheetah-v5", "track")])
def test_video_observations_are_uint8_frame_stacks_that_show_motion(env_id, camera):
    env = make_env(config(env_id, image_size=64, camera=camera), pixels=True)
    obs, _ = env.reset(seed=0)
    assert (obs.shape == (3, 3, 64, 64) and obs.dtype == np.uint8
            and env.observation_space.contains(obs))
    assert obs.std() > 5, "a rendered scene, not a blank frame"
    assert np.array_equal(obs[0], obs[-1]), "the reset frame fills the stack"
    frames = [obs]
    for _ in range(5):
        obs, *_ = env.step(np.ones(env.action_space.shape, np.float32))
        assert np.array_equal(obs[:-1], frames[-1][1:]), "each step shifts the stack by one frame"
        frames.append(obs)
    assert not np.array_equal(frames[0][-1], frames[-1][-1]), (
        "the picture changes as the body moves")
    env.close()


def test_a_vector_worker_limits_its_software_renderer_to_its_share_of_cores_unless_user_chose(
        monkeypatch):
    cfg = config("InvertedPendulum-v5", image_size=32)
    monkeypatch.setenv("LP_NUM_THREADS", "unset")
    monkeypatch.delenv("LP_NUM_THREADS")  # monkeypatch restores whatever the worker function sets
    make_worker_env(cfg, True, 3).close()
    assert "LP_NUM_THREADS" not in os.environ, (
        "in the trainer's own process (Gymnasium's call for the spaces) nothing changes")
    # as in a spawned worker
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    make_worker_env(cfg, True, 3).close()
    assert os.environ["LP_NUM_THREADS"] == "3"
    monkeypatch.delenv("LP_NUM_THREADS")
    make_worker_env(cfg, True, 1).close()
    assert os.environ["LP_NUM_THREADS"] == "0", (
        "one core per worker: rasterize in the worker's own thread")
    monkeypatch.setenv("LP_NUM_THREADS", "7")
    make_worker_env(cfg, True, 3).close()
    assert os.environ["LP_NUM_THREADS"] == "7"


def test_render_size_follows_the_config():
    env = make_env(config("dm_control/cartpole-swingup-v0", image_size=84, frame_stack=2),
                   pixels=True)
    assert env.reset(seed=0)[0].shape == (2, 3, 84, 84)
    env.close()


@pytest.mark.parametrize("env_id, dim",
                         [("dm_control/cartpole-swingup-v0", 5), ("InvertedPendulum-v5", 4),
                          ("Dishwashing-v0", 26)])
def test_state_observations_are_flat_float32_vectors_and_building_them_warns_nothing(env_id, dim):
    """float64 tasks (dm_control's, dishwashing's) and float32 ones: a user sees no gymnasium
    warning on every run."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = make_env(config(env_id), pixels=False)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (dim,) and obs.dtype == np.float32 and env.observation_space.contains(obs)
    assert env.action_space.low.min() == -1 and env.action_space.high.max() == 1


def test_same_seed_gives_the_same_start_and_another_seed_does_not():
    env = make_env(config("dm_control/cartpole-swingup-v0", image_size=64), pixels=True)
    first, again, other = env.reset(seed=7)[0], env.reset(seed=7)[0], env.reset(seed=8)[0]
    assert np.array_equal(first, again) and not np.array_equal(first, other)


def test_action_repeat_sums_rewards_of_the_repeated_steps():
    plain, repeated = (make_task("InvertedPendulum-v5"),
                       ActionRepeat(make_task("InvertedPendulum-v5"), 3))
    plain.reset(seed=1)
    repeated.reset(seed=1)
    action = np.array([0.1], np.float32)
    expected = sum(plain.step(action)[1] for _ in range(3))
    obs, reward, *_ = repeated.step(action)
    assert reward == pytest.approx(expected) and np.allclose(obs, plain.unwrapped._get_obs())


def test_frames_larger_than_mujoco_s_default_offscreen_buffer_render_and_smaller_ones_are_unchanged(
    ):
    """MuJoCo's 640x480 offscreen buffer refused a 481 px camera (the config allows 1024 px frames,
    2048 px videos) with a ValueError traceback; the buffer now grows to fit the largest camera of
    the model."""
    env = make_env(config("dm_control/cartpole-swingup-v0", image_size=64), pixels=True)
    before = env.reset(seed=0)[0]
    large = Camera(env, size=481, camera=None, shadow_size=1024, offsamples=0)
    frame = large.render()
    assert frame.shape == (481, 481, 3) and frame.std() > 5
    assert np.array_equal(env.reset(seed=0)[0], before), (
        "the env's own 64 px camera draws as before")
    large.close()
    env.close()


def test_max_episode_steps_truncates_in_agent_steps():
    env = make_env(config("dm_control/cartpole-swingup-v0", max_episode_steps=7, action_repeat=2),
                   pixels=False)
    env.reset(seed=0)
    flags = [env.step(np.zeros(1, np.float32))[3] for _ in range(7)]
    assert flags == [False] * 6 + [True]


def test_unknown_camera_names_the_available_ones():
    with pytest.raises(UserError) as err:
        make_env(config("HalfCheetah-v5", camera="top"), pixels=True)
    assert re.search("unknown env.camera 'top'.*track", explain(err.value))
