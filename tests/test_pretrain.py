"""Encoder pretraining (trainer/tools/pretrain.py) on a tiny real recording: the command writes an
encoder weights file that `encoder.video.weights` loads with the same parameters, a few steps lower
the training loss, weights of another arch (or network) are a one-line error, and the stacks and
labels it trains on are the env's and the replay's."""

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from encoders import build_encoder
from encoders.frozen import FrozenTrunk
from envs import demos
from envs.config import frames_of
from envs.dishwashing.env import OBS_GROUPS, OBS_SIZE
from envs.make import make_env
from errors import UserError
from sac.replay import ReplayBuffer
from tests.conftest import ROOT, interrupt_when_started, pause, script, wait_for_lock
from trainer.checkpoints import files as checkpoint_files
from trainer.config.load import load_config
from trainer.run.encoder_setup import (
    ENCODER_WEIGHTS_FORMAT,
    build_encoders,
    build_video_encoder,
    save_encoder_weights,
)
from trainer.run.loop import Trainer
from trainer.tools.pretrain import (
    Standardiser,
    build_regressor,
    main,
    predict,
    read_datasets,
    split_of,
    train,
)
from trainer.tools.record import Acting, record, recording_settings

VIDEO = str(ROOT / "configs" / "dishwashing_video.yaml")
# small frames (shifted by up to 2 pixels, as 84 px frames by 4), short episodes, a narrow trunk:
# the recording renders every step
SETS = ["env.image_size=32", "sac.augment_pad=2", "env.max_episode_steps=30",
        "encoder.video.num_filters=8",
        "profile=cpu", "training.device=cpu", "demos.path=null"]
EPISODES, SEED = 3, 0
HIDDEN = 16  # the head's hidden layer: the frozen trunk's projection


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A recording by the recorder (trainer/tools/record.py), as users make them."""
    cfg = load_config(VIDEO, SETS)
    path = tmp_path_factory.mktemp("pretrain") / "recorded"
    episodes, space, action_space, _ = record(cfg, EPISODES, seed=SEED, acting=Acting(noise=0.3),
                                              progress=False)
    demos.write(path, episodes, space, action_space, cfg.env.id, recording_settings(cfg))
    return path


def set_args(items) -> list[str]:
    """`--set ITEM` for each item, as the commands take their overrides."""
    return [arg for item in items for arg in ("--set", item)]


def pretrain_command(*args) -> list[str]:
    return [sys.executable, "-m", "trainer.tools.pretrain", "--config", VIDEO, *map(str, args),
            *set_args(SETS)]


def pretrain_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(pretrain_command(*args), cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


# one epoch of batches of 8, head width HIDDEN
QUICK = ["--epochs", "1", "--batch-size", "8", "--head-hidden", HIDDEN]


def frozen_config(weights, *overrides: str):
    return load_config(VIDEO,
                       [*SETS, "encoder.video.pretrained=true", f"encoder.video.weights={weights}",
                        "encoder.video.freeze=true", *overrides])


def frozen_run(weights, tmp_path, resume=None, *overrides: str) -> Trainer:
    """A few steps of configs/dishwashing_video_frozen.yaml on `weights`, saved to tmp_path/ckpt."""
    cfg = load_config(ROOT / "configs" / "dishwashing_video_frozen.yaml", [*overrides,
        *SETS, f"encoder.video.weights={weights}", "sac.hidden_dim=32", "sac.batch_size=8",
                                                                           "sac.buffer_size=200",
        "training.seed_steps=5", "training.eval_every_episodes=0", "logging.eval_video=false",
        "logging.progress=false", f"logging.tensorboard_dir={tmp_path / 'runs'}",
        f"checkpoint.dir={tmp_path / 'ckpt'}"])
    return Trainer(cfg, resume=resume)


@pytest.fixture(scope="module")
def pretrained(dataset, tmp_path_factory):
    """The command's weights file (head width HIDDEN) and its output."""
    out = tmp_path_factory.mktemp("weights") / "pretrained" / "encoder.pt"
    done = pretrain_cli("--data", dataset, "--out", out, *QUICK)
    assert done.returncode == 0, done.stderr
    return out, done.stdout


