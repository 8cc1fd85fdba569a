"""A hyperparameter sweep on one machine, no account needed: Optuna searches the parameter space of
a W&B sweep file (the same file `wandb sweep` takes, scripts/cloud/sweep.yaml by default), one
`train_sac.py` run per trial.

    python3 -m trainer.tools.sweep --config configs/dmc/cartpole_swingup_state.yaml \\
        --space scripts/cloud/sweep-state.yaml --trials 8

--trials N is the number of finished trials the study (<out>/study.db) should reach. Ctrl-C or
SIGTERM stops and queues the running trial; the same command later continues the sweep, that trial
resuming its checkpoint. Trial i is the run <study>_t<i>, its logs in <out>/runs/<run>/. See
docs/sweeps.md.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import logging
import math
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import optuna
import sqlalchemy

from errors import UserError
from trainer.checkpoints.files import run_files
from trainer.config.checks import RUN_NAME
from trainer.config.load import SEED_LIMIT, load_config
from trainer.config.yaml_files import read_yaml
from trainer.process.cli import DIVERGED_STATUS, prog, run_command
from trainer.process.signals import GracefulStop, Interrupted, die_with_parent

# a clone's; paths are the caller's, as the trainer's are
DEFAULT_SPACE = "scripts/cloud/sweep.yaml"
METRIC_COLUMNS = {"eval/return": "return", "eval/success_rate": "success"}  # eval.csv columns
METHODS = ("random", "bayes")
POLL_S = 2.0
HEARTBEAT_S = 30
# a trial without a heartbeat this long belonged to a killed sweep and is queued again
GRACE_PERIOD_S = 120


class TrialFailed(Exception):
    """A trial's run crashed: the sweep stops rather than spend its budget on more crashes."""


def _no_traceback_for_our_exits(record: logging.LogRecord) -> bool:
    """Optuna logs a failed trial with a traceback; for our own exits the message says it all."""
    if record.exc_info and isinstance(record.exc_info[1], (TrialFailed, Interrupted, UserError)):
        record.exc_info = None
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("trainer.tools.sweep"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True, help="training config every trial starts from")
    parser.add_argument("--space", default=DEFAULT_SPACE,
                        help="W&B sweep file: method, metric, parameters")
    parser.add_argument("--trials", type=int, required=True,
                        help="finished trials the study should reach")
    parser.add_argument("--study", help="study name (default: the config's file name)")
    parser.add_argument("--out",
                        help="folder for study.db, checkpoints/ and runs/ (default: "
                             "runs/sweeps/<study>)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key in every trial (repeatable), e.g. "
                             "training.episodes=50")
    parser.add_argument("--seed", type=int, default=0, help="sampler seed")
    args = parser.parse_args(argv)
    # a stop before or between trials; a running trial's stop is GracefulStop's
    return run_command(lambda: run_sweep(args),
                       cut_short="no trial was running; run the same command to continue the sweep")


