"""A trained policy outside the trainer, as a robot or another program uses it:

    policy = Policy.load("checkpoints/sac_video_latest.pt")   # or a folder written by python3 -m
                                                              trainer.policy.export
    policy.reset()                                             # at an episode start
    action = policy.step(frame)                                # a uint8 (H, W, 3) frame in, a
                                                               bounded action out

See docs/deploy.md.
"""

import dataclasses
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from encoders import build_encoder
from encoders.frozen import ProjectedEncoder
from errors import UserError
from sac.agent import ENCODER_PREFIX, Actor
from trainer.checkpoints.files import CheckpointError, NoSuchFolder
from trainer.checkpoints.payload import RESUME_FIX, load_weights
from trainer.checkpoints.remote import RemoteDir, is_remote, staging_dir
from trainer.config.checks import check_inside
from trainer.config.load import config_from_dict, with_overrides
from trainer.config.yaml_files import parse_set, read_yaml
from trainer.run.encoder_setup import build_encoders, linear_of, untrained

POLICY_FORMAT = "pixel-sac policy 1"  # policy.json's "format": what this version reads and writes
# what Policy.load reads of an exported folder: data (policy.pt and policy.onnx: other runtimes)
SPEC_FILE, WEIGHTS_FILE, CONFIG_FILE = "policy.json", "policy.safetensors", "config.yaml"
CHECKPOINT_FIX = "pass another checkpoint of the run (an older <run>_ep<N>.pt)"
EXPORT_AGAIN = ("export it again from its checkpoint "
                "(python3 -m trainer.policy.export CHECKPOINT --out DIR)")


class PolicyNet(nn.Module):
    """Frames or states in, the deterministic action in [`low`, `high`] (unless `unit_actions`)
    out."""

    def __init__(self, encoder: nn.Module, actor: Actor, *, low: np.ndarray, high: np.ndarray,
                 float16_features: bool,
                 unit_actions: bool):
        super().__init__()
        self.encoder, self.actor = encoder, actor
        self.register_buffer("low", torch.as_tensor(low, dtype=torch.float32))
        self.register_buffer("half_range", torch.as_tensor((high - low) / 2, dtype=torch.float32))
        self.float16_features, self.unit_actions = float16_features, unit_actions
        # inference only: an exported copy's outputs convert to numpy as they are
        self.requires_grad_(False).eval()

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.encoder(obs)
        # the replay stores a frozen trunk's features in float16: the actor learnt on those
        if self.float16_features:
            features = features.half().float()
        mean = self.actor.policy(self.actor.trunk(features)).chunk(2, dim=-1)[0]
        action = torch.tanh(mean)
        return action if self.unit_actions else self.low + (action + 1) * self.half_range


@dataclasses.dataclass
class Spec:
    """What a policy takes and gives: policy.json in an exported folder."""

    obs_shape: tuple[int, ...]
    pixels: bool
    action_low: list[float]
    action_high: list[float]
    task: str
    encoder: str
    action_repeat: int

    def to_json(self) -> dict:
        return {"format": POLICY_FORMAT, **dataclasses.asdict(self)}


