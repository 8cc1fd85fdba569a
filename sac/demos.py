"""Demonstrations as RLPD uses them: a store the replay never evicts, a share of every batch drawn
from it, with the steps a person took over during the run (HIL-SERL's interventions) beside them.
The store is a second ReplayBuffer, so demonstrations go through the same sampling code
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
    replay: ReplayBuffer, *, demos: ReplayBuffer | None, batch_size: int, share: float,
    device: torch.device | str = "cpu"
) -> dict[str, torch.Tensor]:
    """`batch_size` transitions, the demonstrations' share last: drawn uniformly from the
    recorded ones (`demos`) and the replay's transitions a person took over (HIL-SERL's
    interventions) together; the whole batch from the replay while there are neither."""
    recorded, intervened = len(demos) if demos else 0, replay.intervened_count()
    shown = demo_count(batch_size, share) if recorded + intervened else 0
    # in proportion: a split by count, not by coin flips, keeps the batch's shape fixed
    from_person = int(round(shown * intervened / max(recorded + intervened, 1)))
    parts = [replay.sample(batch_size - shown, device)]
    if shown - from_person:
        parts.append(demos.sample(shown - from_person, device))
    if from_person:
        parts.append(replay.sample_intervened(from_person, device))
    if len(parts) == 1:
        return parts[0]
    return {key: torch.cat([part[key] for part in parts]) for key in parts[0]}
