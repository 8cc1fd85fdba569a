"""A frozen trunk outside the update: the replay stores exactly the trunk's features of the stacks a
frame replay would rebuild (several workers, n-step returns), in float16 without changing the critic
loss beyond rounding; the agent learns on them without augmentation; the fingerprint tells trunks
apart; and `encoder.video.weights` takes the encoder of any checkpoint of this trainer, with
one-line errors for files that do not hold a fitting one."""

import io

import numpy as np
import pytest
import torch

from encoders.frozen import FEATURE_DTYPE, FrozenTrunk, ProjectedEncoder, fingerprint
from encoders.state import StateEncoder
from errors import UserError
from sac.agent import SAC
from sac.config import SACConfig
from sac.replay import ReplayBuffer
from tests.conftest import DEFAULT_CONFIG, encoder_config
from trainer.checkpoints import checkpoint
from trainer.checkpoints.payload import Progress, build_payload
from trainer.config.load import Config, load_config, to_dict
from trainer.run.encoder_setup import build_encoders, build_video_encoder

T, SIZE, ACTIONS = 3, 32, 2
OBS = (T, 3, SIZE, SIZE)
GAMMA = 0.9


def frozen_encoder(arch: str = "simple2dcnn", seed: int = 0, **video):
    torch.manual_seed(seed)
    return build_video_encoder(encoder_config(arch, freeze=True, num_filters=8, **video), OBS)


def trunk(**video) -> FrozenTrunk:
    return FrozenTrunk(frozen_encoder(**video), "simple2dcnn", torch.device("cpu"), autocast=False)


def collect(trunk: FrozenTrunk, frames: ReplayBuffer, features: ReplayBuffer, steps: int,
            seed: int = 0) -> None:
    """Random lockstep episodes in every env: each step's newest frame stacks go whole into `frames`
    (which keeps their newest frame) and through the trunk, all envs in one batch, into
    `features`."""
    rng = np.random.default_rng(seed)
    n = frames.num_envs
    stacks = np.zeros((n, *OBS), np.uint8)
    left = np.zeros(n, int)  # steps left in each env's episode; 0: the next frame is a reset frame
    for _ in range(steps):
        first = left == 0
        frame = rng.integers(0, 256, (n, 3, SIZE, SIZE), dtype=np.uint8)
        shifted = np.concatenate([stacks[:, 1:], frame[:, None]], 1)
        stacks = np.where(first[:, None, None, None, None], frame[:, None], shifted)
        left = np.where(first, rng.integers(1, 9, n), left - 1)
        terminated = (left == 0) & rng.integers(0, 2, n).astype(bool)
        action, reward = rng.uniform(-1, 1, (n, ACTIONS)).astype(np.float32), rng.standard_normal(n)
        for replay, obs in ((frames, stacks), (features, trunk(stacks))):
            replay.add_batch(obs, action, reward, terminated, first)


def replays(repr_dim: int, num_envs: int, nstep: int) -> tuple[ReplayBuffer, ReplayBuffer]:
    common = dict(capacity=1000, action_dim=ACTIONS, seed=0, discount=GAMMA, num_envs=num_envs,
                  nstep=nstep)
    return (ReplayBuffer(frame_shape=OBS[1:], frame_dtype=np.uint8, frame_stack=T, **common),
            ReplayBuffer(frame_shape=(repr_dim,), frame_dtype=FEATURE_DTYPE, frame_stack=None,
                         **common))


