"""Observation encoders and their registry.

Contract at this boundary, for every video arch: uint8 (B, T, C, H, W) in, float (B, repr_dim) out; the encoder
normalises and reshapes for itself. The state encoder takes float32 (B, D) and returns (B, D).
Adding an arch is one file in this folder plus one line in ARCHS.
"""

from torch import nn

from encoders.simple2dcnn import Simple2DCNN
from encoders.state import StateEncoder

ARCHS = {
    "simple2dcnn": Simple2DCNN,
}


def build_encoder(cfg, obs_shape: tuple[int, ...]) -> nn.Module:
    """`cfg` is the `encoder` config block; the module returned has `.repr_dim`."""
    if cfg.type == "state":
        return StateEncoder(obs_shape)
    return ARCHS[cfg.video.arch](cfg.video, obs_shape)
