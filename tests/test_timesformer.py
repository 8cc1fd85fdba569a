"""TimeSformer: divided space-time attention at the presets' sizes, the public checkpoint's layout
loaded from a local directory with its time (and patch-grid) embeddings fitted to our stacks, and
clear errors offline."""

import re

import huggingface_hub.constants
import pytest
import torch
from transformers import TimesformerConfig, TimesformerForVideoClassification

from encoders import build_encoder
from encoders.timesformer import PUBLIC_CHECKPOINT
from errors import UserError
from tests.conftest import Unpickled, encoder_config
from trainer.process.cli import explain


@pytest.fixture
def public_layout(tmp_path):
    """A randomly initialised video classifier saved as the public checkpoint is (config.json,
    model.safetensors, `timesformer.*` and `classifier.*` keys, 8 frames), shrunk so the test is
    fast: 64 px, 2 blocks of width 32."""
    torch.manual_seed(3)
    shape = TimesformerConfig(image_size=64, patch_size=16, num_frames=8, hidden_size=32,
                              num_hidden_layers=2,
                              num_attention_heads=2, intermediate_size=64, num_labels=4)
    model = TimesformerForVideoClassification(shape)
    model.save_pretrained(tmp_path / "k400")
    return tmp_path / "k400", model.state_dict()


@pytest.mark.parametrize("preset, width", [("tiny", 96), ("small", 192)])
def test_small_presets_tile_84px_frames_with_divided_space_time_attention(preset, width):
    encoder = build_encoder(encoder_config("timesformer", preset=preset), (3, 3, 84, 84))
    assert encoder.repr_dim == width and encoder.net.config.attention_type == "divided_space_time"
    assert encoder.net.embeddings.patch_embeddings.num_patches == 7 * 7
    assert all(hasattr(layer, "temporal_attention") for layer in encoder.net.encoder.layer), (
        "each block attends across time"
    )
    assert encoder.net.embeddings.time_embeddings.shape[1] == 3


def test_public_layout_loads_from_a_local_directory_with_time_embeddings_fitted(public_layout):
    directory, saved = public_layout
    encoder = build_encoder(
        encoder_config("timesformer", preset="base", pretrained=True, weights=str(directory)),
        (3, 3, 64, 64)
    )
    loaded = encoder.net.state_dict()
    assert encoder.repr_dim == 32
    for key, value in loaded.items():
        expected = saved[f"timesformer.{key}"]
        if key == "embeddings.time_embeddings":
            # 8 -> 3 frames, nearest neighbour as TimeSformer does
            expected = expected[:, [0, 2, 5]]
        assert torch.equal(value, expected), key
    features = encoder(torch.randint(0, 256, (2, 3, 3, 64, 64), dtype=torch.uint8))
    assert features.shape == (2, 32) and torch.isfinite(features).all()


def test_a_smaller_input_size_subsamples_the_position_grid(public_layout):
    directory, saved = public_layout
    encoder = build_encoder(
        encoder_config("timesformer", preset="base", pretrained=True, weights=str(directory),
                       input_size=32),
        (3, 3, 64, 64),
    )
    position = saved["timesformer.embeddings.position_embeddings"]  # CLS + a 4 x 4 grid
    # CLS + rows/cols 0, 2
    assert torch.equal(encoder.net.embeddings.position_embeddings, position[:, [0, 1, 3, 9, 11]])


def test_a_crafted_pickle_as_pytorch_model_bin_is_one_line_without_unsafe_advice(public_layout,
                                                                                 tmp_path):
    """The older of the two files Hugging Face publishes is a pickle: a crafted one is refused, and
    the message does not suggest torch's weights_only=False, which would run it."""
    directory, _ = public_layout
    (directory / "model.safetensors").unlink()
    trace = tmp_path / "unpickled"
    torch.save({"timesformer.w": Unpickled(trace)}, directory / "pytorch_model.bin")
    video = encoder_config("timesformer", preset="base", pretrained=True, weights=str(directory))
    said = r"cannot read .*pytorch_model.bin \(UnpicklingError\)"
    with pytest.raises(UserError, match=said) as raised:
        build_encoder(video, (3, 3, 64, 64))
    assert "\n" not in str(raised.value) and "weights_only" not in str(raised.value)
    assert not trace.exists()


def test_missing_public_checkpoint_offline_is_a_one_line_error_with_where_and_how(
    monkeypatch, tmp_path):
    """The hub tries to download it (a proxy on a closed port refuses, as this offline machine
    would) and fails."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    for name in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    with pytest.raises(UserError) as err:
        build_encoder(encoder_config("timesformer", preset="base", pretrained=True), (3, 3, 64, 64))
    message = str(err.value)
    assert ("\n" not in message and str(tmp_path / "hub") in message
            and "could not be downloaded" in message)
    assert (f"hf download {PUBLIC_CHECKPOINT}" in message
            and "encoder.video.weights" in explain(err.value))


@pytest.mark.parametrize(
    "video, expected",
    [
        ({},
         "cuts 12 px patches, which do not tile 64 px frames; set encoder.video.input_size to a "
         "multiple of 12"),
        ({"preset": "huge"},
         "unknown encoder.video.preset 'huge' for timesformer; allowed: tiny, small, base"),
        ({"pretrained": True}, "set encoder.video.preset=base"),
        (
            {"preset": "base", "pretrained": True, "weights": "/no/such/dir"},
            "is not a TimeSformer checkpoint directory",
        ),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_fix(video, expected):
    with pytest.raises(UserError) as err:
        build_encoder(encoder_config("timesformer", **video), (3, 3, 64, 64))
    assert re.search(expected, explain(err.value))
