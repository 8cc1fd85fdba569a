"""R3D-18: Kinetics weights load from a local file or torch's hub cache and never download; a
missing file is a one-line error saying where to put it and how to get it; `freeze` keeps the trunk
exactly as loaded. It is the arch with BatchNorm, so the agent's train/eval modes are tested here:
acting on running statistics, updating on batches."""

import copy

import numpy as np
import pytest
import torch
from torchvision.models.video import R3D_18_Weights, r3d_18

from encoders import build_encoder
from errors import UserError
from sac.agent import SAC
from sac.config import SACConfig
from tests.conftest import encoder_config
from trainer.process.cli import explain

OBS = (3, 3, 32, 32)


def random_batch(size: int = 4) -> dict[str, torch.Tensor]:
    return {
        "obs": torch.randint(0, 256, (size, *OBS), dtype=torch.uint8),
        "next_obs": torch.randint(0, 256, (size, *OBS), dtype=torch.uint8),
        "action": torch.rand(size, 2) * 2 - 1, "reward": torch.randn(size, 1),
        "discount": torch.ones(size, 1),
    }


def untrained_agent(**sac) -> SAC:
    torch.manual_seed(0)
    cfg = SACConfig(hidden_dim=32, feature_dim=16, **sac)
    return SAC(build_encoder(encoder_config("r3d18"), OBS), 2, cfg, device=torch.device("cpu"),
               pixels=True)


def record_batchnorm_modes(module: torch.nn.Module) -> list[bool]:
    """The training flag of every BatchNorm forward pass in `module`, appended as they run."""
    modes = []
    for layer in module.modules():
        if isinstance(layer, torch.nn.modules.batchnorm._BatchNorm):
            layer.register_forward_hook(lambda layer, inputs, output: modes.append(layer.training))
    return modes


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """An empty hub cache on an offline machine: every connection goes to a proxy on a closed port
    and is refused, as on this project's development machines (the real network path, not a
    stand-in)."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    for name in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)


@pytest.fixture
def kinetics_like(tmp_path):
    """A randomly initialised r3d_18 state dict, classifier included, saved the way torchvision's
    file is."""
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
    assert "\n" not in message and f"not found at {expected} and could not be downloaded" in message
    assert not expected.exists(), "a failed download leaves nothing half-written in the cache"
    assert (R3D_18_Weights.KINETICS400_V1.url in message
            and "encoder.video.weights" in explain(err.value))


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
    encoder = build_encoder(encoder_config("r3d18", pretrained=True, weights=str(path),
                                           freeze=True), OBS)
    agent = SAC(encoder, 2, SACConfig(hidden_dim=32, feature_dim=16, actor_update_every=1),
                device=torch.device("cpu"), pixels=True)
    before = {key: value.clone() for key, value in encoder.state_dict().items()}
    heads_before = [p.detach().clone() for p in agent.critic.q1.parameters()]
    batch = {
        "obs": torch.randint(0, 256, (4, *OBS), dtype=torch.uint8),
        "next_obs": torch.randint(0, 256, (4, *OBS), dtype=torch.uint8),
        "action": torch.rand(4, 2) * 2 - 1, "reward": torch.randn(4, 1),
        "discount": torch.ones(4, 1),
    }
    agent.update(batch)
    agent.critic.train()
    agent.act(batch["obs"].numpy(), sample=False)
    assert not encoder.training and not any(m.training for m in encoder.modules()), (
        "BatchNorm stays in eval mode")
    grad_modes = []
    encoder.net.register_forward_hook(
        lambda module, inputs, output: grad_modes.append(torch.is_grad_enabled()))
    assert not encoder(batch["obs"]).requires_grad and grad_modes == [False], (
        "features come from a no_grad forward")
    assert all(p.grad is None and not p.requires_grad for p in encoder.parameters())
    assert all(torch.equal(before[key], value) for key, value in encoder.state_dict().items()), (
        "weights and BatchNorm statistics unchanged"
    )
    assert any(not torch.equal(a, b) for a, b in zip(heads_before, agent.critic.q1.parameters())), (
        "the critic's heads still learn"
    )


def test_acting_normalises_by_running_statistics_leaves_them_and_restores_the_training_mode():
    """Evaluation's deterministic action of an observation is the same alone or in a batch;
    exploring or evaluating never moves BatchNorm's statistics; the update afterwards trains in
    training mode again."""
    agent = untrained_agent()
    agent.update(random_batch())  # running statistics away from their initial 0 and 1
    encoder = agent.critic.encoder
    statistics = {key: value.clone() for key, value in encoder.state_dict().items()}
    modes = record_batchnorm_modes(encoder)
    obs = np.random.default_rng(0).integers(0, 256, (4, *OBS), dtype=np.uint8)
    together = agent.act(obs, sample=False)
    alone = np.concatenate([agent.act(obs[i : i + 1], sample=False) for i in range(len(obs))])
    agent.act(obs, sample=True)
    np.testing.assert_allclose(alone, together, atol=1e-5)
    assert modes and not any(modes), "every BatchNorm pass of act() in eval mode"
    assert all(torch.equal(statistics[key], value)
               for key, value in encoder.state_dict().items()), "statistics moved"
    assert all(module.training
               for module in (*encoder.modules(), *agent.actor.modules())), "training mode back"
    modes.clear()
    agent.update(random_batch())
    assert modes and all(modes)


def test_the_target_encoder_normalises_by_the_batch_and_keeps_the_statistics_of_its_own_passes():
    """The decision for the target's BatchNorm: training mode in every update (DrQ's and DrQ-v2's
    `critic_target.train()`), like the online encoder whose parameters it averages, whatever acting
    did before; its running statistics are then those of its own passes (never read), not copied
    from the online encoder."""
    agent = untrained_agent(target_update_every=1, critic_tau=0.5)
    agent.act(random_batch()["obs"].numpy(), sample=False)
    target = agent.critic_target.encoder
    before = copy.deepcopy(target)
    modes, inputs = record_batchnorm_modes(target), []
    target.register_forward_hook(lambda module, args, output: inputs.append(args[0]))
    agent.update(random_batch())
    assert len(inputs) == 1 and modes and all(modes), (
        "the target's BatchNorm normalised by the batch")
    with torch.no_grad():
        # the same pass from the same parameters: the soft update moves parameters after it
        before(inputs[0])
    online = dict(agent.critic.encoder.named_buffers())
    for name, value in before.named_buffers():
        if name.endswith(("running_mean", "running_var")):
            assert torch.equal(dict(target.named_buffers())[name], value), name
            assert not torch.equal(online[name], value), (
                f"{name} is the target's own, not the online encoder's")
