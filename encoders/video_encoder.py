"""The base every video arch derives from: uint8 (B, T, C, H, W) in, float32 (B, repr_dim) out.

A subclass implements `build(cfg)` (its network; returns repr_dim) and `encode` on float (B, T, C,
S, S) frames already resized and normalised here; freezing and channels-last apply to what it built.
State-dict keys are its own."""

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from encoders.config import VideoEncoderConfig
from errors import UserError


def init_relu_convs(net: nn.Module) -> None:
    """DrQ's initialisation for conv stacks trained from scratch: orthogonal weights scaled for
    ReLU, zero biases."""
    for layer in net.modules():
        if isinstance(layer, (nn.Conv2d, nn.Conv3d)):
            nn.init.orthogonal_(layer.weight, nn.init.calculate_gain("relu"))
            nn.init.zeros_(layer.bias)


class VideoEncoder(nn.Module):
    # per channel on the [0, 1] scale (one value applies to all): DrQ's x - 0.5
    MEAN: tuple[float, ...] = (0.5,)
    STD: tuple[float, ...] = (1.0,)
    MEMORY_FORMAT: torch.memory_format | None = None
    PRETRAINED = False

    def __init__(self, cfg: VideoEncoderConfig, obs_shape: tuple[int, int, int, int]):
        super().__init__()
        if cfg.pretrained and not self.PRETRAINED:
            raise UserError(f"`arch` {cfg.arch} has no pretrained weights; set `pretrained`=false, "
                            "use r3d18 or timesformer, or set `weights` to a checkpoint of a run "
                            "of this trainer")
        self.obs_shape = tuple(obs_shape)
        frames, channels, _, _ = self.obs_shape
        self.input_size = cfg.input_size
        self.input_shape = (frames, channels, self.input_size,
                            self.input_size) if self.input_size else self.obs_shape
        self.memory_format = self.MEMORY_FORMAT if cfg.channels_last else None
        self.frozen = cfg.freeze
        mean, std = torch.tensor(self.MEAN).view(-1, 1, 1), torch.tensor(self.STD).view(-1, 1, 1)
        # (x / 255 - mean) / std as one multiply-add; non-persistent: on the encoder's device, not
        # in its state dict
        self.register_buffer("pixel_scale", 1 / (255 * std), persistent=False)
        self.register_buffer("pixel_shift", -mean / std, persistent=False)
        self.repr_dim = self.build(cfg)
        if self.memory_format is not None:
            self.to(memory_format=self.memory_format)
        if self.frozen:
            self.requires_grad_(False)
            self.train(False)

    def build(self, cfg: VideoEncoderConfig) -> int:
        """The arch's network from its `encoder.video` settings and `input_shape`; returns
        repr_dim."""
        raise NotImplementedError

    def train(self, mode: bool = True) -> "VideoEncoder":
        """A frozen encoder stays in eval mode, so BatchNorm keeps its pretrained running
        statistics."""
        return super().train(mode and not self.frozen)

    def layout(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.memory_format is None else x.contiguous(memory_format=self.memory_format)

    def output_dim(self) -> int:
        """repr_dim by a dry run, for nets without BatchNorm (a dry run would move its running
        statistics)."""
        with torch.no_grad():
            return self.encode(torch.zeros(1, *self.input_shape)).shape[1]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        assert obs.dtype == torch.uint8 and tuple(obs.shape[1:]) == self.obs_shape, (
            f"expected uint8 (B, {self.obs_shape}), got {obs.dtype} {tuple(obs.shape)}"
        )
        grad = torch.no_grad() if self.frozen else contextlib.nullcontext()
        with grad:
            # float32 out, also under the agent's bf16 autocast
            return self.encode(self.prepare(obs)).float()

    def prepare(self, obs: torch.Tensor) -> torch.Tensor:
        """uint8 (B, T, C, H, W) -> float (B, T, C, S, S), resized and normalised; under autocast
        unresized frames are normalised in bfloat16 (half the memory traffic), resized ones in
        float32 and rounded once."""
        device = obs.device.type
        dtype = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                 else torch.float32)
        if not self.input_size:
            return obs.to(dtype).mul_(self.pixel_scale).add_(self.pixel_shift)
        x = F.interpolate(
            obs.flatten(0, 1).float(), size=(self.input_size, self.input_size), mode="bilinear",
            antialias=True
        )
        return x.unflatten(0, obs.shape[:2]).mul_(self.pixel_scale).add_(self.pixel_shift).to(dtype)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError
