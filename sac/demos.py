"""Demonstrations as RLPD uses them: a store the replay never evicts, a share of every batch drawn
from it. The store is a second ReplayBuffer, so demonstrations go through the same sampling code
(docs/algorithm.md)."""

from collections.abc import Sequence

import numpy as np
import torch

from sac.replay import ReplayBuffer
from sac.ring import min_ring_slots


def fill_store(
    episodes: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    *,
    frame_stack: int | None,
    seed: int,
    discount: float,
    nstep: int,
    frames_on: torch.device | None,
) -> ReplayBuffer:
    """A ReplayBuffer of exactly these episodes: (observations (L + 1, ...), actions, rewards,
    terminations)."""
    observations = [episode[0] for episode in episodes]
    frames = sum(len(obs) for obs in observations)
    first = observations[0]
    store = ReplayBuffer(
        capacity=frames + min_ring_slots(frame_stack),  # stores of one short episode work too
        frame_shape=first.shape[1:],
        frame_dtype=first.dtype,
        action_dim=episodes[0][1].shape[-1],
        frame_stack=frame_stack,
        seed=seed,
        discount=discount,
        nstep=nstep,
        frames_on=frames_on,
    )
    for obs, actions, rewards, terminations in episodes:
        # the store keeps the last frame of the stack it is given: a one-frame stack per step
        if frame_stack:
            obs = obs[:, None]
        store.add_first(obs[0])
        for t in range(len(actions)):
            store.add(actions[t], float(rewards[t]), bool(terminations[t]), obs[t + 1])
    return store


def demo_count(batch_size: int, share: float) -> int:
    return int(round(share * batch_size))


def mixed_sample(
    replay: ReplayBuffer, *, demos: ReplayBuffer, batch_size: int, share: float,
    device: torch.device | str = "cpu"
) -> dict[str, torch.Tensor]:
    """`batch_size` transitions, the demonstrations' share last."""
    from_demos = demo_count(batch_size, share)
    own = replay.sample(batch_size - from_demos, device)
    if from_demos == 0:
        return own
    shown = demos.sample(from_demos, device)
    return {key: torch.cat([own[key], shown[key]]) for key in own}
