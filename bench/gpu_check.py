"""The GPU check: every CUDA path this project has, measured against the targets in
docs/gpu/README.md, in one command.

    make gpu-check                                   # on a CUDA machine: the full check, <= 30 min
    python3 -m bench.gpu_check --device cpu --quick  # anywhere: the same sections, small, minutes
    # a machine that stops a command at 10 minutes
    python3 -m bench.gpu_check --only graphs e2e --seeds 1 2 --minutes 9.5
    python3 -m bench.gpu_check --only updates --missing  # only the rows missing or failed

Writes docs/gpu/<device-name>.json (all rows so far, merged by section) and
docs/gpu/<device-name>.md (the report). Sections, each at the `gpu` profile's settings of the config
it names unless a row says otherwise:
  graphs    simple2dcnn updates/s at batch 128/256/512 (DrQ-v2's schedule), the eager update and the
            CUDA-graphed one alternating in one process (bench/update_speed.py), and at the largest
            batch how far apart 20 updates from the same weights leave them
  e2e       configs/dishwashing_video.yaml from frames with 20 scripted demonstrations until an
            evaluation reaches 80% success (bench/dishwashing_e2e.py): the training seconds, and the
            GPU's busy share meanwhile
  updates   per encoder (simple2dcnn, simple3dcnn, r3d18 fine-tuned, r3d18 frozen at 112 px,
            timesformer small): SAC updates/s at batch 128/256/512 on a replay of random frames (an
            update's cost does not depend on what the frames show), peak memory
            (torch.cuda.max_memory_allocated) and GPU utilisation (NVML, sampled every 0.1 s over
            the row)
  variants  simple2dcnn updates/s with one speed setting flipped from the profile's: replay frames
            on the device vs pinned host memory, torch.compile, bfloat16 autocast, channels-last,
            cuDNN's autotuner
  envs      env steps/s of real training runs (train_sac.py, the gpu profile) on dishwashing_video
            and DMC cartpole/swingup with 1 and 4 env workers, and the episodes/hour they give
  smoke     cartpole/swingup from pixels for a fixed wall time: eval return at the first and the
            last evaluation
  warp      MuJoCo Warp frames/s (physics and ray-traced camera of N worlds, random actions, into a
            replay on the device: bench/mjwarp.py's contender) for cartpole/swingup and dishwashing
            at N worlds and 64/84 px
  warp_learn  cartpole/swingup from pixels in MuJoCo Warp worlds (env.backend mujoco_warp) until its
              eval return
            reaches 700 or the wall time passes: the training seconds to 700
The learning sections (e2e, smoke, warp_learn) run a row per seed of `--seeds`, one after the other.
The report ends with the targets beside the measured values. Each row runs in its own subprocess, so
one that runs out of memory or crashes is reported and the rest go on.
"""

import argparse
import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench.common import Utilisation, cpu_name, positive, scalars
from envs.rendering import configure
from trainer.config.load import SEED_LIMIT, TrainingConfig, load_config

# torch, and what imports it, load inside the functions that use them: after __main__ has set
# OMP_NUM_THREADS (at the end), which torch reads as it loads
ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("graphs", "e2e", "updates", "variants", "envs", "smoke", "warp", "warp_learn")
DMC = "configs/dmc/cartpole_swingup.yaml"
DISHWASHING = "configs/dishwashing_video.yaml"
ENCODERS = {  # row name -> encoder settings
    "simple2dcnn": {"encoder.video.arch": "simple2dcnn"},
    "simple3dcnn": {"encoder.video.arch": "simple3dcnn"},
    "r3d18": {"encoder.video.arch": "r3d18"},
    # stored features cannot be shifted: one augmentation sample (the DMC gpu profile's DrQ setting
    # is two)
    "r3d18_frozen_112": {"encoder.video.arch": "r3d18", "encoder.video.freeze": True,
                         "encoder.video.input_size": 112,
                         "sac.augment_samples": 1},
    "timesformer_small": {"encoder.video.arch": "timesformer", "encoder.video.preset": "small"},
}
WARP_TASKS = {"cartpole": "dm_control/cartpole-swingup-v0", "dishwashing": "Dishwashing-v0"}
WARP_TARGET = 700  # the eval return warp_learn runs to
E2E_TARGET = 0.8  # the eval success rate the dishwashing run (e2e) runs to
# row name -> the setting flipped; compile last, since a --minutes budget may end during its build
VARIANTS = {
    "autocast_bf16": {"training.autocast": True},
    "cudnn_benchmark": {"training.cudnn_benchmark": True},
    "channels_last": {"encoder.video.channels_last": True},
    "replay_host_pinned": {"replay.device": "cpu"},
    "compile": {"training.compile": True},
}


