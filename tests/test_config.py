"""Config: defaults <- YAML <- profile <- --set, and one-line errors (exit status 2, no traceback) for bad input."""

from pathlib import Path

import pytest
import torch

from errors import UserError
from tests.conftest import DEFAULT_CONFIG as DEFAULT
from tests.conftest import ROOT, run_cli
from trainer import device
from trainer.config import Config, explain, load_config, main, to_dict


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
    path = write(tmp_path, "profile: gpu\nprofiles:\n  cpu: {sac: {batch_size: 32}}\n  gpu: {sac: {batch_size: 512, buffer_size: 7777}}\n")
    cfg = load_config(path, ["sac.buffer_size=5000"])
    assert (cfg.profile, cfg.sac.batch_size, cfg.sac.buffer_size) == ("gpu", 512, 5000)
    assert load_config(path, ["profile=cpu"]).sac.batch_size == 32


def test_auto_profile_picks_cpu_without_cuda(tmp_path):
    path = write(tmp_path, "profiles:\n  cpu: {sac: {batch_size: 32}}\n")
    cfg = load_config(path)
    assert cfg.profile == "cpu" and cfg.sac.batch_size == 32


def test_auto_profile_picks_cpu_bf16_where_the_config_has_it_and_the_cpu_computes_bfloat16(tmp_path, monkeypatch):
    both = write(tmp_path, "profiles:\n  cpu: {sac: {batch_size: 32}}\n  cpu_bf16: {sac: {batch_size: 64}}\n")
    cpu = torch.device("cpu")
    suited = device.native_bfloat16(cpu) and device.can_compile(cpu)
    assert load_config(both).profile == ("cpu_bf16" if suited else "cpu"), "this machine's own answer"
    monkeypatch.setattr(device, "native_bfloat16", lambda _: True)
    monkeypatch.setattr(device, "can_compile", lambda _: True)
    assert (load_config(both).profile, load_config(both).sac.batch_size) == ("cpu_bf16", 64)
    assert load_config(both, ["profile=cpu"]).sac.batch_size == 32, "an explicit profile wins"
    cpu_only = (tmp_path / "cpu_only.yaml")
    cpu_only.write_text("profiles:\n  cpu: {sac: {batch_size: 32}}\n")
    assert load_config(cpu_only).profile == "cpu", "a config without cpu_bf16 keeps cpu"
    monkeypatch.setattr(device, "can_compile", lambda _: False)
    assert load_config(both).profile == "cpu", "cpu_bf16 was measured compiled; uncompiled it is not the better choice"
    monkeypatch.setattr(device, "can_compile", lambda _: True)
    monkeypatch.setattr(device, "native_bfloat16", lambda _: False)
    assert load_config(both).profile == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert load_config(both).profile == "gpu"


def test_int_is_accepted_for_float_and_null_for_optional(tmp_path):
    cfg = load_config(write(tmp_path, "sac: {lr: 1, alpha_lr: 3e-4}\nenv: {max_episode_steps: null, camera: track}\n"))
    assert cfg.sac.lr == 1.0 and isinstance(cfg.sac.lr, float)
    assert cfg.sac.alpha_lr == 3e-4, "exponent floats without a dot are floats, not YAML 1.1 strings"
    assert cfg.env.max_episode_steps is None and cfg.env.camera == "track"


