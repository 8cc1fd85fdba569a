"""An asymmetric actor-critic (`sac.critic_input: state`): the replay stores the simulator state
after the frozen trunk's features, the critic reads only that state and the actor only the features.
What the replay and the demonstrations hold there is the state the env reached, and a saved policy
acts on frames alone."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from encoders.frozen import FEATURE_DTYPE
from encoders.state import StateEncoder
from envs import demos
from envs.make import make_env, state_size
from errors import UserError
from sac.agent import SAC
from tests.conftest import ROOT
from tests.test_demos import record_dataset
from tests.test_export import SIZE, frozen_settings, saved_trainer
from trainer.config.load import load_config
from trainer.run.demo_store import Demos, check_fits
from trainer.run.encoder_setup import build_encoders

FEATURES, STATE, ACTIONS = 12, 5, 3


def test_the_critic_reads_only_the_state_and_the_actor_only_the_features():
    cfg = load_config(ROOT / "configs" / "default.yaml",
                      ["sac.hidden_dim=32", "sac.feature_dim=8"]).sac
    torch.manual_seed(0)
    agent = SAC(StateEncoder((FEATURES + STATE,)), ACTIONS, cfg, device=torch.device("cpu"),
                pixels=True,
                augment=False, privileged=STATE)
    stored, action = torch.randn(6, FEATURES + STATE), torch.rand(6, ACTIONS) * 2 - 1
    q = agent.critic(stored, action)
    other_features, other_state = stored.clone(), stored.clone()
    other_features[:, :FEATURES] = torch.randn(6, FEATURES)
    other_state[:, FEATURES:] = torch.randn(6, STATE)
    for same, moved in zip(q, agent.critic(other_features, action)):
        torch.testing.assert_close(same, moved)
    assert not any(torch.allclose(a, b) for a, b in zip(q, agent.critic(other_state, action)))
    assert agent.act(stored[:, :FEATURES].numpy(), sample=False).shape == (6, ACTIONS)
    # an update on stored vectors: the actor's layers take FEATURES inputs, so it can only have read
    # those
    batch = {"obs": stored, "next_obs": other_state, "action": action, "reward": torch.ones(6, 1),
             "discount": torch.full((6, 1), 0.99)}
    before = [p.clone() for p in agent.actor.parameters()]
    metrics = agent.update(batch)
    assert torch.isfinite(metrics["critic_loss"]) and torch.isfinite(metrics["actor_loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.actor.parameters()))


@pytest.mark.parametrize("num_envs", [1, 2])
def test_the_replay_stores_the_state_each_env_reached_after_the_trunks_features(tmp_path, num_envs):
    """Replaying the stored actions from each env's seed in a state env gives the stored states,
    step by step."""
    run, _ = saved_trainer(tmp_path, "dishwashing_video.yaml", *frozen_settings(tmp_path),
                           "sac.critic_input=state",
                           "env.max_episode_steps=20", f"env.num_envs={num_envs}",
                           "training.seed_steps=100")
    run.run(steps=10 * num_envs)
    features = run.trunk.repr_dim
    replay = run.replay
    assert (replay.frames.shape[-1] == features + state_size(run.cfg.env.id)
            and replay.frames.dtype == FEATURE_DTYPE)
    state_env = make_env(run.cfg.env, pixels=False)
    for i in range(num_envs):
        steps = replay.count
        assert replay.pos[0, i] == 0 and (replay.pos[1:steps, i] > 0).all(), "one episode per env"
        expected = [state_env.reset(seed=run.cfg.training.seed + i)[0]]
        for t in range(1, steps):
            expected.append(state_env.step(replay.actions[t, i])[0])
        stored = replay.frames[:steps, i, features:].astype(np.float32)
        np.testing.assert_allclose(stored,
                                   np.array(expected).astype(FEATURE_DTYPE).astype(np.float32))
        assert np.ptp(stored[:, :3], axis=0).max() > 1e-3, (
            "the gripper moved: states of different steps")
    state_env.close()
    run.close()


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("demos") / "scripted"
    record_dataset(path, size=SIZE)
    return path


def frozen_config(tmp_path, recording, *settings):
    return load_config(ROOT / "configs" / "dishwashing_video.yaml", [
        f"env.image_size={SIZE}", f"demos.path={recording}", "profile=cpu",
        *frozen_settings(tmp_path), *settings])


def test_demonstrations_store_their_recorded_states_after_the_trunks_features(tmp_path, recording):
    cfg = frozen_config(tmp_path, recording, "sac.critic_input=state")
    obs_space = gym.spaces.Box(0, 255, (cfg.env.frame_stack, 3, SIZE, SIZE), np.uint8)
    _, trunk = build_encoders(cfg, obs_space.shape, torch.device("cpu"))
    size = state_size(cfg.env.id)
    loaded = Demos(cfg, obs_space, 4, None, trunk, states=size)
    recorded = np.concatenate([e.observations[demos.STATE] for e in demos.read(recording).episodes])
    stored = loaded.store.frames[: len(recorded), 0]
    assert stored.shape == (len(recorded), trunk.repr_dim + size)
    np.testing.assert_array_equal(stored[:, trunk.repr_dim:], recorded.astype(FEATURE_DTYPE))
    plain = Demos(cfg, obs_space, 4, None, trunk)
    np.testing.assert_array_equal(stored[:, : trunk.repr_dim],
                                  plain.store.frames[: len(recorded), 0])


def test_demonstrations_without_states_of_that_size_are_a_one_line_error(tmp_path, recording):
    cfg = frozen_config(tmp_path, recording, "sac.critic_input=state")
    data = demos.read(recording)
    obs_space = gym.spaces.Box(0, 255, (cfg.env.frame_stack, 3, SIZE, SIZE), np.uint8)
    with pytest.raises(UserError,
                       match=r"the critic's simulator state: states of 26 there, 27 numbers here "
                                        r"\(sac.critic_input\)"):
        check_fits(cfg, data, obs_space, 4, states=27)
    data.observation_space = gym.spaces.Dict({demos.PIXELS: data.observation_space[demos.PIXELS]})
    with pytest.raises(UserError, match=r"the critic's simulator state: none there"):
        check_fits(cfg, data, obs_space, 4, states=26)


@pytest.mark.parametrize("settings", [
    ("encoder.video.freeze=false",),
    ("encoder.type=state", "encoder.video.freeze=false"),
    ("env.backend=mujoco_warp",),
])
def test_a_critic_on_the_state_outside_a_frozen_opengl_run_is_a_one_line_error(tmp_path, settings):
    with pytest.raises(UserError,
                       match=r"^sac.critic_input=state needs a frozen video encoder .*; set "
                                        r"sac.critic_input=features$"):
        load_config(ROOT / "configs" / "dishwashing_video_frozen.yaml",
                    ["sac.critic_input=state", *settings])