def num_envs(n: int) -> dict:
    """`n` env workers, evaluated after each round of their episodes (a multiple of num_envs, as the
    config asks)."""
    return {"env.num_envs": n, "training.eval_every_episodes": n}


# what the learning rows (smoke, warp_learn, e2e) of the small checks share, beside their number of
# env workers
QUICK_LEARNING = {"training.seed_steps": 50, "sac.batch_size": 32, "env.max_episode_steps": 25,
                  "training.eval_episodes": 2}
TINY_LEARNING = {"training.seed_steps": 8, "sac.batch_size": 4, "env.max_episode_steps": 8,
                 "training.eval_episodes": 1,
                 "sac.hidden_dim": 32}
# how big each section is: full fits 20 minutes on one GPU, quick a few minutes on a CPU, tiny the
# tests
SIZES = {
    "full": {"batches": (128, 256, 512), "row_s": 8.0, "image_size": 84,
             "encoders": tuple(ENCODERS),
             "env_steps": 1200, "workers": (1, 4), "env_overrides": {}, "smoke_s": 600.0,
             "smoke_overrides": {},
             "warp_tasks": tuple(WARP_TASKS), "warp_worlds": (256, 1024, 4096),
             "warp_sizes": (64, 84),
             # 16 worlds, one update per agent step: DrQ's updates per frame, 16 of them per batched
             # step. Batch 128 and 3-step returns, with which cpu_bf16 reached 689 at 100k frames
             # (3-step returns led one-step ones at 12 of 13 evaluations in docs/results.md): on the
             # H200 an update at 128 took 10.5 ms, at the profile's 512 21.6 ms
             # (docs/gpu/nvidia-h200.md), and this row is timed
             "warp_learn_s": 540.0,
             "warp_learn_overrides": num_envs(16) | {"sac.batch_size": 128, "sac.nstep": 3},
             "graphs_batches": (128, 256, 512), "graphs_check": 20, "e2e_demos": 20,
             "e2e_minutes": 4.0,
             "e2e_overrides": {}},
    "quick": {"batches": (8, 16), "row_s": 3.0, "image_size": 64,
              "encoders": ("simple2dcnn", "simple3dcnn", "r3d18_frozen_112"),
              "env_steps": 250, "workers": (1, 2), "env_overrides": {"sac.batch_size": 16},
              "smoke_s": 90.0,
              "smoke_overrides": QUICK_LEARNING | num_envs(1),
              "warp_tasks": tuple(WARP_TASKS), "warp_worlds": (16, 64), "warp_sizes": (64,),
              "warp_learn_s": 120.0,
              "warp_learn_overrides": QUICK_LEARNING | num_envs(4),
              "graphs_batches": (16, 32), "graphs_check": 5, "e2e_demos": 4, "e2e_minutes": 3.0,
              "e2e_overrides": QUICK_LEARNING | num_envs(2)},
    "tiny": {"batches": (4,), "row_s": 0.5, "image_size": 64,
             "encoders": ("simple2dcnn", "r3d18_frozen_112"),
             "env_steps": 24, "workers": (1,),
             "env_overrides": {"sac.batch_size": 4, "env.max_episode_steps": 8,
                               "sac.hidden_dim": 32},
             # two episodes, not a wall time: the suite's check sees two evaluations however loaded
             # the machine is
             "smoke_s": 600.0,
             "smoke_overrides": TINY_LEARNING | num_envs(1) | {"training.episodes": 2},
             "warp_tasks": ("cartpole",), "warp_worlds": (2,), "warp_sizes": (32,),
             "warp_learn_s": 600.0,
             "warp_learn_overrides": TINY_LEARNING | num_envs(2) | {"training.episodes": 4},
             "graphs_batches": (4,), "graphs_check": 4, "e2e_demos": 1, "e2e_minutes": 10.0,
             "e2e_overrides": TINY_LEARNING | num_envs(1) | {"training.episodes": 2}},
}