class Policy:
    def __init__(self, net: PolicyNet, spec: Spec, *, device: torch.device):
        self.net, self.spec, self.device = net, spec, device
        self.low, self.high = (np.array(spec.action_low, np.float32),
                               np.array(spec.action_high, np.float32))
        self.obs_dtype = np.uint8 if spec.pixels else np.float32
        self.stack = None

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", *, unit_actions: bool = False,
             overrides: list[str] = ()) -> "Policy":
        """A checkpoint (a file or a URL such as s3://...) or an exported folder; `unit_actions`:
        actions in [-1, 1]."""
        if not is_remote(str(path)) and Path(path).is_dir():
            return cls.from_folder(Path(path), torch.device(device), unit_actions=unit_actions)
        return load_checkpoint(path, device, unit_actions=unit_actions, overrides=overrides)[0]

    @classmethod
    def from_folder(cls, folder: Path, device: torch.device, *, unit_actions: bool) -> "Policy":
        """The network built by this repository's code from the folder's config.yaml and
        policy.json, with the weights of policy.safetensors: nothing in the folder runs (policy.pt
        could run anything)."""
        spec = read_spec(folder)
        cfg = read_folder_config(folder)
        net = folder_net(cfg, spec, folder / WEIGHTS_FILE, unit_actions=unit_actions)
        return cls(net.to(device), spec, device=device)

    def to(self, device: str | torch.device) -> "Policy":
        self.device = torch.device(device)
        self.net.to(self.device)
        return self

    def reset(self) -> None:
        """Forget the frame stack: the next `step` starts an episode."""
        self.stack = None

    def step(self, obs: np.ndarray, *, resize: bool = False) -> np.ndarray:
        """One uint8 (H, W, 3) frame (or state (D,)) in, the action out; another size is an error
        unless `resize`."""
        if not self.spec.pixels:
            return self.act(np.asarray(obs, np.float32)[None])[0]
        frame = self.check_frame(obs, resize=resize)
        if self.stack is None:  # as the env's reset: the first frame fills the stack
            self.stack = np.repeat(frame[None], self.spec.obs_shape[0], axis=0)
        else:
            self.stack = np.concatenate([self.stack[1:], frame[None]])
        return self.act(self.stack[None])[0]

    def check_frame(self, frame, *, resize: bool) -> np.ndarray:
        """uint8 (C, H, W) from a (H, W, C) frame, checked (and resized when asked)."""
        _, channels, height, width = self.spec.obs_shape
        expected = f"uint8 ({height}, {width}, {channels})"
        array = isinstance(frame, np.ndarray)
        if not array or frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != channels:
            got = f"{frame.dtype} {frame.shape}" if array else type(frame).__name__
            raise UserError(f"step() takes one camera frame, {expected} (height, width, RGB), got "
                            f"{got}; convert it (e.g. np.asarray(image, np.uint8)), or pass a "
                            "state policy's vector to a state policy")
        if frame.shape[:2] != (height, width):
            if not resize:
                raise UserError(f"step() got a {frame.shape[0]}x{frame.shape[1]} frame where this "
                                f"policy sees {height}x{width}; pass step(frame, resize=True) to "
                                f"resize it, or render at {height}x{width}")
            x = torch.from_numpy(frame).permute(2, 0, 1)[None].float()
            x = F.interpolate(x, size=(height, width), mode="bilinear", antialias=True)
            return x[0].round().clamp(0, 255).to(torch.uint8).numpy()
        return np.ascontiguousarray(frame.transpose(2, 0, 1))

    def act(self, obs: np.ndarray | torch.Tensor) -> np.ndarray:
        """A batch of observations (B, T, C, H, W) uint8 or (B, D) float32, numpy or torch, in;
        actions (B, A)."""
        shape, dtype = tuple(obs.shape), np.dtype(str(obs.dtype).removeprefix("torch."))
        if shape[1:] != self.spec.obs_shape or dtype != self.obs_dtype:
            wanted = (
                f"{np.dtype(self.obs_dtype).name} (B, {', '.join(map(str, self.spec.obs_shape))})")
            raise UserError(f"act() takes {wanted} observations, got {dtype.name} {shape}; pass a "
                            "batch of stacked observations as the env gives them, or one frame at "
                            "a time to step()")
        with torch.inference_mode():
            return self.net(torch.as_tensor(obs, device=self.device)).cpu().numpy()


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu", *,
                    unit_actions: bool = False,
                    overrides: list[str] = ()):
    """(Policy, the run's config with `overrides`, the checkpoint's payload) of a checkpoint file or
    URL."""
    device = torch.device(device)
    local = fetch(str(path)) if is_remote(str(path)) else Path(path)
    cfg, payload = read_checkpoint(local, overrides)
    net, spec = checkpoint_net(cfg, payload, local, unit_actions=unit_actions)
    return Policy(net.to(device), spec, device=device), cfg, payload


def load_with_config(path: str | Path, device: str | torch.device = "cpu", *,
                     unit_actions: bool = False, overrides: list[str] = ()):
    """(Policy, the config it acts in, with `overrides`) of a checkpoint (a file or URL) or of an
    exported folder: what an evaluation needs. A folder's network is its own config's; `overrides`
    change the env it acts in."""
    if is_remote(str(path)) or not Path(path).is_dir():
        return load_checkpoint(path, device, unit_actions=unit_actions, overrides=overrides)[:2]
    folder = Path(path)
    cfg = with_overrides(read_folder_config(folder), overrides)
    check_env_module(cfg.env.id, overrides=overrides, path=folder)  # the env is built from this id
    return Policy.from_folder(folder, torch.device(device), unit_actions=unit_actions), cfg


