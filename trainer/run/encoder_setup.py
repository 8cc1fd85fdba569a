"""The encoders a run trains with, from its `encoder` config block. `encoder.video.weights` may name
a checkpoint of this trainer (its critic's encoder), an encoder weights file
(`save_encoder_weights`, docs/encoders.md), or the arch's own pretrained weights; with `freeze:
true` the trunk runs outside the SAC update (encoders/frozen.py).
"""

import dataclasses
from pathlib import Path

import torch
from torch import nn

from encoders import arch_class, build_encoder
from encoders.config import ARCH_KEYS
from encoders.frozen import FrozenTrunk, ProjectedEncoder
from encoders.state import StateEncoder
from envs.config import EnvConfig, frame_settings, frames_of
from errors import UserError
from file_ops import atomic_write
from sac.agent import ENCODER_PREFIX, is_state_dict
from trainer.checkpoints import files as checkpoint_files
from trainer.checkpoints.payload import damage, is_checkpoint

ENCODER_WEIGHTS = "pixel-sac encoder weights"
# 2: the head's first layer ("projection") beside the encoder
ENCODER_WEIGHTS_FORMAT = f"{ENCODER_WEIGHTS} 2"
# the pretraining head's layers a frozen trunk may apply (readout optional)
HEAD_LAYERS = ("projection", "readout")


def cpu_state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.detach().cpu().contiguous() for key, value in module.state_dict().items()}


def untrained(cfg, **video):
    """The `encoder` block `cfg` for a freshly initialised network: no pretrained weights, plus the
    `video` changes."""
    return dataclasses.replace(cfg,
                               video=dataclasses.replace(cfg.video, pretrained=False, weights=None,
                                                         **video))


def save_encoder_weights(path: Path, cfg, obs_shape: tuple[int, ...], encoder: nn.Module, *,
                         projection: nn.Linear | None = None, readout: nn.Linear | None = None,
                         frames: dict | None = None) -> None:
    """An encoder weights file for `encoder.video.weights`, written atomically; `projection`: a
    Linear(repr_dim, P) a frozen trunk applies through a ReLU; `readout`: a Linear(P, S) from those
    features to the state estimate; `frames`: the frame settings it learnt from
    (config.frames_of)."""
    section = dataclasses.asdict(untrained(cfg, freeze=False))
    head = {name: None if layer is None else cpu_state(layer)
            for name, layer in zip(HEAD_LAYERS, (projection, readout), strict=True)}
    payload = {"format": ENCODER_WEIGHTS_FORMAT, "encoder": section, "obs_shape": list(obs_shape),
               "state_dict": cpu_state(encoder), **head, "frames": frames}
    payload["checksum"] = checkpoint_files.digest(payload)  # torch loads flipped bytes silently
    atomic_write(Path(path), lambda f: torch.save(payload, f))


# (encoder's state, its head's layers)
Loaded = tuple[dict[str, torch.Tensor], dict[str, dict[str, torch.Tensor]]]


def head_layers(payload: dict) -> dict:
    """The head's layers a weights file holds, by name (a file may hold no readout)."""
    return {name: payload[name] for name in HEAD_LAYERS if payload.get(name) is not None}


