"""Replay: one stored frame per step, stacks rebuilt at sample time exactly as the env's frame stack
built them, across episode starts, terminations, truncations and ring wrap-around, with one ring per
env so stacks never mix envs, and the same samples whether frames live in host memory or in a device
tensor."""

import io

import numpy as np
import pytest
import torch

from errors import UserError
from sac.replay import ReplayBuffer, host_bytes_per_slot
from trainer.process.cli import explain

T = 3
GAMMA = 0.9
# 84px RGB frames, as the pixel envs render them
PIXELS = dict(frame_shape=(3, 84, 84), frame_dtype=np.uint8)


def buffer(capacity: int = 37, *, seed: int = 0, **kw) -> ReplayBuffer:
    """The ring the tests share: one-number frames (fill numbers them), 2-d actions, stacks of T,
    discount GAMMA; `kw` changes any of these or adds num_envs, nstep, frames_on."""
    kw = dict(frame_shape=(1,), frame_dtype=np.int64, action_dim=2, frame_stack=T) | kw
    return ReplayBuffer(capacity=capacity, seed=seed, discount=GAMMA, **kw)


def fill(replay: ReplayBuffer, episodes: int, seed: int = 0) -> dict:
    """Feed random episodes whose frames are their global frame number; return the naive reference
    transitions, keyed by the frame number of next_obs's newest frame. The naive stacker pads with
    the reset frame, as the env does."""
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


def fill_envs(replay: ReplayBuffer, steps: int, seed: int = 0, tensors: bool = False) -> dict:
    """Lockstep random episodes in every env of `replay`, frames numbered uniquely across envs
    (frame number * num_envs + env); return the naive per-env reference transitions keyed by
    next_obs's newest frame. `tensors`: observations as torch tensors, as a batched env on a device
    delivers them."""
    rng = np.random.default_rng(seed)
    n = replay.num_envs
    reference, stacks = {}, [None] * n
    # t == length: episode over
    length, ends_terminated, t = np.zeros(n, int), np.zeros(n, bool), np.zeros(n, int)
    for step in range(replay.count, replay.count + steps):
        obs, first, terminated = np.zeros((n, T, 1), np.int64), t == length, np.zeros(n, bool)
        actions, rewards = (rng.standard_normal((n, 2)).astype(np.float32),
                            rng.standard_normal(n).astype(np.float32))
        for env in range(n):
            frame = step * n + env
            if first[env]:
                stacks[env], length[env], ends_terminated[env], t[env] = (
                    [frame] * T, rng.integers(1, 9), rng.integers(2), 0
                )
            else:
                t[env] += 1
                terminated[env] = ends_terminated[env] and t[env] == length[env]
                next_stack = stacks[env][1:] + [frame]
                reference[frame] = (
                    env, stacks[env], actions[env], float(rewards[env]), bool(terminated[env]),
                    next_stack
                )
                stacks[env] = next_stack
            obs[env, :, 0] = stacks[env]
        replay.add_batch(torch.from_numpy(obs) if tensors else obs, actions, rewards, terminated,
                         first)
    return reference


@pytest.mark.parametrize("num_envs", [1, 3])
def test_sampled_stacks_match_naive_reference_across_boundaries_envs_and_wraparound(num_envs):
    replay = buffer(37 * num_envs, num_envs=num_envs)
    reference = fill_envs(replay, steps=200)
    assert replay.count > 3 * replay.capacity, (
        "the ring must have wrapped for this test to mean anything")
    oldest = (replay.count - replay.capacity) * num_envs
    valid = {key for key, (_, stack, *_, next_stack) in reference.items() if min(stack) >= oldest}
    assert {reference[key][0] for key in valid} == set(range(num_envs))

    seen = set()
    for _ in range(200):
        batch = replay.sample(16)
        assert batch["obs"].shape == (16, T, 1) and batch["obs"].dtype == torch.int64
        for i in range(16):
            key = int(batch["next_obs"][i, -1, 0])
            env, stack, action, reward, terminated, next_stack = reference[key]
            assert key in valid, f"transition {key} needs frames that were overwritten"
            assert batch["obs"][i, :, 0].tolist() == stack, (
                "a stack holds one env's frames, padded with its reset frame"
            )
            assert batch["next_obs"][i, :, 0].tolist() == next_stack
            assert np.allclose(batch["action"][i].numpy(), action)
            assert batch["reward"][i, 0].item() == pytest.approx(reward)
            assert batch["discount"][i, 0].item() == pytest.approx(0.0 if terminated else GAMMA)
            seen.add(key)
    assert seen == valid, "sampling must reach every stored transition"
    assert len(replay) >= len(valid)


