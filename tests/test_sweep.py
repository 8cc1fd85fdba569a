"""The local sweep (trainer/tools/sweep.py): Optuna draws a W&B sweep file's parameters the way
W&B's own scheduler maps them, runs real tiny trials of state cartpole, reports their evaluations,
and a sweep stopped mid-trial continues from its SQLite storage with the interrupted trial resuming
its checkpoint."""

import signal
import subprocess
import sys
import time

import optuna
import pytest
import yaml

from tests.conftest import ROOT
from trainer.tools.sweep import read_metric, read_space, suggest

CONFIG = str(ROOT / "configs" / "dmc" / "cartpole_swingup_state.yaml")
TINY_TRIAL = ["training.episodes=4", "training.seed_steps=100", "sac.batch_size=32",
              "sac.hidden_dim=64",
              "training.eval_every_episodes=1", "training.eval_episodes=1",
              "checkpoint.every_episodes=1",
              "logging.eval_video=false", "logging.curve=false"]
SPACE = {"method": "random", "metric": {"name": "eval/return", "goal": "maximize"},
         "parameters": {"sac.lr": {"distribution": "log_uniform_values", "min": 1.0e-4,
                                   "max": 1.0e-3},
                        "sac.nstep": {"values": [1, 3]}, "sac.critic_tau": {"value": 0.01}}}


@pytest.mark.parametrize("name", ["sweep.yaml", "sweep-state.yaml"])
def test_parameters_are_drawn_from_the_distributions_wandb_maps_them_to(name):
    # wandb takes seconds to load: only the tests that use it pay for it
    from wandb.sdk.sweeps.scheduler.optuna import sweep_parameter_to_distribution

    parameters = yaml.safe_load((ROOT / "scripts" / "cloud" / name).read_text())["parameters"]
    trial = optuna.create_study().ask()
    for key, spec in parameters.items():
        value = suggest(trial, key, spec)
        assert trial.distributions[key] == sweep_parameter_to_distribution(spec), key
        assert trial.distributions[key]._contains(trial.distributions[key].to_internal_repr(value))


def set_args(items) -> list[str]:
    """`--set ITEM` for each item, as the command takes its overrides."""
    return [arg for item in items for arg in ("--set", item)]


def sweep_command(*args) -> list[str]:
    return [sys.executable, "-m", "trainer.tools.sweep", "--config", CONFIG, *map(str, args)]


def run_sweep(*args, timeout: float | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(sweep_command(*args), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def sweep(out) -> subprocess.Popen:
    command = sweep_command("--space", out.parent / "space.yaml", "--trials", "3", "--study",
                            "tiny", "--out", out,
                            *set_args(TINY_TRIAL))
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_three_tiny_trials_run_stop_mid_trial_and_continue_from_storage(tmp_path):
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    out = tmp_path / "sweep"
    first = sweep(out)
    interrupted_csv = out / "runs" / "tiny_t1" / "eval.csv"
    deadline = time.monotonic() + 240
    # the second trial has evaluated once: stop the sweep there, at once (its three other tiny
    # episodes may take under a second)
    while not read_metric(interrupted_csv, "return"):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.02)
    first.send_signal(signal.SIGTERM)
    stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 128 + signal.SIGTERM, stderr
    assert ("trial 1 (tiny_t1) saved its run and is queued again; run the same command to "
            "continue" in stderr)
    assert "Trial 1 failed" in stderr and "Traceback" not in stderr, (
        "the stop is logged without a traceback")

    storage = f"sqlite:///{out / 'study.db'}"
    trials = optuna.load_study(study_name="tiny", storage=storage).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "WAITING"]
    assert trials[2].params == trials[1].params and trials[2].user_attrs["run"] == "tiny_t1"
    assert (out / "checkpoints" / "tiny_t1_latest.pt").is_file()

    second = sweep(out)
    stdout, stderr = second.communicate(timeout=300)
    assert second.returncode == 0, stderr
    trials = optuna.load_study(study_name="tiny", storage=storage).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert [t.user_attrs["run"] for t in trials] == ["tiny_t0", "tiny_t1", "tiny_t1", "tiny_t3"]
    assert "resumed from" in (out / "runs" / "tiny_t1" / "train.log").read_text()
    for trial in (trials[0], trials[2], trials[3]):
        returns = read_metric(out / "runs" / trial.user_attrs["run"] / "eval.csv", "return")
        assert len(returns) == 4  # one evaluation per episode, the resumed run's included once
        assert trial.intermediate_values == {i + 1: value for i, value in enumerate(returns)}
        assert trial.value == returns[-1] and trial.params["sac.critic_tau"] == 0.01
    assert "trial 2 (tiny_t1): sac.critic_tau=0.01" in stdout
    table = stdout[stdout.index("| trial |"):].splitlines()
    assert (table[0].startswith(
        "| trial | run | state | eval/return | evals | sac.critic_tau | sac.lr | sac.nstep |"))
    assert sum(" | complete | " in line
               for line in table) == 3 and sum(" | fail | " in line for line in table) == 1

    third = sweep(out)  # the goal is reached: nothing more runs
    stdout, _ = third.communicate(timeout=120)
    assert (third.returncode == 0
            and len(optuna.load_study(study_name="tiny", storage=storage).trials) == 4)


