"""R3D-18: Kinetics weights load from a local file or torch's hub cache and never download; a missing file is a
one-line error saying where to put it and how to get it; `freeze` keeps the trunk exactly as loaded."""

import pytest
import torch
from torchvision.models.video import R3D_18_Weights, r3d_18

from encoders import build_encoder
from errors import UserError
from sac.agent import SAC
from tests.conftest import encoder_config
from trainer.config import SACConfig, explain

OBS = (3, 3, 32, 32)



@pytest.fixture(autouse=True)
def no_downloads(monkeypatch, tmp_path):
    """An empty hub cache, and any download attempt fails the test."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))

    def refuse(*args, **kwargs):
        raise AssertionError("tried to download")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", refuse)
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)


@pytest.fixture
def kinetics_like(tmp_path):
    """A randomly initialised r3d_18 state dict, classifier included, saved the way torchvision's file is."""
    torch.manual_seed(7)
    state = r3d_18(num_classes=400).state_dict()
    path = tmp_path / "r3d18.pth"
    torch.save(state, path)
    return path, state


def test_weights_file_round_trips_into_the_trunk_without_the_classifier(kinetics_like):
    path, saved = kinetics_like
    encoder = build_encoder(encoder_config("r3d18", pretrained=True, weights=str(path)), OBS)
    loaded = encoder.net.state_dict()
    assert encoder.repr_dim == 512 and not any(key.startswith("fc.") for key in loaded)
    assert loaded.keys() == {key for key in saved if not key.startswith("fc.")}
    assert all(torch.equal(loaded[key], saved[key]) for key in loaded)


def test_pretrained_without_weights_reads_torchvisions_hub_cache(kinetics_like, tmp_path):
    path, saved = kinetics_like
    cache = tmp_path / "torch_home" / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    path.rename(cache / "r3d_18-b3b3357e.pth")
    encoder = build_encoder(encoder_config("r3d18", pretrained=True), OBS)
    assert torch.equal(encoder.net.stem[0].weight, saved["stem.0.weight"])


def test_missing_weights_is_a_one_line_error_with_where_and_how(tmp_path):
    expected = tmp_path / "torch_home" / "hub" / "checkpoints" / "r3d_18-b3b3357e.pth"
    with pytest.raises(UserError) as err:
        build_encoder(encoder_config("r3d18", pretrained=True), OBS)
    message = str(err.value)
    assert "\n" not in message and f"not found at {expected}" in message
    assert R3D_18_Weights.KINETICS400_V1.url in message and "encoder.video.weights" in explain(err.value)


def test_a_file_that_is_not_r3d18_weights_is_a_clear_error(tmp_path):
    path = tmp_path / "other.pth"
    torch.save({"conv.weight": torch.zeros(1)}, path)
    with pytest.raises(UserError, match="does not hold r3d_18 weights"):
        build_encoder(encoder_config("r3d18", pretrained=True, weights=str(path)), OBS)


def test_frames_are_normalised_with_kinetics_statistics():
    encoder = build_encoder(encoder_config("r3d18"), OBS)
    transforms = R3D_18_Weights.KINETICS400_V1.transforms()
    assert encoder.MEAN == tuple(transforms.mean) and encoder.STD == tuple(transforms.std)


def test_freeze_means_no_gradients_eval_batchnorm_and_an_unchanged_trunk(kinetics_like):
    path, _ = kinetics_like
    torch.manual_seed(0)
    encoder = build_encoder(encoder_config("r3d18", pretrained=True, weights=str(path), freeze=True), OBS)
    agent = SAC(encoder, 2, SACConfig(hidden_dim=32, feature_dim=16, actor_update_every=1), device=torch.device("cpu"), pixels=True)
    before = {key: value.clone() for key, value in encoder.state_dict().items()}
    heads_before = [p.detach().clone() for p in agent.critic.q1.parameters()]
    batch = {
        "obs": torch.randint(0, 256, (4, *OBS), dtype=torch.uint8), "next_obs": torch.randint(0, 256, (4, *OBS), dtype=torch.uint8),
        "action": torch.rand(4, 2) * 2 - 1, "reward": torch.randn(4, 1), "discount": torch.ones(4, 1),
    }
    agent.update(batch)
    agent.critic.train()
    assert not encoder.training and not any(m.training for m in encoder.modules()), "BatchNorm stays in eval mode"
    grad_modes = []
    encoder.net.register_forward_hook(lambda module, inputs, output: grad_modes.append(torch.is_grad_enabled()))
    assert not encoder(batch["obs"]).requires_grad and grad_modes == [False], "features come from a no_grad forward"
    assert all(p.grad is None and not p.requires_grad for p in encoder.parameters())
    assert all(torch.equal(before[key], value) for key, value in encoder.state_dict().items()), "weights and BatchNorm statistics unchanged"
    assert any(not torch.equal(a, b) for a, b in zip(heads_before, agent.critic.q1.parameters())), "the critic's heads still learn"
