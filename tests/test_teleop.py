"""A person drives the dishwashing arm through pygame (its dummy video driver, with posted key
events standing in for the keys a person presses): the steps they drove and the episodes they
kept become a dataset the trainer trains from, the discarded ones are not in it, and without a
display the command says what it needs in one line."""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from envs import demos
from tests.conftest import ROOT, run_cli
from tests.test_demos import SIZE, VIDEO, demos_run
from trainer.config.load import load_config
from trainer.run.person import Person, start_pygame
from trainer.tools import teleop
from trainer.tools.record import OneEnv, main, observation_space, recording_settings


@pytest.fixture
def pygame(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    pg = start_pygame("keyboard")
    yield pg
    pg.quit()


def test_the_episodes_a_person_keeps_are_the_steps_they_drove(pygame, tmp_path):
    pg = pygame
    # episode 1: right for 4 steps, then up (W) with the fingers shut, kept after 8 steps;
    # episode 2: discarded after 3; episode 3: left, kept after 5
    script = {1: {0: [(pg.KEYDOWN, pg.K_RIGHT)], 4: [(pg.KEYUP, pg.K_RIGHT), (pg.KEYDOWN, pg.K_w),
                                                     (pg.KEYDOWN, pg.K_SPACE)],
                  8: [(pg.KEYUP, pg.K_w), (pg.KEYDOWN, pg.K_RETURN)]},
              2: {3: [(pg.KEYDOWN, pg.K_BACKSPACE)]},
              3: {0: [(pg.KEYDOWN, pg.K_LEFT)], 5: [(pg.KEYDOWN, pg.K_RETURN)]}}
    episode = {"number": 0, "last": None}

    def between(step: int) -> None:
        if step == 0 and episode["last"] != 0:
            episode["number"] += 1
        episode["last"] = step
        for kind, key in script[episode["number"]].get(step, []):
            pg.event.post(pg.event.Event(kind, key=key))
        if step in script[episode["number"]]:
            script[episode["number"]].pop(step)

    cfg = load_config(VIDEO, [f"env.image_size={SIZE}"])
    source = OneEnv(cfg)
    try:
        kept, discarded = teleop.drive(source, Person(pg, "keyboard"), episodes=2, seed=3,
                                       fps=1000, between=between)
        space, action_space = observation_space(source), source.action_space
    finally:
        source.close()
    assert [len(e) for e in kept] == [8, 5] and discarded == 1
    first, second = kept
    right, up_shut = np.array([1, 0, 0, -1], np.float32), np.array([0, 0, 1, 1], np.float32)
    np.testing.assert_array_equal(first.actions, [right] * 4 + [up_shut] * 4)
    np.testing.assert_array_equal(second.actions, [[-1, 0, 0, -1]] * 5)
    assert first.truncations[-1] and not first.terminations.any()  # kept before its end
    # the gripper went where it was driven: right (+x), then up (+z)
    grip = first.observations[demos.STATE][:, :3]
    assert grip[4, 0] > grip[0, 0] and grip[8, 2] > grip[4, 2]

    out = tmp_path / "by_hand"
    demos.write(out, kept, space, action_space, cfg.env.id, recording_settings(cfg))
    done = run_cli(*demos_run(tmp_path, "state", "run", out, 2))
    assert done.returncode == 0, done.stderr
    assert f"training with 2 demonstration episodes (13 steps) from {out}" in done.stdout


def test_teleoperation_without_a_display_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY",
                                                           "SDL_VIDEODRIVER")}
    done = subprocess.run([sys.executable, "-m", "trainer.tools.record", "--teleop", "keyboard",
                           "--out", str(tmp_path / "x"), "--set", f"env.image_size={SIZE}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: --teleop shows the camera in a window and no display is set (DISPLAY); run it on "
        "a desktop, or over ssh -X, or record without --teleop")
    assert not (tmp_path / "x").exists()


def test_the_command_writes_the_kept_episodes_marked_as_a_persons(pygame, tmp_path):
    pg, out = pygame, tmp_path / "by_hand"
    pg.quit()  # the command starts its own

    def press_enter_once_running():  # SDL's event queue takes events from any thread
        while not pg.display.get_init() or pg.display.get_surface() is None:
            time.sleep(0.01)
        for key in (pg.K_UP, pg.K_RETURN):
            time.sleep(0.3)
            pg.event.post(pg.event.Event(pg.KEYDOWN, key=key))

    presser = threading.Thread(target=press_enter_once_running, daemon=True)
    presser.start()
    status = main(["--teleop", "keyboard", "--episodes", "1", "--out", str(out), "--set",
                   f"env.image_size={SIZE}"])
    presser.join(timeout=10)
    assert status == 0
    data = demos.read(out)
    assert len(data.episodes) == 1 and data.recording["driver"] == "person (keyboard)"
    # still until UP was pressed, then moving in +y until Enter kept it
    actions = data.episodes[0].actions
    assert (actions[:, 1] == 1).any() and (actions[-1] == [0, 1, 0, -1]).all(), actions
