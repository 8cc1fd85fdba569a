"""MuJoCo Warp worlds on the CPU split over processes, one core each, behind WarpVectorEnv's
interface.

Processes, not threads: Warp runs a CPU kernel on one thread, and its tile kernels' static storage
rules out threads (docs/warp.md#on-the-cpu-worlds-split-over-processes). World i keeps seed `seed +
i` whichever process holds it."""

import time
import traceback
import weakref
from dataclasses import dataclass

import numpy as np
import torch
import torch.multiprocessing

from envs.config import EnvConfig
from envs.mjwarp.vector import TensorMap, WarpVectorEnv, camera_index, spaces
from envs.workers import (
    BROKEN,
    CLOSE_TIMEOUT_S,
    WorkerDied,
    how_it_ended,
    ignore_stop_signals,
    kill_processes,
    stop_signals_blocked,
    worker_died,
)
from errors import UserError

CPU = torch.device("cpu")


@dataclass
class Shared:
    """The env's tensors in shared memory, one row per world, shaped as WarpVectorEnv's; a process
    writes its own rows only. `actions`: the step asked for; `taken`: those actions as the worlds
    took them (clamped to [-1, 1])."""
    obs: torch.Tensor
    actions: torch.Tensor
    taken: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor


class WarpShards:
    def __init__(self, task, env_cfg: EnvConfig, *, pixels: bool, processes: int,
                 heldout: bool = False):
        """`task`: read here for its spaces only; every process makes its own."""
        n = env_cfg.num_envs
        self.num_envs, self.device, self.terminates_on_success = n, CPU, task.terminates_on_success
        if pixels:
            # a camera the task lacks fails here, in this process
            camera_index(task.mjm, env_cfg.camera)
        self.single_observation_space, self.single_action_space = spaces(
            task, env_cfg, pixels=pixels)
        observation, action = self.single_observation_space, self.single_action_space
        self._shared = Shared(
            obs=torch.zeros((n, *observation.shape), dtype=torch.uint8 if pixels
                            else torch.float32),
            actions=torch.zeros((n, *action.shape)), taken=torch.zeros((n, *action.shape)),
            reward=torch.zeros(n), terminated=torch.zeros(n, dtype=torch.bool),
            truncated=torch.zeros(n, dtype=torch.bool))
        for tensor in vars(self._shared).values():
            tensor.share_memory_()
        self.obs = self._shared.obs  # as WarpVectorEnv.obs: the worlds' observations themselves
        self._observed = None
        self._resetting = torch.zeros(n, dtype=torch.bool)
        # fork is unsafe once torch and warp are initialised
        context = torch.multiprocessing.get_context("spawn")
        self._processes, self._pipes = [], []
        # processes ignore SIGTERM: kill them at exit; registered before any starts, so a failed
        # start leaves none
        self._finalizer = weakref.finalize(self, kill_processes, self._processes)
        # inherited: no stop signal reaches a process before it ignores them
        with stop_signals_blocked():
            for rows in np.array_split(np.arange(n), processes):
                pipe, their_end = context.Pipe()
                process = context.Process(target=_serve, daemon=True, kwargs={
                    "env_cfg": env_cfg, "pixels": pixels, "first": int(rows[0]), "count": len(rows),
                    "shared": self._shared, "pipe": their_end, "heldout": heldout})
                process.start()
                their_end.close()  # so that a dead process's pipe reads as broken here
                self._processes.append(process)
                self._pipes.append(pipe)
        # a call failed: the processes' state and pipes are out of step for good
        self._failed = False
        try:
            self._call("ready")
        except BaseException:
            # the caller gets no env to close, and the error's traceback keeps this one alive
            self._finalizer()
            raise

    def reset(self, seed: int) -> torch.Tensor:
        self._call("reset", seed)
        self._observed = None
        self._resetting = torch.zeros(self.num_envs, dtype=torch.bool)
        return self.obs.clone()

    def step(self, act: TensorMap, observe: TensorMap = torch.clone):
        """One agent step of every world, as WarpVectorEnv.step."""
        if self._observed is None:
            self._observed = observe(self.obs)
        # as WarpVectorEnv: a step where every world resets chooses no action
        if not self._resetting.all():
            action = torch.as_tensor(act(self._observed), dtype=torch.float32)
            assert action.shape == self._shared.actions.shape, (
                f"act gave actions of shape {tuple(action.shape)}")
            self._shared.actions.copy_(action)
        self._call("step")
        self._resetting = self._shared.terminated | self._shared.truncated
        self._observed = observe(self.obs)
        shared = self._shared
        return (shared.taken.clone(), self._observed, shared.reward.clone(),
                shared.terminated.clone(),
                shared.truncated.clone())

    def _call(self, command: str, seed: int | None = None) -> None:
        """`command` to every process, then every answer. A failed call fails every later one: a
        process left one answer behind would otherwise answer the next call with this one's."""
        if self._failed:
            raise RuntimeError("this MuJoCo Warp env stopped at an earlier error; make a new one")
        self._failed = True
        if command != "ready":
            for i, pipe in enumerate(self._pipes):
                self._guarded(i, pipe.send, (command, seed), starting=False)
        answers = [self._guarded(i, pipe.recv, starting=command == "ready")
                   for i, pipe in enumerate(self._pipes)]
        for i, (kind, text) in enumerate(answers):
            if kind == "user_error":
                raise UserError(text)
            if kind == "error":
                raise RuntimeError(f"MuJoCo Warp process {i} failed:\n{text}")
        self._failed = False

    def _guarded(self, i: int, call, *args, starting: bool):
        try:
            return call(*args)
        except BROKEN:
            process = self._processes[i]
            # not memory: its error (a script without a __main__ guard re-runs itself in the
            # process)
            if starting:
                raise WorkerDied(f"MuJoCo Warp process {i} (pid {process.pid}) ended while "
                                 f"starting ({how_it_ended(process)}); its error is printed above "
                                 "(a script that builds the env itself needs an if __name__ == "
                                 "'__main__': guard)") from None
            raise worker_died(i, process, fewer="warp_processes") from None

    def close(self) -> None:
        for pipe in self._pipes:
            try:
                pipe.send(("close", None))
            except BROKEN:
                pass
        # one for all: P processes that hang cost 30 s, not P x 30 s
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for process in self._processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        self._finalizer()


