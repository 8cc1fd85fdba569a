"""N worlds of a task as one vector env: the batched counterpart of envs/workers.py's EnvWorkers, on
a torch device.

`reset(seed)` -> obs; `step(act, observe)` -> (actions, obs, reward, terminated, truncated), as
EnvWorkers.step; `obs` holds the worlds' current observations (the next step overwrites it). Torch
tensors on `device`:
    obs         uint8 (N, T, 3, H, W) frame stacks (oldest first), or float32 (N, D) state vectors
    actions     float32 (N, A) in [-1, 1], the ones this step took
    reward      float32 (N,), summed over action repeats; terminated, truncated bool (N,)
Autoreset is NEXT_STEP; a step where every world resets calls no `act`, as InProcessEnv. World i
starts its k-th episode from (seed + i, k) only (envs/mjwarp/random.py). A world whose physics goes
wrong (Simulation.broken) ends its episode there, truncated, with no reward from that task step."""

import warnings
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from envs.config import EnvConfig
from envs.mjwarp.randomize import FIELDS as SCENE_FIELDS
from envs.mjwarp.randomize import WarpScenes
from envs.mjwarp.simulation import Simulation, WarpCamera
from envs.pixels import resolve_camera
from errors import UserError

TensorMap = Callable[[torch.Tensor], torch.Tensor]