def weights_file_encoder(weights: str, payload: dict, video, obs_shape: tuple[int, ...],
                         frames: dict | None) -> Loaded:
    """The state dicts of an encoder weights file; UserError when it is damaged or built for another
    network."""
    stored = payload.pop("checksum", None)
    if stored is not None and stored != checkpoint_files.digest(payload):
        raise UserError(f"encoder.video.weights={weights} is corrupt (its checksum does not match "
                        "its contents); restore it from a copy or pretrain it again (python3 -m "
                        "trainer.tools.pretrain)")
    problem = _weights_file_problem(payload)
    if problem:
        raise UserError(f"encoder.video.weights={weights} is damaged or not from "
                        f"trainer.tools.pretrain: {problem}; pretrain it again (python3 -m "
                        "trainer.tools.pretrain) or pass another file")
    saved = payload["encoder"]["video"]
    if saved.get("arch") != video.arch:
        raise UserError(f"encoder.video.weights={weights} holds {saved.get('arch')} encoder "
                        f"weights; set encoder.video.arch={saved.get('arch')} or pass weights of a "
                        f"{video.arch} encoder")
    differ = [f"encoder.video.{key}={saved.get(key)}" for key in ARCH_KEYS
              if saved.get(key) != getattr(video, key)]
    if tuple(payload["obs_shape"]) != tuple(obs_shape):
        differ.append(f"frame stacks {tuple(payload['obs_shape'])} (env.frame_stack, "
                      f"env.image_size) where this run has {tuple(obs_shape)}")
    if differ:
        raise UserError(f"the {video.arch} encoder in {weights} was trained with "
                        f"{', '.join(differ)}; use those settings or pretrain weights for this "
                        "config")
    _check_frames(weights, payload.get("frames"), frames)
    return payload["state_dict"], head_layers(payload)


def _check_frames(weights: str, saved: dict | None, frames: dict | None) -> None:
    """Refuse a frozen encoder that learnt from other frames than the run's `frames` (None: no
    check)."""
    differ = [f"env.{key}={saved[key]}" for key in frames or {} if key in (saved or {})
              and saved[key] != frames[key]]
    if differ:
        raise UserError(f"encoder.video.weights={weights} learnt from frames drawn with "
                        f"{', '.join(differ)}, which this run draws otherwise; use those settings, "
                        "pretrain on frames of this run's (trainer.tools.record, "
                        "trainer.tools.pretrain), or set encoder.video.freeze=false to fine-tune "
                        "it")


def _weights_file_problem(payload: dict) -> str | None:
    if (not isinstance(payload.get("encoder"), dict)
        or not isinstance(payload["encoder"].get("video"), dict)):
        return "its encoder settings are not an encoder block"
    shape = payload.get("obs_shape")
    if not isinstance(shape, list) or not all(type(n) is int and n > 0 for n in shape):
        return f"its obs_shape {shape!r} is not a frame stack's shape"
    head = head_layers(payload)
    if not is_state_dict(payload.get("state_dict")) or not all(map(is_state_dict, head.values())):
        return "its state_dict, projection or readout is not a dict of tensors"
    if not isinstance(payload.get("frames") or {}, dict):
        return f"its frames {payload['frames']!r} are not frame settings"
    bad = checkpoint_files.non_finite({"state_dict": payload["state_dict"], **head})
    return f"NaN or inf in {bad}" if bad else None


def checkpoint_encoder(weights: str, video, obs_shape: tuple[int, ...],
                       frames: dict | None = None) -> Loaded | None:
    """(the encoder's weights, its head's layers by name) when `weights` is a checkpoint of this
    trainer or an encoder weights file; None for any other file (the arch's own weights); UserError
    when it holds no encoder that fits."""
    arch, path = video.arch, Path(weights)
    if not path.is_file():
        return None
    try:  # memory-mapped: a large foreign weights file is not read twice
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        # not a torch zip file (or damaged): the arch's own loader says what it expected
        return None
    if isinstance(payload, dict) and payload.get("format") == ENCODER_WEIGHTS_FORMAT:
        return weights_file_encoder(weights, payload, video, obs_shape, frames)
    if isinstance(payload, dict) and str(payload.get("format")).startswith(ENCODER_WEIGHTS):
        raise UserError(f"encoder.video.weights={weights} is in the format \"{payload['format']}\" "
                        f"where this version reads \"{ENCODER_WEIGHTS_FORMAT}\"; pretrain it again "
                        "(python3 -m trainer.tools.pretrain)")
    if not is_checkpoint(payload):
        return None
    problem = damage(payload)
    if problem:
        raise UserError(f"encoder.video.weights={weights}: checkpoint {problem}; pass another "
                        "checkpoint of the run (an older <run>_ep<N>.pt)")
    encoder = payload["config"].get("encoder", {})
    video = encoder.get("video", {})
    if encoder.get("type") != "video" or video.get("arch") != arch:
        saved = video.get("arch") if encoder.get("type") == "video" else "state (no encoder)"
        raise UserError(f"encoder.video.weights={weights} is a checkpoint of a {saved} run; "
                        f"set encoder.video.arch={saved} or pass a checkpoint of a {arch} run")
    state = {key.removeprefix(ENCODER_PREFIX): value
             for key, value in payload["agent"]["critic"].items()
             if key.startswith(ENCODER_PREFIX)}
    if not state:
        raise UserError(f"encoder.video.weights={weights} holds no encoder weights (that run "
                        "learnt on a frozen trunk's stored features); pass the weights it was "
                        "started from")
    # keys newer than it: the defaults
    env = dataclasses.asdict(EnvConfig()) | payload["config"].get("env", {})
    _check_frames(weights, {key: env[key] for key in frame_settings(env["backend"])}, frames)
    return state, {}