def fetch(url: str) -> Path:
    """A checkpoint at an fsspec URL, brought into a local cache folder as a run's --resume does:
    the object the URL names now, downloaded again whenever it changed."""
    parent, _, name = url.rstrip("/").rpartition("/")
    remote = RemoteDir(parent, staging_dir(parent, "policies", None), retries=1, backoff_s=0,
                       report=print, holds_saves=False)
    try:
        found = remote.fetch(name)
    except OSError as err:
        raise CheckpointError(
            f"cannot fetch {url} ({err}); check the URL and credentials") from None
    if not found:  # a copy fetched before is no longer what the URL names
        raise CheckpointError(f"checkpoint not found: {url}; {CHECKPOINT_FIX}")
    return remote.local_dir / name


def read_checkpoint(path: Path, overrides: list[str] = ()):
    """(config with `overrides` applied, payload) of a checkpoint's weights, verified; one-line
    errors otherwise."""
    if path.name.endswith(".replay.pt"):
        raise CheckpointError(f"{path} is a replay sidecar (the replay buffer), not a checkpoint; "
                              "pass the <run>_latest.pt or <run>_ep<N>.pt beside it")
    try:
        payload = load_weights(path)
    except NoSuchFolder:
        raise
    except CheckpointError as err:
        message = str(err).removesuffix(f"; {RESUME_FIX}")
        if "not a checkpoint of this trainer" not in message:
            message += f"; {CHECKPOINT_FIX}"
        raise CheckpointError(message) from None
    cfg = with_overrides(config_from_dict(payload["config"]), overrides)
    check_env_module(cfg.env.id, overrides=overrides, path=path)
    return cfg, payload


def check_env_module(env_id: str, *, overrides: list[str], path: Path) -> None:
    """Gymnasium imports the module an id names before a colon (`pkg.envs:Task-v0`); a checkpoint
    someone else made could name any, so only an id the caller passed itself may."""
    module, colon, _ = env_id.partition(":")
    sets = [parse_set(item).get("env") for item in overrides]
    if colon and env_id not in {node.get("id") for node in sets if isinstance(node, dict)}:
        raise CheckpointError(
            f"checkpoint {path} names env.id {env_id}, for which Gymnasium would import the module "
            f"{module} (any code); if you trust it, pass the id yourself: --set env.id={env_id} "
            f"(in Python, Policy.load(..., overrides=['env.id={env_id}']))")


def task_spec(cfg) -> Spec:
    # here: importing mujoco fixes its GL backend, which a caller may not have chosen yet
    from envs.make import make_task

    task = make_task(cfg.env.id)
    space = task.action_space
    state = (gym.spaces.flatdim(task.observation_space),)
    task.close()
    env = cfg.env
    obs_shape = env.stack_shape if cfg.pixels else state
    return Spec(obs_shape=obs_shape, pixels=cfg.pixels, action_low=space.low.tolist(),
                action_high=space.high.tolist(),
                task=env.id, encoder=cfg.encoder.video.arch if cfg.pixels else "state",
                action_repeat=env.action_repeat)


def checkpoint_net(cfg, payload: dict, path: Path, *, unit_actions: bool) -> tuple[PolicyNet, Spec]:
    spec = task_spec(cfg)
    frozen = cfg.pixels and cfg.encoder.video.freeze
    agent = payload["agent"]
    if frozen:
        encoder = frozen_trunk(cfg, spec.obs_shape, saved=payload.get("trunk"), path=path)
    else:
        encoder = fresh_encoder(cfg, spec)
    net = policy_net(cfg, encoder, spec, unit_actions=unit_actions)
    try:
        if not frozen:
            encoder.load_state_dict({key.removeprefix(ENCODER_PREFIX): value
                                     for key, value in agent["critic"].items()
                                     if key.startswith(ENCODER_PREFIX)})
        net.actor.load_state_dict(agent["actor"])
    except RuntimeError as err:
        raise CheckpointError(
            f"checkpoint {path} does not fit the networks of its own config "
            f"({str(err).splitlines()[0]}); remove the --set overrides that change networks, or "
            f"{CHECKPOINT_FIX}") from None
    return net, spec


def fresh_encoder(cfg, spec: Spec) -> nn.Module:
    """The run's encoder, freshly built: its weights come from the file being read, never one the
    config names."""
    return build_encoder(untrained(cfg.encoder) if cfg.pixels else cfg.encoder, spec.obs_shape)


