"""Env worker processes stepped in turn, each given its next action the moment its step returns; and one env in this
process behind the same interface (`InProcessEnv`), so the trainer has a single acting loop.

Gymnasium's AsyncVectorEnv steps all its envs in lockstep: every step waits for the slowest worker, and the workers
idle while the trainer reads their results and computes the next actions. On 2 cores that held 2 workers to
~1.55x one env's rate, against ~1.8x for workers that never wait on each other (measured interleaved, HalfCheetah
84x84 rendered in software). So each worker here is its own one-env AsyncVectorEnv (Gymnasium's worker loop,
shared memory, autoreset and error reporting, unchanged), and a step of all workers is pipelined: worker 0's result
is read, its next action chosen and sent, then worker 1's, and so on. A worker computes its next step while the
trainer serves the others and while it runs its updates.

The order is fixed, so a run is as deterministic as a lockstep one. The price is one step of policy lag: a worker's
next action is chosen before the updates that follow the step it answers (with one update per agent step, the
policy that acts is one round of updates old).

Observations: uint8 (N, T, C, H, W) frame stacks or float32 (N, D) state vectors, copied out of shared memory
before the worker is sent its next action (which overwrites it).
"""

from collections.abc import Callable

import gymnasium as gym
import numpy as np


class EnvWorkers:
    def __init__(self, make_env: Callable[[], gym.Env], num_envs: int):
        self.workers = [
            gym.vector.AsyncVectorEnv([make_env], shared_memory=True, copy=False, context="spawn",
                                      autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
            for _ in range(num_envs)
        ]
        self.num_envs = num_envs
        self.single_observation_space = self.workers[0].single_observation_space
        self.single_action_space = self.workers[0].single_action_space
        self.obs = np.zeros((num_envs, *self.single_observation_space.shape), self.single_observation_space.dtype)
        self.actions = None  # (N, A) the actions the workers are stepping with now; None before the first step
        self.in_flight = [False] * num_envs  # whose step has been sent and not yet read

    def reset(self, seed: int) -> np.ndarray:
        """Worker i starts an episode from `seed + i`; a step still in flight is finished and dropped first."""
        self._drain()
        for i, worker in enumerate(self.workers):
            worker.reset_async(seed=seed + i)
        for i, worker in enumerate(self.workers):
            obs, _ = worker.reset_wait()
            self.obs[i] = obs[0]
        return self.obs.copy()

    def step(self, act: Callable[[np.ndarray], np.ndarray]):
        """One step of every worker. `act` maps observations (n, ...) to actions (n, A). Returns the actions that
        led to this step's results, and the results: (actions, obs, reward, terminated, truncated), (N, ...) each.
        Autoreset is NEXT_STEP: after an episode ends, the worker's next result is its reset frame (action ignored)."""
        if not any(self.in_flight):
            self.actions = np.array(act(self.obs), dtype=np.float32)  # our own copy: it is written in place
            for i in range(self.num_envs):
                self._send(i)
        taken = self.actions.copy()
        reward, terminated, truncated = np.zeros(self.num_envs), np.zeros(self.num_envs, bool), np.zeros(self.num_envs, bool)
        for i, worker in enumerate(self.workers):
            self.in_flight[i] = False
            obs, rewards, terminations, truncations, _ = worker.step_wait()
            self.obs[i], reward[i], terminated[i], truncated[i] = obs[0], rewards[0], terminations[0], truncations[0]
            self.actions[i] = act(self.obs[i:i + 1])[0]
            self._send(i)
        return taken, self.obs.copy(), reward, terminated, truncated

    def _send(self, i: int) -> None:
        self.workers[i].step_async(self.actions[i:i + 1])
        self.in_flight[i] = True

    def _drain(self) -> None:
        """Read and drop every step in flight (also after a worker's error, which ends only its own step)."""
        for i, worker in enumerate(self.workers):
            if self.in_flight[i]:
                self.in_flight[i] = False
                worker.step_wait()

    def close(self) -> None:
        self._drain()
        for worker in self.workers:
            worker.close()


class InProcessEnv:
    """One env in this process as a vector of one, with EnvWorkers' interface and NEXT_STEP autoreset. Unlike a worker
    it reseeds every episode, from `seed`, `seed + 1`, ... counted from the last `reset(seed)`: so a run stopped at
    an episode boundary and started again with `reset(seed + episodes done)` continues exactly. A step that resets
    chooses no action (`act` is not called, so no RNG is drawn) and reports zeros."""

    def __init__(self, env: gym.Env):
        self.env, self.num_envs = env, 1
        self.single_observation_space, self.single_action_space = env.observation_space, env.action_space
        self.obs = None  # (1, ...) the observation the next action is chosen for
        self.seed, self.resetting = 0, False

    def reset(self, seed: int) -> np.ndarray:
        self.seed, self.resetting = seed, False
        self.obs = self.env.reset(seed=seed)[0][None]
        return self.obs

    def step(self, act: Callable[[np.ndarray], np.ndarray]):
        """As `EnvWorkers.step`, for one env: (actions, obs, reward, terminated, truncated), (1, ...) each."""
        if self.resetting:
            self.reset(self.seed + 1)
            return np.zeros((1, *self.single_action_space.shape), np.float32), self.obs, np.zeros(1), np.zeros(1, bool), np.zeros(1, bool)
        action = np.array(act(self.obs), dtype=np.float32)
        obs, reward, terminated, truncated, _ = self.env.step(action[0])
        self.obs, self.resetting = obs[None], terminated or truncated
        return action, self.obs, np.array([reward], dtype=float), np.array([terminated]), np.array([truncated])

    def close(self) -> None:
        self.env.close()