def test_the_command_writes_weights_that_the_trainer_loads_with_the_same_parameters(pretrained):
    out, stdout = pretrained
    assert f"wrote {out}" in stdout and all(name in stdout for name in OBS_GROUPS)
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["episodes"] == {"train": EPISODES - 1, "held_out": 1}
    assert (set(report["held_out"]) == set(OBS_GROUPS)
            and report["supervision"].startswith("privileged"))
    saved = torch.load(out, weights_only=True)
    assert (saved["format"] == ENCODER_WEIGHTS_FORMAT
            and saved["encoder"]["video"]["arch"] == "simple2dcnn")

    obs_shape = tuple(saved["obs_shape"])
    fresh = build_encoder(load_config(VIDEO, SETS).encoder, obs_shape)
    frozen = build_video_encoder(frozen_config(out).encoder, obs_shape)
    tuned = build_video_encoder(frozen_config(out, "encoder.video.freeze=false").encoder, obs_shape)
    for loaded in (frozen.encoder, tuned):  # fine-tuning takes the encoder alone
        assert loaded.state_dict().keys() == saved["state_dict"].keys()
        for key, value in loaded.state_dict().items():
            assert torch.equal(value, saved["state_dict"][key]), key
    assert not all(torch.equal(value, fresh.state_dict()[key])
                   for key, value in tuned.state_dict().items())
    assert not any(p.requires_grad for p in frozen.parameters())  # freeze: true still applies
    assert any(p.requires_grad for p in tuned.parameters()) and tuned.repr_dim == fresh.repr_dim


def test_the_report_holds_the_labels_mean_and_spread_that_bring_an_estimate_back_to_the_state(
    dataset, pretrained):
    """What scripts/scripted_from_frames.py reads instead of the recordings: the training episodes'
    own scaler."""
    out, _ = pretrained
    train_episodes, *_ = read_datasets([str(dataset)], load_config(VIDEO, SETS), holdout=0.1)
    fitted = Standardiser.fit(np.concatenate([e.observations["state"] for e in train_episodes]))
    saved = Standardiser.of(**json.loads(out.with_suffix(".json").read_text())["labels"])
    for ours, theirs in zip(dataclasses.astuple(saved), dataclasses.astuple(fitted)):
        np.testing.assert_array_equal(ours, theirs)
    assert 0 < saved.outputs < len(saved.mean), "the rack's slot never moves"


@pytest.mark.parametrize("setting", ["env.backend=mujoco_warp", "env.camera=close"])
def test_frozen_weights_load_only_into_runs_whose_frames_are_drawn_as_those_they_learnt_from(
    pretrained, setting):
    """Weights pretrained on OpenGL frames loaded silently into a MuJoCo Warp run (found by
    fuzzing): frozen, they never adapt to another picture. Fine-tuning (freeze: false) may start
    from them."""
    out, _ = pretrained
    assert torch.load(out, weights_only=True)["frames"] == frames_of(load_config(VIDEO, SETS).env)
    key, value = setting.split("=")
    cfg = frozen_config(out, setting)
    obs_shape = tuple(torch.load(out, weights_only=True)["obs_shape"])
    with pytest.raises(UserError,
                       match=r"encoder.video.weights=.*encoder.pt learnt from frames drawn with "
                             rf"{key}=\S+, which this run draws otherwise; .* set "
                             r"encoder.video.freeze=false"):
        build_encoders(cfg, obs_shape, torch.device("cpu"))
    tuned = frozen_config(out, setting, "encoder.video.freeze=false")
    assert build_encoders(tuned, obs_shape, torch.device("cpu"))[1] is None


def test_the_frozen_encoder_is_the_pretrained_encoder_under_the_heads_first_layer(
    dataset, pretrained):
    """On real recorded stacks: ReLU(W conv(x) + b) with the saved conv weights and the saved head
    layer."""
    out, _ = pretrained
    saved = torch.load(out, weights_only=True)
    cfg = frozen_config(out)
    stacks = split_of(demos.read(dataset).episodes, cfg, views=0).stacks(np.arange(0, 40, 7),
                                                                         torch.device("cpu"))
    conv = build_encoder(load_config(VIDEO, SETS).encoder, tuple(saved["obs_shape"]))
    conv.load_state_dict(saved["state_dict"])
    with torch.no_grad():
        expected = torch.relu(conv(stacks) @ saved["projection"]["weight"].T
                              + saved["projection"]["bias"])
    loaded = build_video_encoder(cfg.encoder, tuple(saved["obs_shape"]))
    assert (loaded.repr_dim == HIDDEN and expected.shape == (len(stacks), HIDDEN)
            and expected.abs().sum() > 0)
    torch.testing.assert_close(loaded(stacks), expected, rtol=1e-5, atol=1e-5)
    trunk = FrozenTrunk(loaded, "simple2dcnn", torch.device("cpu"), autocast=False)
    assert trunk.repr_dim == HIDDEN
    np.testing.assert_array_equal(trunk(stacks.numpy()), expected.half().numpy())


