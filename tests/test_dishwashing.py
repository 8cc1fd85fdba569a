"""The dishwashing task: a Gymnasium env that passes the API checker, reproduces episodes from a
seed, is solvable by the scripted policy in both variants, shows the plate to the cameras, and
rejects bad scenes and cameras."""

import warnings

import gymnasium as gym
import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from envs.dishwashing.env import OBS_HELD, OBS_SIZE, SCENE, DishwashingEnv
from envs.dishwashing.scripted import scripted_action
from envs.make import make_env
from errors import UserError
from tests.conftest import ROOT
from trainer.config.load import load_config

ENV_IDS = ("Dishwashing-v0", "DishwashingFeasible-v0")  # the full task and its feasible variant
CAMERAS = ("overview", "close")


def run_scripted(env: gym.Env, seed: int) -> list[tuple]:
    """One episode of the scripted policy; (reward, terminated, truncated, info) per step."""
    obs, _ = env.reset(seed=seed)
    steps, done = [], False
    while not done:
        obs, reward, terminated, truncated, info = env.step(scripted_action(obs))
        steps.append((reward, terminated, truncated, info))
        done = terminated or truncated
    return steps


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_env_passes_the_gymnasium_checker_without_warnings(env_id):
    env = gym.make(env_id, render_mode="rgb_array").unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # velocities have no bound, so the state space is unbounded, as in Gymnasium's own MuJoCo
        # tasks
        warnings.filterwarnings("ignore",
                                message=".*Box observation space (minimum|maximum) value is "
                                        ".*infinity")
        check_env(env)


@pytest.mark.parametrize("env_id, limit", [("Dishwashing-v0", 100), ("DishwashingFeasible-v0", 50)])
def test_registered_ids_have_unit_actions_and_an_episode_limit(env_id, limit):
    env = gym.make(env_id)
    assert env.spec.max_episode_steps == limit
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    assert env.observation_space.shape == (OBS_SIZE,)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_replays_the_same_episode_whatever_came_before(env_id):
    env = gym.make(env_id)
    actions = np.random.default_rng(0).uniform(-1, 1, (30, 4)).astype(np.float32)

    def rollout(seed):
        observations = [env.reset(seed=seed)[0]]
        observations += [env.step(action)[0] for action in actions]
        return np.array(observations)

    first = rollout(5)
    run_scripted(env, seed=1)  # grasps and places a plate in between
    assert np.array_equal(rollout(5), first)
    assert not np.array_equal(env.reset(seed=6)[0], first[0])


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("seed", range(8))
def test_scripted_policy_places_the_plate_within_the_episode_limit(env_id, seed):
    steps = run_scripted(gym.make(env_id), seed)
    reward, terminated, truncated, info = steps[-1]
    assert info["success"] and terminated and not truncated, f"no success in {len(steps)} steps"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_step_before_success_costs_and_success_ends_the_episode_at_zero(env_id):
    steps = run_scripted(gym.make(env_id), seed=0)
    before, (last_reward, *_, last_info) = steps[:-1], steps[-1]
    assert all(-1.0 <= reward <= -0.1 and not terminated and not info["success"]
               for reward, terminated, _, info in before)
    assert last_reward == 0.0 and last_info["success"]
    assert [info["held"] for *_, info in steps].count(True) > 0, "the plate was carried, not pushed"


def test_progress_terms_rise_through_the_task():
    steps = run_scripted(gym.make("Dishwashing-v0"), seed=0)
    first_held = next(i for i, (*_, info) in enumerate(steps) if info["held"])
    assert steps[first_held][0] > steps[first_held - 1][0] + 0.15, "grasping pays"
    lifted, carried = steps[first_held + 10][3], steps[-2][3]
    assert lifted["reward_lift"] > steps[first_held][3]["reward_lift"]
    assert carried["reward_place"] > lifted["reward_place"]


def test_release_pays_for_loosening_the_fingers_only_once_the_plate_is_in_the_slot():
    firm, loose = gym.make("DishwashingFeasible-v0"), gym.make("DishwashingFeasible-v0")
    obs, _ = firm.reset(seed=0)
    loose.reset(seed=0)
    shut, still_shut = np.array([0, 0, 0, 1], np.float32), np.array([0, 0, 0, 0.2], np.float32)
    assert firm.step(shut)[4]["reward_release"] == loose.step(still_shut)[4][
        "reward_release"] == 0.0, (
        "away from the slot")

    obs = firm.unwrapped.observation()
    # carry and lower until the scripted policy would let go
    while (action := scripted_action(obs))[3] > 0:
        obs, *_ = firm.step(action)
        loose.step(action)
    *_, firm_info = firm.step(shut)
    *_, loose_info = loose.step(still_shut)
    assert firm_info["held"] and loose_info["held"]
    assert loose_info["reward_release"] > firm_info["reward_release"] == 0.0


