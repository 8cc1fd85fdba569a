"""Encoders: every arch is chosen in YAML, takes uint8 (B, T, C, H, W) and returns (B, repr_dim);
the options they share (input_size, freeze, channels_last) behave the same for all; the state path
passes vectors through."""

import pytest
import torch

from encoders import ARCHS, build_encoder
from encoders.config import VIDEO_ARCHS, EncoderConfig
from errors import UserError
from tests.conftest import ROOT, encoder_config
from trainer.config.load import load_config

EXAMPLES = {  # the shipped example config of each arch
    "simple2dcnn": "configs/dmc/cartpole_swingup.yaml",
    "simple3dcnn": "configs/dmc/cartpole_swingup_simple3dcnn.yaml",
    "r3d18": "configs/dmc/cartpole_swingup_r3d18.yaml",
    "timesformer": "configs/dmc/cartpole_swingup_timesformer.yaml",
}
REPR_DIMS = {
    "simple2dcnn": 32 * 35 * 35,  # DrQ's 32 filters on a 35 x 35 map at 84 px
    "simple3dcnn": 32 * 3 * 16 * 16,  # 32 filters x 3 frames x 16 x 16
    "r3d18": 512,
    "timesformer": 192,  # the small preset's width
}



def test_every_arch_has_an_example_config():
    assert set(EXAMPLES) == set(ARCHS) == set(REPR_DIMS)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_every_arch_builds_from_its_yaml_and_trains_on_a_uint8_batch(arch):
    cfg = load_config(ROOT / EXAMPLES[arch],
                      ["encoder.video.pretrained=false", "encoder.video.input_size=null"])
    assert cfg.encoder.video.arch == arch
    encoder = build_encoder(cfg.encoder, cfg.env.stack_shape)
    obs = torch.randint(0, 256, (2, 3, 3, 84, 84), dtype=torch.uint8)
    features = encoder(obs)
    assert encoder.repr_dim == REPR_DIMS[arch] and features.shape == (2, REPR_DIMS[arch])
    assert features.dtype == torch.float32 and torch.isfinite(features).all()
    features.square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in encoder.parameters())


@pytest.mark.parametrize("arch", ["simple2dcnn", "simple3dcnn", "r3d18"])
def test_conv_archs_take_64px_frames(arch):
    encoder = build_encoder(encoder_config(arch), (3, 3, 64, 64))
    assert encoder(torch.zeros(2, 3, 3, 64, 64, dtype=torch.uint8)).shape == (2, encoder.repr_dim)


def test_simple3dcnn_convolves_across_frames():
    encoder = build_encoder(encoder_config("simple3dcnn"), (3, 3, 64, 64))
    assert all(conv.kernel_size[0] == 3 for conv in encoder.convs
               if isinstance(conv, torch.nn.Conv3d))
    obs = torch.randint(0, 256, (1, 3, 3, 64, 64), dtype=torch.uint8)
    moved = obs.clone()
    moved[:, 0] = obs[:, 0].roll(5, dims=-1)
    assert not torch.equal(encoder(obs), encoder(moved)), (
        "the first frame's content reaches the features")


def test_input_size_resizes_frames_before_the_network():
    resized = build_encoder(encoder_config("simple2dcnn", input_size=64), (3, 3, 84, 84))
    native = build_encoder(encoder_config("simple2dcnn"), (3, 3, 64, 64))
    assert resized.repr_dim == native.repr_dim
    assert resized(torch.zeros(2, 3, 3, 84, 84, dtype=torch.uint8)).shape == (2, native.repr_dim)


@pytest.mark.parametrize("input_size", [None, 32])
def test_frames_are_normalised_per_channel_and_under_autocast_rounded_once_to_bfloat16(input_size):
    # r3d18: Kinetics' per-channel mean/std
    encoder = build_encoder(encoder_config("r3d18", input_size=input_size), (2, 3, 32, 32))
    obs = torch.randint(0, 256, (2, 2, 3, 32, 32), dtype=torch.uint8)
    mean, std = torch.tensor(encoder.MEAN).view(-1, 1, 1), torch.tensor(encoder.STD).view(-1, 1, 1)
    expected = (obs.float() / 255 - mean) / std
    assert torch.allclose(encoder.prepare(obs), expected, atol=1e-5)
    with torch.autocast("cpu", torch.bfloat16):
        prepared = encoder.prepare(obs)
    assert prepared.dtype == torch.bfloat16
    assert torch.allclose(prepared.float(), expected, rtol=2 ** -7, atol=2e-2), (
        "within bfloat16 rounding of the float32 values")
    assert "pixel_scale" not in encoder.state_dict(), "the constants are not checkpoint state"


@pytest.mark.parametrize("arch, memory_format", [("simple2dcnn", torch.channels_last),
                                                 ("simple3dcnn", torch.channels_last_3d)])
def test_channels_last_changes_the_memory_layout_not_the_features(arch, memory_format):
    torch.manual_seed(0)
    default = build_encoder(encoder_config(arch), (3, 3, 64, 64))
    torch.manual_seed(0)
    channels_last = build_encoder(encoder_config(arch, channels_last=True), (3, 3, 64, 64))
    assert channels_last.convs[0].weight.is_contiguous(memory_format=memory_format)
    obs = torch.randint(0, 256, (2, 3, 3, 64, 64), dtype=torch.uint8)
    assert torch.allclose(default(obs), channels_last(obs), atol=1e-5)


def test_the_config_offers_exactly_the_registered_archs():
    assert list(VIDEO_ARCHS) == list(ARCHS), (
        "declare a new arch in encoders/config.py's VIDEO_ARCHS too")


def test_archs_without_weights_refuse_pretrained():
    with pytest.raises(UserError, match="simple3dcnn has no pretrained weights"):
        build_encoder(encoder_config("simple3dcnn", pretrained=True), (3, 3, 64, 64))


def test_video_encoder_rejects_float_frames():
    encoder = build_encoder(EncoderConfig(type="video"), (3, 3, 64, 64))
    with pytest.raises(AssertionError, match="uint8"):
        encoder(torch.zeros(1, 3, 3, 64, 64))


def test_state_encoder_passes_vectors_through_as_float():
    encoder = build_encoder(EncoderConfig(type="state"), (5,))
    obs = torch.arange(10, dtype=torch.float32).view(2, 5)
    assert encoder.repr_dim == 5 and torch.equal(encoder(obs), obs)