def test_the_state_estimate_trunk_is_the_pretraining_heads_prediction_of_the_varying_state(
    dataset, pretrained):
    """frozen_features=state_estimate: the head's last layer on top, one output per state dimension
    that varies in the recording (standardised), so the replay stores what the labels say and not
    the scene around it."""
    out, _ = pretrained
    saved = torch.load(out, weights_only=True)
    episodes = demos.read(dataset).episodes
    cfg = frozen_config(out, "encoder.video.frozen_features=state_estimate")
    stacks = split_of(episodes, cfg, views=0).stacks(np.arange(0, 40, 7), torch.device("cpu"))
    conv = build_encoder(load_config(VIDEO, SETS).encoder, tuple(saved["obs_shape"]))
    conv.load_state_dict(saved["state_dict"])
    with torch.no_grad():
        hidden = torch.relu(conv(stacks) @ saved["projection"]["weight"].T
                            + saved["projection"]["bias"])
        expected = hidden @ saved["readout"]["weight"].T + saved["readout"]["bias"]
    # the held-out episode is the last
    varying = Standardiser.fit(split_of(episodes[:-1], cfg, views=0).labels).outputs
    # the fixed slot: not learnt
    assert saved["readout"]["weight"].shape == (varying, HIDDEN) and varying < OBS_SIZE
    loaded = build_video_encoder(cfg.encoder, tuple(saved["obs_shape"]))
    assert loaded.repr_dim == varying and (expected < 0).any()  # a linear readout, no ReLU on top
    torch.testing.assert_close(loaded(stacks), expected, rtol=1e-5, atol=1e-5)
    trunk = FrozenTrunk(loaded, "simple2dcnn", torch.device("cpu"), autocast=False)
    assert trunk.fingerprint != FrozenTrunk(build_video_encoder(frozen_config(out).encoder,
                                                                tuple(saved["obs_shape"])),
                                            "simple2dcnn", torch.device("cpu"),
                                            autocast=False).fingerprint


def test_a_state_estimate_from_a_file_without_a_readout_is_a_one_line_error(pretrained, tmp_path):
    out, _ = pretrained
    weights = torch.load(out, weights_only=True)
    del weights["checksum"], weights["readout"]
    torch.save(weights, tmp_path / "projection_only.pt")
    cfg = frozen_config(tmp_path / "projection_only.pt",
                        "encoder.video.frozen_features=state_estimate")
    with pytest.raises(UserError,
                       match=r"encoder.video.weights=.*projection_only.pt holds no readout to "
                             r"estimate the state with; pretrain it again "
                             r".*frozen_features=projection$") as err:
        build_video_encoder(cfg.encoder, tuple(weights["obs_shape"]))
    assert "\n" not in str(err.value)
    assert build_video_encoder(frozen_config(tmp_path / "projection_only.pt").encoder,
                               # projection features still load
                               tuple(weights["obs_shape"])).repr_dim == HIDDEN


def test_a_trainer_on_the_frozen_config_stores_the_projections_features(pretrained, tmp_path):
    out, _ = pretrained
    run = frozen_run(out, tmp_path)
    try:
        run.run(8)
        assert run.trunk.repr_dim == HIDDEN and run.agent.critic.trunk[0].in_features == HIDDEN
        stored = np.asarray(run.replay.frames[:8, 0])
        assert stored.shape == (8, HIDDEN) and stored.dtype == np.float16
        # ReLU outputs of real frames
        assert np.isfinite(stored).all() and (stored >= 0).all() and stored.any()
        assert run.replay.bytes_per_slot < HIDDEN * 2 + 64
    finally:
        run.close()


def test_weights_of_an_older_format_are_a_one_line_error(pretrained, tmp_path):
    out, _ = pretrained
    old = torch.load(out, weights_only=True) | {"format": "pixel-sac encoder weights 1"}
    torch.save(old, tmp_path / "old.pt")
    with pytest.raises(UserError,
                       match=r'in the format "pixel-sac encoder weights 1" where this version '
                             r'reads "pixel-sac encoder weights 2"; pretrain it again') as err:
        build_video_encoder(frozen_config(tmp_path / "old.pt").encoder, tuple(old["obs_shape"]))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("damage, message", [
    (lambda w: w.update(encoder="x"), r"its encoder settings are not an encoder block"),
    (lambda w: w.update(obs_shape=5), r"its obs_shape 5 is not a frame stack's shape"),
    (lambda w: w.update(state_dict=[1]),
     r"its state_dict, projection or readout is not a dict of tensors"),
    (lambda w: w.update(projection="x"),
     r"its state_dict, projection or readout is not a dict of tensors"),
    (lambda w: w.update(readout="x"),
     r"its state_dict, projection or readout is not a dict of tensors"),
    (lambda w: w["readout"]["bias"].fill_(float("nan")), r"NaN or inf in readout\.bias"),
    (lambda w: next(iter(w["state_dict"].values())).fill_(float("inf")),
     r"NaN or inf in state_dict\."),
])
def test_a_damaged_weights_file_is_a_one_line_error(pretrained, tmp_path, damage, message):
    """A file from before weights files carried a checksum, or made by hand: each of these failed
    with a traceback, or (inf) at the first forward pass."""
    out, _ = pretrained
    weights = torch.load(out, weights_only=True)
    del weights["checksum"]
    damage(weights)
    torch.save(weights, tmp_path / "damaged.pt")
    with pytest.raises(UserError,
                       match=rf"encoder.video.weights=.*damaged.pt is damaged or not from "
                                        rf"trainer.tools.pretrain: "
                                        rf"{message}.*; pretrain it again") as err:
        build_video_encoder(frozen_config(tmp_path / "damaged.pt").encoder, (3, 3, 32, 32))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("holdout, held", [(0.1, 1), (0.5, 2), (0.95, EPISODES - 1)])
