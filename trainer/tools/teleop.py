"""A person drives the dishwashing arm (trainer.tools.record --teleop keyboard|gamepad), watching
the camera in a pygame window; each episode is kept or discarded, and the kept ones are written
as the scripted recorder's dataset, marked as a person's.

    keyboard: arrows move the gripper in x/y, W/S up/down, space opens/shuts the fingers,
              Enter keeps the episode, Backspace discards it, Esc stops
    gamepad:  left stick x/y, right stick up/down, A opens/shuts, Start keeps, Back discards

Input through pygame (SDL), as LeRobot's and gym-hil's gamepad teleoperation do. Keys are read
from the event queue, not the keyboard's state, so the posted events of a test drive it the same
way a person does.
"""

import os
import sys

import numpy as np

from envs import demos
from errors import UserError

KEEP, DISCARD, STOP = "keep", "discard", "stop"
WINDOW = 420  # px: the camera frame scaled up to be seen
DEAD_ZONE = 0.15  # a resting stick reads a little off zero


def start_pygame(device: str):
    """pygame with a window, or a one-line UserError that says what is missing."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        import pygame
    except ImportError:
        raise UserError("--teleop needs pygame (pip install pygame==2.6.1, in requirements.txt)"
                        ) from None
    # Linux without X or Wayland (a pod over plain ssh); macOS and Windows always have a screen
    headless = not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
                    or os.environ.get("SDL_VIDEODRIVER"))
    if sys.platform.startswith("linux") and headless:
        raise UserError("--teleop shows the camera in a window and no display is set (DISPLAY); "
                        "run it on a desktop, or over ssh -X, or record without --teleop")
    pygame.init()
    try:
        pygame.display.set_mode((WINDOW, WINDOW))
    except pygame.error as err:
        raise UserError(f"--teleop cannot open a window ({err}); run it on a desktop, or over "
                        "ssh -X") from None
    pygame.display.set_caption("dishwashing: Enter keeps, Backspace discards, Esc stops")
    if device == "gamepad":
        pygame.joystick.init()
        if pygame.joystick.get_count() == 0:
            raise UserError("--teleop gamepad found no gamepad; plug one in, or use --teleop "
                            "keyboard")
    return pygame


class Person:
    """The device's state, updated from pygame's events: `action()` is the task's (dx, dy, dz,
    fingers) in [-1, 1]; `decision` is what the person said of the episode (KEEP, DISCARD,
    STOP or None)."""

    def __init__(self, pygame, device: str):
        self.pg, self.held, self.fingers = pygame, set(), -1.0
        self.decision = None
        self.pad = pygame.joystick.Joystick(0) if device == "gamepad" else None

    def read_events(self) -> None:
        pg = self.pg
        keys = {pg.K_RETURN: KEEP, pg.K_BACKSPACE: DISCARD, pg.K_ESCAPE: STOP}
        buttons = {7: KEEP, 6: DISCARD}  # Start, Back on an Xbox-layout pad
        for event in pg.event.get():
            if event.type == pg.QUIT:
                self.decision = STOP
            elif event.type == pg.KEYDOWN:
                self.held.add(event.key)
                self.decision = keys.get(event.key, self.decision)
                if event.key == pg.K_SPACE:
                    self.fingers = -self.fingers
            elif event.type == pg.KEYUP:
                self.held.discard(event.key)
            elif event.type == pg.JOYBUTTONDOWN:
                self.decision = buttons.get(event.button, self.decision)
                if event.button == 0:  # A
                    self.fingers = -self.fingers

    def action(self) -> np.ndarray:
        pg = self.pg
        if self.pad is not None:
            axes = [self.pad.get_axis(i) for i in (0, 1, 4)]
            x, y, z = (0.0 if abs(a) < DEAD_ZONE else a for a in axes)
            move = [x, -y, -z]  # stick up is negative in SDL
        else:
            def pair(plus, minus):
                return float(plus in self.held) - float(minus in self.held)
            move = [pair(pg.K_RIGHT, pg.K_LEFT), pair(pg.K_UP, pg.K_DOWN), pair(pg.K_w, pg.K_s)]
        return np.array([*move, self.fingers], np.float32)


def show(pygame, frame: np.ndarray) -> None:
    """The (C, H, W) camera frame, scaled to the window."""
    surface = pygame.surfarray.make_surface(frame.transpose(2, 1, 0))
    pygame.display.get_surface().blit(pygame.transform.scale(surface, (WINDOW, WINDOW)), (0, 0))
    pygame.display.flip()


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
