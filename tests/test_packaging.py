"""`pip install .` gives a package that works outside the clone: the wheel built from the tracked
files, installed into a fresh venv, imports every module it holds and answers `--help` for every
command, from another folder.

The venv sees this environment's installed dependencies through a .pth file and the wheel goes in
with --no-deps: nothing is downloaded, and only the wheel can supply the project's own modules."""

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

# each command as a user of the installed package types it: the console script, and the module form
COMMANDS = {
    "pixel-sac-train": "train_sac",
    "pixel-sac-record": "trainer.tools.record",
    "pixel-sac-pretrain": "trainer.tools.pretrain",
    "pixel-sac-evaluate": "trainer.policy.evaluate",
    "pixel-sac-export": "trainer.policy.export",
    "pixel-sac-plot": "trainer.tools.plot",
    "pixel-sac-sweep": "trainer.tools.sweep",
    "pixel-sac-config": "trainer.config",
}
GUARD_S = 300  # a guard against hangs, never a measurement


def run(*command, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=GUARD_S)
    assert result.returncode == 0, f"{' '.join(map(str, command))}: {result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv, wheel's module names, a folder outside the clone, the env to run in)."""
    tmp = tmp_path_factory.mktemp("packaging")
    # the tracked files only: a stale build/ or an untracked module cannot leak in
    source = tmp / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                             check=True)
    for path in filter(None, tracked.stdout.split("\0")):
        if (ROOT / path).is_file():
            (source / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, source / path)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
        "-q", "-w",
        str(tmp / "dist"), str(source), cwd=tmp)
    wheel = next((tmp / "dist").glob("pixel_sac-*.whl"))
    venv = tmp / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", str(venv), cwd=tmp)
    python = venv / "bin" / "python"
    site = run(str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
               cwd=tmp).stdout.strip()
    site = Path(site)
    outer = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site / "dependencies.pth").write_text("\n".join(sorted(outer)) + "\n")
    run(sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
        "-q", str(wheel),
        cwd=tmp)
    with zipfile.ZipFile(wheel) as archive:
        modules = sorted(name[:-3].removesuffix("/__init__").replace("/", ".")
                         for name in archive.namelist()
                         if name.endswith(".py"))
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp), "MUJOCO_GL": "egl",
           "OMP_NUM_THREADS": "1"}
    return venv, modules, elsewhere, env


def test_the_wheel_holds_every_package_the_commands_import(installed):
    _, modules, _, _ = installed
    for module in ("errors", "file_ops", "train_sac", "trainer", "sac", "envs", "envs.dishwashing",
                   "envs.mjwarp",
                   "encoders"):
        assert module in modules, f"{module} is missing from the wheel"
    assert not [module for module in modules
                if module.split(".")[0] in ("tests", "bench", "scripts")]


def test_every_module_imports_from_the_installed_package_and_not_from_the_clone(
    installed, tmp_path):
    venv, modules, elsewhere, env = installed
    check = (f"import importlib, pathlib\n"
             f"for name in {modules!r}:\n"
             f"    module = importlib.import_module(name)\n"
             f"    assert pathlib.Path(module.__file__).is_relative_to({str(venv)!r}), "
             "module.__file__\n"
             f"from envs.dishwashing.env import SCENE\n"
             f"assert SCENE.is_file() and pathlib.Path(SCENE).is_relative_to({str(venv)!r}), "
             "SCENE\n")
    run(str(venv / "bin" / "python"), "-c", check, cwd=elsewhere, env=env)


@pytest.mark.parametrize("script", COMMANDS)
def test_every_command_answers_help_under_the_name_it_was_started_by(installed, script):
    """The usage line names the command as the user typed it: the console script's name, or
    `python3 -m <module>`, never the one form for the other."""
    venv, _, elsewhere, env = installed
    for command, typed in (([str(venv / "bin" / script)], script),
                           ([str(venv / "bin" / "python"), "-m", COMMANDS[script]],
                            f"python3 -m {COMMANDS[script]}")):
        result = run(*command, "--help", cwd=elsewhere, env=env)
        assert result.stdout.startswith(f"usage: {typed} "), result.stdout[:500]


def test_the_clone_s_training_script_answers_help_as_typed():
    result = run(sys.executable, "train_sac.py", "--help", cwd=ROOT)
    assert result.stdout.startswith("usage: python3 train_sac.py "), result.stdout[:500]


def test_a_sweep_from_the_installed_package_runs_its_trial_and_writes_under_the_callers_folder(
    installed):
    """The sweep starts each trial's trainer itself: from a wheel it must find the installed one,
    and write where it was started, as the trainer does (it used to look for train_sac.py and runs/
    beside its own source)."""
    venv, _, elsewhere, env = installed
    shutil.copytree(ROOT / "configs", elsewhere / "configs", dirs_exist_ok=True)
    space = elsewhere / "space.yaml"
    space.write_text(
        "method: random\nmetric: {name: eval/return}\nparameters: {sac.lr: {values: [0.001]}}\n")
    tiny = ["training.episodes=1", "training.seed_steps=50", "sac.batch_size=16",
            "sac.hidden_dim=16",
            "training.eval_every_episodes=1", "training.eval_episodes=1",
            "logging.eval_video=false",
            "logging.curve=false"]
    run(str(venv / "bin" / "pixel-sac-sweep"), "--config",
        "configs/dmc/cartpole_swingup_state.yaml", "--space",
        str(space), "--trials", "1", "--study", "packaged",
        *[arg for item in tiny for arg in ("--set", item)],
        cwd=elsewhere, env=env)
    trial = elsewhere / "runs" / "sweeps" / "packaged"
    assert ((trial / "study.db").is_file()
            and (trial / "runs" / "packaged_t0" / "eval.csv").is_file())
    assert (trial / "checkpoints" / "packaged_t0_latest.pt").is_file()


def test_what_the_commands_write_by_default_is_ignored_by_git_and_checkpoints_stays_a_folder():
    """The default folders of runs, checkpoints, recordings and exports (README.md's commands) stay
    out of `git status`; checkpoints/ keeps its tracked placeholder, so a clone has the folder."""
    written = ["runs/sac_video/eval.csv", "checkpoints/sac_video.abandoned-1/notes.txt",
               "datasets/dishwashing_scripted/episodes.hdf5", "policy/README.md",
               "policy/config.yaml"]
    for path in [*written, "checkpoints/.gitkeep"]:  # --no-index: the rules, whatever git tracks
        checked = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT,
                                 timeout=GUARD_S)
        assert checked.returncode == (0 if path in written else 1), f"{path}: {checked.returncode}"