@pytest.mark.parametrize("config", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.yaml")))
def test_every_shipped_config_resolves(config):
    cfg = load_config(ROOT / config)
    assert to_dict(cfg)["env"]["id"]


@pytest.mark.parametrize("task, action_repeat", [("cartpole_swingup", 8), ("reacher_easy", 4), ("finger_spin", 2),
                                                  ("cheetah_run", 4), ("walker_walk", 2)])
def test_dmc_pixel_configs_carry_drq_settings_on_a_gpu_and_the_measured_cpu_variants_on_a_cpu(task, action_repeat):
    gpu = load_config(ROOT / f"configs/dmc/{task}.yaml", ["profile=gpu"])
    assert (gpu.env.image_size, gpu.env.frame_stack, gpu.env.action_repeat) == (84, 3, action_repeat)
    assert (gpu.sac.batch_size, gpu.sac.augment_samples, gpu.sac.augment_pad, gpu.sac.nstep) == (512, 2, 4, 1)
    assert (gpu.sac.lr, gpu.sac.critic_tau, gpu.sac.actor_update_every, gpu.sac.init_temperature) == (1e-3, 0.01, 2, 0.1)
    cpu = load_config(ROOT / f"configs/dmc/{task}.yaml", ["profile=cpu"])
    assert (cpu.sac.batch_size, cpu.sac.augment_samples, cpu.sac.nstep) == (64, 1, 3), "the README's cartpole CPU run"
    assert not (cpu.training.autocast or cpu.training.compile)
    bf16 = load_config(ROOT / f"configs/dmc/{task}.yaml", ["profile=cpu_bf16"])
    assert (bf16.sac.batch_size, bf16.sac.augment_samples, bf16.sac.nstep) == (128, 1, 3), "the README's bf16 cartpole run"
    assert bf16.training.autocast and bf16.training.compile


@pytest.mark.parametrize(
    "text, overrides, expected",
    [
        ("sac: {batch_sise: 8}\n", [], "unknown config key 'sac.batch_sise'"),
        ("", ["sac.batch_size=lots"], "'sac.batch_size' must be int"),
        ("", ["encoder.video.arch=resnet9000"], "unknown encoder.video.arch 'resnet9000'; allowed: simple2dcnn"),
        ("", ["encoder.type=audio"], "encoder.type must be one of video, state"),
        ("profiles: {tpu: {}}\n", [], "unknown profile 'profiles.tpu'"),
        ("profiles: {gpu: {sac: {bach_size: 1}}}\n", [], "unknown config key 'profiles.gpu.sac.bach_size'"),
        ("profiles: {cpu: {}, gpu: {}}\n", ["profile=cpu_bf16"], "profile cpu_bf16 has no profiles.cpu_bf16 block in"),
        ("sac: 5\n", [], "'sac' must be a mapping"),
        ("sac: {lr: fast}\n", [], "'sac.lr' must be float"),
        ("env: [unclosed\n", [], "cannot parse"),
        ("", ["sac.batch_size"], "--set expects key=value"),
        ("", ["encoder.video.weights=/tmp/w.pth"], "encoder.video.weights is set but encoder.video.pretrained is false"),
        ("", ["encoder.video.input_size=16"], "encoder.video.input_size must be >= 32 or null"),
        ("", ["encoder.type=state", "encoder.lr=1e-4"], "encoder.lr must be > 0 and applies to video encoders only"),
        ("", ["sac.augment_samples=0"], "config key 'sac.augment_samples' must be >= 1"),
        ("", ["sac.nstep=0"], "config key 'sac.nstep' must be >= 1"),
        ("", ["sac.augment_samples=2", "sac.augment_pad=0"], "sac.augment_samples > 1 needs a video encoder and sac.augment_pad > 0"),
        ("", ["sac.augment_samples=2", "encoder.type=state"], "sac.augment_samples > 1 needs a video encoder"),
    ],
)
def test_bad_input_is_a_user_error_naming_the_key(tmp_path, text, overrides, expected):
    with pytest.raises(UserError, match=expected.replace("(", r"\(").replace("[", r"\[")):
        load_config(write(tmp_path, text), overrides)


def test_messages_from_low_layers_name_the_config_keys_of_their_parameters():
    err = UserError("unknown `camera` 'top'; raise `capacity` or lower `num_envs`; run `hf download x` or `other`")
    assert explain(err) == "unknown env.camera 'top'; raise sac.buffer_size or lower env.num_envs; run `hf download x` or `other`"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--config", "no/such/file.yaml"], "config file not found: no/such/file.yaml"),
        (["--config", DEFAULT, "--set", "sac.batch_sise=8"], "unknown config key 'sac.batch_sise'"),
        (["--config", DEFAULT, "--set", "sac.batch_size=abc"], "'sac.batch_size' must be int"),
        (["--config", DEFAULT, "--set", "encoder.video.arch=resnet9000"], "unknown encoder.video.arch"),
        (["--config", DEFAULT, "--set", "env.id=NoSuchTask-v9"], "unknown env.id 'NoSuchTask-v9'"),
    ],
)
def test_cli_reports_bad_input_in_one_line_with_status_2(args, expected):
    result = run_cli(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.stderr


def test_cli_reports_unparseable_yaml(tmp_path):
    result = run_cli("--config", str(write(tmp_path, "env: [unclosed\n")))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "cannot parse" in result.stderr and "line 2" in result.stderr


def test_print_helper_shows_resolved_values_one_per_line(capsys):
    assert main([DEFAULT, "--set", "checkpoint.name=pod_run", "--print", "run_name", "--print", "logging.tensorboard_dir"]) == 0
    assert capsys.readouterr().out.splitlines() == ["pod_run", "runs"]


@pytest.mark.parametrize("args, expected", [
    (["--set", "sac.nope=1", "--print", "run_name"], "unknown config key 'sac.nope'"),
    (["--print", "logging.nope"], "unknown config key 'logging.nope'; pass a dotted key"),
])
def test_print_helper_reports_bad_keys_in_one_line_with_status_2(capsys, args, expected):
    assert main([DEFAULT, *args]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1
