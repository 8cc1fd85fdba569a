"""Config: defaults <- YAML <- profile <- --set, and one-line errors (exit status 2, no traceback)
for bad input."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from errors import UserError
from sac.replay import ReplayBuffer
from sac.ring import min_ring_slots
from tests.conftest import DEFAULT_CONFIG as DEFAULT
from tests.conftest import ROOT, run_cli
from trainer.config.__main__ import main
from trainer.config.load import AUTO_PROFILE_VARIABLE, Config, load_config, to_dict
from trainer.process import device
from trainer.process.cli import explain


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path


def test_yaml_overrides_defaults_and_set_overrides_yaml(tmp_path):
    path = write(tmp_path, "sac: {batch_size: 64}\nenv: {id: InvertedPendulum-v5}\n")
    cfg = load_config(path, ["sac.batch_size=16", "encoder.video.arch=simple2dcnn"])
    assert cfg.sac.batch_size == 16
    assert cfg.env.id == "InvertedPendulum-v5"
    assert cfg.sac.lr == Config().sac.lr


def test_profile_block_applies_and_set_still_wins(tmp_path):
    path = write(
        tmp_path,
        "profile: gpu\nprofiles:\n  cpu: {sac: {batch_size: 32}}\n"
        "  gpu: {sac: {batch_size: 512, buffer_size: 7777}}\n",
    )
    cfg = load_config(path, ["sac.buffer_size=5000"])
    assert (cfg.profile, cfg.sac.batch_size, cfg.sac.buffer_size) == ("gpu", 512, 5000)
    assert load_config(path, ["profile=cpu"]).sac.batch_size == 32


def test_auto_profile_picks_cpu_without_cuda(tmp_path, monkeypatch):
    monkeypatch.delenv(AUTO_PROFILE_VARIABLE)
    path = write(tmp_path, "profiles:\n  cpu: {sac: {batch_size: 32}}\n")
    cfg = load_config(path)
    assert cfg.profile == "cpu" and cfg.sac.batch_size == 32


def test_auto_profile_picks_cpu_bf16_where_the_config_has_it_and_the_cpu_computes_bfloat16(
    tmp_path, monkeypatch):
    monkeypatch.delenv(AUTO_PROFILE_VARIABLE)
    both = write(tmp_path,
                 "profiles:\n  cpu: {sac: {batch_size: 32}}\n  cpu_bf16: {sac: {batch_size: 64}}\n")
    cpu = torch.device("cpu")
    suited = device.native_bfloat16(cpu) and device.can_compile(cpu)
    assert load_config(both).profile == ("cpu_bf16" if suited else "cpu"), (
        "this machine's own answer")
    monkeypatch.setattr(device, "native_bfloat16", lambda _: True)
    monkeypatch.setattr(device, "can_compile", lambda _: True)
    assert (load_config(both).profile, load_config(both).sac.batch_size) == ("cpu_bf16", 64)
    assert load_config(both, ["profile=cpu"]).sac.batch_size == 32, "an explicit profile wins"
    cpu_only = (tmp_path / "cpu_only.yaml")
    cpu_only.write_text("profiles:\n  cpu: {sac: {batch_size: 32}}\n")
    assert load_config(cpu_only).profile == "cpu", "a config without cpu_bf16 keeps cpu"
    monkeypatch.setattr(device, "can_compile", lambda _: False)
    assert load_config(both).profile == "cpu", (
        "cpu_bf16 was measured compiled; uncompiled it is not the better choice")
    monkeypatch.setattr(device, "can_compile", lambda _: True)
    monkeypatch.setattr(device, "native_bfloat16", lambda _: False)
    assert load_config(both).profile == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert load_config(both).profile == "gpu"


def test_the_machine_can_say_what_auto_means_and_an_explicit_profile_still_wins(
    tmp_path, monkeypatch):
    """PIXEL_SAC_PROFILE is what `profile: auto` picks, whatever the hardware (the suite sets it to
    cpu)."""
    both = write(tmp_path,
                 "profiles:\n  cpu: {sac: {batch_size: 32}}\n  cpu_bf16: {sac: {batch_size: 64}}\n")
    monkeypatch.setattr(device, "native_bfloat16", lambda _: True)
    monkeypatch.setattr(device, "can_compile", lambda _: True)
    monkeypatch.setenv(AUTO_PROFILE_VARIABLE, "cpu")
    assert (load_config(both).profile, load_config(both).sac.batch_size) == ("cpu", 32)
    assert load_config(both, ["profile=cpu_bf16"]).sac.batch_size == 64, "an explicit profile wins"
    monkeypatch.setenv(AUTO_PROFILE_VARIABLE, "tpu")
    with pytest.raises(UserError,
                       match="PIXEL_SAC_PROFILE must be one of cpu, cpu_bf16, gpu; got 'tpu'"):
        load_config(both)


def test_int_is_accepted_for_float_and_null_for_optional(tmp_path):
    cfg = load_config(write(tmp_path, "sac: {lr: 1, alpha_lr: 3e-4}\n"
                                      "env: {max_episode_steps: null, camera: track}\n"))
    assert cfg.sac.lr == 1.0 and isinstance(cfg.sac.lr, float)
    assert cfg.sac.alpha_lr == 3e-4, (
        "exponent floats without a dot are floats, not YAML 1.1 strings")
    assert cfg.env.max_episode_steps is None and cfg.env.camera == "track"


def test_a_file_merges_over_its_bases_before_the_profile_and_set(tmp_path):
    (tmp_path / "family").mkdir()
    (tmp_path / "family" / "root.yaml").write_text(
        "sac: {lr: 3.0e-4, hidden_dim: 256, nstep: 2}\ntraining: {episodes: 7}\n"
        "profiles:\n  cpu: {sac: {batch_size: 32, buffer_size: 5000}}\n")
    (tmp_path / "family" / "mid.yaml").write_text(
        "base: root.yaml\nsac: {hidden_dim: 128}\nenv: {id: A-v0, camera: side}\n")
    (tmp_path / "other.yaml").write_text("env: {id: B-v0}\ntraining: {episodes: 9}\n")
    task = tmp_path / "task.yaml"
    task.write_text("base: [family/mid.yaml, other.yaml]\nsac: {hidden_dim: 64}\n"
                    "env: {camera: null}\nprofiles:\n  cpu: {sac: {batch_size: 16}}\n")
    cfg = load_config(task, ["profile=cpu"])
    assert cfg.sac.hidden_dim == 64, "the file over its bases"
    assert (cfg.sac.lr, cfg.sac.nstep) == (3e-4, 2), (
        "a mapping merges key by key: the base's other keys stay")
    assert cfg.env.id == "B-v0" and cfg.training.episodes == 9, "a later base over an earlier one"
    assert cfg.env.camera is None, "null replaces the base's value"
    assert (cfg.sac.batch_size,
            cfg.sac.buffer_size) == (16, 5000), "profile blocks merge key by key too"
    assert cfg.profiles == {"cpu": {"sac": {"batch_size": 16, "buffer_size": 5000}}}
    assert load_config(task,
                       ["profile=cpu",
                        "sac.batch_size=8"]).sac.batch_size == 8, "--set has the last word"
    (tmp_path / "family" / "root.yaml").write_text(
        "sac: {nstep: 2}\nprofiles: {cpu: {sac: {nstep: 4}}}\n")
    assert load_config(task, ["profile=cpu"]).sac.nstep == 4, (
        "a base's profile block applies after the file's keys")
    assert "base" not in to_dict(cfg), (
        "the resolved config holds settings, not where they came from")


@pytest.mark.parametrize("files, expected", [
    ({"task.yaml": "base: task.yaml\n"},
     r"inherit in a cycle: .*task.yaml -> .*task.yaml; remove one"),
    ({"task.yaml": "base: a.yaml\n", "a.yaml": "base: [b.yaml]\n", "b.yaml": "base: a.yaml\n"},
     r"inherit in a cycle: .*task.yaml -> .*a.yaml -> .*b.yaml -> .*a.yaml"),
    ({"task.yaml": "base: gone.yaml\n"}, r"base config .*gone.yaml named in .*task.yaml not found"),
    ({"task.yaml": "base: {sac: 1}\n"},
     r"base in .*task.yaml must be a file path or a list of them"),
    ({"task.yaml": "base: a.yaml\n", "a.yaml": "sac: {lr: 1}\nenv: {}\nsac: {nstep: 3}\n"},
     r"cannot parse .*a.yaml at line 3: duplicate key 'sac' \(first at line 1\)"),
    ({"task.yaml": "sac: {lr: 1, lr: 2}\n"},
     r"cannot parse .*task.yaml at line 1: duplicate key 'lr'"),
    ({"task.yaml": "profiles: {cpu: {base: a.yaml}}\n"}, r"unknown config key 'profiles.cpu.base'"),
])
def test_inheritance_and_duplicate_keys_fail_in_one_line(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(UserError, match=expected) as err:
        load_config(tmp_path / "task.yaml")
    assert "\n" not in str(err.value)


def test_a_key_that_overrides_a_yaml_merge_key_is_not_a_duplicate(tmp_path):
    path = write(
        tmp_path,
        "sac: &small {batch_size: 8, nstep: 2}\n"
        "profiles: {cpu: {sac: {<<: *small, batch_size: 16}}}\n"
    )
    cfg = load_config(path, ["profile=cpu"])
    assert (cfg.sac.batch_size, cfg.sac.nstep) == (16, 2)


@pytest.mark.parametrize("config",
                         sorted(str(p.relative_to(ROOT))
                                for p in (ROOT / "configs").rglob("*.yaml")))
def test_every_shipped_config_resolves(config):
    cfg = load_config(ROOT / config)
    assert to_dict(cfg)["env"]["id"]


@pytest.mark.parametrize("task, action_repeat",
                         [("cartpole_swingup", 8), ("reacher_easy", 4), ("finger_spin", 2),
                           ("cheetah_run", 4), ("walker_walk", 2)])
def test_dmc_pixel_configs_carry_drq_settings_on_a_gpu_and_the_measured_cpu_variants_on_a_cpu(
    task, action_repeat):
    gpu = load_config(ROOT / f"configs/dmc/{task}.yaml", ["profile=gpu"])
    assert (gpu.env.image_size, gpu.env.frame_stack,
            gpu.env.action_repeat) == (84, 3, action_repeat)
    assert (gpu.sac.batch_size, gpu.sac.augment_samples, gpu.sac.augment_pad,
            gpu.sac.nstep) == (512, 2, 4, 1)
    assert (gpu.sac.lr, gpu.sac.critic_tau, gpu.sac.actor_update_every,
            gpu.sac.init_temperature) == (
        1e-3, 0.01, 2, 0.1
    )
    cpu = load_config(ROOT / f"configs/dmc/{task}.yaml", ["profile=cpu"])
    assert (cpu.sac.batch_size, cpu.sac.augment_samples,
            cpu.sac.nstep) == (64, 1, 3), "the README's cartpole CPU run"
    assert not (cpu.training.autocast or cpu.training.compile)
    bf16 = load_config(ROOT / f"configs/dmc/{task}.yaml", ["profile=cpu_bf16"])
    assert (bf16.sac.batch_size, bf16.sac.augment_samples, bf16.sac.nstep) == (128, 1, 3), (
        "the README's bf16 cartpole run"
    )
    assert bf16.training.autocast and bf16.training.compile


@pytest.mark.parametrize(
    "text, overrides, expected",
    [
        ("sac: {batch_sise: 8}\n", [], "unknown config key 'sac.batch_sise'"),
        ("", ["sac.batch_size=lots"], "'sac.batch_size' must be int"),
        ("", ["encoder.video.arch=resnet9000"],
         "unknown encoder.video.arch 'resnet9000'; allowed: simple2dcnn"),
        ("", ["encoder.type=audio"],
         "config key 'encoder.type' must be one of video, state, got 'audio'"),
        ("profiles: {tpu: {}}\n", [], "unknown profile 'profiles.tpu'"),
        ("profiles: {gpu: {sac: {bach_size: 1}}}\n", [],
         "unknown config key 'profiles.gpu.sac.bach_size'"),
        ("profiles: {cpu: {}, gpu: {}}\n", ["profile=cpu_bf16"],
         "profile cpu_bf16 has no profiles.cpu_bf16 block in"),
        ("sac: 5\n", [], "'sac' must be a mapping"),
        ("sac: {lr: fast}\n", [], "'sac.lr' must be float"),
        ("env: [unclosed\n", [], "cannot parse"),
        ("", ["sac.batch_size"], "--set expects key=value"),
        (
            "", ["encoder.video.weights=/tmp/w.pth"],
            "encoder.video.weights is set but encoder.video.pretrained is false",
        ),
        ("", ["encoder.video.input_size=16"],
         "config key 'encoder.video.input_size' must be in [32, 1024] or null"),
        ("", ["encoder.type=state", "encoder.lr=1e-4"],
         "encoder.lr applies to video encoders only"),
        ("", ["sac.augment_samples=0"],
         "config key 'sac.augment_samples' must be in [1, 16], got 0"),
        ("", ["sac.nstep=0"], "config key 'sac.nstep' must be in [1, 100], got 0"),
        (
            "", ["sac.augment_samples=2", "sac.augment_pad=0"],
            "sac.augment_samples > 1 needs a video encoder and sac.augment_pad > 0",
        ),
        ("", ["sac.augment_samples=2", "encoder.type=state"],
         "sac.augment_samples > 1 needs a video encoder"),
        ("", ["encoder.video.frozen_features=state_estimate"],
         "encoder.video.frozen_features=state_estimate is what a frozen trunk stores, and this "
         "run trains its encoder; set encoder.video.freeze=true, or frozen_features=projection"),
        ("", ["encoder.video.frozen_features=state"],
         "config key 'encoder.video.frozen_features' must be one of projection, state_estimate, "
         "got 'state'"),
        ("", ["env.backend=opengl"],
         "config key 'env.backend' must be one of mujoco, mujoco_warp, got 'opengl'"),
        ("", ["sac.updates_per_step=-0.5"],
         "config key 'sac.updates_per_step' must be in (0, 100] (fractions allowed"),
        ("", ["env.num_envs=300"],
         "env.num_envs must be at most 256 with env.backend=mujoco, a process each; got 300: "
                                   "lower it, or use env.backend=mujoco_warp for more"),
        ("", ["env.backend=mujoco_warp", "env.num_envs=4", "env.warp_processes=8"],
         "env.warp_processes (8) exceeds env.num_envs (4): a process steps one world at least; "
         "lower it, or set it to null (one per core, at most one per world)"),
        ("", ["env.num_envs=2", "env.frame_stack=3", "sac.buffer_size=9"],
         "sac.buffer_size must be at least 10 (a ring of 5 slots per env), got 9; raise it"),
        # states are stored one per slot
        ("", ["encoder.type=state", "env.frame_stack=3", "sac.buffer_size=2"],
         "sac.buffer_size must be at least 3 (a ring of 3 slots per env), got 2; raise it"),
        # learn() would wait for good
        ("", ["encoder.type=state", "sac.batch_size=64", "sac.buffer_size=63"],
         "sac.buffer_size (63) is below sac.batch_size (64): the replay could never hold a batch, "
         "so the run would never update; raise sac.buffer_size or lower sac.batch_size"),
        ("", ["env.warp_processes=0"],
         "config key 'env.warp_processes' must be in [1, 1024] or null (null = one per core"),
        ("", ["training.eval_envs=0"],
         "config key 'training.eval_envs' must be in [1, 256], got 0"),
        ("", ["encoder.type=state", "training.eval_envs=2"],
         "training.eval_envs > 1 evaluates in worker processes, whose state-mode envs render no "
         "eval video; set logging.eval_video=false or training.eval_envs=1"),
    ],
)
def test_bad_input_is_a_user_error_naming_the_key(tmp_path, text, overrides, expected):
    with pytest.raises(UserError, match=re.escape(expected)):
        load_config(write(tmp_path, text), overrides)


def test_the_smallest_replay_is_the_replays_own_rule(tmp_path):
    """The config refuses exactly what ReplayBuffer would: frame stacks need their window, states
    and a frozen trunk's features (stored one per slot, no stacks) only one slot more than a
    transition."""
    for overrides, frame_stack in ((["env.frame_stack=4"], 4), (["encoder.type=state"], None),
                                   (["encoder.video.freeze=true"], None)):
        fits = min_ring_slots(frame_stack) * 2
        cfg = load_config(write(tmp_path, ""),
                          [*overrides, "env.num_envs=2", f"sac.buffer_size={fits}",
                           "sac.batch_size=2"])
        ReplayBuffer(capacity=fits, frame_shape=(3,), frame_dtype=np.uint8, action_dim=1,
                     frame_stack=frame_stack,
                     seed=0, discount=0.99, num_envs=2)
        assert cfg.sac.buffer_size == fits and cfg.replay_stack == frame_stack
        with pytest.raises(UserError, match=f"at least {fits} "):
            load_config(write(tmp_path, ""),
                        [*overrides, "env.num_envs=2", f"sac.buffer_size={fits - 1}",
                         "sac.batch_size=2"])
        with pytest.raises(UserError, match="slots per env"):
            ReplayBuffer(capacity=fits - 1, frame_shape=(3,), frame_dtype=np.uint8, action_dim=1,
                         frame_stack=frame_stack, seed=0, discount=0.99, num_envs=2)


def test_warp_worlds_may_outnumber_worker_processes(tmp_path):
    """A GPU steps thousands of MuJoCo Warp worlds; the OpenGL backend's 256 is a limit on
    processes."""
    cfg = load_config(write(tmp_path, ""),
                      ["env.backend=mujoco_warp", "env.num_envs=4096", "sac.buffer_size=1000000"])
    assert cfg.env.num_envs == 4096


def test_warp_processes_binds_only_the_backend_it_splits(tmp_path):
    """`env.warp_processes` splits MuJoCo Warp worlds over processes; with the mujoco backend (set
    by a base file or a script) it means nothing, so one env does not refuse it."""
    cfg = load_config(write(tmp_path, ""), ["env.num_envs=1", "env.warp_processes=4"])
    assert cfg.env.backend == "mujoco" and cfg.env.warp_processes == 4


def test_messages_from_low_layers_name_the_config_keys_of_their_parameters():
    err = UserError(
        "unknown `camera` 'top'; raise `capacity` or lower `num_envs`; run `hf download x` or "
        "`other`")
    assert explain(err) == (
        "unknown env.camera 'top'; raise sac.buffer_size or lower env.num_envs; run `hf download "
        "x` or `other`"
    )


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--config", "no/such/file.yaml"], "config file not found: no/such/file.yaml"),
        (["--config", DEFAULT, "--set", "sac.batch_sise=8"], "unknown config key 'sac.batch_sise'"),
        (["--config", DEFAULT, "--set", "sac.batch_size=abc"], "'sac.batch_size' must be int"),
        (["--config", DEFAULT, "--set", "encoder.video.arch=resnet9000"],
         "unknown encoder.video.arch"),
        (["--config", DEFAULT, "--set", "env.id=NoSuchTask-v9"], "unknown env.id 'NoSuchTask-v9'"),
        (["--config", DEFAULT, "--set", "env.backend=mjx"],
         "config key 'env.backend' must be one of mujoco, mujoco_warp"),
    ],
)
def test_cli_reports_bad_input_in_one_line_with_status_2(args, expected):
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], (
        result.stderr)


def test_cli_reports_unparseable_yaml(tmp_path):
    result = run_cli("--config", str(write(tmp_path, "env: [unclosed\n")))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (result.stderr.count("\n") == 1 and "cannot parse" in result.stderr
            and "line 2" in result.stderr)


def test_print_helper_shows_resolved_values_one_per_line(capsys):
    assert main(
        [DEFAULT, "--set", "checkpoint.name=pod_run", "--print", "run_name", "--print",
         "logging.tensorboard_dir"]
    ) == 0
    assert capsys.readouterr().out.splitlines() == ["pod_run", "runs"]


@pytest.mark.parametrize("args, expected", [
    (["--set", "sac.nope=1", "--print", "run_name"], "unknown config key 'sac.nope'"),
    (["--print", "logging.nope"], "unknown config key 'logging.nope'; pass a dotted key"),
    # attributes of a value are not keys
    (["--print", "sac.lr.real"], "unknown config key 'sac.lr.real'"),
    (["--print", "__class__"], "unknown config key '__class__'"),
    (["--print", "run_name.upper"], "unknown config key 'run_name.upper'"),
])
def test_print_helper_reports_bad_keys_in_one_line_with_status_2(capsys, args, expected):
    assert main([DEFAULT, *args]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


# the PlaNet benchmark's six tasks and the action repeat each runs with (PlaNet, Hafner et al. 2019;
# DrQ keeps them)
PLANET_ACTION_REPEAT = {"cartpole_swingup": 8, "reacher_easy": 4, "cheetah_run": 4,
                        "finger_spin": 2,
                        "walker_walk": 2, "ball_in_cup_catch": 4}


@pytest.mark.parametrize("task", sorted(PLANET_ACTION_REPEAT))
def test_each_planet_task_has_a_pixel_and_a_state_config_at_the_benchmark_s_action_repeat(task):
    domain, name = task.rsplit("_", 1)
    pixels, state = (load_config(str(ROOT / "configs" / "dmc" / f"{task}{end}.yaml"))
                     for end in ("", "_state"))
    for cfg, encoder in ((pixels, "video"), (state, "state")):
        assert cfg.env.id == f"dm_control/{domain}-{name}-v0" and cfg.encoder.type == encoder
        assert cfg.env.action_repeat == PLANET_ACTION_REPEAT[task]
