"""Encoders: uint8 (B, T, C, H, W) in, (B, repr_dim) out; the state path passes vectors through."""

import pytest
import torch

from encoders import ARCHS, build_encoder
from trainer.config import EncoderConfig


@pytest.mark.parametrize("arch", sorted(ARCHS))
@pytest.mark.parametrize("size", [84, 64])
def test_video_encoder_maps_uint8_stacks_to_flat_features(arch, size):
    cfg = EncoderConfig(type="video")
    cfg.video.arch = arch
    encoder = build_encoder(cfg, (3, 3, size, size))
    obs = torch.randint(0, 256, (2, 3, 3, size, size), dtype=torch.uint8)
    features = encoder(obs)
    assert features.shape == (2, encoder.repr_dim)
    assert torch.isfinite(features).all()
    features.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in encoder.parameters())


def test_simple2dcnn_has_drq_feature_size_at_84px():
    encoder = build_encoder(EncoderConfig(type="video"), (3, 3, 84, 84))
    assert encoder.repr_dim == 32 * 35 * 35


def test_video_encoder_rejects_float_frames():
    encoder = build_encoder(EncoderConfig(type="video"), (3, 3, 64, 64))
    with pytest.raises(AssertionError, match="uint8"):
        encoder(torch.zeros(1, 3, 3, 64, 64))


def test_state_encoder_passes_vectors_through_as_float():
    encoder = build_encoder(EncoderConfig(type="state"), (5,))
    obs = torch.arange(10, dtype=torch.float32).view(2, 5)
    assert encoder.repr_dim == 5 and torch.equal(encoder(obs), obs)
