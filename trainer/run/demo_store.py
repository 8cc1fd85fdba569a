"""The run's demonstrations (`demos.path`): read the Minari dataset, check it against the config,
fill their store; with a frozen trunk, its features of every frame stack. Checkpoints hold the
file's fingerprint, never the demonstrations (docs/checkpoints.md#reading)."""

import time

import gymnasium as gym
import numpy as np
import torch

from encoders.frozen import FrozenTrunk
from envs import demos as demo_files
from envs import lerobot_format
from envs.config import frame_settings
from errors import UserError
from sac.demos import fill_store
from sac.replay import ReplayBuffer
from trainer.config.load import Config

RECORD_HINT = ("record matching ones with python3 -m trainer.tools.record --config <this config> "
               "[its --set ...] --out PATH")


class Demos:
    """The demonstrations of a run: `store` is the ReplayBuffer that batches draw `demos.share`
    from."""

    def __init__(self, cfg: Config, obs_space: gym.spaces.Box, action_dim: int,
                 frames_on: torch.device | None,
                 trunk: FrozenTrunk | None = None, *, states: int = 0):
        """`states` > 0: each step's features end in the recorded simulator state, that long
        (trainer's `stored`)."""
        self.path = cfg.demos.path
        data = read(cfg, self.path)
        key = check_fits(cfg, data, obs_space, action_dim, states=states)
        self.fingerprint, self.episodes, self.steps = (data.fingerprint, len(data.episodes),
                                                       data.steps)
        # said, not refused: fixed-scene demonstrations in a randomised run (or the reverse) are a
        # user's choice
        recorded = data.recording.get("randomized")
        randomises = cfg.env.randomize.enabled
        same = recorded is None or recorded == randomises or key != demo_files.PIXELS
        were = "on randomised scenes" if recorded else "on the fixed scene"
        self.scenes = ("" if same else f", recorded {were} while this run "
                       f"{'randomises' if randomises else 'does not randomise'} them")
        sac = cfg.sac
        observations = [e.observations[key] for e in data.episodes]
        frame_stack = cfg.env.frame_stack if key == demo_files.PIXELS else None
        # seconds the trunk took to encode them; None: the store holds frames
        self.encode_s: float | None = None
        def store(observations, frame_stack: int | None,
                  frames_on: torch.device | None) -> ReplayBuffer:
            return fill_store(
                [(obs, e.actions, e.rewards, e.terminations)
                 for obs, e in zip(observations, data.episodes)],
                frame_stack=frame_stack,
                seed=cfg.training.seed,
                discount=sac.discount,
                nstep=sac.nstep,
                frames_on=frames_on,
            )

        if trunk:  # a store of frames builds the stacks; a feature vector holds its stack
            start = time.perf_counter()
            features = encode(trunk, store(observations, frame_stack, None),
                              batch_size=sac.batch_size)
            if states:
                recorded = np.concatenate([e.observations[demo_files.STATE] for e in data.episodes])
                features = np.concatenate([features, recorded.astype(features.dtype)], axis=1)
            observations = np.split(features, np.cumsum([len(obs) for obs in observations])[:-1])
            self.encode_s, frame_stack = time.perf_counter() - start, None
        self.store: ReplayBuffer = store(observations, frame_stack, frames_on)

    def describe(self) -> str:
        text = (f"{self.episodes} demonstration episodes ({self.steps} steps) from "
                f"{self.path}{self.scenes}")
        if self.encode_s is None:
            return text
        return f"{text}, stored as the frozen trunk's features (encoded in {self.encode_s:.1f} s)"

    def state_dict(self) -> dict:
        return {"path": str(self.path), "fingerprint": self.fingerprint,
                "rng": self.store.rng.bit_generator.state}

    def load_state_dict(self, state: dict | None) -> str:
        """Continue the saved sampling; returns what to tell the user (the file is re-read, or it
        changed)."""
        verb = "re-read" if self.encode_s is None else "re-read and re-encoded"
        message = f"{verb} {self.describe()}; checkpoints do not copy them"
        if state is None:
            return f"{message}; the checkpoint trained without demonstrations"
        self.store.rng.bit_generator.state = state["rng"]
        if state["fingerprint"] != self.fingerprint:
            return (
                f"{message}; the file differs from the one the checkpoint trained with "
                f"({state['path']}): training goes on with the demonstrations as they are now"
            )
        return message


