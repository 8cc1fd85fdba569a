"""SkyPilot task files and the sweep launcher in scripts/cloud/.

SkyPilot is a launcher-side CLI that brings ~100 packages (an API server, databases, cloud SDKs), so
it is not installed with the project (`make setup` runs on every GPU pod) but in the tools venv
`make tools` builds: the task files are parsed there by SkyPilot's own parser and the W&B sweep
files checked by W&B's sweep engine (scripts/cloud/check.py). Their `run` commands are executed with
a stand-in python to see what they would train, the launchers with a stand-in `sky` and `wandb` to
see what they would launch, and a W&B agent's command line is built by wandb's own agent code."""

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import train_sac
from tests.conftest import ROOT, run_cli
from trainer.config.load import load_config

CLOUD = ROOT / "scripts" / "cloud"
TASK_FILES = ("train.yaml", "train-spot.yaml")
SKY_FILES = (*TASK_FILES, "sweep-cluster.yaml", "sweep-agent.yaml")
SWEEP_FILES = ("sweep.yaml", "sweep-state.yaml")
TOOLS_PYTHON = ROOT / ".tools-venv" / "bin" / "python"
TRAIN_OPTIONS = {"--config", "--resume", "--set"}


def task(name: str) -> dict:
    return yaml.safe_load((CLOUD / name).read_text())


