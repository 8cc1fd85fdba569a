"""Acting beside learning (`training.overlap`): the envs act with a published copy of the policy
from before the loop step's updates, all workers' actions come from one batched forward pass, and a
run stays what its seed makes it: the same twice, exact across a resume, and a different run from
one without overlap. On a GPU an action never waits for the updates in flight."""

import numpy as np
import pytest
import torch

from encoders import build_encoder
from encoders.config import EncoderConfig
from envs.make import make_env, make_vector_env
from sac.agent import SAC
from sac.config import SACConfig
from tests.conftest import ROOT
from tests.test_agent import OBS, batch, make_agent
from tests.test_loop import assert_same_state, final_state
from tests.test_workers import SEED, Recorder, pendulum
from trainer.config.load import load_config
from trainer.run.loop import Trainer


def overlapping(device: str = "cpu") -> SAC:
    torch.manual_seed(0)
    return SAC(build_encoder(EncoderConfig(type="video"), OBS), 2, SACConfig(hidden_dim=64),
               device=torch.device(device), pixels=True, overlap=True,
               cuda_graph=device == "cuda")


def trainer(tmp_path, config: str, *overrides: str, resume: str | None = None) -> Trainer:
    return Trainer(load_config(ROOT / "configs" / config, [
        "sac.hidden_dim=32", "sac.batch_size=8", "sac.buffer_size=1000", "logging.progress=false",
        "training.eval_every_episodes=0", f"logging.tensorboard_dir={tmp_path / 'runs'}",
        f"checkpoint.dir={tmp_path / 'ckpt'}", *overrides]), resume=resume)


def sampled(agent: SAC, obs: np.ndarray, published: bool) -> np.ndarray:
    torch.manual_seed(3)
    return agent.act(obs, sample=True, published=published)


def test_published_actions_read_the_policy_as_it_was_at_the_last_publish():
    agent = overlapping()
    obs = np.random.default_rng(0).integers(0, 256, (3, *OBS), dtype=np.uint8)
    agent.publish()
    before = sampled(agent, obs, published=False)
    for _ in range(2):  # an actor update among them
        agent.update(batch())
    assert not np.array_equal(sampled(agent, obs, published=False), before), "the updates moved it"
    assert np.array_equal(sampled(agent, obs, published=True), before)
    agent.publish()
    assert np.array_equal(sampled(agent, obs, published=True),
                          sampled(agent, obs, published=False))


def test_the_published_copy_is_separate_and_a_load_publishes_what_it_loaded():
    agent, other = overlapping(), overlapping()
    for _ in range(2):
        other.update(batch())
    published = agent.published
    assert published.actor is not agent.actor and published.encoder is not agent.critic.encoder
    assert not any(p.requires_grad for p in published.actor.parameters())
    agent.load_state_dict(other.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(published.actor.state_dict().values(),
                                                 other.actor.state_dict().values()))
    assert all(torch.equal(a, b) for a, b in zip(published.encoder.state_dict().values(),
                                                 other.critic.encoder.state_dict().values()))


def test_without_overlap_the_agent_keeps_no_copy_and_acts_with_the_trained_policy():
    agent = make_agent()
    obs = np.random.default_rng(0).integers(0, 256, (2, *OBS), dtype=np.uint8)
    agent.publish()
    agent.update(batch())
    assert agent.published is None
    assert np.array_equal(sampled(agent, obs, published=True), sampled(agent, obs, published=False))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="streams exist only on a CUDA device")
def test_on_a_gpu_a_published_action_returns_while_the_updates_still_run():
    obs = np.random.default_rng(0).integers(0, 256, (4, *OBS), dtype=np.uint8)
    agent = overlapping(device="cuda")
    for _ in range(5):  # the eager warm-up and the captures
        agent.update(batch(256, device="cuda"))
    agent.publish()
    torch.cuda.synchronize()
    data = [batch(256, device="cuda") for _ in range(30)]
    for published in (True, False):
        for one in data:
            agent.update(one)
        agent.act(obs, sample=True, published=published)
        busy = not torch.cuda.current_stream().query()
        assert busy == published, "the action waited for the updates only when not published"
        torch.cuda.synchronize()


@pytest.mark.parametrize("together", [False, True])
def test_together_workers_act_once_a_step_on_every_env_s_observation(together):
    cfg = pendulum()
    workers = make_vector_env(cfg.env, cfg.pixels, together=together)
    policy, calls = Recorder(workers.single_action_space.shape[0]), []

    def act(obs: np.ndarray) -> np.ndarray:
        calls.append(len(obs))
        return policy(obs)

    obs = workers.reset(seed=SEED)
    steps = [workers.step(act) for _ in range(20)]
    workers.close()
    n = cfg.env.num_envs
    assert calls == ([n] * 21 if together else [1] * n * 21), "the first frames, then each step's"
    env = make_env(cfg.env, cfg.pixels)  # worker 0 stepped as a plain env with the actions taken
    expected, _ = env.reset(seed=SEED)
    assert np.array_equal(obs[0], expected)
    for actions, observations, _, terminated, truncated in steps:
        chosen_for = {a.tobytes(): o for o, a in policy.seen}
        assert np.array_equal(chosen_for[actions[0].tobytes()], expected), "from its last frame"
        if terminated[0] or truncated[0]:
            break
        expected, *_ = env.step(actions[0])
        assert np.array_equal(observations[0], expected)
    env.close()


def test_each_action_reads_the_policy_of_before_the_previous_loop_step_s_updates(tmp_path):
    run = trainer(tmp_path, "dmc/cartpole_swingup.yaml", "training.overlap=true",
                  "training.seed_steps=20", "training.episodes=1", "env.max_episode_steps=60",
                  "env.image_size=64", "sac.feature_dim=16")
    agent, learn, act = run.agent, run.learn, run.agent.act
    live = lambda: [t.clone() for t in agent.actor.state_dict().values()]  # noqa: E731
    starts, checked = [], {"lagging": 0, "acts": 0}

    def learning(env_steps: int) -> None:
        starts.append(live())  # the policy before this loop step's updates
        learn(env_steps)

    def acting(obs, sample: bool, published: bool = False):
        if published and starts:
            copy = list(agent.published.actor.state_dict().values())
            assert all(torch.equal(a, b) for a, b in zip(copy, starts[-1]))
            checked["acts"] += 1
            checked["lagging"] += not all(torch.equal(a, b) for a, b in zip(copy, live()))
        return act(obs, sample, published)

    run.learn, agent.act = learning, acting
    assert run.train() == 0
    assert agent.updates > 20 and checked["acts"] > 20
    assert checked["lagging"] > 10, "the policy acting had not yet seen the latest updates"


def ends(tmp_path, overlap: bool) -> dict:
    """The end of a state run on two workers, with or without overlap."""
    run = trainer(tmp_path, "inverted_pendulum_state.yaml", f"training.overlap={overlap}",
                  "env.num_envs=2", "training.seed_steps=20", "training.episodes=12")
    assert run.train() == 0
    return final_state(tmp_path / "ckpt" / f"{run.cfg.run_name}_latest.pt")


def test_a_run_with_overlap_is_the_same_twice_and_not_the_run_without(tmp_path):
    on, again, off = (ends(tmp_path / name, overlap)
                      for name, overlap in (("on", True), ("again", True), ("off", False)))
    assert_same_state(on, again)
    assert on["updates"] > 50
    assert not all(torch.equal(a, off["nets"]["actor"][name])
                   for name, a in on["nets"]["actor"].items()), "acting a step later changes it"


def test_a_run_with_overlap_stopped_at_an_episode_end_resumes_to_the_end_of_one_that_never_stopped(
        tmp_path):
    """A pixel run: the published encoder and actor are not in the checkpoint; the resume publishes
    the saved ones, which is what the run that went on acted with after its episode's reset."""
    pixels = ("training.overlap=true", "env.max_episode_steps=30", "env.image_size=64",
              "sac.feature_dim=16", "training.seed_steps=15", "checkpoint.every_episodes=1")
    straight = trainer(tmp_path / "straight", "default.yaml", *pixels, "training.episodes=4")
    assert straight.train() == 0
    assert trainer(tmp_path, "default.yaml", *pixels, "training.episodes=2").train() == 0
    resumed = trainer(tmp_path, "default.yaml", *pixels, "training.episodes=4", resume="auto")
    assert resumed.progress.episode == 2 and resumed.train() == 0
    latest = final_state(tmp_path / "ckpt" / "sac_video_latest.pt")
    assert latest["updates"] > 50
    assert_same_state(latest, final_state(tmp_path / "straight" / "ckpt" / "sac_video_latest.pt"))
