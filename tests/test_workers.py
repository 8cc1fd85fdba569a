"""Env workers stepped in turn with pipelined actions: each step returns what sequential envs return
for the same seeds and actions, the actions it reports are the ones the workers stepped with,
episodes autoreset on the next step, a reset with steps in flight starts clean, workers ignore the
stop signals (the trainer stops them), and a killed worker is a WorkerDied error after which close
still ends every process."""

import functools
import os
import signal

import numpy as np
import pytest

from envs.make import make_env, make_vector_env
from envs.workers import EnvWorkers, InProcessEnv, WorkerDied
from trainer.config.load import Config

SEED = 5


def pendulum(mode: str = "state") -> Config:
    """InvertedPendulum falls within a few random steps: episodes end often."""
    cfg = Config()
    cfg.env.id, cfg.encoder.type, cfg.env.image_size, cfg.env.num_envs = (
        "InvertedPendulum-v5", mode, 32, 2)
    return cfg


class Recorder:
    """A policy that hands out known actions and remembers which observation each was chosen for."""

    def __init__(self, action_dim: int):
        self.rng, self.action_dim, self.seen = np.random.default_rng(0), action_dim, []

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        actions = self.rng.uniform(-1, 1, (len(obs), self.action_dim)).astype(np.float32)
        self.seen += [(o.copy(), a.copy()) for o, a in zip(obs, actions)]
        return actions


@pytest.mark.parametrize("mode", ["state", "video"])
def test_each_worker_returns_what_a_sequential_env_returns_for_its_seed_and_the_reported_actions(
    mode):
    cfg = pendulum(mode)
    workers = make_vector_env(cfg.env, cfg.pixels)
    policy = Recorder(workers.single_action_space.shape[0])
    first = workers.reset(seed=SEED)
    rounds = [workers.step(policy) for _ in range(25)]
    workers.close()

    for i in range(cfg.env.num_envs):
        env = make_env(cfg.env, cfg.pixels)
        obs, _ = env.reset(seed=SEED + i)
        assert np.array_equal(first[i], obs)
        resetting, episodes = False, 0
        for actions, observations, rewards, terminated, truncated in rounds:
            # NEXT_STEP autoreset: the worker's own RNG picks the new start, so only check its shape
            if resetting:
                obs, _ = env.reset()
                assert rewards[i] == 0 and not terminated[i]
                resetting = False
                continue
            obs, reward, term, trunc, _ = env.step(actions[i])
            assert np.array_equal(observations[i], obs), f"worker {i}"
            assert (rewards[i] == pytest.approx(reward) and terminated[i] == term
                    and truncated[i] == trunc)
            resetting = term or trunc
            episodes += resetting
        assert episodes >= 1, "the pendulum fell at least once: autoreset was exercised"
        env.close()


def test_the_action_a_worker_steps_with_was_chosen_from_the_observation_its_previous_step_returned(
    ):
    cfg = pendulum()
    workers = make_vector_env(cfg.env, cfg.pixels)
    policy = Recorder(workers.single_action_space.shape[0])
    obs = workers.reset(seed=SEED)
    for _ in range(5):
        actions, next_obs, *_ = workers.step(policy)
        chosen_for = {a.tobytes(): o for o, a in policy.seen}
        for i in range(cfg.env.num_envs):
            assert np.array_equal(chosen_for[actions[i].tobytes()], obs[i]), f"worker {i}"
        obs = next_obs
    workers.close()


@pytest.mark.parametrize("num_envs", [1, 2])  # in this process, and worker processes
def test_observations_are_observed_once_each_and_the_policy_and_the_step_get_what_observe_returns(
    num_envs):
    cfg = pendulum()
    cfg.env.num_envs = num_envs
    workers = make_vector_env(cfg.env, cfg.pixels)
    policy, calls = Recorder(workers.single_action_space.shape[0]), []

    # a stand-in for a frozen trunk: a different shape and dtype
    def features(obs: np.ndarray) -> np.ndarray:
        return np.concatenate([obs, -obs], axis=1).astype(np.float16)

    def observe(obs: np.ndarray) -> np.ndarray:
        calls.append(obs.copy())
        return features(obs)

    first = workers.reset(seed=SEED)
    ended = 0
    for step in range(12):
        _, observed, _, terminated, truncated = workers.step(policy, observe)
        ended += int((terminated | truncated).sum())
        assert len(calls) == num_envs * (step + 2), (
            "each env's reset frame once, then each env's result once")
        assert all(len(call) == 1 for call in calls), (
            "one env at a time: a batch of one, as in this process")
        assert np.array_equal(np.concatenate(calls[:num_envs]), first)
        new = np.concatenate(calls[-num_envs:])
        assert new.shape == (num_envs, *workers.single_observation_space.shape)
        assert observed.dtype == np.float16 and np.array_equal(observed, features(new))
    assert ended >= 1, "the pendulum fell at least once: reset frames were observed too"
    made = [features(obs) for obs in calls]
    assert all(any(np.array_equal(o, row) for batch in made for row in batch)
               for o, _ in policy.seen), \
        "act read only what observe returned"
    workers.close()


