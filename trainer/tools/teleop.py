"""A person drives the dishwashing arm (trainer.tools.record --teleop keyboard|gamepad), watching
the camera in a pygame window; each episode is kept or discarded, and the kept ones are written
as the scripted recorder's dataset, marked as a person's. The keys: trainer/run/person.py.
"""

import numpy as np

from envs import demos
from trainer.run.person import DISCARD, STOP, Person, show


def drive(source, person: Person, *, episodes: int, seed: int, fps: float, between=None):
    """Episodes a person kept, as demos.Episode, with how many were discarded. `source` is
    trainer.tools.record's OneEnv; `between(step)` runs before each step (a test posts its
    events there)."""
    pg, clock, kept, discarded, number = person.pg, person.pg.time.Clock(), [], 0, 0
    while len(kept) < episodes:
        seen, taken = [source.reset(seed + number)], []
        number += 1
        person.decision, person.fingers = None, -1.0
        ended = False
        while person.decision is None:
            show(pg, seen[-1][demos.PIXELS][0])
            if between is not None:
                between(len(taken))
            person.read_events()
            # an episode that is over waits for keep or discard
            if not ended and person.decision is None:
                action = person.action()
                observed, reward, terminated, truncated = source.step(action[None])
                seen.append(observed)
                taken.append((action, reward[0], terminated[0], truncated[0]))
                ended = bool(terminated[0] or truncated[0])
            clock.tick(fps)
        if person.decision == STOP:
            break
        if person.decision == DISCARD or not taken:
            discarded += 1
            continue
        actions, rewards, terminations, truncations = (np.array(x) for x in zip(*taken))
        # kept before its end: the episode is cut short there
        truncations[-1] = truncations[-1] or not terminations[-1]
        kept.append(demos.Episode(
            {key: np.concatenate([s[key] for s in seen]) for key in seen[0]},
            actions.astype(np.float32), rewards.astype(np.float32),
            terminations.astype(bool), truncations.astype(bool)))
    return kept, discarded