def read(cfg: Config, path: str) -> demo_files.Demonstrations:
    """A Minari recording, or a LeRobot dataset (a folder or hf://datasets/<id>) read through
    `demos.lerobot`'s keys, its frames resized to `env.image_size`."""
    if lerobot_format.is_dataset(path) or lerobot_format.is_hub_id(path):
        return lerobot_format.read(path, cfg.demos.lerobot, image_size=cfg.env.image_size)
    return demo_files.read(path)


def encode(trunk: FrozenTrunk, frames: ReplayBuffer, *, batch_size: int) -> np.ndarray:
    """The trunk's features (count, repr_dim) of the stack ending at every frame of `frames`."""
    numbers = np.arange(frames.count)
    batches = (numbers[i : i + batch_size] for i in range(0, frames.count, batch_size))
    return np.concatenate([trunk(frames.stacks(ends, np.zeros_like(ends)).numpy())
                           for ends in batches])


def check_fits(cfg: Config, data: demo_files.Demonstrations, obs_space: gym.spaces.Box,
               action_dim: int, *,
               states: int = 0) -> str:
    """The observation key this run reads, or a one-line UserError naming the dataset's side and the
    config's."""
    pixels = cfg.encoder.type == "video"
    key = demo_files.PIXELS if pixels else demo_files.STATE

    def fail(what: str, theirs, ours, config_key: str) -> UserError:
        return UserError(
            f"demonstrations {data.path} do not fit this run: {what} {theirs} there, {ours} here "
            f"({config_key}); {RECORD_HINT}, or set demos.path to another dataset"
        )

    recorded_id = data.recording.get("env_id")
    if recorded_id is not None and recorded_id != cfg.env.id:
        raise fail("env id", recorded_id, cfg.env.id, "env.id")
    if key not in data.observation_space.spaces:
        raise fail("observations", "/".join(data.observation_space.spaces), key, "encoder.type")
    space = data.observation_space[key]
    # stacks stored: the run could not restack them
    if pixels and len(space.shape) == len(obs_space.shape):
        raise fail(
            "frames stored in stacks of",
            space.shape[0],
            f"single frames stacked {cfg.env.frame_stack} at a time",
            "env.frame_stack",
        )
    ours = obs_space.shape[1:] if pixels else obs_space.shape
    if tuple(space.shape) != tuple(ours) or np.dtype(space.dtype) != np.dtype(obs_space.dtype):
        raise fail(
            "observations",
            f"{np.dtype(space.dtype)} {tuple(space.shape)}",
            f"{np.dtype(obs_space.dtype)} {tuple(ours)}",
            "env.image_size" if pixels else "env.id",
        )
    recorded_states = data.observation_space.spaces.get(demo_files.STATE)
    if states and (recorded_states is None or recorded_states.shape != (states,)):
        theirs = "none" if recorded_states is None else f"states of {recorded_states.shape[0]}"
        raise fail("the critic's simulator state:", theirs, f"{states} numbers", "sac.critic_input")
    if data.action_space.shape != (action_dim,):
        raise fail("action dimension", data.action_space.shape[0], action_dim, "env.id")
    for number, episode in enumerate(data.episodes):
        # the task's actions are rescaled to [-1, 1] (envs/make.py); a little slack for float32
        if len(episode) and np.abs(episode.actions).max() > 1 + 1e-5:
            step = int(np.abs(episode.actions).max(axis=1).argmax())
            raise UserError(
                f"demonstrations {data.path} hold actions outside the task's [-1, 1] (episode "
                f"{number}, step {step}: {np.round(episode.actions[step], 3).tolist()}); rescale "
                "them to [-1, 1] per dimension, as the task's own actions are")
    # frames another renderer made look different (docs/warp.md): a dataset that does not say is an
    # OpenGL one
    recorded_defaults = {"backend": "mujoco"}
    for setting in ("action_repeat",
                    *frame_settings(cfg.env.backend)) if pixels else ("action_repeat",):
        configured = getattr(cfg.env, setting)
        recorded = data.recording.get(setting, recorded_defaults.get(setting, configured))
        if recorded != configured:
            raise fail(setting, recorded, configured, f"env.{setting}")
    return key