@pytest.mark.parametrize("num_envs, nstep", [(1, 1), (2, 1), (2, 3)])
def test_stored_features_are_the_trunks_output_on_the_stacks_a_frame_replay_samples(
    num_envs, nstep):
    encode = trunk()
    frames, features = replays(encode.repr_dim, num_envs, nstep)
    collect(encode, frames, features, steps=60)
    assert len(frames) == len(features)
    for _ in range(3):  # the same RNG state samples the same transitions from both
        pixels, stored = frames.sample(16), features.sample(16)
        assert stored["obs"].dtype == torch.float16 and stored["obs"].shape == (16, encode.repr_dim)
        for key in ("action", "reward", "discount"):
            assert torch.equal(pixels[key], stored[key]), key
        # batch 16 here, a batch of num_envs at collection: one float16 step apart
        for key in ("obs", "next_obs"):
            torch.testing.assert_close(stored[key], torch.from_numpy(encode(pixels[key].numpy())),
                                       rtol=2e-3, atol=1e-3)
    assert features.bytes_per_slot < frames.bytes_per_slot


def test_the_trunk_is_the_frozen_encoder_in_float16_under_inference_mode():
    encode = trunk()
    stacks = np.random.default_rng(0).integers(0, 256, (4, *OBS), dtype=np.uint8)
    features = encode(stacks)
    assert features.dtype == np.float16 and features.shape == (4, encode.repr_dim)
    with torch.no_grad():
        expected = encode.encoder(torch.from_numpy(stacks)).half().numpy()
    assert np.array_equal(features, expected)


def test_a_feature_replay_resumes_with_the_same_samples():
    encode = trunk()
    _, features = replays(encode.repr_dim, 2, 3)
    _, restored = replays(encode.repr_dim, 2, 3)
    collect(encode, replays(encode.repr_dim, 2, 3)[0], features, steps=30)
    buffer = io.BytesIO()
    torch.save(features.state_dict(), buffer)
    buffer.seek(0)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    for _ in range(3):
        a, b = features.sample(8), restored.sample(8)
        assert all(torch.equal(a[key], b[key]) for key in a)


def feature_agent(repr_dim: int) -> SAC:
    torch.manual_seed(0)
    cfg = SACConfig(hidden_dim=32, feature_dim=16)
    return SAC(StateEncoder((repr_dim,)), ACTIONS, cfg, device=torch.device("cpu"), pixels=True,
               augment=False)