def test_the_holdout_share_leaves_at_least_one_episode_each_side(dataset, holdout, held):
    """A share that rounds to every episode (0.95 of 3) still trains on one: an empty training split
    failed on an IndexError."""
    train_episodes, held_episodes, *_ = read_datasets([str(dataset)], load_config(VIDEO, SETS),
                                                      holdout=holdout)
    assert (len(train_episodes), len(held_episodes)) == (EPISODES - held, held)


RANDOMIZED = ["env.randomize.enabled=true", "env.randomize.color=0.3",
              "env.randomize.light_intensity=0.4"]


@pytest.fixture(scope="module")
def viewed(tmp_path_factory):
    """A randomised recording with every step also stored as one other scene shows it
    (trainer.tools.record --views 2)."""
    cfg = load_config(VIDEO, [*SETS, *RANDOMIZED])
    path = tmp_path_factory.mktemp("pretrain") / "viewed"
    episodes, space, action_space, _ = record(cfg, EPISODES, seed=SEED, acting=Acting(noise=0.3),
                                              progress=False,
                                              views=2)
    demos.write(path, episodes, space, action_space, cfg.env.id, recording_settings(cfg))
    return path


def scene_gap(model, data, scaler, cfg) -> float:
    """Mean squared difference between the standardised estimates of every step in its own scene and
    the other."""
    own, other = (predict(model, data, cfg, batch_size=64, device=torch.device("cpu"),
                          scaler=scaler, view=view)
                  for view in (None, 0))
    return float(np.mean((scaler.targets(own) - scaler.targets(other)) ** 2))


def test_the_invariance_weight_pulls_the_estimates_of_one_step_in_two_scenes_together(viewed):
    cfg = load_config(VIDEO, [*SETS, *RANDOMIZED])
    episodes, _, obs_shape, views = read_datasets([str(viewed)], cfg, holdout=0.1)
    data = split_of(episodes, cfg, views=views)
    scaler = Standardiser.fit(data.labels)
    gaps = {}
    for invariance in (0.0, 10.0):
        torch.manual_seed(0)
        model = build_regressor(cfg, obs_shape, outputs=scaler.outputs, hidden=32)
        train(model, data, scaler, cfg, epochs=10, batch_size=16, lr=3e-3, invariance=invariance,
              device=torch.device("cpu"), progress=False)
        gaps[invariance] = scene_gap(model, data, scaler, cfg)
    assert views == 1 and gaps[10.0] < 0.5 * gaps[0.0], gaps


def test_pretraining_on_views_reports_the_scene_gap_of_every_part_of_the_state(viewed, tmp_path):
    out = tmp_path / "encoder.pt"
    done = pretrain_cli("--data", viewed, "--out", out, *QUICK, *set_args(RANDOMIZED))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.with_suffix(".json").read_text())
    assert (report["views"], report["invariance"]) == (1, 1.0) and "scene gap" in done.stdout
    gaps = {name: row["scene_gap"] for name, row in report["held_out"].items()}
    assert (set(gaps) == set(OBS_GROUPS) and gaps["plate position"] > 0
            and gaps["slot position"] < 1e-4), gaps
    estimates = frozen_config(out, "encoder.video.frozen_features=state_estimate", *RANDOMIZED)
    _, trunk = build_encoders(estimates, tuple(report["encoder"]["obs_shape"]), torch.device("cpu"))
    episodes, *_ = read_datasets([str(viewed)], estimates, holdout=0.1)
    data = split_of(episodes, estimates, views=1)
    outputs = Standardiser.fit(data.labels).outputs
    assert trunk(data.stacks(np.arange(5), torch.device("cpu"),
                             view=0)).shape == (5, outputs), "a trunk like any"


