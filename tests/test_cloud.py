"""SkyPilot task files and the sweep launcher in scripts/cloud/.

SkyPilot is a launcher-side CLI that brings ~100 packages (an API server, databases, cloud SDKs), so it is not
installed with the project (`make setup` runs on every GPU pod). The task files are checked here against the keys of
SkyPilot's task schema (skypilot 0.14.1, sky/utils/schemas.py), their `run` command is executed with a stand-in
python to see what it would train, and the sweep is run with a stand-in `sky` to see what it would launch."""

import json
import os
import re
import stat
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT
from trainer.config import load_config

CLOUD = ROOT / "scripts" / "cloud"
TASK_FILES = ("train.yaml", "train-spot.yaml")
TASK_KEYS = {"name", "workdir", "event_callback", "num_nodes", "resources", "file_mounts", "service", "pool", "setup",
             "run", "envs", "secrets", "volumes", "config"}
RESOURCE_KEYS = {"cloud", "region", "zone", "infra", "cpus", "memory", "accelerators", "instance_type", "use_spot",
                 "job_recovery", "disk_size", "disk_tier", "network_tier", "ports", "labels", "image_id", "autostop",
                 "any_of", "ordered"}
STORAGE_KEYS = {"name", "source", "store", "persistent", "mode", "config"}
STORAGE_MODES = {"MOUNT", "COPY", "MOUNT_CACHED"}
ENV_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TRAIN_OPTIONS = {"--config", "--resume", "--set"}


def task(name: str) -> dict:
    return yaml.safe_load((CLOUD / name).read_text())


