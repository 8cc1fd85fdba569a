"""Observation encoders and their registry: a video arch takes uint8 (B, T, C, H, W) and returns
float (B, repr_dim). Adding an arch is one file in this folder plus one line in ARCHS."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

    from encoders.config import EncoderConfig

# name -> class, imported when chosen: torchvision and transformers take seconds to import
ARCHS = {
    "simple2dcnn": "encoders.simple2dcnn.Simple2DCNN",
    "simple3dcnn": "encoders.simple3dcnn.Simple3DCNN",
    "r3d18": "encoders.r3d18.R3D18",
    "timesformer": "encoders.timesformer.TimeSformer",
}


def arch_class(name: str) -> type[nn.Module]:
    module, _, cls = ARCHS[name].rpartition(".")
    return getattr(importlib.import_module(module), cls)


def build_encoder(cfg: EncoderConfig, obs_shape: tuple[int, ...]) -> nn.Module:
    """The module returned has `.repr_dim`."""
    if cfg.type == "state":
        from encoders.state import StateEncoder  # loaded when built, as ARCHS' modules are

        return StateEncoder(obs_shape)
    return arch_class(cfg.video.arch)(cfg.video, obs_shape)