def in_flight(cfg: Config):
    """(workers of `cfg` reset from SEED and stepped once, so every worker's next step is running;
    their policy)."""
    workers = make_vector_env(cfg.env, cfg.pixels)
    policy = Recorder(workers.single_action_space.shape[0])
    workers.reset(seed=SEED)
    workers.step(policy)
    return workers, policy


def test_reset_with_steps_in_flight_finishes_them_and_starts_from_the_seeds():
    cfg = pendulum()
    workers, _ = in_flight(cfg)
    assert all(workers.in_flight), "every worker has its next step running"
    again = workers.reset(seed=SEED)
    assert not any(workers.in_flight)
    reference = make_env(cfg.env, cfg.pixels)
    assert np.array_equal(again[1], reference.reset(seed=SEED + 1)[0])
    reference.close()
    workers.close()


def test_workers_take_any_env_factory():
    workers = EnvWorkers(functools.partial(make_env, pendulum().env, False), 3)
    assert workers.reset(seed=0).shape == (3, *workers.single_observation_space.shape)
    workers.close()


def test_a_vector_of_one_resets_on_the_next_step_from_the_next_seed_without_choosing_an_action():
    cfg = pendulum()
    cfg.env.num_envs = 1
    one = make_vector_env(cfg.env, cfg.pixels)
    assert isinstance(one, InProcessEnv)
    reference = make_env(cfg.env, cfg.pixels)
    policy = Recorder(one.single_action_space.shape[0])
    assert np.array_equal(one.reset(seed=SEED)[0], reference.reset(seed=SEED)[0])
    terminated = truncated = [False]
    while not (terminated[0] or truncated[0]):
        actions, obs, _, terminated, truncated = one.step(policy)
        assert np.array_equal(obs[0], reference.step(actions[0])[0])
    chosen = len(policy.seen)
    actions, obs, reward, terminated, truncated = one.step(policy)
    assert len(policy.seen) == chosen, "no action is drawn for the reset frame"
    assert not actions.any() and reward[0] == 0 and not terminated[0] and not truncated[0]
    assert np.array_equal(obs[0],
                          reference.reset(seed=SEED
                                          + 1)[0]), "the next episode starts from the next seed"
    one.close()
    reference.close()


def test_a_killed_worker_is_a_worker_died_error_and_close_still_ends_every_process():
    workers, policy = in_flight(pendulum())
    victim = workers.workers[1].processes[0]
    os.kill(victim.pid, signal.SIGKILL)
    with pytest.raises(WorkerDied,
                       match=rf"env worker 1 \(pid {victim.pid}\) died \(killed by signal 9"):
        for _ in range(3):  # the step in flight may already have answered
            workers.step(policy)
    workers.close()
    assert not any(w.processes[0].is_alive() for w in workers.workers)


def test_workers_ignore_the_stop_signals_their_trainer_handles():
    workers = make_vector_env(pendulum().env, False)
    workers.reset(seed=SEED)
    for worker in workers.workers:
        os.kill(worker.processes[0].pid, signal.SIGINT)
        os.kill(worker.processes[0].pid, signal.SIGTERM)
    policy = Recorder(workers.single_action_space.shape[0])
    workers.step(policy)  # still answering
    workers.close()
    assert all(w.processes[0].exitcode == 0 for w in workers.workers)


def test_a_reset_a_stop_signal_cut_short_closes_quietly_and_a_reset_then_starts_clean(recwarn):
    """A stop signal between a reset's request and its answer (the trainer's start-up) leaves the
    answer pending: close and the next reset read it first, so gymnasium's close warns of nothing on
    the way out."""
    cfg = pendulum()
    workers = make_vector_env(cfg.env, cfg.pixels)
    workers.workers[1].reset_async(seed=SEED)  # requested, never read, as a signal leaves it
    again = make_vector_env(cfg.env, cfg.pixels)
    assert np.array_equal(workers.reset(seed=SEED), again.reset(seed=SEED))
    workers.workers[0].reset_async(seed=SEED)
    workers.close()
    again.close()
    assert not [w for w in recwarn if "pending call" in str(w.message)]