def test_the_agent_learns_on_stored_features_through_the_pixel_trunk_without_augmenting():
    encode = trunk()
    _, features = replays(encode.repr_dim, 1, 1)
    collect(encode, replays(encode.repr_dim, 1, 1)[0], features, steps=40)
    agent = feature_agent(encode.repr_dim)
    assert isinstance(agent.critic.trunk[1],
                      torch.nn.LayerNorm), "wide features are projected and normalised"
    before = [p.detach().clone() for p in agent.critic.parameters()]
    metrics = agent.update(features.sample(8))
    assert torch.isfinite(metrics["critic_loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.critic.parameters()))
    stacks = np.random.default_rng(1).integers(0, 256, (2, *OBS), dtype=np.uint8)
    assert agent.act(encode(stacks), sample=False).shape == (2, ACTIONS)


def test_float16_storage_changes_the_critic_loss_only_by_rounding():
    """The same agent, the same batch, features kept in float32 or rounded to float16: losses within
    1e-3."""
    torch.manual_seed(0)
    encoder = frozen_encoder()
    stacks = torch.randint(0, 256, (2, 64, *OBS), dtype=torch.uint8)
    with torch.no_grad():
        obs, next_obs = encoder(stacks[0]), encoder(stacks[1])
    batch = {"action": torch.rand(64, ACTIONS) * 2 - 1, "reward": torch.randn(64, 1),
             "discount": torch.full((64, 1), GAMMA)}
    losses = []
    for dtype in (torch.float32, torch.float16):
        agent = feature_agent(encoder.repr_dim)
        torch.manual_seed(1)  # the same next actions
        metrics = agent.update(batch | {"obs": obs.to(dtype), "next_obs": next_obs.to(dtype)})
        losses.append(metrics["critic_loss"].item())
    assert losses[0] != losses[1] and abs(losses[0] - losses[1]) <= 1e-3 * abs(losses[0])


def test_the_fingerprint_follows_weights_arch_and_frame_size_not_memory_layout():
    base = fingerprint(frozen_encoder(), "simple2dcnn")
    assert base == fingerprint(frozen_encoder(), "simple2dcnn")
    assert base.startswith("simple2dcnn on 3x3x32x32")
    assert base != fingerprint(frozen_encoder(seed=1), "simple2dcnn")
    assert base != fingerprint(frozen_encoder(input_size=48), "simple2dcnn")
    assert base == fingerprint(frozen_encoder(channels_last=True), "simple2dcnn")
    assert fingerprint(frozen_encoder("simple3dcnn"), "simple3dcnn") != base


def test_a_projected_trunk_stores_the_projections_width_and_its_fingerprint_follows_the_projection(
    ):
    """A pretrained projection on the frozen encoder (trainer/tools/pretrain.py's head layer):
    features of its width, and stored features of another projection are told apart as those of
    another encoder are."""
    def projected(seed: int) -> ProjectedEncoder:  # the same encoder, projections drawn with `seed`
        encoder = frozen_encoder()
        torch.manual_seed(seed)
        return ProjectedEncoder(encoder, torch.nn.Linear(encoder.repr_dim, 24))

    encode = FrozenTrunk(projected(0), "simple2dcnn", torch.device("cpu"), autocast=False)
    stacks = np.random.default_rng(0).integers(0, 256, (5, *OBS), dtype=np.uint8)
    assert encode.repr_dim == 24 and encode(stacks).shape == (5, 24)
    assert not any(p.requires_grad
                   for p in encode.encoder.parameters()) and not encode.encoder.train().training
    base = fingerprint(projected(0), "simple2dcnn")
    assert base.startswith("simple2dcnn on 3x3x32x32") and base == encode.fingerprint
    assert (base != fingerprint(projected(1), "simple2dcnn")
            != fingerprint(frozen_encoder(), "simple2dcnn"))


def test_a_frozen_video_config_builds_a_trunk_and_a_vector_encoder_for_the_agent():
    cfg = Config()
    cfg.encoder.video.freeze = True
    encoder, trunk_ = build_encoders(cfg, OBS, torch.device("cpu"))
    assert isinstance(encoder, StateEncoder) and encoder.repr_dim == trunk_.repr_dim
    cfg.encoder.video.freeze = False
    encoder, trunk_ = build_encoders(cfg, OBS, torch.device("cpu"))
    assert trunk_ is None and encoder.repr_dim > 0 and any(p.requires_grad
                                                           for p in encoder.parameters())


def save_run(directory, arch: str = "simple2dcnn", freeze: bool = False, **video):
    """A checkpoint of this trainer whose critic holds an `arch` encoder, moved away from any fresh
    initialisation (none when `freeze`: stored features)."""
    cfg = Config()
    cfg.encoder.video.arch, cfg.encoder.video.num_filters = arch, 8
    for key, value in video.items():
        setattr(cfg.encoder.video, key, value)
    encoder = StateEncoder((16,)) if freeze else build_video_encoder(cfg.encoder, OBS)
    agent = SAC(encoder, ACTIONS, SACConfig(hidden_dim=32, feature_dim=16),
                device=torch.device("cpu"), pixels=True)
    with torch.no_grad():
        for parameter in agent.critic.encoder.parameters():
            parameter.add_(1.0)
    state = build_payload(config=to_dict(cfg), agent_state=agent.state_dict(), progress=Progress(),
                          trunk=None, demos=None, learning_steps=0, wall_s=0.0,
                          rng=np.random.default_rng(0))
    saved = checkpoint.save(directory, "pre", state, {}, env_step=1, episode=1, keep_replays=1,
                            keep_last=0)
    return saved.latest, agent


def test_weights_from_a_checkpoint_of_this_trainer_are_its_critics_encoder_frozen(tmp_path):
    path, trained = save_run(tmp_path)
    cfg = encoder_config("simple2dcnn", num_filters=8, pretrained=True, weights=str(path),
                         freeze=True)
    encoder = build_video_encoder(cfg, OBS)
    for name, value in trained.critic.encoder.state_dict().items():
        assert torch.equal(encoder.state_dict()[name], value), name
    assert not any(p.requires_grad for p in encoder.parameters())


@pytest.mark.parametrize("saved, video, message", [
    ({"arch": "simple3dcnn"}, {},
     r"is a checkpoint of a simple3dcnn run; set encoder.video.arch=simple3dcnn"),
    ({"freeze": True}, {}, r"holds no encoder weights .* pass the weights it was started from"),
    ({}, {"num_filters": 16},
     r"does not fit this config's simple2dcnn .* settings it was trained with"),
])
def test_a_checkpoint_without_a_fitting_encoder_is_a_one_line_error(
    tmp_path, saved, video, message):
    path, _ = save_run(tmp_path, **saved)
    cfg = encoder_config("simple2dcnn",
                         **({"num_filters": 8, "pretrained": True, "weights": str(path)} | video))
    with pytest.raises(UserError, match=message) as err:
        build_video_encoder(cfg, OBS)
    assert "\n" not in str(err.value)


def test_a_checkpoint_frozen_into_a_run_that_draws_its_frames_otherwise_is_a_one_line_error(
    tmp_path):
    path, _ = save_run(tmp_path)  # an OpenGL run's, from the default camera
    cfg = encoder_config("simple2dcnn", num_filters=8, pretrained=True, weights=str(path),
                         freeze=True)
    frames = {"camera": None, "backend": "mujoco_warp", "warp_shadows": False, "warp_skybox": False}
    with pytest.raises(UserError,
                       match=r"pre_latest.pt learnt from frames drawn with env.backend=mujoco, "
                             r"which this run draws otherwise"):
        build_video_encoder(cfg, OBS, frames=frames)
    build_video_encoder(cfg, OBS, frames=frames | {"backend": "mujoco"})


def test_a_damaged_checkpoint_as_weights_is_a_one_line_error(tmp_path):
    """Its weights went into the encoder unchecked: NaN in them failed at the first forward pass
    with a traceback."""
    path, _ = save_run(tmp_path)
    payload = torch.load(path, weights_only=True)
    next(iter(payload["agent"]["critic"].values())).fill_(float("nan"))
    torch.save(payload, path)
    cfg = encoder_config("simple2dcnn", num_filters=8, pretrained=True, weights=str(path))
    with pytest.raises(UserError,
                       match=r"encoder.video.weights=.*pre_latest.pt: checkpoint is corrupt \(its "
                             r"checksum does not match its contents\); pass another checkpoint of "
                             r"the run") as err:
        build_video_encoder(cfg, OBS)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("exists", [False, True])
def test_weights_that_are_no_checkpoint_for_an_arch_without_its_own_are_a_one_line_error(
    tmp_path, exists):
    path = tmp_path / "weights.pt"
    if exists:
        torch.save({"convs.0.weight": torch.zeros(1)}, path)
    cfg = encoder_config("simple2dcnn", pretrained=True, weights=str(path))
    with pytest.raises(UserError,
                       match="is (not found|not a checkpoint of this trainer); simple2dcnn loads "
                             "weights"):
        build_video_encoder(cfg, OBS)


def test_shifted_copies_with_a_frozen_trunk_are_a_config_error():
    overrides = ["encoder.video.freeze=true", "sac.augment_samples=2"]
    with pytest.raises(UserError,
                       match="nothing to shift with encoder.video.freeze=true .* set "
                             "sac.augment_samples=1"):
        load_config(DEFAULT_CONFIG, overrides)


def test_demonstrations_with_a_frozen_trunk_pass_the_config_rules(tmp_path):
    """The demonstrations are encoded by the trunk as they load (tests/test_demos.py): the config
    takes both."""
    cfg = load_config(DEFAULT_CONFIG,
                      ["encoder.video.freeze=true", f"demos.path={tmp_path / 'demos'}"])
    assert cfg.encoder.video.freeze and cfg.demos.path == str(tmp_path / "demos")