@pytest.mark.parametrize("space, expected", [
    ({**SPACE, "parameters": {"sac.lrr": {"values": [1e-3]}}},
     "error: unknown config key 'sac.lrr'; allowed under"),
    ({**SPACE, "method": "grid"},
     "method must be one of random, bayes for a local sweep; got 'grid'"),
    ({**SPACE, "metric": {"name": "eval/reward"}},
     "metric.name must be one of eval/return, eval/success_rate"),
    ({**SPACE, "parameters": {"sac.lr": {"distribution": "normal", "mu": 0, "sigma": 1}}},
     "sweep parameter sac.lr: use value, a list of values, or numbers min/max"),
    ({**SPACE, "parameters": {"sac.lr": {"values": "abc"}}},
     "sweep parameter sac.lr: use value, a list of values"),
    ({**SPACE, "parameters": {"sac.lr": {"min": "low", "max": 1}}},
     "sweep parameter sac.lr: use value, a list of"),
    ({**SPACE, "parameters": {"sac.lr": 0.001}},
     "parameter sac.lr must be a spec (value, values, or min/max)"),
    ({**SPACE, "early_terminate": "hyperband"},
     "early_terminate must be a mapping with type: hyperband"),
    ({**SPACE, "metric": "eval/return"},
     "metric.name must be one of eval/return, eval/success_rate"),
    ("method: random\nmethod: bayes\n", "duplicate key 'method'"),
    ({**SPACE, "early_terminate": {"type": "hyperband", "eta": 1}},
     "an integer eta >= 2 (both optional)"),
    ({**SPACE, "early_terminate": {"type": "hyperband", "min_iter": "abc"}},
     "an integer min_iter >= 1"),
    ({**SPACE, "parameters": {"sac.lr": {"min": 0.01, "max": 0.001}}},
     "sweep parameter sac.lr: min must be at most max, and above 0 for log_uniform_values; got "
     "min 0.01, max 0.001"),
    ({**SPACE,
      "parameters": {"sac.lr": {"distribution": "log_uniform_values", "min": 0, "max": 0.001}}},
     "sweep parameter sac.lr: min must be at most max, and above 0"),
    ({**SPACE, "parameters": {"sac.lr": {"min": float("nan"), "max": 0.001}}},
     "use value, a list of values, or numbers"),
])
def test_bad_sweep_file_is_a_one_line_error_before_any_trial(tmp_path, space, expected):
    (tmp_path / "space.yaml").write_text(space if isinstance(space, str) else yaml.safe_dump(space))
    result = sweep_cli(tmp_path, "--space", str(tmp_path / "space.yaml"))
    assert (result.returncode == 2 and expected in result.stderr
            and result.stderr.count("\n") == 1), result.stderr
    assert not (tmp_path / "out" / "runs").exists()


def sweep_cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """One trial of CONFIG into tmp_path/out, with `args` after (the last of a flag given twice
    counts)."""
    return run_sweep("--trials", "1", "--out", tmp_path / "out", *args)


@pytest.mark.parametrize("args, expected", [
    (["--study", "bad name/x"],
     "error: --study 'bad name/x' cannot name the trials' runs (bad name/x_t0, ...)"),
    (["--seed", "-1"], "error: --trials must be >= 1 and --seed in [0, 1073741824); got 1 and -1"),
    (["--out", "{tmp}/file"], "error: cannot keep the study in {tmp}/file/study.db ("),
    (["--out", "{tmp}/notadb"],
     "error: cannot keep the study in {tmp}/notadb/study.db (file is not a database)"),
])
def test_sweep_settings_it_cannot_use_are_one_line_errors_before_any_trial(
    tmp_path, args, expected):
    """Each of these ended in a traceback: the study name inside its first trial, the others from
    numpy, the filesystem or SQLite."""
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "notadb").mkdir()
    (tmp_path / "notadb" / "study.db").write_text("not a database")
    result = sweep_cli(tmp_path, "--space", str(tmp_path / "space.yaml"),
                       *(a.format(tmp=tmp_path) for a in args))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert expected.format(tmp=tmp_path) in result.stderr
    assert not [path for path in tmp_path.rglob("*") if "runs" in path.parts]


