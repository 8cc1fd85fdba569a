"""TimeSformer (Bertasius et al., 2021), divided space-time attention, as Hugging Face transformers'
`TimesformerModel`.

This module picks the size (`preset`) and loads the public Kinetics-400 checkpoint, resizing its
time and position embeddings to ours as TimeSformer's own code does. Features: the final CLS token,
(B, hidden_size)."""

from pathlib import Path

import torch
import torch.nn.functional as F
from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import LocalEntryNotFoundError
from safetensors.torch import load_file
from transformers import TimesformerConfig, TimesformerModel

from encoders.config import VideoEncoderConfig
from encoders.video_encoder import VideoEncoder
from errors import UserError

PRESET_KEYS = ("patch_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "intermediate_size")
# the tiny and small ones tile 84 px frames with 7 x 7 patches; base is the public checkpoint's
# shape
PRESETS = {
    name: dict(zip(PRESET_KEYS, sizes, strict=True)) for name, sizes in {
        "tiny": (12, 96, 2, 3, 384),
        "small": (12, 192, 4, 3, 768),
        "base": (16, 768, 12, 12, 3072),
    }.items()
}
PUBLIC_CHECKPOINT = "facebook/timesformer-base-finetuned-k400"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
BACKBONE, CLASSIFIER = "timesformer.", "classifier."
DIVIDED = "divided_space_time"


def find_checkpoint(weights: str | None) -> Path:
    """The checkpoint directory: `weights`, or the public checkpoint in the Hugging Face cache."""
    if weights:
        path = Path(weights)
        if not (path / "config.json").is_file():
            raise UserError(
                f"`weights`={weights} is not a TimeSformer checkpoint directory; "
                f"pass the folder holding config.json and {' or '.join(WEIGHT_FILES)}"
            )
        return path
    try:
        return Path(snapshot_download(PUBLIC_CHECKPOINT, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    try:
        return Path(snapshot_download(PUBLIC_CHECKPOINT,
                                      allow_patterns=["config.json", WEIGHT_FILES[0]]))
    except (LocalEntryNotFoundError, OSError) as err:
        raise UserError(
            f"pretrained timesformer weights ({PUBLIC_CHECKPOINT}) are not in the Hugging Face "
            f"cache {constants.HF_HUB_CACHE} and could not be downloaded ({type(err).__name__}); "
            f"on a connected machine run `hf download {PUBLIC_CHECKPOINT}` and copy that cache "
            "here, or set `weights`=<checkpoint dir>"
        ) from None


def read_state_dict(directory: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors, from whichever of the two files Hugging Face publishes it is in."""
    for name in WEIGHT_FILES:
        path = directory / name
        if path.is_file():
            if name.endswith(".safetensors"):
                return load_file(path)
            try:
                return torch.load(path, map_location="cpu", weights_only=True)
            except Exception as err:  # damaged or not tensors; torch's text advises an unsafe load
                raise UserError(f"cannot read {path} ({type(err).__name__}); download the full "
                                f"checkpoint ({PUBLIC_CHECKPOINT}) again") from None
    raise UserError(
        f"{directory} holds no {' or '.join(WEIGHT_FILES)}; download the full checkpoint "
        f"({PUBLIC_CHECKPOINT})"
    )


def adapt(state: dict[str, torch.Tensor],
          target: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map the checkpoint's keys to TimesformerModel's and resize its time and position embeddings
    to ours."""
    state = {key.removeprefix(BACKBONE): value for key, value in state.items()
             if not key.startswith(CLASSIFIER)}
    time, pos = "embeddings.time_embeddings", "embeddings.position_embeddings"
    if time in state and state[time].shape != target[time].shape:  # (1, frames, D)
        state[time] = F.interpolate(
            state[time].transpose(1, 2), size=target[time].shape[1], mode="nearest"
        ).transpose(1, 2)
    if pos in state and state[pos].shape != target[pos].shape:  # (1, 1 + grid * grid, D), CLS first
        cls, grid = state[pos][:, :1], state[pos][:, 1:]
        old, new, dim = (round(grid.shape[1] ** 0.5), round((target[pos].shape[1] - 1) ** 0.5),
                         grid.shape[2])
        grid = F.interpolate(grid.transpose(1, 2).reshape(1, dim, old, old), size=(new, new),
                             mode="nearest")
        state[pos] = torch.cat([cls, grid.flatten(2).transpose(1, 2)], dim=1)
    return state


class TimeSformer(VideoEncoder):
    # TimeSformer's Kinetics normalisation (DATA.MEAN/STD)
    MEAN, STD = (0.45, 0.45, 0.45), (0.225, 0.225, 0.225)
    PRETRAINED = True

    def build(self, cfg: VideoEncoderConfig) -> int:
        if cfg.preset not in PRESETS:
            raise UserError(
                f"unknown `preset` '{cfg.preset}' for timesformer; allowed: {', '.join(PRESETS)}")
        if cfg.pretrained and cfg.preset != "base":
            raise UserError(
                "pretrained timesformer weights have the base preset's shape; set `preset`=base "
                f"(got '{cfg.preset}')"
            )
        checkpoint = find_checkpoint(cfg.weights) if cfg.pretrained else None
        # no dropout: the critic's targets need a deterministic encoder
        arch = (TimesformerConfig.from_pretrained(checkpoint) if checkpoint
                else TimesformerConfig(**PRESETS[cfg.preset]))
        frames, channels, size, _ = self.input_shape
        arch.update({"num_frames": frames, "image_size": size, "num_channels": channels,
                     "hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0,
                     "drop_path_rate": 0})
        if arch.attention_type != DIVIDED:
            raise UserError(
                f"{checkpoint} is a TimeSformer with {arch.attention_type} attention; "
                f"this encoder loads {DIVIDED} checkpoints"
            )
        if size % arch.patch_size:
            raise UserError(
                f"timesformer preset '{cfg.preset}' cuts {arch.patch_size} px patches, "
                f"which do not tile {size} px frames; "
                f"set `input_size` to a multiple of {arch.patch_size} "
                f"(e.g. {arch.patch_size * max(1, round(size / arch.patch_size))})"
            )
        self.net = TimesformerModel(arch)
        if checkpoint:
            try:
                self.net.load_state_dict(adapt(read_state_dict(checkpoint), self.net.state_dict()))
            except RuntimeError as err:
                raise UserError(
                    f"{checkpoint} does not fit TimesformerModel ({str(err).splitlines()[0]}); "
                    f"use the {PUBLIC_CHECKPOINT} checkpoint"
                ) from None
        return arch.hidden_size

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(pixel_values=x).last_hidden_state[:, 0]