@pytest.mark.parametrize("data, args, message", [
    (["dataset"], ["--invariance", "2"],
     "--invariance weighs the same step seen in two scenes, and these datasets hold one scene per "
     "step; record them with trainer.tools.record --views 2"),
    (["viewed", "dataset"], [],
     "the datasets hold different numbers of other scenes per step ({viewed}: 1, "
                                "{dataset}: 0); pretrain on recordings made with the same "
                                "trainer.tools.record --views"),
    (["viewed"], ["--invariance", "-1"], "--invariance finite and >= 0"),
])
def test_scene_pairs_the_datasets_cannot_give_are_one_line_errors(dataset, viewed, tmp_path, data,
                                                                  args, message):
    paths = {"dataset": str(dataset), "viewed": str(viewed)}
    done = pretrain_cli("--data", *(paths[name] for name in data), "--out", tmp_path / "encoder.pt",
                        *args,
                        *set_args(RANDOMIZED))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert message.format(**paths) in done.stderr and not (tmp_path / "encoder.pt").exists()


def test_a_few_steps_lower_the_training_loss(dataset):
    cfg = load_config(VIDEO, SETS)
    episodes, _, obs_shape, _ = read_datasets([str(dataset)], cfg, holdout=0.1)
    data = split_of(episodes, cfg, views=0)
    scaler = Standardiser.fit(data.labels)
    torch.manual_seed(0)
    model = build_regressor(cfg, obs_shape, outputs=scaler.outputs, hidden=32)
    losses = train(model, data, scaler, cfg, epochs=15, batch_size=16, lr=3e-3, invariance=1.0,
                   device=torch.device("cpu"), progress=False)
    assert len(losses) >= 50
    # ~1 (standardised labels) at the start
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    assert last < 0.8 * first, (first, last)


@pytest.mark.parametrize("saved, message", [
    ({"arch": "simple3dcnn"},
     "holds simple3dcnn encoder weights; set encoder.video.arch=simple3dcnn or pass weights"),
    ({"num_layers": 2},
     "trained with encoder.video.num_layers=2; use those settings or pretrain weights"),
    ({"frame_stack": 2},
     r"trained with frame stacks \(2, 3, 32, 32\) \(env.frame_stack, env.image_size\) where"),
])
def test_weights_of_another_network_are_a_one_line_error(tmp_path, saved, message):
    cfg = load_config(VIDEO, SETS)
    obs_shape = (saved.get("frame_stack", 3), 3, 32, 32)
    for key in ("arch", "num_layers"):
        setattr(cfg.encoder.video, key, saved.get(key, getattr(cfg.encoder.video, key)))
    path = tmp_path / "other.pt"
    save_encoder_weights(path, cfg.encoder, obs_shape, build_encoder(cfg.encoder, obs_shape))
    with pytest.raises(UserError, match=message) as err:
        build_video_encoder(frozen_config(path).encoder, (3, 3, 32, 32))
    assert "\n" not in str(err.value)


def test_the_stacks_and_labels_are_the_envs_and_the_replays(dataset):
    """The recorded actions replayed in a fresh env give its frame stacks and states; a replay
    filled from those stacks as the training loop fills it samples exactly the stacks pretraining
    feeds the encoder."""
    cfg = load_config(VIDEO, SETS)
    episodes = demos.read(dataset).episodes
    data = split_of(episodes, cfg, views=0)

    env = make_env(cfg.env, pixels=True)
    replay = ReplayBuffer(capacity=len(data) + 8, frame_shape=env.observation_space.shape[1:],
                          frame_dtype=np.uint8,
                          action_dim=env.action_space.shape[0], frame_stack=cfg.env.frame_stack,
                          seed=0, discount=0.99)
    env_stacks, states = [], []
    for i, episode in enumerate(episodes):
        obs, _ = env.reset(seed=SEED + i)
        env_stacks.append(obs)
        states.append(env.unwrapped.observation())
        replay.add_first(obs)
        for action in episode.actions:
            obs, reward, terminated, _, _ = env.step(action)
            env_stacks.append(obs)
            states.append(env.unwrapped.observation())
            replay.add(action, reward, terminated, obs)
    env.close()
    stacks = data.stacks(np.arange(len(data)), torch.device("cpu")).numpy()
    np.testing.assert_array_equal(stacks, np.asarray(env_stacks))
    np.testing.assert_allclose(data.labels, np.asarray(states, np.float32), rtol=0, atol=0)

    sampled = replay.sample(2000)
    ours = {stack.tobytes() for stack in stacks}
    for key in ("obs", "next_obs"):
        assert {stack.tobytes() for stack in sampled[key].numpy()} <= ours, key
    # reset stacks end no transition
    firsts = np.cumsum([0] + [len(e.actions) + 1 for e in episodes[:-1]])
    later = {stack.tobytes() for n, stack in enumerate(stacks) if n not in firsts}
    assert {stack.tobytes() for stack in sampled["next_obs"].numpy()} == later