# ---- one row, in its own process -----------------------------------------------------------------
def update_row(config: str, device: str, batch: int, seconds: float, settings: dict) -> dict:
    """SAC updates/s of `config` at its gpu profile plus `settings`, on a replay filled with random
    frames."""

    configure()  # before mujoco loads: its import raises on a bad MUJOCO_GL
    import numpy as np
    import torch

    from trainer.run.loop import Trainer

    sets = {"profile": "gpu", "training.device": device, "sac.batch_size": batch,
            "sac.buffer_size": 4 * batch + 64,
            "env.num_envs": 1, "logging.tensorboard": False, "logging.progress": False,
            "logging.eval_video": False,
            "checkpoint.dir": tempfile.mkdtemp(), "logging.tensorboard_dir": tempfile.mkdtemp(),
            **settings}
    cfg = load_config(ROOT / config, [f"{key}={value}" for key, value in sets.items()])
    trainer = Trainer(cfg)
    replay, agent, rng = trainer.replay, trainer.agent, np.random.default_rng(0)
    shape = trainer.env.single_observation_space.shape

    # what the replay keeps of a random stack: its frame, or a frozen trunk's features
    def stored() -> np.ndarray:
        return trainer.observe(rng.integers(0, 256, (1, *shape), dtype=np.uint8))[0]

    replay.add_first(stored())
    for _ in range(4 * batch):
        action = rng.uniform(-1, 1, trainer.action_dim).astype(np.float32)
        replay.add(action, float(rng.normal()), False, stored())
    cuda = trainer.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(3):  # allocations, cuDNN autotuning, compilation
        agent.update(replay.sample(batch, trainer.device))
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    monitor = Utilisation(trainer.device)
    updates, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        agent.update(replay.sample(batch, trainer.device))
        updates += 1
        if updates % 10 == 0:
            sync()
    sync()
    elapsed = time.perf_counter() - start
    row = {"updates_per_s": round(updates / elapsed, 2), "updates": updates,
           "seconds": round(elapsed, 1),
           "gpu_util_pct": monitor.stop(), "device": str(trainer.device),
           "peak_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
           "frames_on": "device" if isinstance(replay.frames, torch.Tensor) else "host"}
    trainer.close()
    return row


# what a training run stopped by SIGTERM gets to save and exit (Docker and most schedulers: 30 s)
STOP_WAIT_S = 35.0


class Budget:
    """This command's wall time (`--minutes`; None: no limit). Each row gets at most the time left,
    less a margin for a stopped training run to save and the report to be written, so on a machine
    that kills a command at its limit every row that started ends in the report, and the rest say
    they did not run."""

    MARGIN_S = STOP_WAIT_S + 10.0

    def __init__(self, minutes: float | None):
        self.end = None if minutes is None else time.monotonic() + 60 * minutes - self.MARGIN_S

    def left(self, seconds: float) -> float:
        """`seconds`, or the time left if that is less (<= 0: spent)."""
        return seconds if self.end is None else min(seconds, self.end - time.monotonic())


NOT_RUN = {"error": "not run: the --minutes budget was spent"}