class WarpVectorEnv:
    def __init__(self, task, env_cfg: EnvConfig, *, num_envs: int, pixels: bool,
                 device: torch.device,
                 heldout: bool = False):
        """`pixels`: frame stacks, else state vectors; `heldout`: the held-out randomised scenes."""
        self.task, self.num_envs, self.device = task, num_envs, torch.device(device)
        self.action_repeat = env_cfg.action_repeat
        self.terminates_on_success = task.terminates_on_success
        # agent steps; None = the task's own limit only
        self.max_episode_steps = env_cfg.max_episode_steps
        camera = WarpCamera(index=camera_index(task.mjm, env_cfg.camera), size=env_cfg.image_size,
                        shadows=env_cfg.warp_shadows,
                            skybox=env_cfg.warp_skybox) if pixels else None
        scenes = pixels and (heldout or env_cfg.randomize.enabled)
        self.sim = Simulation(task.mjm, num_worlds=num_envs, device=self.device, camera=camera,
                              batched_model_fields=task.batched_model_fields
                              + (SCENE_FIELDS if scenes else ()),
                              max_constraints=task.max_constraints)
        self._scenes = WarpScenes(env_cfg.randomize, task, self.sim.model, camera=camera.index,
                                  heldout=heldout) if scenes else None
        self.single_observation_space, self.single_action_space = spaces(
            task, env_cfg, pixels=pixels)
        self.obs = torch.zeros((num_envs, *self.single_observation_space.shape),
                               dtype=torch.uint8 if pixels else torch.float32, device=self.device)
        self._pixels = pixels
        n, long = num_envs, {"dtype": torch.long, "device": self.device}
        self._seeds, self._episodes = torch.zeros(n, **long), torch.zeros(n, **long)
        self._task_steps, self._agent_steps = torch.zeros(n, **long), torch.zeros(n, **long)
        self._resetting = torch.zeros(n, dtype=torch.bool, device=self.device)
        # what `observe` made of self.obs; None after `reset(seed)`, until a step observes it
        self._observed = None
        self._warned_broken = False

    def reset(self, seed: int) -> torch.Tensor:
        """World i starts an episode from `seed + i` (its first); returns the observations."""
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._seeds = seed + torch.arange(self.num_envs, dtype=torch.long, device=self.device)
        self._episodes.zero_()
        self._resetting.zero_()  # a world that had just ended starts now, not at the next step
        self._restart(everyone)
        self.sim.sync()
        self.task.after_reset(self.sim, everyone)
        self._observe(everyone)
        self._observed = None
        return self.obs.clone()

    def step(self, act: TensorMap, observe: TensorMap = torch.clone):
        """One agent step of every world; see the module docstring."""
        if self._observed is None:
            self._observed = observe(self.obs)
        resetting = self._resetting
        # every world returns its reset observation: no action to choose (nor RNG to draw)
        if resetting.all():
            action = torch.zeros((self.num_envs, self.task.action_dim), dtype=torch.float32,
                                 device=self.device)
        else:
            action = torch.as_tensor(act(self._observed), dtype=torch.float32,
                                     device=self.device).clamp(-1.0, 1.0)
            assert action.shape == (self.num_envs, self.task.action_dim), (
                f"act gave actions of shape {action.shape}")
        live = ~resetting
        reward = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)
        terminated = torch.zeros_like(resetting)
        task_truncated, broken = torch.zeros_like(resetting), torch.zeros_like(resetting)
        # state of worlds that ended before the current repeat, and which
        kept, kept_mask = None, None
        for repeat in range(self.action_repeat):
            if repeat:
                kept, kept_mask = self._keep(~live, kept, kept_mask)
            self.task.apply_action(self.sim, action)
            self.sim.step(self.task.substeps)
            self.sim.sync()
            step_reward, step_terminated = self.task.outcome(self.sim, action)
            # MuJoCo Warp steps a broken world on, NaN into the replay: end its episode here instead
            step_broken = live & self.sim.broken()
            step_terminated = step_terminated & ~step_broken
            self._task_steps += live
            limit = self._task_steps >= self.task.time_limit
            reward += torch.where(live & ~step_broken, step_reward, 0.0)
            terminated |= live & step_terminated
            task_truncated |= live & (limit | step_broken) & ~step_terminated
            broken |= step_broken
            live &= ~(step_terminated | limit | step_broken)
        if kept is not None:
            for field, value in zip(self._final_state(), kept):
                field.copy_(torch.where(_rows(kept_mask, field), value, field))
        self._agent_steps += ~resetting
        truncated = task_truncated | (~resetting & ~terminated & self._over_agent_limit())
        self._episodes += resetting
        self._restart(resetting)
        self.sim.sync()
        self.task.after_reset(self.sim, resetting)
        self._observe(resetting, void=broken)
        self._resetting = terminated | truncated
        self._observed = observe(self.obs)
        # last: its host read waits for work already queued, as the caller's reads would
        self._warn_once(broken)
        return (torch.where(resetting[:, None], 0.0, action), self._observed, reward, terminated,
                truncated)

    def states(self) -> torch.Tensor:
        """float32 (N, D): the worlds' state vectors, whether the observations are frames or
        states."""
        return self.task.observation(self.sim)

    def _warn_once(self, broken: torch.Tensor) -> None:
        """The first broken world warns: a task that breaks often needs fixing, not truncating."""
        if self._warned_broken or not bool(broken.any()):
            return
        self._warned_broken = True
        warnings.warn(f"MuJoCo Warp: {int(broken.sum())} world(s) lost contacts or constraint rows "
                      "for want of room, or their state diverged; such an episode ends there "
                      "(truncated, that task step's reward 0). Shown once; if it recurs, raise "
                      "the task's max_constraints (envs/mjwarp/)",
                      RuntimeWarning,
                      stacklevel=3)

    def _over_agent_limit(self) -> torch.Tensor:
        if self.max_episode_steps is None:
            return torch.zeros_like(self._resetting)
        return self._agent_steps >= self.max_episode_steps

    def _restart(self, mask: torch.Tensor) -> None:
        """Initial state of the worlds in `mask` (positions not yet synced)."""
        self.sim.reset(mask)
        self.task.reset(self.sim, mask, seeds=self._seeds, episodes=self._episodes)
        # before `sync`, whose camlight places the moved camera and lights
        if self._scenes is not None:
            self._scenes.apply(mask, self._seeds, self._episodes)
        self._task_steps.masked_fill_(mask, 0)
        self._agent_steps.masked_fill_(mask, 0)

    def _final_state(self) -> tuple[torch.Tensor, ...]:
        """What a world's last observation is made of: restored for worlds that ended inside an
        action repeat."""
        return self.sim.qpos, self.sim.qvel, self.sim.eq_active

    def _keep(self, ended: torch.Tensor, kept, kept_mask):
        """Add the worlds that ended at the previous repeat to the kept states (their state is final
        now)."""
        state = self._final_state()
        if kept is None:
            return tuple(field.clone() for field in state), ended
        newly = ended & ~kept_mask
        return tuple(torch.where(_rows(newly, field), field, value)
                     for field, value in zip(state, kept)), ended

    def _observe(self, restarted: torch.Tensor, void: torch.Tensor | None = None) -> None:
        """The observations of the current state; `void` (bool (N,)): broken worlds, whose state
        vectors are zeros."""
        if not self._pixels:
            state = self.states()
            self.obs.copy_(state if void is None else state.masked_fill(void[:, None], 0.0))
            return
        frame = self.sim.render()
        shifted = torch.cat([self.obs[:, 1:], frame[:, None]], dim=1)
        torch.where(restarted[:, None, None, None, None], frame[:, None], shifted, out=self.obs)

    def close(self) -> None:
        """Nothing to stop: no processes, and MuJoCo Warp frees its arrays with the objects."""


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.view(-1, *([1] * (like.dim() - 1)))


def spaces(task, env_cfg: EnvConfig, *, pixels: bool) -> tuple[gym.spaces.Box, gym.spaces.Box]:
    """(one world's observation space, its action space): frame stacks or state vectors; actions in
    [-1, 1]."""
    if pixels:
        observation = gym.spaces.Box(0, 255, env_cfg.stack_shape, np.uint8)
    else:
        observation = gym.spaces.Box(-np.inf, np.inf, (task.state_dim,), np.float32)
    return observation, gym.spaces.Box(-1.0, 1.0, (task.action_dim,), np.float32)


def camera_index(mjm, camera) -> int:
    if mjm.ncam == 0:
        raise UserError(
            "the `backend` mujoco_warp renders a fixed camera and this task has none; use "
            "`backend` mujoco")
    return resolve_camera(mjm, 0 if camera is None else camera, None, free=False)
