"""A person's input device through pygame (SDL), as LeRobot's and gym-hil's gamepad
teleoperation read theirs: the task's action from a keyboard or a gamepad, their word on an
episode, and the take-over switch of a run that learns (trainer/run/takeover.py).

    keyboard: arrows move the gripper in x/y, W/S up/down, space opens/shuts the fingers,
              Enter keeps the episode, Backspace discards it, Esc stops, T takes over / hands back
    gamepad:  left stick x/y, right stick up/down, A opens/shuts, Start keeps, Back discards,
              RB takes over / hands back

Keys are read from the event queue, not the keyboard's state, so the posted events of a test
drive it the same way a person does.
"""

import os
import sys

import numpy as np

from errors import UserError

KEEP, DISCARD, STOP = "keep", "discard", "stop"
WINDOW = 420  # px: the camera frame scaled up to be seen
DEAD_ZONE = 0.15  # a resting stick reads a little off zero
TAKE_OVER_BUTTON = 5  # RB on an Xbox-layout pad


def start_pygame(device: str, *, what: str = "--teleop",
                 instead: str = "record without --teleop"):
    """pygame with a window, or a one-line UserError that says what is missing; `what`: the
    setting that asked for it, `instead`: how to do without, both named in the errors."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        import pygame
    except ImportError:
        raise UserError(f"{what} needs pygame (pip install pygame==2.6.1, in requirements.txt)"
                        ) from None
    # Linux without X or Wayland (a pod over plain ssh); macOS and Windows always have a screen
    headless = not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
                    or os.environ.get("SDL_VIDEODRIVER"))
    if sys.platform.startswith("linux") and headless:
        raise UserError(f"{what} shows the camera in a window and no display is set (DISPLAY); "
                        f"run it on a desktop, or over ssh -X, or {instead}")
    pygame.init()
    try:
        pygame.display.set_mode((WINDOW, WINDOW))
    except pygame.error as err:
        raise UserError(f"{what} cannot open a window ({err}); run it on a desktop, or over "
                        "ssh -X") from None
    if device == "gamepad":
        pygame.joystick.init()
        if pygame.joystick.get_count() == 0:
            raise UserError(f"{what} gamepad found no gamepad; plug one in, or use keyboard")
    return pygame


class Person:
    """The device's state, updated from pygame's events: `action()` is the task's (dx, dy, dz,
    fingers) in [-1, 1]; `decision` is what the person said of the episode (KEEP, DISCARD,
    STOP or None); `taking_over`: whether they have taken the controls from a learning run."""

    def __init__(self, pygame, device: str):
        self.pg, self.held, self.fingers = pygame, set(), -1.0
        self.decision, self.taking_over = None, False
        self.pad = pygame.joystick.Joystick(0) if device == "gamepad" else None

    def read_events(self) -> None:
        pg = self.pg
        keys = {pg.K_RETURN: KEEP, pg.K_BACKSPACE: DISCARD, pg.K_ESCAPE: STOP}
        buttons = {7: KEEP, 6: DISCARD}  # Start, Back on an Xbox-layout pad
        for event in pg.event.get():
            if event.type == pg.QUIT:
                self.decision, self.taking_over = STOP, False
            elif event.type == pg.KEYDOWN:
                self.held.add(event.key)
                self.decision = keys.get(event.key, self.decision)
                if event.key == pg.K_SPACE:
                    self.fingers = -self.fingers
                elif event.key == pg.K_t:
                    self.taking_over = not self.taking_over
            elif event.type == pg.KEYUP:
                self.held.discard(event.key)
            elif event.type == pg.JOYBUTTONDOWN:
                self.decision = buttons.get(event.button, self.decision)
                if event.button == 0:  # A
                    self.fingers = -self.fingers
                elif event.button == TAKE_OVER_BUTTON:
                    self.taking_over = not self.taking_over

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
