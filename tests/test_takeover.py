"""A person takes over a run while it learns (demos.takeover), through pygame under its dummy video
driver with posted key events standing in for the keys a person presses: the steps they drive are
env 0's, flagged in the replay, drawn as the demonstration share of the batches, counted in
TensorBoard and eval.csv, and a resume keeps all of it."""

import copy

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from errors import UserError
from sac.demos import mixed_sample
from sac.replay import ReplayBuffer
from tests.conftest import ROOT
from tests.test_demos import SIZE, VIDEO
from trainer.config.load import load_config
from trainer.run.loop import Trainer

RIGHT = [1, 0, 0, -1]  # the right arrow held, the fingers open


@pytest.fixture
def dummy_display(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")


def press(*keys, up=()) -> None:
    import pygame as pg

    for key in keys:
        pg.event.post(pg.event.Event(pg.KEYDOWN, key=key))
    for key in up:
        pg.event.post(pg.event.Event(pg.KEYUP, key=key))


def flagged(replay: ReplayBuffer) -> tuple[np.ndarray, np.ndarray]:
    """(slot, env) of every transition flagged as a person's."""
    return np.nonzero(replay.intervened[:min(replay.count, replay.capacity)])


def test_the_steps_a_person_takes_over_are_theirs_drawn_as_demonstrations_and_kept_on_resume(
        tmp_path, dummy_display):
    import pygame as pg

    cfg = load_config(VIDEO, [
        f"env.image_size={SIZE}", "env.num_envs=2", "env.max_episode_steps=15",
        "demos.path=null", "demos.takeover=keyboard", "demos.share=0.5",
        "sac.hidden_dim=32", "sac.batch_size=16", "sac.buffer_size=1000",
        "training.seed_steps=10", "training.eval_every_episodes=2", "training.eval_episodes=1",
        "logging.eval_video=false", "logging.progress=false",
        f"logging.tensorboard_dir={tmp_path / 'runs'}", f"checkpoint.dir={tmp_path / 'ckpt'}"])
    run = Trainer(cfg)
    run.run(4)
    assert run.progress.intervened == 0 and len(flagged(run.replay)[0]) == 0
    press(pg.K_t, pg.K_RIGHT)  # takes over, holding right
    run.run(12)
    press(pg.K_t, up=[pg.K_RIGHT])  # hands back
    run.run(30)  # two episodes each env, an evaluation after the second
    slots, envs = flagged(run.replay)
    driven = run.progress.intervened
    assert driven >= 5 and len(slots) == driven, "every step they drove is flagged, once"
    assert (envs == 0).all(), "a person drives env 0 only"
    np.testing.assert_array_equal(run.replay.actions[slots, envs], [RIGHT] * driven)
    assert list(np.diff(np.sort(slots))) == [1] * (driven - 1), "one take-over: one stretch"
    # the other half of a batch: the replay's own transitions, the policy's and the person's alike
    batch = run.sample(16)
    np.testing.assert_array_equal(batch["action"][8:], [RIGHT] * 8)

    run_dir = tmp_path / "runs" / cfg.run_name
    header, *rows = (run_dir / "eval.csv").read_text().splitlines()
    assert header.endswith(",intervened") and rows
    # the first evaluation comes after the take-over: its share counts every step up to it
    share = float(rows[0].split(",")[-1])
    assert share == pytest.approx(driven / int(rows[0].split(",")[0]), abs=1e-3) and share > 0
    path = run.save(final_of_episode=False)
    run.close()
    events = EventAccumulator(str(run_dir))
    events.Reload()
    shares = [event.value for event in events.Scalars("train/intervened_share")]
    assert max(shares) > 0 and min(shares) == 0, "the person's episodes, and the policy's alone"
    assert [e.value for e in events.Scalars("eval/intervened_share")][0] == pytest.approx(share)

    resumed = Trainer(cfg, resume=str(path))
    try:
        assert resumed.progress.intervened == driven
        kept_slots, kept_envs = flagged(resumed.replay)
        np.testing.assert_array_equal(kept_slots, slots)
        assert resumed.replay.intervened_count() == driven
        np.testing.assert_array_equal(resumed.sample(16)["action"][8:], [RIGHT] * 8)
    finally:
        resumed.close()


def test_a_share_of_the_batch_draws_from_recorded_demonstrations_and_interventions_by_count():
    def buffer(steps: list[tuple[float, bool]]) -> ReplayBuffer:
        """A replay of (action, whether a person gave it) steps."""
        replay = ReplayBuffer(capacity=50, frame_shape=(2,), frame_dtype=np.float32, action_dim=1,
                              frame_stack=None, seed=0, discount=0.99)
        replay.add_first(np.zeros(2, np.float32))
        for action, person in steps:
            replay.add_batch(np.zeros((1, 2), np.float32), np.array([[action]], np.float32),
                             np.zeros(1), np.zeros(1, bool), np.zeros(1, bool),
                             intervened=np.array([person]))
        return replay

    recorded = buffer([(0.5, False)] * 30)
    own = buffer([(-1.0, False)] * 10 + [(1.0, True)] * 10)
    # 30 recorded and 10 intervened: a quarter of the demonstration share from the person
    batch = mixed_sample(own, demos=recorded, batch_size=16, share=0.5)["action"][:, 0]
    assert torch.equal(batch[8:14], torch.full((6,), 0.5))
    assert torch.equal(batch[14:], torch.full((2,), 1.0))
    # without recorded demonstrations the share is the person's alone; with neither, no share
    assert torch.equal(mixed_sample(own, demos=None, batch_size=16, share=0.5)["action"][8:, 0],
                       torch.full((8,), 1.0))
    plain = mixed_sample(buffer([(-1.0, False)] * 10), demos=None, batch_size=16, share=0.5)
    assert torch.equal(plain["action"][:, 0], torch.full((16,), -1.0))


def test_interventions_leave_the_draw_once_the_ring_overwrites_them():
    replay = ReplayBuffer(capacity=6, frame_shape=(1,), frame_dtype=np.float32, action_dim=1,
                          frame_stack=None, seed=0, discount=0.99)
    replay.add_first(np.zeros(1, np.float32))

    def step(person: bool) -> None:
        replay.add_batch(np.zeros((1, 1), np.float32), np.ones((1, 1), np.float32), np.zeros(1),
                         np.zeros(1, bool), np.zeros(1, bool), intervened=np.array([person]))

    step(True)
    step(True)
    assert replay.intervened_count() == 2
    state = copy.deepcopy(replay.state_dict())  # its arrays are views of the ring's
    for _ in range(4):  # frames 3-6 in a ring of 6: frame 0, the first one's start, overwritten
        step(False)
    assert replay.intervened_count() == 1
    step(False)
    assert replay.intervened_count() == 0
    step(False)
    assert not replay.intervened.any(), "both slots hold the policy's steps now"
    replay.load_state_dict(state)
    assert replay.intervened_count() == 2, "a saved replay keeps its flags"
    del state["intervened"]  # a replay saved before take-over existed
    replay.load_state_dict(state)
    assert replay.intervened_count() == 0 and not replay.intervened.any()


def test_take_over_needs_the_dishwashing_frames_of_an_opengl_env():
    with pytest.raises(UserError) as err:
        load_config(ROOT / "configs" / "dishwashing_state.yaml", ["demos.takeover=keyboard"])
    assert str(err.value) == (
        "demos.takeover drives the dishwashing arm watching the frames of one OpenGL env: it needs "
        "a Dishwashing env.id, encoder.type video and env.backend=mujoco; set demos.takeover=null")
