"""The encoders a run trains with, from its `encoder` config block.

`encoder.video.weights` may name
- a checkpoint of this trainer, of any arch: the critic's encoder weights are taken from it ("pretrain once, train
  many policies fast": e.g. a simple2dcnn from a finished cartpole/swingup run, frozen, driving fresh agents on
  stored features);
- an encoder weights file (`save_encoder_weights`; `python3 -m trainer.pretrain` writes them): a torch file
  {"format": ENCODER_WEIGHTS_FORMAT, "encoder": the `encoder` config section it was built from, "obs_shape": [T, C,
  H, W], "state_dict": the encoder's}, read weights-only;
- any other file or folder: the arch's own pretrained weights (encoders/r3d18.py, encoders/timesformer.py), read by
  the arch.

With `encoder.video.freeze: true` the trunk runs outside the SAC update (encoders/frozen.py): the agent gets the
vector encoder over its `repr_dim` features, and the trainer maps each step's frame stacks to features once.
"""

import dataclasses
from pathlib import Path

import torch
from torch import nn

from encoders import arch_class, build_encoder
from encoders.frozen import FrozenTrunk
from encoders.state import StateEncoder
from errors import UserError
from trainer.checkpoint import atomic_save

CRITIC_ENCODER = "encoder."  # state-dict prefix of the critic's encoder in a checkpoint's agent state
ENCODER_WEIGHTS_FORMAT = "pixel-sac encoder weights 1"
# the encoder.video keys that shape the network and what it sees; the others say how a run uses it
ARCH_KEYS = ("arch", "num_filters", "num_layers", "input_size", "preset")


def save_encoder_weights(path: Path, cfg, obs_shape: tuple[int, ...], encoder: nn.Module) -> None:
    """An encoder weights file for `encoder.video.weights`, written atomically; `cfg` is the `encoder` block the
    encoder was built from, `obs_shape` (T, C, H, W) its input."""
    untrained = dataclasses.replace(cfg.video, pretrained=False, weights=None, freeze=False)
    section = dataclasses.asdict(dataclasses.replace(cfg, video=untrained))
    state = {key: value.detach().cpu().contiguous() for key, value in encoder.state_dict().items()}
    atomic_save({"format": ENCODER_WEIGHTS_FORMAT, "encoder": section, "obs_shape": list(obs_shape),
                 "state_dict": state}, Path(path))


def weights_file_encoder(weights: str, payload: dict, video, obs_shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """The state dict of an encoder weights file, or a one-line UserError when it was built for another network
    (arch and the keys that shape it) or for other frame stacks than `obs_shape`."""
    saved = payload["encoder"].get("video", {})
    if saved.get("arch") != video.arch:
        raise UserError(f"encoder.video.weights={weights} holds {saved.get('arch')} encoder weights; "
                        f"set encoder.video.arch={saved.get('arch')} or pass weights of a {video.arch} encoder")
    differ = [f"encoder.video.{key}={saved.get(key)}" for key in ARCH_KEYS if saved.get(key) != getattr(video, key)]
    if tuple(payload["obs_shape"]) != tuple(obs_shape):
        differ.append(f"frame stacks {tuple(payload['obs_shape'])} (env.frame_stack, env.image_size) "
                      f"where this run has {tuple(obs_shape)}")
    if differ:
        raise UserError(f"the {video.arch} encoder in {weights} was trained with {', '.join(differ)}; "
                        "use those settings or pretrain weights for this config")
    return payload["state_dict"]


def checkpoint_encoder(weights: str, video, obs_shape: tuple[int, ...]) -> dict[str, torch.Tensor] | None:
    """The encoder weights in `weights` when it is a checkpoint of this trainer (its critic's encoder) or an encoder
    weights file; None for any other file (the arch's own weights). UserError when it holds no encoder that fits
    `video` (the `encoder.video` block)."""
    arch, path = video.arch, Path(weights)
    if not path.is_file():
        return None
    try:  # memory-mapped: a large foreign weights file is not read twice
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # not a torch zip file (or damaged): the arch's own loader says what it expected
        return None
    if isinstance(payload, dict) and payload.get("format") == ENCODER_WEIGHTS_FORMAT:
        return weights_file_encoder(weights, payload, video, obs_shape)
    if not (isinstance(payload, dict) and {"agent", "config", "format"} <= payload.keys()):
        return None
    encoder = payload["config"].get("encoder", {})
    video = encoder.get("video", {})
    if encoder.get("type") != "video" or video.get("arch") != arch:
        saved = video.get("arch") if encoder.get("type") == "video" else "state (no encoder)"
        raise UserError(f"encoder.video.weights={weights} is a checkpoint of a {saved} run; "
                        f"set encoder.video.arch={saved} or pass a checkpoint of a {arch} run")
    state = {key.removeprefix(CRITIC_ENCODER): value for key, value in payload["agent"]["critic"].items()
             if key.startswith(CRITIC_ENCODER)}
    if not state:
        raise UserError(f"encoder.video.weights={weights} holds no encoder weights (that run learnt on a frozen "
                        "trunk's stored features); pass the weights it was started from")
    return state


def build_video_encoder(cfg, obs_shape: tuple[int, ...]) -> nn.Module:
    """`cfg` is the `encoder` block. A checkpoint or an encoder weights file in `encoder.video.weights` initialises
    the arch's network."""
    video = cfg.video
    state = checkpoint_encoder(video.weights, video, obs_shape) if video.pretrained and video.weights else None
    if state is None:
        if video.weights and not arch_class(video.arch).PRETRAINED:
            where = "not found" if not Path(video.weights).is_file() else "not a checkpoint of this trainer"
            raise UserError(f"encoder.video.weights={video.weights} is {where}; {video.arch} loads weights only from "
                            "a checkpoint of this trainer (<run>_latest.pt or <run>_ep<N>.pt) or an encoder "
                            "weights file (python3 -m trainer.pretrain)")
        return build_encoder(cfg, obs_shape)
    untrained = dataclasses.replace(cfg, video=dataclasses.replace(video, pretrained=False, weights=None))
    encoder = build_encoder(untrained, obs_shape)
    try:
        encoder.load_state_dict(state)
    except RuntimeError as err:
        raise UserError(f"the encoder in {video.weights} does not fit this config's {video.arch} "
                        f"({str(err).splitlines()[0]}); use the encoder.video and env.image_size settings it was "
                        "trained with") from None
    return encoder


def build_encoders(cfg, obs_shape: tuple[int, ...], device: torch.device) -> tuple[nn.Module, FrozenTrunk | None]:
    """(the agent's encoder, the frozen trunk or None). `cfg` is the whole config: a frozen trunk runs on the
    training device, in bfloat16 autocast when `training.autocast` is on."""
    encoder_cfg = cfg.encoder
    if encoder_cfg.type != "video":
        return build_encoder(encoder_cfg, obs_shape), None
    encoder = build_video_encoder(encoder_cfg, obs_shape)
    if not encoder_cfg.video.freeze:
        return encoder, None
    trunk = FrozenTrunk(encoder, encoder_cfg.video.arch, device, autocast=cfg.training.autocast)
    return StateEncoder((trunk.repr_dim,)), trunk
