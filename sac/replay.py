"""Replay buffer that stores every frame once, in one ring per env, and rebuilds frame stacks and
n-step returns at sample time (docs/algorithm.md)."""

import numpy as np
import torch

from errors import UserError
from sac.ring import min_ring_slots

ARRAYS = ("frames", "actions", "rewards", "terminated", "pos")
# saved, and absent from replays saved before there were interventions: all False then
FLAGS = ("intervened",)
SLOT_DTYPES = {"actions": np.float32, "rewards": np.float32, "terminated": np.bool_,
               "pos": np.int32, "intervened": np.bool_}


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`tensor` on `device`; to the host it blocks, as a non-blocking copy returns before its bytes
    arrive."""
    if device.type == "cuda" and tensor.device.type == "cpu":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=device.type == "cuda")


def to_host(values) -> np.ndarray:
    return values.cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)


def frame_bytes(frame_shape, frame_dtype) -> int:
    return int(np.prod(frame_shape)) * np.dtype(frame_dtype).itemsize


def state_problem(state: dict) -> str | None:
    """What in a saved replay state does not hold together, as the end of "it ..."; None when
    nothing."""
    missing = [key for key in (*ARRAYS, "count", "num_transitions", "capacity", "rng")
               if key not in state]
    if missing:
        return f"lacks {', '.join(missing)}"
    if not all(isinstance(state[name], torch.Tensor) and state[name].dim() >= 2 for name in ARRAYS):
        return f"holds {', '.join(ARRAYS)} that are not all (slots, envs, ...) tensors"
    count, capacity, pos = state["count"], state["capacity"], state["pos"]
    if not all(type(value) is int and value >= 0
               for value in (count, capacity, state["num_transitions"])):
        return "holds a count, num_transitions or capacity that is not a count"
    rows = {tuple(state[name].shape[:2]) for name in (*ARRAYS, *FLAGS) if name in state}
    if len(rows) > 1 or len(state["frames"]) != min(count, capacity) or pos.dim() != 2:
        return (f"holds arrays of (slots, envs) {sorted(rows)} that do not fit its count {count} "
                f"and capacity {capacity}")
    if state["num_transitions"] != int((pos > 0).sum()):
        return (f"counts {state['num_transitions']} transitions where its slots hold "
                f"{int((pos > 0).sum())}")
    if numpy_state_problem(state["rng"]):
        return "holds a sampler state that is not numpy's"
    return None


def numpy_state_problem(state) -> bool:
    try:
        np.random.default_rng().bit_generator.state = state
    except (TypeError, ValueError, KeyError, OverflowError):
        # numpy's setter raises each for some damage
        return True
    return False


def host_bytes_per_slot(frame_shape, frame_dtype, action_dim: int, frames_on_host: bool) -> int:
    """Host memory one slot takes: numpy allocates lazily, so callers check a buffer's size against
    the RAM first."""
    scalars = sum(np.dtype(dtype).itemsize * (action_dim if name == "actions" else 1)
                  for name, dtype in SLOT_DTYPES.items())
    return (frame_bytes(frame_shape, frame_dtype) if frames_on_host else 0) + scalars


class ReplayBuffer:
    def __init__(self, *, capacity: int, frame_shape, frame_dtype, action_dim: int,
                 frame_stack: int | None, seed: int,
                 discount: float, num_envs: int = 1, frames_on: torch.device | None = None,
                 nstep: int = 1):
        """`capacity` frames in all, split evenly across `num_envs` rings; `frames_on`: a device for
        the frames."""
        self.capacity = capacity // num_envs
        self.num_envs = num_envs
        self.frame_stack = frame_stack
        self.nstep, self.discount = nstep, discount
        self._window = (frame_stack or 1) + 1
        if self.capacity < min_ring_slots(frame_stack):
            raise UserError(
                f"`capacity`={capacity} leaves {self.capacity} slots per env; "
                f"raise it to {min_ring_slots(frame_stack) * num_envs} or more, or lower `num_envs`"
            )
        shape = (self.capacity, num_envs)
        if frames_on is None:
            self.frames = np.zeros((*shape, *frame_shape), dtype=frame_dtype)
        else:
            dtype = torch.from_numpy(np.zeros(0, dtype=frame_dtype)).dtype
            self.frames = torch.zeros((*shape, *frame_shape), dtype=dtype, device=frames_on)
        self.actions = np.zeros((*shape, action_dim), dtype=SLOT_DTYPES["actions"])
        self.rewards = np.zeros(shape, dtype=SLOT_DTYPES["rewards"])
        self.terminated = np.zeros(shape, dtype=SLOT_DTYPES["terminated"])
        self.pos = np.zeros(shape, dtype=SLOT_DTYPES["pos"])
        # the transitions whose action a person gave (trainer/run/takeover.py), and their frame
        # numbers * num_envs + env, oldest first from `_flagged_from`
        self.intervened = np.zeros(shape, dtype=SLOT_DTYPES["intervened"])
        self._flagged, self._flagged_from = [], 0
        self.count = 0  # frames ever written per env; slot of frame n is n % capacity
        self.num_transitions = 0
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        """Transitions currently stored, all envs together."""
        return self.num_transitions

    @property
    def bytes_per_slot(self) -> int:
        return (sum(getattr(self, name).nbytes for name in (*ARRAYS, *FLAGS))
                // (self.capacity * self.num_envs))

    def add_first(self, obs: np.ndarray) -> None:
        self.add_resets(obs[None])

    def add_resets(self, obs: np.ndarray | torch.Tensor) -> None:
        n = self.num_envs
        self.add_batch(obs, np.zeros((n, self.actions.shape[-1]), np.float32), np.zeros(n),
                       np.zeros(n, bool),
                       np.ones(n, bool))

    def add(self, action: np.ndarray, reward: float, terminated: bool,
            next_obs: np.ndarray) -> None:
        self.add_batch(
            next_obs[None], np.asarray(action)[None], np.array([reward]), np.array([terminated]),
            np.zeros(1, bool)
        )

    def add_batch(self, obs: np.ndarray | torch.Tensor, action: np.ndarray, reward: np.ndarray,
                  terminated: np.ndarray,
                  first: np.ndarray, intervened: np.ndarray | None = None) -> None:
        """One frame per env, (N, ...) each: the observation, the action and outcome that led to it,
        and whether it is a reset frame (`first`; its action, reward and terminated are ignored);
        `intervened`: whether a person gave that action."""
        assert len(obs) == self.num_envs, f"expected {self.num_envs} envs, got {len(obs)}"
        if self.count == 0:
            assert first.all(), "every env's first frame must be a reset frame"
        slot = self.count % self.capacity
        previous = self.pos[(self.count - 1) % self.capacity]
        pos = np.where(first, 0, previous + 1)
        if self.count >= self.capacity:
            self.num_transitions -= int((self.pos[slot] > 0).sum())
        frame = obs[:, -1] if self.frame_stack else obs
        self.frames[slot] = (torch.as_tensor(frame) if isinstance(self.frames, torch.Tensor)
                             else to_host(frame))
        self.actions[slot] = np.where(first[:, None], 0.0, action)
        self.rewards[slot] = np.where(first, 0.0, reward)
        self.terminated[slot] = ~first & terminated
        self.pos[slot] = pos
        flags = np.zeros(self.num_envs, bool) if intervened is None else intervened & ~first
        self.intervened[slot] = flags
        self._flagged += (self.count * self.num_envs + np.flatnonzero(flags)).tolist()
        self.num_transitions += int((pos > 0).sum())
        self.count += 1

    def sample(self, batch_size: int,
               device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """obs/next_obs uint8 (B, T, C, H, W) (no T without `frame_stack`), action, reward, and
        discount (B, 1): the whole factor on next_obs's value, 0 after a termination."""
        assert self.num_transitions > 0, "no transitions to sample from"
        return self._batch(*self._sample_ends(batch_size), device)

    def intervened_count(self) -> int:
        """Transitions a person gave the action of that `sample_intervened` can draw."""
        oldest = max(0, self.count - self.capacity) + self._window - 1
        flagged = self._flagged
        while self._flagged_from < len(flagged) and flagged[self._flagged_from] < (
                oldest * self.num_envs):
            self._flagged_from += 1
        if self._flagged_from > len(flagged) // 2:  # compact now and then: O(1) per transition
            del flagged[:self._flagged_from]
            self._flagged_from = 0
        return len(flagged) - self._flagged_from

    def sample_intervened(self, batch_size: int,
                          device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """As `sample`, uniform over the transitions a person gave the action of."""
        count = self.intervened_count()
        assert count > 0, "no intervened transitions to sample from"
        picks = self.rng.integers(self._flagged_from, self._flagged_from + count, size=batch_size)
        # the picks alone: the whole list into numpy would cost every update its length
        ends, envs = np.divmod(np.array([self._flagged[k] for k in picks]), self.num_envs)
        return self._batch(ends, envs, device)

    def _batch(self, ends: np.ndarray, envs: np.ndarray,
               device: torch.device | str) -> dict[str, torch.Tensor]:
        """The batch of the transitions ending at frame numbers `ends` of `envs`."""
        slots = ends % self.capacity
        lasts, reward, discount = self._returns(ends, slots, envs)
        stack = self.frame_stack or 1
        frames = np.concatenate([self._stack_frames(ends - 1, envs),
                                 self._stack_frames(lasts, envs)], axis=1)
        device = torch.device(device)
        # (B, 2T, *frame)
        window = self._gather_frames(frames % self.capacity, envs[:, None], device)
        obs, next_obs = window[:, :stack], window[:, stack:]
        if not self.frame_stack:
            obs, next_obs = obs[:, 0], next_obs[:, 0]
        batch = {
            "action": torch.from_numpy(self.actions[slots, envs]),
            "reward": torch.from_numpy(reward)[:, None],
            "discount": torch.from_numpy(discount)[:, None],
        }
        return {"obs": obs, **{key: to_device(value, device) for key, value in batch.items()},
                "next_obs": next_obs}

    def stacks(self, ends: np.ndarray, envs: np.ndarray,
               device: torch.device | str = "cpu") -> torch.Tensor:
        """The observations ending at frame numbers `ends` (B,) of `envs` (B,), as `sample` builds
        them; the frames must still be in the ring."""
        frames = self._stack_frames(ends, envs) % self.capacity
        window = self._gather_frames(frames, envs[:, None], torch.device(device))
        return window if self.frame_stack else window[:, 0]

    def _stack_frames(self, ends: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """(B, T) frame numbers of the stacks ending at frames `ends` (B,), clamped to each
        episode's first frame."""
        back = np.arange((self.frame_stack or 1) - 1, -1, -1)[None, :]
        return ends[:, None] - np.minimum(back, self.pos[ends % self.capacity, envs][:, None])

    def _returns(
        self, ends: np.ndarray, slots: np.ndarray, envs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For transitions ending at frames `ends` (in `slots`): the frame each n-step transition
        ends at, its discounted reward sum and the discount on the value there."""
        lasts = ends.copy()
        reward = self.rewards[slots, envs].copy()
        discount = np.float32(self.discount) * ~self.terminated[slots, envs]
        for k in range(1, self.nstep):
            frame = ends + k
            slot = frame % self.capacity
            same_episode = ((frame < self.count)
                            & (self.pos[slot, envs] == self.pos[slots, envs] + k))
            reward += np.where(same_episode, discount * self.rewards[slot, envs], 0.0)
            discount = np.where(
                same_episode, discount * np.float32(self.discount) * ~self.terminated[slot, envs],
                discount
            )
            lasts = np.where(same_episode, frame, lasts)
        return lasts, reward, discount

    def _gather_frames(self, slots: np.ndarray, envs: np.ndarray,
                       device: torch.device) -> torch.Tensor:
        if isinstance(self.frames, torch.Tensor):
            where = self.frames.device
            return to_device(
                self.frames[to_device(torch.from_numpy(slots), where),
                            to_device(torch.from_numpy(envs), where)], device
            )
        return to_device(torch.from_numpy(self.frames[slots, envs]), device)

    def _sample_ends(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """(frame number, env) pairs, uniform over valid transitions."""
        oldest = max(0, self.count - self.capacity)
        flat = np.empty(0, dtype=np.int64)  # frame number * num_envs + env
        while len(flat) < batch_size:
            candidates = self.rng.integers(
                oldest * self.num_envs, self.count * self.num_envs, size=batch_size - len(flat)
            )
            ends, envs = np.divmod(candidates, self.num_envs)
            pos = self.pos[ends % self.capacity, envs]
            valid = (pos > 0) & (ends - np.minimum(pos, self._window - 1) >= oldest)
            flat = np.concatenate([flat, candidates[valid]])
        return np.divmod(flat, self.num_envs)

    def state_dict(self) -> dict:
        filled = min(self.count, self.capacity)
        arrays = {name: torch.as_tensor(getattr(self, name)[:filled]).cpu()
                  for name in (*ARRAYS, *FLAGS)}
        return {
            **arrays, "count": self.count, "num_transitions": self.num_transitions,
            "capacity": self.capacity,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        if (state["capacity"] != self.capacity
            or tuple(state["frames"].shape[1:]) != tuple(self.frames.shape[1:])):
            raise UserError(
                f"the checkpoint's replay holds {state['capacity']} slots of (envs, frame) "
                f"{tuple(state['frames'].shape[1:])}, "
                f"the config asks for {self.capacity} of {tuple(self.frames.shape[1:])}; "
                "resume with the `capacity`, `num_envs` and env settings it was trained with"
            )
        filled = len(state["frames"])
        for name in ARRAYS:
            target = getattr(self, name)
            target[:filled] = (state[name].to(target.device) if isinstance(target, torch.Tensor)
                               else state[name].numpy())
        self.intervened[:] = False
        if "intervened" in state:
            self.intervened[:filled] = state["intervened"].numpy()
        self.count, self.num_transitions = state["count"], state["num_transitions"]
        self.rng.bit_generator.state = state["rng"]
        slots, envs = np.nonzero(self.intervened)
        # a slot's frame number: the newest written there
        frames = slots + self.capacity * ((self.count - 1 - slots) // self.capacity)
        self._flagged, self._flagged_from = sorted((frames * self.num_envs + envs).tolist()), 0