def run_row(kind: str, params: dict, *, limit_s: float, budget: Budget) -> dict:
    """One row in a fresh Python process (its own CUDA context and peak memory), stopped after
    `limit_s` or when the budget runs out; a crash, an out-of-memory or a stop becomes the row's
    `error` instead of ending the check."""
    timeout = budget.left(limit_s)
    if timeout <= 0:
        return NOT_RUN
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from bench.gpu_check import "
            f"{kind}; print('ROW ' + json.dumps({kind}(**json.loads(sys.argv[1]))))")
    try:
        done = subprocess.run([sys.executable, "-c", code, json.dumps(params)], cwd=ROOT,
                              capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        # a hang, or a row the budget's end cut short: the report says which
        cause = "the --minutes budget ran out" if timeout < limit_s else "the row's time limit"
        return {"error": f"stopped after {timeout:.0f} s: {cause}"}
    rows = [line[4:] for line in done.stdout.splitlines() if line.startswith("ROW ")]
    if done.returncode != 0 or not rows:
        lines = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
        return {"error": lines[-1][:300] if lines else f"exit {done.returncode}"}
    return json.loads(rows[-1])


# ---- training runs, through the command line -----------------------------------------------------
def training_run(config: str, device: str, settings: dict, wall_s: float, workdir: Path,
                 stop_at_return: float | None = None) -> dict:
    """train_sac.py on `config` (gpu profile + `settings`) until it ends, `wall_s` passes or an
    evaluation reaches `stop_at_return` (then SIGTERM, as a spot reclaim would); what it logged to
    TensorBoard and eval.csv."""
    sets = {"profile": "gpu", "training.device": device, "checkpoint.dir": str(workdir / "ckpt"),
            "logging.tensorboard_dir": str(workdir / "runs"), "logging.eval_video": False,
            "logging.progress": False,
            "checkpoint.name": "check", **settings}
    args = [sys.executable, str(ROOT / "train_sac.py"), "--config", str(ROOT / config)]
    args += [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]
    run, log = workdir / "runs" / "check", workdir / "train.log"
    start = time.perf_counter()
    with open(log, "w") as output:  # a file, not a pipe: nobody reads a pipe while the run goes
        process = subprocess.Popen(args, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
        while process.poll() is None and time.perf_counter() - start < wall_s:
            time.sleep(1.0)
            if stop_at_return is not None and any(e["return"] >= stop_at_return
                                                  for e in evals(run / "eval.csv")):
                break
        stopped = process.poll() is None
        if stopped:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            # the budget's margin is for the save a stop makes, no more
            process.kill()
            process.wait()
    result = {"exit": process.returncode, "wall_s": round(time.perf_counter() - start, 1),
              "scalars": scalars(run), "evals": evals(run / "eval.csv")}
    if stopped and process.returncode == -signal.SIGKILL:
        result["error"] = (
            f"not stopped {STOP_WAIT_S:.0f} s after SIGTERM (the save a stop makes); killed")
    elif process.returncode not in (0, 128 + signal.SIGTERM):
        result["error"] = (log.read_text().strip().splitlines()
                           or [f"exit {process.returncode}"])[-1][:300]
    return result


def evals(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path) as f:
        return [{"frames": int(row["frames"]), "return": float(row["return"]),
                 "train_s": float(row["wall_s"])}
                for row in csv.DictReader(f)]


def env_row(config: str, *, device: str, workers: int, env_steps: int, overrides: dict,
            wall_s: float) -> dict:
    """Env steps/s while training (one update per step after the seed steps) with `workers` env
    processes, and the GPU's utilisation meanwhile: the targets are for training, where the GPU
    waits on the envs."""
    import torch

    if wall_s <= 0:
        return NOT_RUN
    seed_steps = min(1000, env_steps // 3)
    # demos.path null: the rate of acting and learning, without recording a dataset first (a demo
    # batch costs the same)
    settings = {"env.num_envs": workers, "training.seed_steps": seed_steps,
                "training.max_env_steps": env_steps,
                "demos.path": "null", "training.eval_every_episodes": 10**6,
                "checkpoint.every_episodes": 10**6, "checkpoint.every_minutes": 0,
                "sac.buffer_size": env_steps + 100, **overrides}
    monitor = Utilisation(torch.device(device))
    with tempfile.TemporaryDirectory() as workdir:
        run = training_run(config, device, settings, wall_s=wall_s, workdir=Path(workdir))
    later_half_util = monitor.stop(skip=0.5)
    rates = run["scalars"].get("train/env_steps_per_s", [])
    lengths = run["scalars"].get("train/episode_length", [])
    row = {"workers": workers, "wall_s": run["wall_s"], "episodes": len(rates),
           "gpu_util_pct": later_half_util}
    if run.get("error") or not rates:
        return row | {"error": run.get("error", "no episode finished")}
    # the later half: past the seed steps, updates running
    learning = rates[len(rates) // 2:] or rates
    steps_per_s = sorted(learning)[len(learning) // 2]
    length = sum(lengths) / len(lengths)
    return row | {"env_steps_per_s": round(steps_per_s, 2), "episode_length": round(length, 1),
                  "episodes_per_hour": round(3600 * steps_per_s / length, 1)}


def learning_row(device: str, wall_s: float, settings: dict, target: float | None = None) -> dict:
    """Cartpole/swingup from pixels (gpu profile + `settings`) until `wall_s` passes or, with a
    `target`, an evaluation reaches it: eval return at the first and the last evaluation; with a
    target, the best return and the training seconds (eval.csv's wall_s) and frames of the first
    evaluation at it."""
    if wall_s <= 0:
        return NOT_RUN
    settings = {"checkpoint.every_episodes": 10**6, "checkpoint.every_minutes": 0, **settings}
    with tempfile.TemporaryDirectory() as workdir:
        run = training_run(DMC, device, settings, wall_s=wall_s, workdir=Path(workdir),
                           stop_at_return=target)
    evals = run["evals"]
    row = {"wall_s": run["wall_s"], "evals": evals} | ({} if target is None else {"target": target})
    if run.get("error") or not evals:
        return row | {"error": run.get("error", "no evaluation finished")}
    row |= {"first_return": evals[0]["return"], "last_return": evals[-1]["return"],
            "last_frames": evals[-1]["frames"]}
    if target is None:
        return row
    reached = [e for e in evals if e["return"] >= target]
    return row | {"best_return": max(e["return"] for e in evals),
                  "train_s_to_target": reached[0]["train_s"] if reached else None,
                  "frames_to_target": reached[0]["frames"] if reached else None}


def device_memory_used() -> int:
    """Bytes in use on the current GPU, whoever allocated them: torch's own counters miss MuJoCo
    Warp's pool."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return total - free


def warp_row(env_id: str, device: str, worlds: int, image_size: int, seconds: float) -> dict:
    """Frames/s of `worlds` MuJoCo Warp worlds of `env_id` (bench/mjwarp.py's contender: random
    actions, physics and render, frames into a replay on `device`), timed after its warm-up steps;
    build_s includes loading (or, the first time on a machine, compiling) the kernels."""
    import torch

    from bench.mjwarp import WARMUP_STEPS, Warp, config, timed_frames

    start = time.perf_counter()
    contender = Warp(config(env_id, num_envs=worlds, image_size=image_size, backend="mujoco_warp"),
                     torch.device(device))
    for _ in range(WARMUP_STEPS):
        contender.step()
    built = time.perf_counter()
    # each step reads its flags to the host: synchronised
    frames, elapsed = timed_frames(contender, seconds)
    cuda = torch.device(device).type == "cuda"
    row = {"worlds": worlds, "image_size": image_size, "frames_per_s": round(frames / elapsed, 1),
           "frames": frames,
           "seconds": round(elapsed, 1), "build_s": round(built - start, 1),
           "device_memory_gb": round(device_memory_used() / 2**30, 2) if cuda else None}
    contender.close()
    return row


def key_value(text: str) -> str:
    """An argparse type: KEY=VALUE, else a one-line usage error."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE (a config key, e.g. training.autocast=true), got {text}")
    return text


def seed(text: str) -> int:
    """An argparse type: a training.seed, else a one-line usage error."""
    value = int(text)
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(
            f"must be a training.seed in [0, {SEED_LIMIT}), got {text}")
    return value


# ---- the check -----------------------------------------------------------------------------------
def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    return f"CPU {cpu_name()}"


def report_name(device: str, size: str) -> str:
    """The report's device name: the GPU's or CPU's, with the size when it is not the full check."""
    return device_name(device) + ("" if size == "full" else f" ({size})")


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def run_sections(sections: list[str], device: str, size: dict, record, budget: Budget,
                 seeds: list[int],
                 e2e_settings: dict | None = None) -> None:
    """The rows of `sections`, each passed to `record(section, name, measure)` (`measure()` runs it
    and returns the row), which runs it or not and keeps what it returns, so a check cut short keeps
    the rows it finished; each row within the `budget`. The learning sections (smoke, warp_learn)
    run a row per seed of `seeds`."""
    small = size["image_size"] != SIZES["full"]["image_size"]
    # the size's frames, where not the full check's
    resized = {"env.image_size": size["image_size"]} if small else {}
    e2e_settings = e2e_settings or {}

    def learning(section: str, settings: dict, target: float | None = None) -> None:
        """A row per seed of a learning section: cartpole/swingup at `settings` under the size's own
        overrides."""
        settings = settings | size[f"{section}_overrides"] | resized
        for seed in seeds:
            record(section, f"seed{seed}",
                   partial(learning_row, device, budget.left(size[f"{section}_s"]),
                           settings | {"training.seed": seed}, target=target))

    if "graphs" in sections:
        sets = [f"env.image_size={size['image_size']}"] if small else []
        for batch in size["graphs_batches"]:
            record("graphs", f"simple2dcnn@{batch}", partial(run_row, "graphs_row", {
                "device": device, "batch": batch, "seconds": size["row_s"], "sets": sets,
                "check": size["graphs_check"] if batch == size["graphs_batches"][-1] else 0},
                limit_s=600, budget=budget))
    if "e2e" in sections:
        overrides = size["e2e_overrides"] | resized | e2e_settings
        suffix = "".join(f" {key}={value}" for key, value in e2e_settings.items())

        def e2e(seed: int) -> dict:  # the minutes left when the row starts, not when it is listed
            return run_row("e2e_row", {"device": device, "seed": seed, "demos": size["e2e_demos"],
                                       "minutes": budget.left(60 * size["e2e_minutes"]) / 60,
                                       "settings": overrides},
                           limit_s=60 * size["e2e_minutes"] + 120, budget=budget)

        for seed in seeds:
            record("e2e", f"seed{seed}{suffix}", partial(e2e, seed))
    if "updates" in sections:
        for name in size["encoders"]:
            for batch in size["batches"]:
                settings = ENCODERS[name] | resized
                record("updates", f"{name}@{batch}", partial(run_row, "update_row", {
                    "config": DMC, "device": device, "batch": batch, "seconds": size["row_s"],
                    "settings": settings},
                    limit_s=600, budget=budget))
    # the same update on this machine's CPU, for the speed-up
    if "updates" in sections and device == "cuda":
        record("updates", "cpu_reference_simple2dcnn@128", partial(run_row, "update_row", {
            "config": DMC, "device": "cpu", "batch": 128, "seconds": size["row_s"], "settings": {}},
            limit_s=600, budget=budget))
    if "variants" in sections:
        # the middle batch: 256 in the full check
        batch = size["batches"][len(size["batches"]) // 2]
        for name, flipped in {"profile": {}, **VARIANTS}.items():
            record("variants", name,
                   partial(variant_row, device, batch=batch, seconds=size["row_s"],
                           settings=resized | flipped, budget=budget))
    if "envs" in sections:
        for config in (DISHWASHING, DMC):
            for workers in size["workers"]:
                overrides = size["env_overrides"] | {"env.image_size": size["image_size"]}
                record("envs", f"{Path(config).stem}@{workers}", partial(
                    env_row, config, device=device, workers=workers, env_steps=size["env_steps"],
                    overrides=overrides,
                    wall_s=budget.left(3600)))
    if "smoke" in sections:
        learning("smoke", {"training.eval_every_episodes": 5, "training.eval_episodes": 5})
    if "warp" in sections:
        for task in size["warp_tasks"]:
            for image_size in size["warp_sizes"]:
                for worlds in size["warp_worlds"]:
                    record("warp", f"{task}@{worlds}x{image_size}", partial(run_row, "warp_row", {
                        "env_id": WARP_TASKS[task], "device": device, "worlds": worlds,
                        "image_size": image_size,
                        "seconds": size["row_s"]}, limit_s=900, budget=budget))
    if "warp_learn" in sections:
        learning("warp_learn", {"env.backend": "mujoco_warp", "training.eval_episodes": 10},
                 target=WARP_TARGET)


def graphs_row(device: str, batch: int, seconds: float, sets: list[str], check: int) -> dict:
    """simple2dcnn updates/s at `batch`, eager and graphed alternating in one process
    (bench/update_speed.py), and with `check` > 0 how far apart `check` updates from the same
    weights leave the two."""
    import torch

    from bench.update_speed import check as compare
    from bench.update_speed import load, speed

    configure()
    cfg, where = load(device, batch, sets=sets), torch.device(device)
    rates = {row["path"]: row["updates_per_s"]
             for row in speed(cfg, where, seconds=seconds, chunk=10)}
    row = {"before": rates["before"], "after": rates["after"],
           "speedup": round(rates["after"] / rates["before"], 2)}
    return row | ({"check": compare(cfg, where, updates=check)} if check else {})


def e2e_row(device: str, seed: int, demos: int, minutes: float, settings: dict) -> dict:
    """configs/dishwashing_video.yaml at the gpu profile (plus `settings`) from frames with `demos`
    scripted demonstrations, until an evaluation reaches 80% success or `minutes` pass
    (bench/dishwashing_e2e.py)."""
    from bench.dishwashing_e2e import record, train

    if minutes <= 0:
        return NOT_RUN
    with tempfile.TemporaryDirectory() as workdir:
        record_s = record(Path(workdir) / "demos", demos,
                          [f"{key}={value}" for key, value in settings.items()
                           if key.startswith("env.")])
        sets = [f"{key}={value}" for key, value in ({"training.device": device} | settings).items()]
        (Path(workdir) / "run").mkdir()
        rows, summary = train(seed, Path(workdir) / "demos", Path(workdir) / "run", profile="gpu",
                              target=E2E_TARGET, minutes=minutes, sets=sets)
    evals = [{"env_step": int(row["env_step"]), "success": float(row["success"]),
              "train_s": float(row["wall_s"])}
             for row in rows]
    return summary | {"record_s": round(record_s, 1), "target": E2E_TARGET, "evals": evals}


def variant_row(device: str, *, batch: int, seconds: float, settings: dict, budget: Budget) -> dict:
    """The profile's update at `batch` with `settings` flipped, in its own process."""
    return run_row("update_row",
                   {"config": DMC, "device": device, "batch": batch, "seconds": seconds,
                    "settings": settings}, limit_s=900, budget=budget) | {"batch": batch}


def claims(rows: dict) -> list[tuple[str, str, str]]:
    """(claim, its target, measured) for each claim the rows can answer: the targets are
    docs/gpu/README.md's."""
    updates, envs, warp = rows.get("updates", {}), rows.get("envs", {}), rows.get("warp", {})

    def utilisation(encoder: str) -> str:
        """Updates alone keep a GPU busy, whatever the utilisation while training: say which the
        number is."""
        ran = {int(name.split("@")[1]): row["gpu_util_pct"] for name, row in updates.items()
               if name.startswith(f"{encoder}@") and row.get("gpu_util_pct") is not None}
        alone = (f"updates alone: {ran[max(ran)]} at batch {max(ran)}" if ran
                 else "updates alone: n/a")
        return f"while training: not measured (envs rows train simple2dcnn); {alone}"

    def training_utilisation() -> str:
        shown = [f"{key}: {row['gpu_util_pct']}" for key, row in envs.items()
                 if row.get("gpu_util_pct") is not None]
        return ", ".join(shown) or "n/a"

    def peak(batch: int) -> str:
        values = {name: row.get("peak_memory_gb") for name, row in updates.items()
                  if name.endswith(f"@{batch}")}
        shown = [f"{name.split('@')[0]} {value}" for name, value in values.items()
                 if value is not None]
        return ", ".join(shown) or "n/a"

    def episodes(key: str) -> str:
        value = envs.get(key, {}).get("episodes_per_hour")
        return "n/a" if value is None else str(value)

    def speedup() -> str:
        gpu = updates.get("simple2dcnn@128", {}).get("updates_per_s")
        cpu = updates.get("cpu_reference_simple2dcnn@128", {}).get("updates_per_s")
        return f"{gpu / cpu:.1f}x" if gpu and cpu else "n/a"

    def warp_best(image_size: int) -> str:
        rates = {name: row["frames_per_s"] for name, row in warp.items()
                 if name.startswith("cartpole@") and row.get("image_size") == image_size
                 and "frames_per_s" in row}
        best = max(rates, key=rates.get, default=None)
        return f"{rates[best]} ({best})" if best else "n/a"

    def graph_speedup(batch: int) -> str:
        row = rows.get("graphs", {}).get(f"simple2dcnn@{batch}", {})
        return (f"{row['speedup']}x ({row['before']} -> {row['after']} updates/s)"
                if "speedup" in row else "n/a")

    def per_seed(section: str, result: Callable[[dict], str | None]) -> str:
        """Each seed's row of a learning section as `result` words it; rows it has no words for are
        left out."""
        shown = [f"{seed}: {text}" for seed, row in rows.get(section, {}).items()
                 if (text := result(row))]
        return ", ".join(shown) or "n/a"

    def dishwashing_learned(row: dict) -> str | None:
        if row.get("wall_s_to_target") is not None:
            return f"{row['wall_s_to_target']:.0f} s ({row['env_step_at_target']} agent steps)"
        if row.get("best_success") is not None:
            return f"not reached, best {row['best_success']:.0%} in {row['process_s']:.0f} s"
        return None

    def warp_learned(row: dict) -> str | None:
        if row.get("train_s_to_target") is not None:
            return (f"{row['train_s_to_target'] / 60:.1f} min of training "
                    f"({row['frames_to_target']} frames)")
        if "best_return" in row:
            return f"not reached, best {row['best_return']:.0f} in {row['wall_s'] / 60:.1f} min"
        return None

    return [
        ("CUDA graphs against eager updates, simple2dcnn at batch 256, same card and process",
         ">= 4x",
         graph_speedup(256)),
        ("CUDA graphs against eager updates, simple2dcnn at batch 512, same card and process",
         ">= 3x",
         graph_speedup(512)),
        ("dishwashing_video to 80% eval success, training seconds (eval.csv's wall_s)", "<= 120",
         per_seed("e2e", dishwashing_learned)),
        ("R3D18 GPU utilisation while training (%)", "40-60", utilisation("r3d18")),
        ("Simple3DCNN GPU utilisation while training (%)", "20-30", utilisation("simple3dcnn")),
        ("GPU utilisation while training, Simple2DCNN (%; below 20: CPU-bound)", ">= 20",
         training_utilisation()),
        ("VRAM at batch 256 (GB)", "4-6", peak(256)),
        ("VRAM at batch 512 (GB)", "8-12", peak(512)),
        ("dishwashing episodes/hour, Simple2DCNN", "~200", ", ".join(
            f"{key.split('@')[1]} workers: {episodes(key)}" for key in envs
            if key.startswith("dishwashing"))
         or "n/a"),
        ("dishwashing episodes/hour, R3D18", "~150", "not measured (envs rows train simple2dcnn)"),
        ("faster than this machine's CPU (simple2dcnn updates/s at batch 128)", "10-50x",
         speedup()),
        ("MuJoCo Warp frames/s, cartpole at 64 px (on an H100)", ">= 100,000", warp_best(64)),
        (f"MuJoCo Warp pixel cartpole to return {WARP_TARGET} (on an H100)", "< 15 min",
         per_seed("warp_learn", warp_learned)),
    ]


def markdown(name: str, commands: dict, rows: dict) -> str:
    """The report: each section's rows under the command that measured them, then the claims."""
    lines = [f"# GPU check: {name}", ""]
    for section in SECTIONS:
        if section not in rows:
            continue
        lines += [f"## {section}", "", f"Command: `{commands.get(section, 'not recorded')}`", ""]
        if section == "e2e":
            for i, (seed, row) in enumerate(rows[section].items()):
                lines += [""] * (i > 0) + [f"### {seed}", ""]
                lines += [f"- {key}: {value}" for key, value in row.items() if key != "evals"]
                lines += ["- evaluations (agent steps: success at training seconds): " + ", ".join(
                    f"{e['env_step']}: {e['success']:.0%} at {e['train_s']:.0f} s"
                    for e in row.get("evals", []))]
        elif section in ("smoke", "warp_learn"):
            for i, (seed, row) in enumerate(rows[section].items()):
                lines += [""] * (i > 0) + [f"### {seed}", ""]
                lines += [f"- {key}: {value}" for key, value in row.items() if key != "evals"]
                lines += ["- evaluations (frames: return): "
                          + ", ".join(f"{e['frames']}: {e['return']:.0f}"
                                      for e in row.get("evals", []))]
        else:
            keys = sorted({key for row in rows[section].values() for key in row})
            lines += ["| row | " + " | ".join(keys) + " |", "| --- |" + " --- |" * len(keys)]
            lines += [f"| {row_name} | " + " | ".join(str(row.get(key, "")) for key in keys) + " |"
                      for row_name, row in rows[section].items()]
        lines.append("")
    lines += ["## The targets beside the measured values", "",
              "| claim | target | measured |", "| --- | --- | --- |"]
    lines += [f"| {claim} | {guide} | {value} |" for claim, guide, value in claims(rows)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None,
                        help="default: cuda when available")
    parser.add_argument("--quick", action="store_const", const="quick", dest="size", default="full",
                        help="small sizes: minutes on a CPU")
    parser.add_argument("--tiny", action="store_const", const="tiny", dest="size",
                        help="smallest sizes: the tests")
    parser.add_argument("--smoke-minutes", type=positive(float),
                        help="the smoke section's wall time (default: the size's)")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--out", default=str(ROOT / "docs" / "gpu"),
                        help="folder for <device>.md and .json")
    parser.add_argument("--seeds", type=seed, nargs="+", default=[TrainingConfig().seed],
                        help="the learning sections' (smoke, warp_learn) training.seed, a row "
                             "each (default: the config's)"),
    parser.add_argument("--e2e-set", action="append", default=[], metavar="KEY=VALUE",
                        type=key_value,
                        help="a setting the e2e runs take beside the gpu profile's (a candidate "
                             "for the profile); its rows are named after it")
    parser.add_argument("--missing", action="store_true",
                        help="run only the rows of --only's sections that the report lacks or "
                             "that ended in an error, keeping the rest (a later call finishes an "
                             "earlier one's sections)")
    parser.add_argument("--minutes", type=positive(float),
                        help="this command's wall time: rows get what is left, those past it are "
                             "marked not run (for machines that limit a command's time)")
    args = parser.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but no CUDA device is available; run with --device cpu --quick",
              file=sys.stderr)
        return 2
    name = report_name(device, args.size)
    size = SIZES[args.size] | ({"smoke_s": 60 * args.smoke_minutes} if args.smoke_minutes else {})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / f"{slug(name)}.json"
    saved = json.loads(json_path.read_text()) if json_path.is_file() else {}
    rows, commands = saved.get("rows", {}), saved.get("commands", {})
    command = "python3 -m bench.gpu_check " + " ".join(sys.argv[1:] if argv is None else argv)
    if not args.missing:  # a section run again replaces its rows and the command that measured them
        for section in args.only:
            rows.pop(section, None)
            commands[section] = command

    def record(section: str, row_name: str, measure) -> None:
        kept = rows.get(section, {}).get(row_name, {})
        if args.missing and kept and "error" not in kept:
            return
        # its first row measured by this one
        if args.missing and not commands.get(section, "").endswith(command):
            commands[section] = (f"{commands[section]}; {command}" if section in commands
                                 else command)
        rows.setdefault(section, {})[row_name] = measure()
        print(f"{section} {row_name}: {rows[section][row_name]}", flush=True)
        json_path.write_text(json.dumps({"device": name, "torch": torch.__version__,
                                         "commands": commands,
                                         "threads": torch.get_num_threads(), "rows": rows},
                                        indent=1) + "\n")
        (out / f"{slug(name)}.md").write_text(markdown(name, commands, rows))

    run_sections(args.only, device, size, record, Budget(args.minutes), args.seeds,
                 dict(item.split("=", 1) for item in args.e2e_set))
    print(f"wrote {json_path} and {json_path.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
    sys.exit(main())