def executable(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def recorder(path, calls) -> None:
    """A stand-in program that appends its working directory and arguments to `calls`, one JSON line per call."""
    executable(path, f"#!{sys.executable}\nimport json, os, sys\n"
                     f"open({str(calls)!r}, 'a').write(json.dumps([os.getcwd(), *sys.argv[1:]]) + '\\n')\n")


def recorded(calls) -> list[list[str]]:
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


@pytest.mark.parametrize("name", TASK_FILES)
def test_task_file_uses_only_keys_skypilot_defines(name):
    spec = task(name)
    assert set(spec) <= TASK_KEYS, set(spec) - TASK_KEYS
    resources = spec["resources"]
    for block in [resources, *resources.get("any_of", [])]:
        assert set(block) <= RESOURCE_KEYS, set(block) - RESOURCE_KEYS
    for target, mount in spec["file_mounts"].items():
        assert target.startswith("/") and set(mount) <= STORAGE_KEYS and mount["mode"] in STORAGE_MODES
    for key, value in spec["envs"].items():
        assert ENV_NAME.fullmatch(key) and (value is None or isinstance(value, str)), key
    assert isinstance(spec["setup"], str) and isinstance(spec["run"], str)


@pytest.mark.parametrize("name", TASK_FILES)
def test_task_file_installs_the_gpu_stack_and_mounts_a_bucket_the_user_must_name(name):
    spec = task(name)
    assert "REQUIREMENTS=requirements-gpu.txt" in spec["setup"] and (ROOT / "requirements-gpu.txt").is_file()
    assert spec["workdir"] == "."
    assert spec["envs"]["BUCKET"] is None  # SkyPilot refuses to launch until --env BUCKET=... is given
    [mount] = spec["file_mounts"].values()
    assert mount["name"] == "${BUCKET}" and mount["persistent"] is True
    assert mount["mode"] == "MOUNT_CACHED"  # TensorBoard appends to its event files, which MOUNT cannot do


def run_command(tmp_path, name: str, **overrides: str) -> list[str]:
    """train_sac.py's arguments as the task's `run` would pass them, with SkyPilot's env handling."""
    calls = tmp_path / "calls.jsonl"
    recorder(tmp_path / ".venv" / "bin" / "python", calls)
    spec = task(name)
    env = {**os.environ, **{key: value or "" for key, value in spec["envs"].items()}, "BUCKET": "b", **overrides}
    subprocess.run(["bash", "-c", spec["run"]], cwd=tmp_path, env=env, check=True)
    [[_, script, *args]] = recorded(calls)
    assert script == "train_sac.py"
    return args


@pytest.mark.parametrize("name", TASK_FILES)
def test_run_trains_the_chosen_config_and_resumes_from_checkpoints_in_the_bucket(tmp_path, name):
    args = run_command(tmp_path, name, CONFIG="configs/dmc/cheetah_run.yaml", RUN="cheetah_seed2",
                       ARGS="--set training.seed=2 --set training.episodes=7")
    options = list(zip(args[::2], args[1::2]))
    assert len(args) % 2 == 0 and {option for option, _ in options} <= TRAIN_OPTIONS, args
    assert ("--config", "configs/dmc/cheetah_run.yaml") in options and ("--resume", "auto") in options
    cfg = load_config(ROOT / "configs/dmc/cheetah_run.yaml", [value for option, value in options if option == "--set"])
    [mount] = task(name)["file_mounts"]
    assert cfg.checkpoint.dir.startswith(f"{mount}/") and cfg.logging.tensorboard_dir.startswith(f"{mount}/")
    assert (cfg.run_name, cfg.training.seed, cfg.training.episodes) == ("cheetah_seed2", 2, 7)


@pytest.mark.parametrize("name", TASK_FILES)
def test_run_keeps_the_config_own_run_name_by_default(tmp_path, name):
    args = run_command(tmp_path, name)
    config = args[args.index("--config") + 1]
    sets = [args[i + 1] for i, arg in enumerate(args) if arg == "--set"]
    assert load_config(ROOT / config, sets).run_name == load_config(ROOT / config).run_name


def test_every_config_the_cloud_files_name_exists():
    named = {match for path in CLOUD.iterdir() for match in re.findall(r"configs/[\w/.-]+\.yaml", path.read_text())}
    assert "configs/default.yaml" in named
    assert [config for config in sorted(named) if not (ROOT / config).is_file()] == []


def test_on_demand_cluster_is_deleted_once_idle_after_the_run():
    autostop = task("train.yaml")["resources"]["autostop"]
    assert autostop["down"] is True and isinstance(autostop["idle_minutes"], int) and autostop["idle_minutes"] > 0


def test_spot_variant_is_a_recovering_managed_job_that_runs_exactly_what_train_yaml_runs():
    spot, on_demand = task("train-spot.yaml"), task("train.yaml")
    resources = spot["resources"]
    assert resources["use_spot"] is True and "autostop" not in resources  # managed jobs delete their own clusters
    assert resources["job_recovery"]["strategy"] and resources["job_recovery"]["max_restarts_on_errors"] >= 1
    for key in ("workdir", "envs", "file_mounts", "setup", "run"):
        assert spot[key] == on_demand[key], key
    assert resources["any_of"] == on_demand["resources"]["any_of"]


@pytest.fixture
def fake_sky(tmp_path):
    """PATH with a stand-in `sky` that records each call; returns (env, calls file)."""
    calls = tmp_path / "sky_calls.jsonl"
    recorder(tmp_path / "bin" / "sky", calls)
    return {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}, calls


def sweep(env: dict, *args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLOUD / "sweep.sh"), *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_sweep_launches_one_managed_spot_job_per_config_and_seed_each_its_own_run(fake_sky):
    env, calls = fake_sky
    configs = [str(ROOT / "configs/dmc/cheetah_run.yaml"), "dmc/walker_walk.yaml"]  # the second from cwd
    result = sweep({**env, "SEEDS": "1 2"}, "my-bucket", *configs, cwd=ROOT / "configs")
    assert result.returncode == 0, result.stderr
    launches = recorded(calls)
    assert len(launches) == 4
    runs = set()
    for cwd, *argv in launches:
        assert cwd == str(ROOT)  # SkyPilot uploads the working directory as the job's workdir
        assert argv[:3] == ["jobs", "launch", "scripts/cloud/train-spot.yaml"] and {"--yes", "--detach-run"} <= set(argv)
        envs = dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "--env")
        assert envs["BUCKET"] == "my-bucket" and (ROOT / envs["CONFIG"]).is_file()
        seed = envs["ARGS"].removeprefix("--set training.seed=")
        assert envs["RUN"] == f"{envs['CONFIG'].split('/')[-1].removesuffix('.yaml')}_seed{seed}"
        runs.add(envs["RUN"])
    assert runs == {"cheetah_run_seed1", "cheetah_run_seed2", "walker_walk_seed1", "walker_walk_seed2"}


@pytest.mark.parametrize("args, extra_env, expected", [
    ([], {}, "error: a bucket and at least one config are needed; usage: scripts/cloud/sweep.sh BUCKET CONFIG"),
    (["b", "configs/default.yaml", "configs/nope.yaml"], {}, "error: config file not found: configs/nope.yaml; usage:"),
    (["b", "configs/default.yaml"], {"SEEDS": "1 two"}, "error: SEEDS must be whole numbers separated by spaces, got 'two'"),
])
def test_sweep_rejects_bad_arguments_before_launching_anything(fake_sky, args, extra_env, expected):
    env, calls = fake_sky
    result = sweep({**env, **extra_env}, *args)
    assert result.returncode == 2 and result.stderr.startswith(expected) and result.stderr.count("\n") == 1
    assert recorded(calls) == []
