"""Env worker processes stepped in turn, each sent its next action the moment its step returns, or
(`together`) all sent theirs from one batched action once every step has returned; and one env in
this process behind the same interface (`InProcessEnv`), so the trainer has a single acting loop.

Not Gymnasium's lockstep AsyncVectorEnv, where every step waits for the slowest worker (measured in
docs/guide.md): each worker is its own one-env AsyncVectorEnv, served in a fixed order, at the price
of one step of policy lag. `together` trades the wait for one policy forward pass a step instead of
one a worker."""

import atexit
import contextlib
import functools
import gc
import multiprocessing
import signal
import weakref
from collections.abc import Callable

import gymnasium as gym
import numpy as np
from gymnasium.vector.async_vector_env import AsyncState

from errors import UserError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
CLOSE_TIMEOUT_S = 30.0
BROKEN = (EOFError, BrokenPipeError, ConnectionError)


class WorkerDied(UserError):
    """An env worker process ended without being asked to (killed, out of memory)."""


@contextlib.contextmanager
def stop_signals_blocked():
    """Around starting worker processes: they inherit the blocked stop signals until they ignore
    them."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@contextlib.contextmanager
def stop_signals_held():
    """`stop_signals_blocked`, and a stop signal that arrives meanwhile is raised again once every
    worker has started (another thread may take it despite the mask, and its handler would orphan a
    worker half started)."""
    held = []
    previous = {sig: signal.signal(sig, lambda signum, frame: held.append(signum))
                for sig in STOP_SIGNALS}
    try:
        with stop_signals_blocked():
            yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])


def ignore_stop_signals() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def how_it_ended(process) -> str:
    process.join(timeout=1.0)
    code = process.exitcode
    return f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"


def worker_died(index: int, process, *, fewer: str = "num_envs") -> WorkerDied:
    """The one-line error for worker `index` found dead mid-run; `fewer`: the parameter that lowers
    its memory."""
    return WorkerDied(f"env worker {index} (pid {process.pid}) died ({how_it_ended(process)}: the "
                      "out-of-memory killer, or a kill); the last checkpoint is intact: continue "
                      f"with --resume auto, with fewer `{fewer}` if memory ran out")


def _shielded(make_env: Callable[[], gym.Env]) -> gym.Env:
    if multiprocessing.parent_process() is not None:
        ignore_stop_signals()
        # its exit skips the last garbage collections (~1 s each, and workers close one after
        # another)
        atexit.register(gc.freeze)
    return make_env()


def _force_close(worker: gym.vector.AsyncVectorEnv) -> None:
    kill_processes(worker.processes)
    worker._state = AsyncState.DEFAULT  # a pending call's answer never comes from a killed process
    worker.close(terminate=True)


def kill_processes(processes: list) -> None:
    """SIGKILL, then reap, every worker process still alive (workers ignore SIGTERM)."""
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()


def kill_workers(workers: list[gym.vector.AsyncVectorEnv]) -> None:
    kill_processes([worker.processes[0] for worker in workers])


def override(driver: Callable[[], np.ndarray | None] | None, action: np.ndarray) -> bool:
    """Whether `driver` (env 0's, or None) gave an action: then written over `action`, in place."""
    given = driver() if driver is not None else None
    if given is not None:
        action[...] = given
    return given is not None


class EnvWorkers:
    def __init__(self, make_env: Callable[[], gym.Env], num_envs: int, *, together: bool = False):
        self.together = together
        shielded = functools.partial(_shielded, make_env)
        self.workers: list[gym.vector.AsyncVectorEnv] = []
        # workers ignore SIGTERM, so the libraries' exit clean-up (terminate, join) would wait
        # forever: kill them first
        self._finalizer = weakref.finalize(self, kill_workers, self.workers)
        self.in_flight = [False] * num_envs
        self.dead: set[int] = set()
        try:
            with stop_signals_held():
                for _ in range(num_envs):
                    self.workers.append(gym.vector.AsyncVectorEnv(
                        [shielded], shared_memory=True, copy=False, context="spawn",
                        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP))
            base = self.workers[0]  # asked before any step is in flight: a call waits for none
            self.terminates_on_success = bool(base.call("has_wrapper_attr",
                                                        "terminates_on_success")[0]
                                              and base.get_attr("terminates_on_success")[0])
        except BaseException:
            # one failed to start, or a stop signal came meanwhile: the caller gets none to close
            self.close()
            raise
        self.num_envs = num_envs
        self.single_observation_space = self.workers[0].single_observation_space
        self.single_action_space = self.workers[0].single_action_space
        self.obs = np.zeros((num_envs, *self.single_observation_space.shape),
                            self.single_observation_space.dtype)
        # (N, S) float32: each env's newest info["state"] (pixel envs give one), else None
        self.states = None
        self.actions = np.zeros((num_envs, *self.single_action_space.shape), np.float32)
        # `driver()`: env 0's action in place of the policy's, or None; `driven`: per env, whether
        # the action of the last step's result came from it
        self.driver, self.driving, self.driven = None, np.zeros(num_envs, bool), np.zeros(
            num_envs, bool)

    def reset(self, seed: int) -> np.ndarray:
        """Worker i starts an episode from `seed + i`; a step still in flight is finished and
        dropped first."""
        self._drain()
        for i, worker in enumerate(self.workers):
            with self._alive(i):
                worker.reset_async(seed=seed + i)
        for i, worker in enumerate(self.workers):
            with self._alive(i):
                obs, info = worker.reset_wait()
            self.obs[i] = obs[0]
            self._keep_state(i, info)
        return self.obs.copy()

    def step(self, act: Callable[[np.ndarray], np.ndarray],
             observe: Callable[[np.ndarray], np.ndarray] = np.copy):
        """One step of every worker: (actions taken, obs, reward, terminated, truncated), (N, ...)
        each. `observe` maps observations to what `act` reads and the step returns (by default a
        copy out of shared memory); `act` maps those to actions. Autoreset is NEXT_STEP: after an
        episode ends the next result is the reset frame."""
        # after a reset, each env's first frame acted on as every later one is: alone (a batch of
        # all would round otherwise than one env in this process), or all together
        if not any(self.in_flight):
            if self.together:
                self._choose(slice(None), act, observe(self.obs))
            else:
                for i in range(self.num_envs):
                    self._choose(slice(i, i + 1), act, observe(self.obs[i:i + 1]))
        taken, self.driven = self.actions.copy(), self.driving.copy()
        reward, terminated, truncated = (
            np.zeros(self.num_envs), np.zeros(self.num_envs, bool), np.zeros(self.num_envs, bool)
        )
        observed = []
        for i, worker in enumerate(self.workers):
            self.in_flight[i] = False
            with self._alive(i):
                obs, rewards, terminations, truncations, info = worker.step_wait()
            self.obs[i], reward[i], terminated[i], truncated[i] = (obs[0], rewards[0],
                                                                   terminations[0], truncations[0])
            self._keep_state(i, info)
            if not self.together:
                observed.append(observe(self.obs[i:i + 1]))
                self._choose(slice(i, i + 1), act, observed[-1])
        if self.together:
            observed.append(observe(self.obs))
            self._choose(slice(None), act, observed[-1])
        return taken, np.concatenate(observed), reward, terminated, truncated

    def _choose(self, envs: slice, act: Callable[[np.ndarray], np.ndarray],
                observed: np.ndarray) -> None:
        """The next actions of `envs`, the policy's (env 0's driver's instead, when it gives one),
        sent."""
        self.actions[envs] = act(observed)
        self.driving[envs] = False
        if envs.start in (None, 0):
            self.driving[0] = override(self.driver, self.actions[0])
        for i in range(self.num_envs)[envs]:
            self._send(i)

    def _keep_state(self, i: int, info: dict) -> None:
        if "state" in info:
            if self.states is None:
                self.states = np.zeros((self.num_envs, *info["state"].shape[1:]), np.float32)
            self.states[i] = info["state"][0]

    def _send(self, i: int) -> None:
        with self._alive(i):
            self.workers[i].step_async(self.actions[i:i + 1])
        self.in_flight[i] = True

    @contextlib.contextmanager
    def _alive(self, i: int):
        try:
            yield
        except BROKEN:
            self.dead.add(i)
            raise worker_died(i, self.workers[i].processes[0]) from None

    def _drain(self) -> None:
        """Read and drop every step or reset a worker still owes, also one a stop signal cut short
        or a worker's error ended (gymnasium's close would wait for it with a warning on stderr, a
        reset would refuse)."""
        for i, worker in enumerate(self.workers):
            self.in_flight[i] = False
            with self._alive(i):
                if worker._state is AsyncState.WAITING_STEP:
                    worker.step_wait()
                elif worker._state is AsyncState.WAITING_RESET:
                    worker.reset_wait()

    def close(self) -> None:
        try:
            self._drain()
            for i, worker in enumerate(self.workers):
                if i in self.dead:
                    _force_close(worker)
                else:
                    worker.close(timeout=CLOSE_TIMEOUT_S)
        except (*BROKEN, multiprocessing.TimeoutError, WorkerDied):
            for worker in self.workers:
                if not worker.closed:
                    _force_close(worker)
        self._finalizer()


class InProcessEnv:
    """One env in this process with EnvWorkers' interface. It reseeds every episode (`seed`, `seed +
    1`, ... from the last `reset(seed)`), so a run resumed at an episode boundary continues exactly;
    a resetting step calls no `act`."""

    def __init__(self, env: gym.Env):
        self.env, self.num_envs = env, 1
        self.terminates_on_success = getattr(env.unwrapped, "terminates_on_success", False)
        self.single_observation_space, self.single_action_space = (env.observation_space,
                                                                   env.action_space)
        self.obs = self.states = None  # states: as EnvWorkers'
        self.driver, self.driven = None, np.zeros(1, bool)  # as EnvWorkers'
        # what `observe` made of it; None after `reset(seed)`, until the next step observes it
        self.observed = None
        self.seed, self.resetting = 0, False

    def reset(self, seed: int) -> np.ndarray:
        self.seed, self.resetting, self.observed = seed, False, None
        obs, info = self.env.reset(seed=seed)
        self.obs, self.states = obs[None], self._states(info)
        return self.obs

    def step(self, act: Callable[[np.ndarray], np.ndarray],
             observe: Callable[[np.ndarray], np.ndarray] = np.copy):
        """As `EnvWorkers.step`, for one env."""
        if self.resetting:
            self.reset(self.seed + 1)
            self.observed, self.driven = observe(self.obs), np.zeros(1, bool)
            return (np.zeros((1, *self.single_action_space.shape), np.float32), self.observed,
                    np.zeros(1),
                    np.zeros(1, bool), np.zeros(1, bool))
        if self.observed is None:
            self.observed = observe(self.obs)
        action = np.array(act(self.observed), dtype=np.float32)
        self.driven = np.array([override(self.driver, action[0])])
        obs, reward, terminated, truncated, info = self.env.step(action[0])
        self.obs, self.states, self.resetting = (obs[None], self._states(info), terminated
                                                 or truncated)
        self.observed = observe(self.obs)
        return (action, self.observed, np.array([reward], dtype=float), np.array([terminated]),
                np.array([truncated]))

    @staticmethod
    def _states(info: dict) -> np.ndarray | None:
        return info["state"][None] if "state" in info else None

    def close(self) -> None:
        self.env.close()