def test_a_sweep_file_reads_numbers_as_configs_do(tmp_path):
    """`1e-4` is a string to plain YAML 1.1; a sweep file, like a config, reads it as the float a
    user means."""
    (tmp_path / "space.yaml").write_text("method: random\nmetric: {name: eval/return}\n"
                                         "parameters:\n  sac.lr: {distribution: "
                                         "log_uniform_values, min: 1e-4, "
                                         "max: 3e-3}\n")
    space = read_space(tmp_path / "space.yaml")
    value = suggest(optuna.create_study().ask(), "sac.lr", space["parameters"]["sac.lr"])
    assert isinstance(value, float) and 1e-4 <= value <= 3e-3


def test_a_sweep_whose_study_db_was_deleted_refuses_to_continue_another_trials_run(tmp_path):
    """With study.db deleted and the trials' checkpoints kept, the new trial 0 (other settings)
    resumed the old trial 0's finished run, and the table reported that run's return for the new
    settings."""
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    tiny = set_args([*TINY_TRIAL, "training.episodes=1"])  # 125 agent steps
    first = sweep_cli(tmp_path, "--space", str(tmp_path / "space.yaml"), "--study", "tiny", *tiny)
    assert first.returncode == 0, first.stderr
    checkpoints = tmp_path / "out" / "checkpoints"
    before = {p.name: p.read_bytes() for p in checkpoints.iterdir()}
    (tmp_path / "out" / "study.db").unlink()
    again = sweep_cli(tmp_path, "--space", str(tmp_path / "space.yaml"), "--study", "tiny", *tiny,
                      "--seed", "1")
    assert again.returncode == 2 and "Traceback" not in again.stderr, again.stderr
    assert again.stderr.strip().splitlines()[-1] == (
        f"error: trial 0's run tiny_t0 already has checkpoints in {checkpoints} "
        "(tiny_t0_latest.pt, tiny_t0_best.pt, tiny_t0_ep1.pt) that "
        f"{tmp_path / 'out' / 'study.db'} does not know: they are a trial of another study, "
        "trained with other settings; restore that study.db, or pass another --out or --study")
    assert {p.name: p.read_bytes() for p in checkpoints.iterdir()} == before


HOLD = """
import sys
from pathlib import Path
from trainer.process import lock
held = lock.hold(Path(sys.argv[1]), what="run", fix="")
print("held", flush=True)
sys.stdin.read()
"""


def test_a_trial_that_diverges_is_pruned_and_the_sweep_goes_on(tmp_path):
    """Absurd learning rates are part of a search: a trial whose training diverged (exit status 3)
    used to stop the whole sweep with its one-line error."""
    space = {"method": "random", "metric": {"name": "eval/return", "goal": "maximize"},
             "parameters": {"sac.lr": {"value": 1.0}, "sac.alpha_lr": {"value": 1.0}}}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    absurd = ["sac.updates_per_step=20", "sac.discount=1", "sac.batch_size=8",
              "training.seed_steps=10"]
    done = run_sweep("--space", tmp_path / "space.yaml", "--trials", "2", "--study", "tiny",
                     "--out",
                     tmp_path / "sweep", *set_args([*TINY_TRIAL, *absurd]), timeout=600)
    assert done.returncode == 0, done.stderr
    for number in (0, 1):
        assert (f"trial {number} (tiny_t{number}) pruned: training diverged by "
                "step " in done.stdout), done.stdout
    study = optuna.load_study(study_name="tiny",
                              storage=f"sqlite:///{tmp_path / 'sweep' / 'study.db'}")
    assert [t.state.name for t in study.trials] == ["PRUNED", "PRUNED"]


def test_a_trial_whose_run_another_process_holds_stops_the_sweep_in_one_line(tmp_path):
    """A trial queued again while its old trainer still runs (a sweep frozen past Optuna's
    heartbeat, two sweeps on one study): its trainer refuses the run, and the sweep says so rather
    than training over it."""
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    out = tmp_path / "sweep"
    (out / "checkpoints").mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out / "checkpoints" / "tiny_t0")],
                              cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        done = run_sweep("--space", tmp_path / "space.yaml", "--trials", "1", "--study", "tiny",
                         "--out", out,
                         timeout=300)
    finally:
        holder.communicate("")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[
        -1].startswith(f"error: trial 0 (tiny_t0): run 'tiny_t0' is in use by pid "
                       f"{holder.pid} on host ")
    assert [p.name
            for p in (out / "checkpoints").iterdir()] == [
                ".tiny_t0.lock"], "nothing of the run written"