def executable(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def recorder(path, calls) -> None:
    """A stand-in program that appends its working directory and arguments to `calls`, one JSON line
    per call."""
    executable(path, f"#!{sys.executable}\nimport json, os, sys\n"
                     f"open({str(calls)!r}, 'a')"
                     ".write(json.dumps([os.getcwd(), *sys.argv[1:]]) + '\\n')\n")


def recorded(calls) -> list[list[str]]:
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def check_with_the_tools(*paths) -> tuple[int, dict]:
    """scripts/cloud/check.py in the tools venv (`make tools`): SkyPilot's and W&B's sweep engine's
    own parsers."""
    assert TOOLS_PYTHON.is_file(), f"{TOOLS_PYTHON} is missing: run `make tools` (make test does)"
    result = subprocess.run([str(TOOLS_PYTHON), str(CLOUD / "check.py"), *map(str, paths)],
                            cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    return result.returncode, {Path(r["file"]).name: r
                               for r in map(json.loads, result.stdout.splitlines())}


@pytest.fixture(scope="module")
def checked():
    status, reports = check_with_the_tools(*(CLOUD / name for name in SKY_FILES + SWEEP_FILES))
    assert status == 0, [r for r in reports.values() if "error" in r]
    return reports


@pytest.mark.parametrize("name", SKY_FILES)
def test_skypilot_parses_the_task_file_and_demands_its_bucket_or_sweep(checked, name):
    report = checked[name]
    assert report["kind"] == "skypilot" and report["workdir"] == "."
    assert report["required_envs"] == (["SWEEP_ID"] if name == "sweep-agent.yaml" else ["BUCKET"])
    for mount in report["storage_mounts"].values():  # ${BUCKET} became the bucket --env names
        assert mount == {"name": "placeholder", "mode": "MOUNT_CACHED", "persistent": True}


def test_skypilot_rejects_a_misspelt_resources_key(tmp_path):
    typo = task("train.yaml")
    typo["resources"]["disk_sise"] = 100
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(typo))
    status, reports = check_with_the_tools(tmp_path / "typo.yaml")
    assert (status == 1
            and "Instead of 'disk_sise', did you mean "
                "'disk_size'?" in reports["typo.yaml"]["error"])


def test_sweep_cluster_only_sets_up_and_each_agent_runs_wandb_agent_on_one_gpu(checked):
    cluster, agent = checked["sweep-cluster.yaml"], checked["sweep-agent.yaml"]
    assert cluster["run"] is None and cluster["setup"] == checked["train.yaml"]["setup"]
    # trials write there
    assert list(cluster["storage_mounts"]) == list(checked["train.yaml"]["storage_mounts"])
    assert cluster["file_mounts"] == {"~/.netrc": "~/.netrc"}  # W&B's key from `wandb login`
    assert agent["setup"] is None and agent["accelerators"] == ["{'A100': 1}"]
    assert (agent["run"].split()[:2] == [".venv/bin/wandb", "agent"]
            and '"$SWEEP_ID"' in agent["run"])


@pytest.mark.parametrize("name", SWEEP_FILES)
def test_wandb_sweep_engine_accepts_the_sweep_file(checked, name):
    report = checked[name]
    assert report["kind"] == "wandb-sweep" and report["method"] in ("random", "bayes")
    assert report["metric"] == {"name": "eval/return", "goal": "maximize"}


def test_wandb_sweep_engine_rejects_a_misspelt_method_and_distribution(tmp_path):
    bad = task("sweep.yaml")
    bad["method"], bad["parameters"]["sac.lr"]["distribution"] = "bayesian", "loguniform"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    status, reports = check_with_the_tools(tmp_path / "bad.yaml")
    error = reports["bad.yaml"]["error"]
    assert status == 1 and "'bayesian' is not one of" in error
    assert "invalid hyperparameter configuration: sac.lr" in error


@pytest.mark.parametrize("name", TASK_FILES)
def test_task_file_installs_the_gpu_stack_and_mounts_a_bucket_the_user_must_name(name):
    spec = task(name)
    assert ("REQUIREMENTS=requirements-gpu.txt" in spec["setup"]
            and (ROOT / "requirements-gpu.txt").is_file())
    assert spec["workdir"] == "."
    # SkyPilot refuses to launch until --env BUCKET=... is given
    assert spec["envs"]["BUCKET"] is None
    [mount] = spec["file_mounts"].values()
    assert mount["name"] == "${BUCKET}" and mount["persistent"] is True
    # TensorBoard appends to its event files, which MOUNT cannot do
    assert mount["mode"] == "MOUNT_CACHED"


def run_command(tmp_path, name: str, **overrides: str) -> list[str]:
    """train_sac.py's arguments as the task's `run` would pass them, with SkyPilot's env
    handling."""
    calls = tmp_path / "calls.jsonl"
    recorder(tmp_path / ".venv" / "bin" / "python", calls)
    spec = task(name)
    env = {**os.environ, **{key: value or "" for key, value in spec["envs"].items()}, "BUCKET": "b",
           **overrides}
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
    assert ("--config",
            "configs/dmc/cheetah_run.yaml") in options and ("--resume", "auto") in options
    cfg = load_config(ROOT / "configs/dmc/cheetah_run.yaml",
                      [value for option, value in options if option == "--set"])
    [mount] = task(name)["file_mounts"]
    assert (cfg.checkpoint.dir.startswith(f"{mount}/")
            and cfg.logging.tensorboard_dir.startswith(f"{mount}/"))
    assert (cfg.run_name, cfg.training.seed, cfg.training.episodes) == ("cheetah_seed2", 2, 7)


@pytest.mark.parametrize("name", TASK_FILES)
def test_run_keeps_the_config_own_run_name_by_default(tmp_path, name):
    args = run_command(tmp_path, name)
    config = args[args.index("--config") + 1]
    sets = [args[i + 1] for i, arg in enumerate(args) if arg == "--set"]
    assert load_config(ROOT / config, sets).run_name == load_config(ROOT / config).run_name


def test_every_config_the_cloud_files_name_exists():
    named = {match for path in CLOUD.iterdir()
             for match in re.findall(r"configs/[\w/.-]+\.yaml", path.read_text())}
    assert "configs/default.yaml" in named
    assert [config for config in sorted(named) if not (ROOT / config).is_file()] == []


def test_on_demand_cluster_is_deleted_once_idle_after_the_run():
    autostop = task("train.yaml")["resources"]["autostop"]
    assert (autostop["down"] is True and isinstance(autostop["idle_minutes"], int)
            and autostop["idle_minutes"] > 0)


def test_spot_variant_is_a_recovering_managed_job_that_runs_exactly_what_train_yaml_runs():
    spot, on_demand = task("train-spot.yaml"), task("train.yaml")
    resources = spot["resources"]
    # managed jobs delete their own clusters
    assert resources["use_spot"] is True and "autostop" not in resources
    assert (resources["job_recovery"]["strategy"]
            and resources["job_recovery"]["max_restarts_on_errors"] >= 1)
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
    return subprocess.run([str(CLOUD / "sweep.sh"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True)


def test_sweep_launches_one_managed_spot_job_per_config_and_seed_each_its_own_run(fake_sky):
    env, calls = fake_sky
    # the second from cwd
    configs = [str(ROOT / "configs/dmc/cheetah_run.yaml"), "dmc/walker_walk.yaml"]
    result = sweep({**env, "SEEDS": "1 2"}, "my-bucket", *configs, cwd=ROOT / "configs")
    assert result.returncode == 0, result.stderr
    launches = recorded(calls)
    assert len(launches) == 4
    runs = set()
    for cwd, *argv in launches:
        assert cwd == str(ROOT)  # SkyPilot uploads the working directory as the job's workdir
        assert (argv[:3] == ["jobs", "launch", "scripts/cloud/train-spot.yaml"]
                and {"--yes", "--detach-run"} <= set(argv))
        envs = dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "--env")
        assert envs["BUCKET"] == "my-bucket" and (ROOT / envs["CONFIG"]).is_file()
        seed = envs["ARGS"].removeprefix("--set training.seed=")
        assert envs["RUN"] == f"{envs['CONFIG'].split('/')[-1].removesuffix('.yaml')}_seed{seed}"
        runs.add(envs["RUN"])
    assert runs == {"cheetah_run_seed1", "cheetah_run_seed2", "walker_walk_seed1",
                    "walker_walk_seed2"}


@pytest.mark.parametrize("args, extra_env, expected", [
    ([], {},
     "error: a bucket and at least one config are needed; usage: scripts/cloud/sweep.sh BUCKET "
     "CONFIG"),
    (["b", "configs/default.yaml", "configs/nope.yaml"], {},
     "error: config file not found: configs/nope.yaml; usage:"),
    (["b", "configs/default.yaml"], {"SEEDS": "1 two"},
     "error: SEEDS must be whole numbers separated by spaces, got 'two'"),
])
def test_sweep_rejects_bad_arguments_before_launching_anything(fake_sky, args, extra_env, expected):
    env, calls = fake_sky
    result = sweep({**env, **extra_env}, *args)
    assert (result.returncode == 2 and result.stderr.startswith(expected)
            and result.stderr.count("\n") == 1)
    assert recorded(calls) == []


SAMPLED = {"sac.lr": 0.00042, "sac.alpha_lr": 0.0011, "sac.batch_size": 128, "env.action_repeat": 4,
           "sac.nstep": 3,
           "sac.augment_pad": 6, "sac.augment_samples": 2, "encoder.video.arch": "simple3dcnn"}


def test_wandb_agent_command_becomes_the_sampled_overrides_of_a_run_named_after_them(
    tmp_path, monkeypatch):
    """wandb's own agent (0.31.0) expands the sweep file's command and starts it, as `wandb agent`
    does for each value set the controller sends: the trial wrapper hands train_sac.py the values as
    KEY=VALUE, which become exactly those config values, in a resumable run in the bucket whose name
    depends on the values alone."""
    from wandb.wandb_agent import Agent  # here: wandb takes seconds to load

    sweep = task("sweep.yaml")
    calls = tmp_path / "calls.jsonl"
    recorder(tmp_path / "python", calls)
    monkeypatch.chdir(ROOT)  # the agent runs in the cluster's workdir, the repository
    for name, value in {"PYTHON": tmp_path / "python", "WANDB_DIR": tmp_path, "WANDB_RUN_ID": "",
                        "WANDB_SWEEP_PARAM_PATH": ""}.items():
        # restored after the test; the agent sets the last two itself
        monkeypatch.setenv(name, str(value))
    agent = Agent(api=None, queue=None)
    # what the agent takes from the sweep the controller describes
    agent._sweep_command = sweep["command"]
    other = {**SAMPLED, "sac.lr": 0.0003}
    for run_id, values in (("run1", SAMPLED), ("run2", SAMPLED), ("run3", other)):
        agent._command_run({"run_id": run_id, "program": sweep["program"],
                            "args": {key: {"value": value} for key, value in values.items()}})
        assert agent._run_processes[run_id].wait() == 0
    (cwd, script, *argv), second, third = recorded(calls)
    assert (cwd, script) == (str(ROOT), "train_sac.py")
    args = train_sac.parse_args(argv)
    assert args.config == "configs/dmc/cartpole_swingup.yaml" and args.resume == "auto"
    assert args.overrides == [f"{key}={value}" for key, value in SAMPLED.items()]
    cfg = load_config(ROOT / args.config, args.set)
    for key, value in SAMPLED.items():
        section, *rest = key.split(".")
        node = getattr(cfg, section)
        for part in rest:
            node = getattr(node, part)
        assert node == value, key
    assert (cfg.checkpoint.dir == "/checkpoints/checkpoints"
            and cfg.logging.tensorboard_dir == "/checkpoints/runs")
    assert cfg.logging.wandb is True and cfg.run_name.startswith("cartpole_swingup_")
    names = [load_config(ROOT / a.config, a.set).run_name
             for a in map(train_sac.parse_args, (second[2:], third[2:]))]
    # the same values continue the same run; others are another
    assert names[0] == cfg.run_name != names[1]


def test_trial_wrapper_rejects_a_command_without_the_config_first(tmp_path):
    result = subprocess.run(["bash", str(CLOUD / "sweep-trial.sh"), "sac.lr=0.001"], cwd=ROOT,
                            capture_output=True,
                            text=True, env={**os.environ, "PYTHON": str(tmp_path / "missing")})
    assert (result.returncode == 2
            and result.stderr.startswith("error: expected --config CONFIG KEY=VALUE"))


@pytest.fixture
def fake_sky_and_wandb(fake_sky, tmp_path):
    """Adds a stand-in `wandb` that records its call and prints what `wandb sweep` prints."""
    env, calls = fake_sky
    wandb_calls = tmp_path / "wandb_calls.jsonl"
    executable(tmp_path / "bin" / "wandb",
               f"#!{sys.executable}\nimport json, os, sys\n"
               f"open({str(wandb_calls)!r}, 'a')"
               ".write(json.dumps([os.getcwd(), *sys.argv[1:]]) + '\\n')\n"
               "print('wandb: Creating sweep with ID: abc123')\n"
               "print('wandb: Run sweep agent with: wandb agent me/pixel-sac/abc123')\n")
    return env, calls, wandb_calls


def test_sweep_launch_creates_the_sweep_provisions_once_and_starts_one_agent_per_gpu(
    fake_sky_and_wandb):
    env, calls, wandb_calls = fake_sky_and_wandb
    result = subprocess.run([str(CLOUD / "sweep-launch.sh"), "A100:3"], cwd=ROOT / "configs",
                            env={**env, "BUCKET": "my-bucket"}, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    [[cwd, *create]] = recorded(wandb_calls)
    assert cwd == str(ROOT) and create == ["sweep", "--project", "pixel-sac",
                                           "scripts/cloud/sweep.yaml"]
    launch, *agents = recorded(calls)
    assert launch[1:] == ["launch", "-c", "sac-sweep", "scripts/cloud/sweep-cluster.yaml", "--gpus",
                          "A100:3",
                          "--env", "BUCKET=my-bucket", "--yes"]
    assert [a[1:] for a in agents] == [["exec", "sac-sweep", "scripts/cloud/sweep-agent.yaml",
                                        "--gpus", "A100:1",
                                        "--env", "SWEEP_ID=me/pixel-sac/abc123", "-d"]] * 3
    # SkyPilot uploads the working directory
    assert all(cwd == str(ROOT) for cwd, *_ in recorded(calls))


def test_sweep_launch_adds_agents_to_an_existing_sweep_without_creating_one(fake_sky_and_wandb):
    env, calls, wandb_calls = fake_sky_and_wandb
    result = subprocess.run([str(CLOUD / "sweep-launch.sh"), "L4:1"], cwd=ROOT, capture_output=True,
                            text=True,
                            env={**env, "BUCKET": "b", "SWEEP_ID": "me/p/xyz", "CLUSTER": "more"})
    assert result.returncode == 0, result.stderr
    assert recorded(wandb_calls) == []
    assert [call[1:3] for call in recorded(calls)] == [["launch", "-c"], ["exec", "more"]]
    assert recorded(calls)[1][-2] == "SWEEP_ID=me/p/xyz"


@pytest.mark.parametrize("args, extra_env, expected", [
    ([], {"BUCKET": "b"}, "error: one argument GPU_TYPE:COUNT is needed, got ''"),
    (["A100"], {"BUCKET": "b"}, "error: one argument GPU_TYPE:COUNT is needed, got 'A100'"),
    (["A100:8"], {}, "error: BUCKET is not set; usage:"),
    (["A100:8"], {"BUCKET": "b", "SWEEP_FILE": "nope.yaml"},
     "error: sweep file not found: nope.yaml"),
])
def test_sweep_launch_rejects_bad_arguments_before_launching_anything(fake_sky_and_wandb, args,
                                                                      extra_env, expected):
    env, calls, wandb_calls = fake_sky_and_wandb
    env = {key: value for key, value in env.items() if key != "BUCKET"}
    result = subprocess.run([str(CLOUD / "sweep-launch.sh"), *args], cwd=ROOT,
                            env={**env, **extra_env},
                            capture_output=True, text=True)
    assert (result.returncode == 2 and result.stderr.startswith(expected)
            and result.stderr.count("\n") == 1)
    assert recorded(calls) == [] and recorded(wandb_calls) == []


def test_train_sac_applies_bare_key_value_arguments_after_the_set_ones(tmp_path):
    result = run_cli("--config", str(ROOT / "configs/dmc/cartpole_swingup_state.yaml"), "--set",
                     "training.episodes=5",
                     "training.episodes=0")
    assert result.returncode == 2 and result.stderr == (
        "error: config key 'training.episodes' must be in [1, 10000000], got 0\n"
    )