def run_sweep(args: argparse.Namespace) -> int:
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    space = read_space(Path(args.space))
    check_parameters(args.config, args.set, space["parameters"])
    if args.trials < 1 or not 0 <= args.seed < SEED_LIMIT:
        raise UserError(
            f"--trials must be >= 1 and --seed in [0, {SEED_LIMIT}); got {args.trials} and "
            f"{args.seed}")
    name = args.study or Path(args.config).stem
    if not RUN_NAME.fullmatch(f"{name}_t{args.trials}"):
        raise UserError(f"--study {name!r} cannot name the trials' runs ({name}_t0, ...); use "
                        "letters, digits and _ . + = - (not first: . or -), short enough for a "
                        "trial's run name (100 characters)")
    out = Path(args.out or Path("runs", "sweeps", name)).resolve()
    metric = space["metric"]
    direction = "maximize" if metric.get("goal", "maximize") == "maximize" else "minimize"
    try:
        out.mkdir(parents=True, exist_ok=True)
        storage = optuna.storages.RDBStorage(
            f"sqlite:///{out / 'study.db'}", heartbeat_interval=HEARTBEAT_S,
            grace_period=GRACE_PERIOD_S,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback())
        study = optuna.create_study(study_name=name, storage=storage, direction=direction,
                                    load_if_exists=True)
    except (OSError, sqlalchemy.exc.SQLAlchemyError) as err:
        reason = " ".join(str(getattr(err, "orig", None) or err).split())
        raise UserError(
            f"cannot keep the study in {out / 'study.db'} ({reason}); pass another --out") from None
    # A restarted sweep must not redraw the parameters of its first trials: the seed moves on with
    # the study.
    seed = args.seed + len(study.trials)
    sampler = (optuna.samplers.TPESampler if space["method"] == "bayes"
               else optuna.samplers.RandomSampler)
    study.sampler = sampler(seed=seed)
    early = space.get("early_terminate")
    study.pruner = optuna.pruners.NopPruner()
    if early:
        study.pruner = optuna.pruners.HyperbandPruner(min_resource=early.get("min_iter", 1),
                                                      reduction_factor=early.get("eta", 3))
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)

    # trials' records reach it from child loggers
    for handler in optuna.logging.get_logger("optuna").handlers:
        handler.addFilter(_no_traceback_for_our_exits)
    status = 0
    if len(study.get_trials(states=finished)) < args.trials:
        with GracefulStop() as stop:
            trial_runner = TrialRunner(args.config, args.set, space, out, study_name=name,
                                       stop=stop)
            try:
                study.optimize(trial_runner,
                               callbacks=[
                                   optuna.study.MaxTrialsCallback(args.trials, states=finished)])
            except Interrupted as err:
                [interrupted] = [t for t in study.trials if t.number == trial_runner.number]
                # queued first next time
                optuna.storages.RetryHeartbeatStaleTrialCallback()(study, interrupted)
                run = interrupted.user_attrs["run"]
                print(f"sweep stopped by signal {err.signum}; trial {interrupted.number} ({run}) "
                      "saved its run and is queued again; run the same command to "
                      "continue", file=sys.stderr)
                status = 128 + err.signum
            except TrialFailed as err:
                print(f"error: {err}", file=sys.stderr)
                status = 1
    print(results_table(study, metric["name"]))
    return status


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite int or float (YAML's .nan and .inf are floats)."""
    return (is_int(value) or isinstance(value, float)) and math.isfinite(value)


def read_space(path: Path) -> dict:
    if not path.is_file():
        raise UserError(
            f"sweep file not found: {path}; pass --space scripts/cloud/sweep.yaml or another sweep "
            "file")
    space = read_yaml(path, what="sweep settings (method, metric, parameters)")
    if space.get("method") not in METHODS:
        raise UserError(f"{path}: method must be one of {', '.join(METHODS)} for a local sweep; "
                        f"got {space.get('method')!r}")
    metric = space.get("metric") or {}
    if (not isinstance(metric, dict) or metric.get("name") not in METRIC_COLUMNS
            or metric.get("goal", "maximize") not in ("maximize", "minimize")):
        raise UserError(f"{path}: metric.name must be one of {', '.join(METRIC_COLUMNS)} (what the "
                        "trainer writes to eval.csv) and metric.goal maximize or minimize; got "
                        f"{metric}")
    early = space.get("early_terminate")
    if early is not None and (not isinstance(early, dict) or early.get("type") != "hyperband"
                              or not is_int(early.get("min_iter", 1))
                              or early.get("min_iter", 1) < 1
                              or not is_int(early.get("eta", 3)) or early.get("eta", 3) < 2):
        raise UserError(f"{path}: early_terminate must be a mapping with type: hyperband, an "
                        "integer min_iter >= 1 and an integer eta >= 2 (both optional); got "
                        f"{early!r}")
    parameters = space.get("parameters")
    if not isinstance(parameters, dict) or not parameters:
        raise UserError(
            f"{path}: parameters must map config keys (e.g. sac.lr) to W&B parameter specs")
    for name, spec in parameters.items():
        if not isinstance(spec, dict):
            raise UserError(
                f"{path}: parameter {name} must be a spec (value, values, or min/max); got "
                f"{spec!r}")
    return space


def check_parameters(config: str, sets: list[str], parameters: dict) -> None:
    """Every parameter's distribution and key, with a value drawn from it, before any trial
    starts."""
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the probe study is no news
    probe = optuna.create_study().ask()
    optuna.logging.set_verbosity(verbosity)
    load_config(config,
                sets + [f"{name}={suggest(probe, name, spec)}"
                        for name, spec in parameters.items()])


def suggest(trial, name: str, spec: dict):
    """One parameter of a W&B sweep file, drawn by an Optuna trial with the distribution W&B's
    scheduler maps it to."""
    distribution = spec.get("distribution")
    if "value" in spec or distribution == "constant":
        return trial.suggest_categorical(name, [spec["value"]])
    if (isinstance(spec.get("values"), list) and spec["values"]
        and distribution in (None, "categorical")):
        return trial.suggest_categorical(name, spec["values"])
    if is_number(spec.get("min")) and is_number(spec.get("max")):
        low, high = spec["min"], spec["max"]
        distribution = distribution or ("int_uniform" if is_int(low) and is_int(high)
                                        else "uniform")
        if low > high or (distribution == "log_uniform_values" and low <= 0):
            raise UserError(f"sweep parameter {name}: min must be at most max, and above 0 for "
                            f"log_uniform_values; got min {low}, max {high}")
        if distribution == "int_uniform":
            return trial.suggest_int(name, low, high)
        if distribution in ("uniform", "log_uniform_values"):
            return trial.suggest_float(name, low, high, log=distribution == "log_uniform_values")
    raise UserError(f"sweep parameter {name}: use value, a list of values, or numbers min/max with "
                    "distribution int_uniform, uniform or log_uniform_values for a local sweep; "
                    f"got {spec}")


def read_metric(eval_csv: Path, column: str) -> list[float]:
    """The metric of every evaluation so far (rows being written are skipped until complete)."""
    if not eval_csv.exists():
        return []
    with open(eval_csv, newline="") as f:
        cells = [row.get(column) for row in csv.DictReader(f)]
    return [float(cell) for cell in cells if cell]


class TrialRunner:
    """The objective: one trainer process per trial, its evaluations reported to Optuna as they
    appear."""

    def __init__(self, config: str, sets: list[str], space: dict, out: Path, *, study_name: str,
                 stop: GracefulStop):
        self.config = Path(config).resolve()
        self.train_sac = importlib.util.find_spec("train_sac").origin  # in a clone or installed
        self.sets, self.space, self.out, self.study_name = sets, space, out, study_name
        self.column = METRIC_COLUMNS[space["metric"]["name"]]
        self.stop = stop
        self.number: int | None = None

    def __call__(self, trial) -> float:
        self.number = trial.number
        params = {name: suggest(trial, name, spec)
                  for name, spec in self.space["parameters"].items()}
        # a queued-again trial keeps its run, and so its checkpoint
        run = trial.user_attrs.get("run")
        if run is None:
            run = f"{self.study_name}_t{trial.number}"
            self.check_unknown(trial.number, run)
            trial.set_user_attr("run", run)
        run_dir = self.out / "runs" / run
        run_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, self.train_sac, "--config", str(self.config), "--resume", "auto"]
        for item in [*self.sets, *(f"{name}={value}" for name, value in params.items()),
                     f"checkpoint.name={run}", f"checkpoint.dir={self.out / 'checkpoints'}",
                     f"logging.tensorboard_dir={self.out / 'runs'}", "logging.progress=false"]:
            command += ["--set", item]
        log = run_dir / "train.log"
        sampled = " ".join(f"{key}={value}" for key, value in params.items())
        print(f"trial {trial.number} ({run}): {sampled}; log: {log}", flush=True)
        with open(log, "a") as output:
            # Its own session: Ctrl-C reaches the sweep alone, which passes one SIGTERM on (two
            # would kill at once).
            process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT,
                                       start_new_session=True, preexec_fn=die_with_parent)
            values = self._follow(trial, process, run_dir / "eval.csv")
        # high learning rates are part of a search: the sweep goes on
        if process.returncode == DIVERGED_STATUS:
            lines = [line for line in log.read_text().splitlines()
                     if line.startswith("error: training diverged")]
            reason = lines[-1].removeprefix("error: ") if lines else f"training diverged, see {log}"
            print(f"trial {trial.number} ({run}) pruned: {reason}", flush=True)
            raise optuna.TrialPruned("training diverged")
        if process.returncode == 2:
            lines = [line for line in log.read_text().splitlines() if line.startswith("error:")]
            reason = lines[-1].removeprefix("error: ") if lines else f"bad input, see {log}"
            raise UserError(f"trial {trial.number} ({run}): {reason}")
        if process.returncode != 0:
            raise TrialFailed(
                f"trial {trial.number} ({run}) exited with status {process.returncode}; see {log}")
        if not values:
            raise UserError(f"trial {trial.number} ({run}) finished without an evaluation of "
                            f"{self.space['metric']['name']} (a task without success has no "
                            "eval/success_rate); raise training.episodes or lower "
                            "training.eval_every_episodes")
        return values[-1]

    def check_unknown(self, number: int, run: str) -> None:
        """A new trial's run must have no checkpoints: --resume auto would report another study's
        result as its own."""
        folder = self.out / "checkpoints"
        found = run_files(os.listdir(folder) if folder.is_dir() else [], run)
        if found:
            raise UserError(f"trial {number}'s run {run} already has checkpoints in {folder} "
                            f"({', '.join(found[:3])}) that {self.out / 'study.db'} does not know: "
                            "they are a trial of another study, trained with other settings; "
                            "restore that study.db, or pass another --out or --study")

    def _follow(self, trial, process: subprocess.Popen, eval_csv: Path) -> list[float]:
        reported: list[float] = []
        while True:
            running = process.poll() is None
            values = read_metric(eval_csv, self.column)
            for index in range(len(reported), len(values)):
                trial.report(values[index], step=index + 1)
            reported = values
            if running and trial.should_prune():
                self._terminate(process)
                raise optuna.TrialPruned(f"pruned after {len(values)} evaluations")
            if running and self.stop.requested:
                self._terminate(process)
                raise Interrupted(self.stop.signum)
            if not running:
                return values
            time.sleep(POLL_S)

    @staticmethod
    def _terminate(process: subprocess.Popen) -> None:
        """SIGTERM: the run saves `_latest` and exits."""
        process.send_signal(signal.SIGTERM)
        process.wait()


def results_table(study, metric: str) -> str:
    """The study's trials as a Markdown table, best first."""
    trials = [t for t in study.trials if t.state.name != "WAITING"]
    names = sorted({name for t in trials for name in t.params})
    sign = -1 if study.direction.name == "MAXIMIZE" else 1

    def value(t):  # a pruned or stopped trial: its last evaluation
        return t.value if t.value is not None else t.intermediate_values.get(
            max(t.intermediate_values, default=0))

    def order(t):
        return t.state.name != "COMPLETE", value(t) is None, sign * (value(t) or 0.0)

    lines = [f"| trial | run | state | {metric} | evals | " + " | ".join(names) + " |",
             "|" + " --- |" * (5 + len(names))]
    for t in sorted(trials, key=order):
        cells = [str(t.number), t.user_attrs.get("run", ""), t.state.name.lower(),
                 _format(value(t), digits=3),
                 str(len(t.intermediate_values)), *(_format(t.params.get(name)) for name in names)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _format(value, digits: int = 0) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}" if digits else f"{value:.3g}"
    return "" if value is None else str(value)


if __name__ == "__main__":
    sys.exit(main())