@pytest.mark.parametrize("num_envs", [1, 3])
def test_nstep_transitions_sum_discounted_rewards_within_one_episode_and_stop_at_its_end(num_envs):
    """The naive n-step return: follow the episode step by step from the sampled transition, at most
    n steps, never past a termination, the episode's last frame or the newest frame written."""
    nstep = 3
    replay = buffer(37 * num_envs, num_envs=num_envs, nstep=nstep)
    reference = fill_envs(replay, steps=200)
    # a transition is known by its obs's newest frame
    by_obs = {stack[-1]: key for key, (_, stack, *_) in reference.items()}
    stops = set()
    for _ in range(100):
        batch = replay.sample(16)
        assert batch["reward"].dtype == batch["discount"].dtype == torch.float32
        for i in range(16):
            key = by_obs[int(batch["obs"][i, -1, 0])]
            env, stack, action, reward, terminated, next_stack = reference[key]
            total, discount, steps = reward, GAMMA * (not terminated), 1
            while (
                steps < nstep and discount > 0 and key + num_envs in reference
                and reference[key + num_envs][1] == next_stack
            ):
                key += num_envs
                _, _, _, reward, terminated, next_stack = reference[key]
                total, discount, steps = (total + discount * reward,
                                          discount * GAMMA * (not terminated), steps + 1)
            newest = key + num_envs >= replay.count * num_envs
            stops.add(
                "whole" if steps == nstep else "terminated" if discount == 0 else "newest"
                if newest else "episode end"
            )
            assert batch["obs"][i, :, 0].tolist() == stack
            assert np.allclose(batch["action"][i].numpy(), action), "the first step's action"
            assert batch["next_obs"][i, :, 0].tolist() == next_stack
            assert batch["reward"][i, 0].item() == pytest.approx(total, rel=1e-5)
            assert batch["discount"][i, 0].item() == pytest.approx(discount)
    assert stops == {"whole", "terminated", "episode end", "newest"}


def test_frames_in_a_device_tensor_sample_the_same_batches_as_host_frames():
    kwargs = dict(capacity=60, seed=4, num_envs=2, nstep=3)
    host, on_device = buffer(**kwargs), buffer(**kwargs, frames_on=torch.device("cpu"))
    assert isinstance(on_device.frames, torch.Tensor) and isinstance(host.frames, np.ndarray)
    fill_envs(host, steps=80)
    fill_envs(on_device, steps=80)
    for _ in range(5):
        a, b = host.sample(16), on_device.sample(16)
        assert all(torch.equal(a[k], b[k]) for k in a)
    restored = buffer(**kwargs, frames_on=torch.device("cpu"))
    restored.load_state_dict(host.state_dict())
    assert torch.equal(restored.sample(16)["obs"],
                       host.sample(16)["obs"]), "a host checkpoint loads into device frames"


def test_observations_as_torch_tensors_are_stored_as_numpy_ones_in_host_and_device_frames():
    kwargs = dict(capacity=60, seed=4, num_envs=2)
    reference, host = buffer(**kwargs), buffer(**kwargs)
    on_device = buffer(**kwargs, frames_on=torch.device("cpu"))
    fill_envs(reference, steps=80)
    fill_envs(host, steps=80, tensors=True)
    fill_envs(on_device, steps=80, tensors=True)
    assert isinstance(host.frames, np.ndarray) and np.array_equal(host.frames, reference.frames)
    assert torch.equal(on_device.frames, torch.from_numpy(reference.frames))