def _serve(*, env_cfg: EnvConfig, pixels: bool, first: int, count: int, shared: Shared, pipe,
           heldout: bool = False) -> None:
    """A process's loop: worlds first .. first + count - 1 of the whole, in a WarpVectorEnv of its
    own."""
    ignore_stop_signals()
    torch.set_num_threads(1)  # the tasks' torch ops are small; the one core is the ray tracer's
    from envs.mjwarp import make_task  # here: envs.mjwarp imports this module

    rows = slice(first, first + count)
    try:
        env = WarpVectorEnv(make_task(env_cfg.id, CPU), env_cfg, num_envs=count, pixels=pixels,
                            device=CPU,
                            heldout=heldout)
    except Exception as error:
        _answer(pipe, _failure(error))
        return
    if not _answer(pipe, ("ok", None)):
        return
    while True:
        try:
            command, seed = pipe.recv()
        except BROKEN:
            return
        if command == "close":
            return
        try:
            if command == "reset":
                env.reset(seed + first)
            else:
                taken, _, reward, terminated, truncated = env.step(lambda _: shared.actions[rows],
                                                                   observe=lambda obs: obs)
                for out, value in ((shared.taken, taken), (shared.reward, reward),
                                   (shared.terminated, terminated), (shared.truncated, truncated)):
                    out[rows] = value
            shared.obs[rows] = env.obs
            answer = ("ok", None)
        except Exception as error:
            answer = _failure(error)
        if not _answer(pipe, answer):
            return


def _answer(pipe, answer: tuple[str, str | None]) -> bool:
    """Send a process's answer; False when the trainer is gone."""
    try:
        pipe.send(answer)
    except BROKEN:
        return False
    return True


def _failure(error: Exception) -> tuple[str, str]:
    if isinstance(error, UserError):
        return "user_error", str(error)
    return "error", "".join(traceback.format_exception(error))
