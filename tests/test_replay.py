"""Replay: one stored frame per step, stacks rebuilt at sample time exactly as the env's frame stack built them,
across episode starts, terminations, truncations and ring wrap-around."""

import io

import numpy as np
import pytest
import torch

from sac.replay import ReplayBuffer
from trainer.errors import UserError

T = 3


def fill(replay: ReplayBuffer, episodes: int, seed: int = 0) -> dict:
    """Feed random episodes whose frames are their global frame number; return the naive reference transitions,
    keyed by the frame number of next_obs's newest frame. The naive stacker pads with the reset frame, as the env does."""
    rng = np.random.default_rng(seed)
    reference, frame = {}, replay.count
    for _ in range(episodes):
        stack = [frame] * T
        replay.add_first(np.array(stack)[:, None])
        frame += 1
        length, ends_terminated = int(rng.integers(1, 9)), bool(rng.integers(2))
        for t in range(length):
            action, reward = rng.standard_normal(2).astype(np.float32), float(rng.standard_normal())
            terminated = ends_terminated and t == length - 1
            next_stack = stack[1:] + [frame]
            replay.add(action, reward, terminated, np.array(next_stack)[:, None])
            reference[frame] = (stack, action, reward, terminated, next_stack)
            stack, frame = next_stack, frame + 1
    return reference


def test_sampled_stacks_match_naive_reference_across_boundaries_and_wraparound():
    replay = ReplayBuffer(capacity=37, frame_shape=(1,), frame_dtype=np.int64, action_dim=2, frame_stack=T, seed=0)
    reference = fill(replay, episodes=60)
    assert replay.count > 3 * replay.capacity, "the ring must have wrapped for this test to mean anything"
    oldest = replay.count - replay.capacity
    valid = {key for key, (stack, *_ , next_stack) in reference.items() if min(stack) >= oldest}

    seen = set()
    for _ in range(200):
        batch = replay.sample(16)
        assert batch["obs"].shape == (16, T, 1) and batch["obs"].dtype == torch.int64
        for i in range(16):
            key = int(batch["next_obs"][i, -1, 0])
            stack, action, reward, terminated, next_stack = reference[key]
            assert key in valid, f"transition {key} needs frames that were overwritten"
            assert batch["obs"][i, :, 0].tolist() == stack
            assert batch["next_obs"][i, :, 0].tolist() == next_stack
            assert np.allclose(batch["action"][i].numpy(), action)
            assert batch["reward"][i, 0].item() == pytest.approx(reward)
            assert batch["discount"][i, 0].item() == (0.0 if terminated else 1.0)
            seen.add(key)
    assert seen == valid, "sampling must reach every stored transition"
    assert len(replay) >= len(valid)


def test_reset_frames_are_not_transitions():
    replay = ReplayBuffer(capacity=100, frame_shape=(1,), frame_dtype=np.int64, action_dim=2, frame_stack=T, seed=0)
    for _ in range(5):
        replay.add_first(np.zeros((T, 1)))
    assert len(replay) == 0
    reference = fill(replay, episodes=10)
    assert len(replay) == len(reference)


def test_state_vectors_are_stored_without_a_stack_axis():
    replay = ReplayBuffer(capacity=50, frame_shape=(4,), frame_dtype=np.float32, action_dim=1, frame_stack=None, seed=0)
    replay.add_first(np.full(4, 0.0, np.float32))
    for step in range(1, 20):
        replay.add(np.array([step], np.float32), float(step), step == 19, np.full(4, step, np.float32))
    batch = replay.sample(8)
    assert batch["obs"].shape == (8, 4) and batch["next_obs"].shape == (8, 4)
    assert torch.equal(batch["next_obs"][:, 0], batch["obs"][:, 0] + 1)
    assert torch.equal(batch["action"][:, 0], batch["next_obs"][:, 0])
    assert torch.equal(batch["discount"][:, 0] == 0, batch["next_obs"][:, 0] == 19)


def test_bytes_per_transition_for_84px_video_is_under_22kb_and_a_sixth_of_stacked_storage():
    replay = ReplayBuffer(capacity=1000, frame_shape=(3, 84, 84), frame_dtype=np.uint8, action_dim=6, frame_stack=T, seed=0)
    frame_bytes = 3 * 84 * 84
    assert replay.bytes_per_slot <= 22 * 1024
    assert 2 * T * frame_bytes / replay.bytes_per_slot > 5.9


def test_a_buffer_larger_than_free_ram_is_refused_before_allocation():
    with pytest.raises(UserError, match=r"needs .* GiB .* lower sac.buffer_size to at most \d+"):
        ReplayBuffer(capacity=10**9, frame_shape=(3, 84, 84), frame_dtype=np.uint8, action_dim=6, frame_stack=T, seed=0)


def test_state_dict_round_trip_through_weights_only_load_resumes_the_same_samples():
    replay = ReplayBuffer(capacity=37, frame_shape=(1,), frame_dtype=np.int64, action_dim=2, frame_stack=T, seed=3)
    fill(replay, episodes=12)
    buffer = io.BytesIO()
    torch.save(replay.state_dict(), buffer)
    buffer.seek(0)
    restored = ReplayBuffer(capacity=37, frame_shape=(1,), frame_dtype=np.int64, action_dim=2, frame_stack=T, seed=99)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    for _ in range(3):
        a, b = replay.sample(8), restored.sample(8)
        assert all(torch.equal(a[k], b[k]) for k in a)
    fill(replay, episodes=3, seed=5)
    fill(restored, episodes=3, seed=5)
    assert torch.equal(replay.sample(8)["obs"], restored.sample(8)["obs"])


def test_restoring_into_a_different_capacity_is_a_clear_error():
    replay = ReplayBuffer(capacity=37, frame_shape=(1,), frame_dtype=np.int64, action_dim=2, frame_stack=T, seed=0)
    fill(replay, episodes=3)
    other = ReplayBuffer(capacity=40, frame_shape=(1,), frame_dtype=np.int64, action_dim=2, frame_stack=T, seed=0)
    with pytest.raises(UserError, match="sac.buffer_size"):
        other.load_state_dict(replay.state_dict())
