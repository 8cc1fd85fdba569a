"""Evaluation episodes: the deterministic policy from fixed seeds, as the trainer's periodic
evaluation and trainer.policy.evaluate both run them."""

import dataclasses
from collections.abc import Callable

import numpy as np
from PIL import Image

from sac.replay import to_host


@dataclasses.dataclass
class Episode:
    checkpoint: str
    seed: int
    ret: float
    length: int
    success: bool | None  # None where the task has no success


def run_episodes(act: Callable, env, *, seed: int, episodes: int,
                 observe: Callable = lambda obs: obs,
                 camera=None, film: int = 0, video_size: int = 0, max_frames: int | None = None,
                 stopped: Callable[[], bool] = lambda: False, progress=None,
                 name: str = "") -> tuple[list[Episode], list[np.ndarray]] | None:
    """Episode i from `seed + i`, `env.num_envs` at a time, and the frames of the first `film`
    episodes (each up to `max_frames`), whole episodes in turn; None once `stopped()` is true."""
    n, rows, clip = env.num_envs, [], []
    for first in range(0, episodes, n):
        env.reset(seed=seed + first)
        count = min(n, episodes - first)
        total, length = np.zeros(n), np.zeros(n, int)
        # envs past `count` run no episode of ours
        done, success = np.arange(n) >= count, np.zeros(n, bool)
        filmed = {i: [] for i in range(n) if first + i < min(film, episodes)}
        while not done.all():
            if stopped():
                return None
            for i, frames in filmed.items():
                if not done[i] and (max_frames is None or len(frames) < max_frames):
                    frames.append(frame(env, camera, i, video_size))
            _, _, reward, terminated, truncated = env.step(act, observe)
            reward, terminated, truncated = to_host(reward), to_host(terminated), to_host(truncated)
            total += np.where(done, 0.0, reward)
            length += ~done
            success |= ~done & terminated
            done |= terminated | truncated
        clip += [picture for frames in filmed.values() for picture in frames]
        for i in range(count):
            rows.append(Episode(name, seed + first + i, float(total[i]), int(length[i]),
                                bool(success[i]) if env.terminates_on_success else None))
            if progress is not None:
                progress.update(1)
    return rows, clip


def frame(env, camera, i: int, size: int) -> np.ndarray:
    """uint8 (size, size, 3): the camera's picture of the env, or world i's newest observed frame
    scaled to it."""
    if camera is not None:
        return camera.render().copy()
    latest = np.ascontiguousarray(to_host(env.obs[i, -1]).transpose(1, 2, 0))
    return np.asarray(Image.fromarray(latest).resize((size, size), Image.NEAREST))
