"""A person takes over a run while it learns (`demos.takeover: keyboard|gamepad`), as HIL-SERL's
interventions do: env 0's camera frames in a window; T (RB on a gamepad) takes the controls and
hands them back. While the person holds them, their actions drive env 0 at the task's own pace
(envs/make.py's control_fps) in place of the policy's, the replay flags those steps, and the
demonstration share of every batch draws from them (sac/demos.py). The keys: person.py."""

import time

import numpy as np

from envs.make import control_fps
from sac.replay import to_host
from trainer.run.person import Person, show, start_pygame

SHOW_EVERY_S = 1 / 30  # while the policy drives, the window is redrawn this often at most


class TakeOver:
    """`action()` is env 0's driver (envs/workers.py): the person's action while they hold the
    controls, else None."""

    def __init__(self, device: str, env, *, env_id: str, action_repeat: int):
        self.pg = start_pygame(device, what="demos.takeover", instead="set demos.takeover=null")
        button = "RB" if device == "gamepad" else "T"
        self.pg.display.set_caption(f"training env 0: {button} takes over and hands back")
        self.person, self.env = Person(self.pg, device), env
        self.fps, self.clock, self.shown_at = control_fps(env_id, action_repeat), None, 0.0

    def action(self) -> np.ndarray | None:
        self.person.read_events()
        driving = self.person.taking_over
        if driving or time.monotonic() - self.shown_at >= SHOW_EVERY_S:
            show(self.pg, to_host(self.env.obs[0, -1]))
            self.shown_at = time.monotonic()
        if not driving:
            self.clock = None
            return None
        if self.clock is None:  # a new take-over: its first step waits for nothing
            self.clock = self.pg.time.Clock()
        self.clock.tick(self.fps)
        return self.person.action()

    def close(self) -> None:
        self.pg.quit()
