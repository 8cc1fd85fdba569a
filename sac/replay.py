"""Replay buffer that stores every frame once.

Written by hand because the libraries' buffers (SB3, TorchRL, ...) store each transition's observation and next
observation as full frame stacks: 2 x T frames per step, ~127 KB for 3x84x84 with T=3, against ~21 KB here. Pixel
SAC lives or dies by replay capacity in RAM, so the frame-deduplicating layout is worth its ~100 lines.

Layout: a ring of slots, one per env frame. A slot holds the frame, the action and reward that led to it, the
`terminated` flag, and `pos`, the frame's index within its episode (0 = the reset frame, which ends no transition).
Transition at slot i: obs = stack ending at frame i-1, next_obs = stack ending at frame i. Stacks are rebuilt at
sample time from the T+1 frames i-T..i, clamped to the episode's first frame (the same padding the env's frame
stack uses at reset). Truncation needs no flag: the next slot simply starts a new episode (pos = 0).

Shapes out of `sample`: obs/next_obs uint8 (B, T, C, H, W) for frame stacks, or (B, *frame_shape) when
`frame_stack` is None (state vectors); action float32 (B, A); reward and discount float32 (B, 1).
"""

import numpy as np
import psutil
import torch

from trainer.errors import UserError

MEMORY_HEADROOM = 0.9  # leave a tenth of free RAM to the rest of the process


class ReplayBuffer:
    def __init__(self, capacity: int, frame_shape, frame_dtype, action_dim: int, frame_stack: int | None, seed: int):
        self.capacity = capacity
        self.frame_stack = frame_stack
        self._window = (frame_stack or 1) + 1
        slot_bytes = int(np.prod(frame_shape)) * np.dtype(frame_dtype).itemsize + 4 * action_dim + 4 + 1 + 4
        needed, available = capacity * slot_bytes, psutil.virtual_memory().available
        if needed > MEMORY_HEADROOM * available:
            fits = int(MEMORY_HEADROOM * available // slot_bytes)
            raise UserError(
                f"replay buffer of sac.buffer_size={capacity} needs {needed / 2**30:.1f} GiB but only "
                f"{available / 2**30:.1f} GiB of RAM is free; lower sac.buffer_size to at most {fits}"
            )
        self.frames = np.zeros((capacity, *frame_shape), dtype=frame_dtype)
        self.actions = np.zeros((capacity, action_dim), dtype=np.float32)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=bool)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.count = 0  # frames ever written; slot of frame n is n % capacity
        self.num_transitions = 0
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        """Transitions currently stored."""
        return self.num_transitions

    @property
    def bytes_per_slot(self) -> int:
        arrays = (self.frames, self.actions, self.rewards, self.terminated, self.pos)
        return sum(a.nbytes for a in arrays) // self.capacity

    def add_first(self, obs: np.ndarray) -> None:
        """The observation returned by `reset`."""
        self._write(obs, action=0.0, reward=0.0, terminated=False, pos=0)

    def add(self, action: np.ndarray, reward: float, terminated: bool, next_obs: np.ndarray) -> None:
        """One env step: the action taken, its outcome, and the observation it led to."""
        assert self.count > 0, "add_first must start every episode"
        previous = int(self.pos[(self.count - 1) % self.capacity])
        self._write(next_obs, action, reward, terminated, pos=previous + 1)

    def _write(self, obs, action, reward, terminated, pos) -> None:
        slot = self.count % self.capacity
        if self.count >= self.capacity and self.pos[slot] > 0:
            self.num_transitions -= 1
        self.frames[slot] = obs[-1] if self.frame_stack else obs
        self.actions[slot] = action
        self.rewards[slot] = reward
        self.terminated[slot] = terminated
        self.pos[slot] = pos
        self.num_transitions += int(pos > 0)
        self.count += 1

    def sample(self, batch_size: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        assert self.num_transitions > self._window, "too few transitions to sample from"
        ends = self._sample_ends(batch_size)
        back = np.minimum(np.arange(self._window - 1, -1, -1)[None, :], self.pos[ends % self.capacity][:, None])
        window = torch.from_numpy(self.frames[(ends[:, None] - back) % self.capacity])  # (B, T+1, *frame)
        if self.frame_stack:
            obs, next_obs = window[:, :-1], window[:, 1:]
        else:
            obs, next_obs = window[:, 0], window[:, 1]
        slots = ends % self.capacity
        batch = {
            "obs": obs,
            "action": torch.from_numpy(self.actions[slots]),
            "reward": torch.from_numpy(self.rewards[slots])[:, None],
            "discount": torch.from_numpy(1.0 - self.terminated[slots].astype(np.float32))[:, None],
            "next_obs": next_obs,
        }
        return {key: value.to(device, non_blocking=True) for key, value in batch.items()}

    def _sample_ends(self, batch_size: int) -> np.ndarray:
        """Uniform over valid transitions: not a reset frame, and every frame its stack needs still in the ring."""
        oldest = max(0, self.count - self.capacity)
        ends = np.empty(0, dtype=np.int64)
        while len(ends) < batch_size:
            candidates = self.rng.integers(oldest, self.count, size=batch_size - len(ends))
            pos = self.pos[candidates % self.capacity]
            valid = (pos > 0) & (candidates - np.minimum(pos, self._window - 1) >= oldest)
            ends = np.concatenate([ends, candidates[valid]])
        return ends

    def state_dict(self) -> dict:
        filled = min(self.count, self.capacity)
        arrays = {name: torch.from_numpy(getattr(self, name)[:filled]) for name in ("frames", "actions", "rewards", "terminated", "pos")}
        return {**arrays, "count": self.count, "num_transitions": self.num_transitions, "capacity": self.capacity, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        if state["capacity"] != self.capacity or tuple(state["frames"].shape[1:]) != self.frames.shape[1:]:
            raise UserError(
                f"the checkpoint's replay holds {state['capacity']} frames of shape {tuple(state['frames'].shape[1:])}, "
                f"the config asks for {self.capacity} of {self.frames.shape[1:]}; resume with the sac.buffer_size and env settings it was trained with"
            )
        filled = len(state["frames"])
        for name in ("frames", "actions", "rewards", "terminated", "pos"):
            getattr(self, name)[:filled] = state[name].numpy()
        self.count, self.num_transitions = state["count"], state["num_transitions"]
        self.rng.bit_generator.state = state["rng"]