def build_video_encoder(cfg, obs_shape: tuple[int, ...], *,
                        frames: dict | None = None) -> nn.Module:
    """`cfg` is the `encoder` block; with `freeze: true` a weights file's projection (and with
    `frozen_features: state_estimate` its readout) goes on top."""
    video = cfg.video
    frames = frames if video.freeze else None  # fine-tuning adapts the encoder to the run's frames
    loaded = checkpoint_encoder(video.weights, video, obs_shape,
                                frames) if video.pretrained and video.weights else None
    if loaded is None:
        if video.weights and not arch_class(video.arch).PRETRAINED:
            where = ("not found" if not Path(video.weights).is_file()
                     else "not a checkpoint of this trainer")
            raise UserError(f"encoder.video.weights={video.weights} is {where}; {video.arch} loads "
                            "weights only from a checkpoint of this trainer (<run>_latest.pt or "
                            "<run>_ep<N>.pt) or an encoder weights file (python3 -m "
                            "trainer.tools.pretrain)")
        return build_encoder(cfg, obs_shape)
    encoder = build_encoder(untrained(cfg), obs_shape)
    state, head = loaded
    try:
        encoder.load_state_dict(state)
    except RuntimeError as err:
        raise UserError(f"the encoder in {video.weights} does not fit this config's {video.arch} "
                        f"({str(err).splitlines()[0]}); use the encoder.video and env.image_size "
                        "settings it was trained with") from None
    if video.frozen_features == "state_estimate" and "readout" not in head:
        raise UserError(f"encoder.video.weights={video.weights} holds no readout to estimate the "
                        "state with; pretrain it again (python3 -m trainer.tools.pretrain), or "
                        "set encoder.video.frozen_features=projection")
    if "projection" not in head or not video.freeze:
        return encoder
    readout = linear_of(head["readout"]) if video.frozen_features == "state_estimate" else None
    return ProjectedEncoder(encoder, linear_of(head["projection"]), readout=readout)


def linear_of(state: dict[str, torch.Tensor]) -> nn.Linear:
    out_features, in_features = state["weight"].shape
    linear = nn.Linear(in_features, out_features)
    linear.load_state_dict(state)
    return linear


def build_encoders(cfg, obs_shape: tuple[int, ...],
                   device: torch.device) -> tuple[nn.Module, FrozenTrunk | None]:
    """(the agent's encoder, the frozen trunk or None); `cfg` is the whole config."""
    encoder_cfg = cfg.encoder
    if encoder_cfg.type != "video":
        return build_encoder(encoder_cfg, obs_shape), None
    encoder = build_video_encoder(encoder_cfg, obs_shape, frames=frames_of(cfg.env))
    if not encoder_cfg.video.freeze:
        return encoder, None
    trunk = FrozenTrunk(encoder, encoder_cfg.video.arch, device, autocast=cfg.training.autocast)
    return StateEncoder((trunk.repr_dim,)), trunk