def test_a_missing_dataset_is_a_one_line_error(tmp_path):
    done = pretrain_cli("--data", str(tmp_path / "absent"), "--out", str(tmp_path / "encoder.pt"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (done.stderr.strip().splitlines()[-1].startswith(
        f"error: no Minari dataset at {tmp_path / 'absent'}"))
    assert not (tmp_path / "encoder.pt").exists()


@pytest.mark.parametrize("args, message", [
    (["--lr", "inf"], "--epochs and --lr must be finite and > 0"),
    (["--epochs", "inf"], "--epochs and --lr must be finite and > 0"),
    (["--out", "{tmp}"], "--out {tmp} names a folder; pass the weights file to write"),
    (["--out", "{tmp}/file/encoder.pt"],
     "cannot write {tmp}/file/encoder.pt: {tmp}/file is not a folder"),
    (["--epochs", "0.5", "--lr", "1e30", "--replace"], "pretraining diverged (training loss "),
])
def test_settings_that_would_end_in_a_traceback_or_nan_weights_are_one_line_errors(
    dataset, tmp_path, args, message):
    """The place to write is checked before training, and weights that are not finite are never
    written, not even with --replace: a huge learning rate used to replace a good weights file with
    NaNs, and exit 0."""
    (tmp_path / "file").write_text("not a folder")
    good = tmp_path / "encoder.pt"
    good.write_bytes(b"earlier weights")
    done = pretrain_cli("--data", str(dataset), "--out", str(good), "--batch-size", "8",
                        *(arg.format(tmp=tmp_path) for arg in args))
    # above it, the progress bar
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert message.format(tmp=tmp_path) in done.stderr.strip().splitlines()[-1]
    # the run's lock stays
    written = sorted(name for name in os.listdir(tmp_path) if name != ".encoder.pt.lock")
    assert good.read_bytes() == b"earlier weights" and written == ["encoder.pt", "file"]


def test_the_frozen_config_uses_the_pretrained_file_with_the_state_configs_sac_settings():
    """Refused with its own demonstrations only until demonstrations work with a frozen trunk."""
    frozen = load_config(ROOT / "configs" / "dishwashing_video_frozen.yaml",
                         ["demos.path=null", "profile=cpu_bf16"])
    state = load_config(ROOT / "configs" / "dishwashing_state.yaml", ["profile=cpu"])
    video = frozen.encoder.video
    assert (video.arch, video.freeze, video.pretrained, video.weights) == (
        "simple2dcnn", True, True, "pretrained/dishwashing_simple2dcnn.pt")
    for key in ("batch_size", "buffer_size", "hidden_dim", "lr", "alpha_lr", "critic_tau",
                "actor_update_every",
                "target_update_every", "init_temperature", "critic_layer_norm"):
        assert getattr(frozen.sac, key) == getattr(state.sac, key), key
    assert (frozen.training.max_env_steps == state.training.max_env_steps
            and frozen.sac.augment_samples == 1)


def test_a_weights_file_with_a_flipped_byte_fails_its_checksum(pretrained, tmp_path):
    """Torch loads flipped bytes silently: a finite change in one weight used to train on without a
    word."""
    out, _ = pretrained
    data = out.read_bytes()
    weight = torch.load(out, weights_only=True)["state_dict"]["convs.0.weight"].reshape(-1)[0]
    old = weight.numpy().tobytes()
    assert data.count(old) == 1
    (tmp_path / "flipped.pt").write_bytes(data.replace(old, (weight + 0.5).numpy().tobytes()))
    with pytest.raises(UserError,
                       match=r"flipped.pt is corrupt \(its checksum does not match its contents\); "
                                        r"restore it from a copy or pretrain it again") as err:
        build_video_encoder(frozen_config(tmp_path / "flipped.pt").encoder, (3, 3, 32, 32))
    assert "\n" not in str(err.value)


def test_pretraining_again_to_the_weights_of_a_frozen_run_never_strands_the_run(
    dataset, pretrained, tmp_path):
    """Pretraining again to the fixed --out the config suggests replaced the file silently, and the
    frozen run trained on it could never resume (its stored features were the old trunk's). Now
    refused; --replace keeps the old file."""
    out = tmp_path / "pretrained" / "encoder.pt"
    out.parent.mkdir()
    shutil.copy(pretrained[0], out)
    shutil.copy(pretrained[0].with_suffix(".json"), out.with_suffix(".json"))
    before = out.read_bytes()
    run = frozen_run(out, tmp_path)
    run.run(8)
    run.save(final_of_episode=False)
    run.close()

    # not the default seed: other weights
    again = ["--data", dataset, "--out", out, *QUICK, "--set", "training.seed=2"]
    refused = pretrain_cli(*again)
    assert refused.returncode == 2 and refused.stderr == (
        f"error: --out {out} already exists, and runs trained frozen on it resume only with that "
        "exact file; pass "
        "another --out, or --replace to write over it (the old file is kept beside it as "
        "encoder.replaced-<time>.pt)\n")
    assert out.read_bytes() == before
    frozen_run(out, tmp_path, resume="auto").close()

    replaced = pretrain_cli(*again, "--replace")
    assert replaced.returncode == 0, replaced.stderr
    [kept] = out.parent.glob("encoder.replaced-*.pt")
    assert kept.read_bytes() == before and out.read_bytes() != before
    assert out.parent.joinpath(kept.stem + ".json").is_file()
    assert f"kept the file it replaced as {kept}" in replaced.stdout
    with pytest.raises(UserError,
                       match=r"stored the features of frozen trunk .* but this config stores the "
                             r"features of frozen trunk .*; resume with .* \(a weights file that "
                             r"trainer.tools.pretrain --replace wrote over is kept beside it as "
                             r"<name>.replaced-<time>.pt\)"):
        frozen_run(out, tmp_path, resume="auto")
    resumed = frozen_run(kept, tmp_path, resume="auto")
    assert resumed.progress.env_step >= 8
    resumed.close()


def test_init_goes_on_from_an_earlier_files_encoder_head_and_label_units(
    dataset, pretrained, tmp_path):
    """With a vanishing learning rate, pretraining from --init writes back the earlier weights and
    scores its held-out loss, in its label units and head width; a fresh start from the same seed
    writes other weights."""
    init = pretrained[0]
    earlier = json.loads(init.with_suffix(".json").read_text())
    runs = {}
    for name, args in (("init", ["--init", str(init)]), ("fresh", ["--head-hidden", str(HIDDEN)])):
        out = tmp_path / f"{name}.pt"
        done = pretrain_cli("--data", str(dataset), "--out", str(out), "--epochs", "0.1",
                            "--batch-size", "8",
                            "--lr", "1e-12", *args)
        assert done.returncode == 0, done.stderr
        runs[name] = (torch.load(out, weights_only=True),
                      json.loads(out.with_suffix(".json").read_text()))
    (weights, report), saved = runs["init"], torch.load(init, weights_only=True)
    for part in ("state_dict", "projection", "readout"):
        for key, value in saved[part].items():
            torch.testing.assert_close(weights[part][key], value, rtol=0, atol=1e-6)
    assert (report["labels"] == earlier["labels"] and report["head_hidden"] == HIDDEN
            and report["init"] == str(init))
    assert report["held_out_loss"] == pytest.approx(earlier["held_out_loss"], rel=1e-4)
    fresh = runs["fresh"][0]["state_dict"]
    assert max((fresh[key] - value).abs().max()
               for key, value in saved["state_dict"].items()) > 1e-3


def test_an_init_file_that_cannot_be_gone_on_from_is_a_one_line_error(
    dataset, pretrained, tmp_path, capsys):
    bare = tmp_path / "bare.pt"
    shutil.copy(pretrained[0], bare)  # without its report: no label units
    other = tmp_path / "other.pt"
    shutil.copy(pretrained[0], other)
    varying = (
        Standardiser.of(
            **json.loads(pretrained[0].with_suffix(".json").read_text())["labels"]).outputs)
    other.with_suffix(".json").write_text(json.dumps({"labels": {"mean": [0.0] * (varying + 1),
                                                                 "std": [1.0] * varying + [0.0]}}))
    mismatched = tmp_path / "mismatched.pt"
    shutil.copy(pretrained[0], mismatched)
    mismatched.with_suffix(".json").write_text(
        '{"labels": {"mean": [0.0, 1.0], "std": [1.0, 1.0]}}')
    base = ["--config", VIDEO, "--data", str(dataset), "--out", str(tmp_path / "out.pt"),
            "--epochs", "0.1",
            *set_args(SETS)]
    for args, message in (
            (["--init", str(bare)],
             f"--init {bare} is not an encoder weights file with its readout and its report "
                                    f"({tmp_path / 'bare.json'}) beside it; pass a file "
                                    "python3 -m trainer.tools.pretrain"),
            (["--init", str(other)],
             f"--init {other} learnt a state of {varying + 1} numbers and these recordings "
                                     f"hold {OBS_SIZE}; pass recordings of the task it learnt"),
            (["--init", str(mismatched)],
             f"--init {mismatched} estimates {varying} numbers and its report's labels "
                                          "vary in 2; put back the report it was written with"),
            (["--init", str(pretrained[0]), "--head-hidden", "8"],
             "--head-hidden is the width of --init")):
        assert main(base + args) == 2
        err = capsys.readouterr().err
        assert message in err and err.strip().count("\n") == 0, err
    assert not (tmp_path / "out.pt").exists()


def test_a_policy_reads_another_encoders_estimate_in_the_same_units_only(
    dataset, pretrained, tmp_path, capsys):
    """scripts/scripted_from_frames.py --policy-reads weights: the policy's own weights file changes
    nothing, another file in the same label units changes the path it takes; a projection policy or
    other units are one line."""
    module = script("scripted_from_frames")
    own = pretrained[0]
    other = tmp_path / "other.pt"  # the same units, another estimate
    payload = torch.load(own, weights_only=True)
    payload["readout"]["bias"] += 0.5
    del payload["checksum"]
    torch.save(payload | {"checksum": checkpoint_files.digest(payload)}, other)
    shutil.copy(own.with_suffix(".json"), other.with_suffix(".json"))
    policies = {}
    for features in ("state_estimate", "projection"):
        run = frozen_run(own, tmp_path / features, None,
                         f"encoder.video.frozen_features={features}")
        run.run(8)
        run.save(final_of_episode=False)
        run.close()
        [policies[features]] = (tmp_path / features / "ckpt").glob("*_latest.pt")

    def main(weights, *args) -> int:
        capsys.readouterr()
        return module.main(["--config", str(ROOT / "configs" / "dishwashing_video_frozen.yaml"),
                            "--weights",
                            str(weights), "--scenes", "fixed", "--episodes", "1", *args,
                            *set_args(SETS)])

    def measured(weights, *args) -> str:
        assert main(weights, *args) == 0
        return capsys.readouterr().out.split("\n", 1)[1]  # after the line that names the weights

    policy = ["--policy", str(policies["state_estimate"])]
    assert measured(own, *policy, "--policy-reads", "weights") == measured(own, *policy)
    assert measured(other, *policy, "--policy-reads", "weights") != measured(other, *policy)
    assert main(other, "--policy", str(policies["projection"]), "--policy-reads", "weights") == 2
    assert ("pass --policy with a checkpoint trained with "
            "encoder.video.frozen_features=state_estimate" in capsys.readouterr().err)
    other.with_suffix(".json").write_text(json.dumps({"labels": {"mean": [0.0] * OBS_SIZE,
                                                                 "std": [1.0] * OBS_SIZE}}))
    assert main(other, *policy, "--policy-reads", "weights") == 2
    assert "learnt on estimates in other units than" in capsys.readouterr().err


def test_pretraining_stopped_by_ctrl_c_is_one_line_and_leaves_the_earlier_file(
    dataset, pretrained, tmp_path):
    """Ctrl-C in trainer.tools.pretrain was a KeyboardInterrupt traceback."""
    out = tmp_path / "encoder.pt"
    shutil.copy(pretrained[0], out)
    command = pretrain_command("--data", dataset, "--out", out, "--replace", "--epochs", "1000",
                               "--batch-size", "8")
    status, stderr = interrupt_when_started(command, signal.SIGINT, started=b"pretraining:")
    assert status == 130 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == (  # its own line: the bar has ended before it
        f"stopped by signal 2; {out} was not written (an earlier file there is intact)")
    assert out.read_bytes() == pretrained[0].read_bytes()
    assert sorted(os.listdir(tmp_path)) == [".encoder.pt.lock", "encoder.pt"], (
        "nothing but the output's lock file")


def test_pretraining_into_a_weights_file_another_pretraining_is_writing_refuses_in_one_line(
    dataset, tmp_path):
    """Both trained (a command run twice), and the one that finished last silently replaced the
    other's file."""
    out = tmp_path / "pretrained" / "encoder.pt"
    args = ["--data", dataset, "--out", out, "--batch-size", "8", "--head-hidden", HIDDEN]
    command = pretrain_command(*args, "--epochs", "1000")
    first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        wait_for_lock(out.with_name(".encoder.pt.lock"), first)
        pause(first)
        second = pretrain_cli(*args, "--epochs", "1")
        assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
        assert second.stderr.startswith(
            f"error: weights file {out} is in use by pid {first.pid} on host ")
        assert second.stderr.endswith("; wait for that process to finish, or pass another --out\n")
        assert not out.exists() and not out.with_suffix(".json").exists()
    finally:
        first.kill()
        first.communicate()