def policy_net(cfg, encoder: nn.Module, spec: Spec, *, unit_actions: bool) -> PolicyNet:
    actor = Actor(encoder.repr_dim, action_dim=len(spec.action_low), cfg=cfg.sac, pixels=cfg.pixels)
    frozen = cfg.pixels and cfg.encoder.video.freeze
    return PolicyNet(encoder, actor, low=np.array(spec.action_low), high=np.array(spec.action_high),
                     float16_features=frozen, unit_actions=unit_actions)


def folder_net(cfg, spec: Spec, path: Path, *, unit_actions: bool) -> PolicyNet:
    """An exported folder's network with the weights of its safetensors file (tensors only)."""
    if not path.is_file():
        raise UserError(f"{path.parent} has no {WEIGHTS_FILE} (an earlier version's export, whose "
                        f"weights this one does not read); {EXPORT_AGAIN}")
    try:
        weights = load_file(path)
    except (OSError, SafetensorError) as err:
        reason = str(err).strip().splitlines()[0]
        raise UserError(f"{path} is unreadable ({reason}); {EXPORT_AGAIN}") from None
    encoder = fresh_encoder(cfg, spec)
    if cfg.pixels and cfg.encoder.video.freeze and "encoder.projection.weight" in weights:
        # a frozen trunk under the layers of its pretraining head, shaped as the file says
        layers = {name: linear_of(head_layer(weights, name)) for name in ("projection", "readout")
                  if f"encoder.{name}.weight" in weights}
        encoder = ProjectedEncoder(encoder, layers["projection"], readout=layers.get("readout"))
    net = policy_net(cfg, encoder, spec, unit_actions=unit_actions)
    try:
        net.load_state_dict(weights)
    except RuntimeError as err:
        reason = str(err).splitlines()[0]
        raise UserError(f"{path} does not fit the network of its {CONFIG_FILE} ({reason}); "
                        f"{EXPORT_AGAIN}") from None
    return net


def head_layer(weights: dict[str, torch.Tensor], name: str) -> dict[str, torch.Tensor]:
    prefix = f"encoder.{name}."
    return {key.removeprefix(prefix): value for key, value in weights.items()
            if key.startswith(prefix)}


def read_folder_config(folder: Path):
    """The run's config as the export wrote it, read as data (YAML's safe subset) and checked."""
    file = folder / CONFIG_FILE
    if not file.is_file():
        raise UserError(f"{folder} has no {CONFIG_FILE}; {EXPORT_AGAIN}")
    cfg = config_from_dict(read_yaml(file, what="config keys"))
    check_inside(cfg)  # not what this machine has (wandb, folders): the policy only reads it
    return cfg


def frozen_trunk(cfg, obs_shape: tuple[int, ...], *, saved: str | None, path: Path) -> nn.Module:
    """The frozen trunk a run learnt on, rebuilt as the trainer built it and checked against its
    fingerprint."""
    with torch.random.fork_rng():
        # as the trainer seeds before building a trunk that loads no weights
        torch.manual_seed(cfg.training.seed)
        _, trunk = build_encoders(cfg, obs_shape, torch.device("cpu"))
    if trunk.fingerprint != saved:
        raise UserError(f"checkpoint {path} learnt on frozen trunk {saved}, but "
                        f"encoder.video.weights={cfg.encoder.video.weights} gives "
                        f"{trunk.fingerprint}; pass the weights file it was trained with (--set "
                        "encoder.video.weights=PATH, or Policy.load(..., overrides=[...]))")
    return trunk.encoder


def read_spec(folder: Path) -> Spec:
    file = folder / SPEC_FILE
    if not file.is_file():
        raise UserError(f"{folder} is not an exported policy (no {SPEC_FILE}); pass a checkpoint "
                        "or a folder written by python3 -m trainer.policy.export")
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{file} is unreadable ({err}); {EXPORT_AGAIN}") from None
    found = data.get("format") if isinstance(data, dict) else None
    if found != POLICY_FORMAT:
        raise UserError(f"{folder} was exported in the format {found!r}, where this version reads "
                        f"{POLICY_FORMAT!r}; {EXPORT_AGAIN}")
    fields = {f.name for f in dataclasses.fields(Spec)}
    if not fields <= data.keys():
        raise UserError(f"{file} lacks {', '.join(sorted(fields - data.keys()))}; {EXPORT_AGAIN}")
    return Spec(**{key: tuple(data[key]) if key == "obs_shape" else data[key] for key in fields})