def test_reset_frames_are_not_transitions():
    replay = buffer(100)
    for _ in range(5):
        replay.add_first(np.zeros((T, 1)))
    assert len(replay) == 0
    reference = fill(replay, episodes=10)
    assert len(replay) == len(reference)


@pytest.mark.parametrize("nstep", [1, 2])
def test_state_vectors_are_stored_without_a_stack_axis(nstep):
    replay = buffer(50, frame_shape=(4,), frame_dtype=np.float32, action_dim=1, frame_stack=None,
                    nstep=nstep)
    replay.add_first(np.full(4, 0.0, np.float32))
    for step in range(1, 20):
        replay.add(np.array([step], np.float32), float(step), step == 19,
                   np.full(4, step, np.float32))
    batch = replay.sample(8)
    obs, next_obs = batch["obs"][:, 0], batch["next_obs"][:, 0]
    assert batch["obs"].shape == (8, 4) and batch["next_obs"].shape == (8, 4)
    assert torch.equal(next_obs,
                       torch.clamp(obs + nstep,
                                   max=19)), "n steps on, never past the terminal state"
    assert torch.equal(batch["action"][:, 0], obs + 1)
    steps = next_obs - obs
    assert torch.allclose(batch["reward"][:, 0], obs + 1 + (steps > 1) * GAMMA * (obs + 2))
    assert torch.equal(batch["discount"][:, 0] == 0, next_obs == 19)


def test_bytes_per_transition_for_84px_video_is_under_22kb_and_a_sixth_of_stacked_storage():
    replay = buffer(1000, **PIXELS, action_dim=6, num_envs=2)
    frame_bytes = 3 * 84 * 84
    assert replay.bytes_per_slot <= 22 * 1024
    assert 2 * T * frame_bytes / replay.bytes_per_slot > 5.9


@pytest.mark.parametrize("action_dim", [1, 6])
def test_the_host_memory_check_counts_what_a_slot_allocates(action_dim):
    """The trainer refuses a replay too large for the RAM from host_bytes_per_slot, before
    allocating: it must match the arrays the buffer then allocates, with frames on the host or on a
    device."""
    for frames_on in (None, torch.device("cpu")):
        replay = buffer(100, **PIXELS, action_dim=action_dim, frames_on=frames_on)
        on_host = replay.bytes_per_slot - (0 if frames_on is None else 3 * 84 * 84)
        assert host_bytes_per_slot((3, 84, 84), np.uint8, action_dim, frames_on is None) == on_host


def test_state_dict_round_trip_through_weights_only_load_resumes_the_same_samples():
    replay = buffer(seed=3)
    fill(replay, episodes=12)
    saved = io.BytesIO()
    torch.save(replay.state_dict(), saved)
    saved.seek(0)
    restored = buffer(seed=99)
    restored.load_state_dict(torch.load(saved, weights_only=True))
    for _ in range(3):
        a, b = replay.sample(8), restored.sample(8)
        assert all(torch.equal(a[k], b[k]) for k in a)
    fill(replay, episodes=3, seed=5)
    fill(restored, episodes=3, seed=5)
    assert torch.equal(replay.sample(8)["obs"], restored.sample(8)["obs"])


def test_a_ring_too_short_for_a_stack_is_a_clear_error_whose_fix_fits():
    """Two rings of 4 slots hold no stack of 3 and its next frame; the size the message asks for
    builds."""
    with pytest.raises(UserError) as err:
        buffer(8, num_envs=2)
    message = explain(err.value)
    assert (f"sac.buffer_size=8 leaves 4 slots per env; raise it to {2 * (T + 2)} or more, or "
            "lower env.num_envs" in message)
    buffer(2 * (T + 2), num_envs=2)


def test_restoring_into_a_different_capacity_is_a_clear_error():
    replay = buffer()
    fill(replay, episodes=3)
    other = buffer(40)
    with pytest.raises(UserError) as err:
        other.load_state_dict(replay.state_dict())
    assert "sac.buffer_size" in explain(err.value)