def test_shutting_the_fingers_away_from_the_plate_grasps_nothing():
    env = gym.make("Dishwashing-v0")
    env.reset(seed=0)
    infos = [env.step(np.array([0, 0, 0, 1], np.float32))[4] for _ in range(10)]
    assert not any(info["held"] for info in infos)


def test_opening_the_fingers_drops_the_plate():
    env = gym.make("DishwashingFeasible-v0")
    obs, _ = env.reset(seed=0)
    assert obs[OBS_HELD] == 1.0
    obs, reward, *_ = env.step(np.array([0, 0, 0, -1], np.float32))
    assert obs[OBS_HELD] == 0.0
    for _ in range(10):
        obs, later, *_ = env.step(np.array([0, 0, 0, -1], np.float32))
    assert later < reward, "a dropped plate costs more than a held one"


def test_render_mode_rgb_array_follows_size_and_camera():
    frames = {}
    for camera in CAMERAS:
        env = gym.make("Dishwashing-v0", render_mode="rgb_array", width=96, height=64,
                       camera_name=camera)
        env.reset(seed=0)
        frames[camera] = env.render()
        env.close()
    assert all(frame.shape == (64, 96, 3) and frame.dtype == np.uint8 for frame in frames.values())
    assert not np.array_equal(frames["overview"], frames["close"])


def plate_mask(env: gym.Env, camera: str, size: int) -> np.ndarray:
    """Pixels showing the plate, from MuJoCo's segmentation rendering of the same camera."""
    base = env.unwrapped
    renderer = mujoco.Renderer(base.model, size, size)
    renderer.enable_segmentation_rendering()
    renderer.update_scene(base.data, camera=camera)
    ids, types = renderer.render().transpose(2, 0, 1)
    renderer.close()
    geoms = ids[types == mujoco.mjtObj.mjOBJ_GEOM]
    mask = np.zeros((size, size), bool)
    mask[types == mujoco.mjtObj.mjOBJ_GEOM] = (base.model.geom_bodyid[geoms]
                                               == base.model.body("plate").id)
    return mask


@pytest.mark.parametrize("size", [64, 84])
@pytest.mark.parametrize("camera", CAMERAS)
def test_video_frames_show_the_plate_and_change_where_it_moves(camera, size):
    cfg = load_config(ROOT / "configs" / "dishwashing_video.yaml",
                      [f"env.camera={camera}", f"env.image_size={size}"])
    env = make_env(cfg.env, cfg.pixels)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (cfg.env.frame_stack, 3, size, size) and obs.dtype == np.uint8
    before, mask_before = obs[-1].transpose(1, 2, 0).copy(), plate_mask(env, camera, size)

    base = env.unwrapped
    # only the plate moves: from the basin to the rack
    base.data.joint("plate").qpos[:3] = base.slot
    mujoco.mj_forward(base.model, base.data)
    after, mask_after = env.camera.render().copy(), plate_mask(env, camera, size)

    changed = (before != after).any(axis=2)
    for mask in (mask_before, mask_after):
        assert mask.sum() >= 30, "the plate covers enough pixels to be seen"
        assert changed[mask].mean() > 0.9, "the pixels where the plate was, and is now, changed"
    env.close()


def test_feasible_config_builds_a_state_env():
    cfg = load_config(ROOT / "configs" / "dishwashing_feasible.yaml")
    env = make_env(cfg.env, cfg.pixels)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (OBS_SIZE,) and obs.dtype == np.float32


def test_unknown_camera_names_the_scene_cameras():
    with pytest.raises(UserError,
                       match="unknown dishwashing camera 'top'; this scene's cameras: overview, "
                             "close"):
        DishwashingEnv(render_mode="rgb_array", camera_name="top")


def test_missing_scene_file_is_a_clear_error(tmp_path):
    with pytest.raises(UserError,
                       match="dishwashing scene not found: .*nowhere.xml; pass model_path="):
        DishwashingEnv(model_path=tmp_path / "nowhere.xml")


def test_scene_with_a_missing_asset_is_a_clear_error(tmp_path):
    scene = tmp_path / "scene.xml"
    scene.write_text(SCENE.read_text().replace("<asset>",
                                               '<asset>\n    <mesh name="cup" file="cup.stl"/>'))
    with pytest.raises(UserError,
                       match=r"cannot load dishwashing scene .*scene.xml: .*cup.stl.*; fix the "
                             r"MJCF file"):
        DishwashingEnv(model_path=scene)


def test_scene_without_an_element_the_task_needs_is_a_clear_error(tmp_path):
    scene = tmp_path / "scene.xml"
    scene.write_text(SCENE.read_text().replace('<site name="slot"', '<site name="spot"'))
    with pytest.raises(UserError, match="has no site named 'slot'"):
        DishwashingEnv(model_path=scene)


def test_unknown_variant_is_a_clear_error():
    with pytest.raises(UserError,
                       match="unknown dishwashing variant 'easy'; use one of full, feasible"):
        DishwashingEnv(variant="easy")
