"""The GPU check (bench/gpu_check.py) at its tiny size on this machine's CPU: every section runs
through the real trainer and command line and writes its report, so the harness is known to work
before a GPU appears."""

import json
import subprocess
import sys

import pytest
import torch

from bench.gpu_check import (
    DMC,
    ENCODERS,
    NOT_RUN,
    SIZES,
    VARIANTS,
    Budget,
    claims,
    report_name,
    run_row,
    run_sections,
    slug,
)
from tests.conftest import ROOT
from trainer.config.load import load_config

TINY = ["--device", "cpu", "--tiny"]  # the check at its tiny size, on this machine's CPU


def gpu_check(*args, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m bench.gpu_check ARGS` from the repository root, its output captured as text."""
    command = [sys.executable, "-m", "bench.gpu_check", *map(str, args)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_the_tiny_check_runs_every_section_and_writes_the_report(tmp_path):
    args = [*TINY, "--out", tmp_path]
    result = gpu_check(*args, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    [report] = tmp_path.glob("*.json")
    rows = json.loads(report.read_text())["rows"]
    assert set(rows) == {"graphs", "e2e", "updates", "variants", "envs", "smoke", "warp",
                         "warp_learn"}
    graphs = rows["graphs"]["simple2dcnn@4"]
    assert graphs["before"] > 0 and graphs["after"] > 0, graphs
    # no graphs on a CPU: both agents run the eager update, from the same weights and seed
    assert (graphs["check"]["max_abs_difference"] == 0.0
            and graphs["check"]["same_rng_state"]), graphs
    e2e = rows["e2e"]["seed1"]
    # 2 episodes of 8 steps
    assert e2e["exit"] == 0 and [e["env_step"] for e in e2e["evals"]] == [8, 16], e2e
    for section in ("updates", "variants", "envs", "warp"):
        for name, row in rows[section].items():
            assert "error" not in row, f"{section} {name}: {row['error']}"
    assert all(row["updates_per_s"] > 0
               for row in [*rows["updates"].values(), *rows["variants"].values()])
    assert set(rows["variants"]) == {"profile", "replay_host_pinned", "compile", "autocast_bf16",
                                     "channels_last",
                                     "cudnn_benchmark"}
    assert all(row["env_steps_per_s"] > 0 and row["episodes"] >= 1 for row in rows["envs"].values())
    assert set(rows["smoke"]) == set(rows["warp_learn"]) == {"seed1"}, (
        "a row per seed, the config's by default")
    smoke = rows["smoke"]["seed1"]
    assert "error" not in smoke and len(smoke["evals"]) >= 2, smoke
    assert (set(rows["warp"]) == {"cartpole@2x32"}
            and rows["warp"]["cartpole@2x32"]["frames_per_s"] > 0)
    learned = rows["warp_learn"]["seed1"]
    assert ("error" not in learned
            and [e["frames"] for e in learned["evals"]] == [2 * 8 * 8, 4 * 8 * 8]), learned
    # 8-step episodes cannot reach it
    assert learned["train_s_to_target"] is None and learned["best_return"] < 700
    markdown = report.with_suffix(".md").read_text()
    assert "## The targets beside the measured values" in markdown
    assert ("| R3D18 GPU utilisation while training (%) | 40-60 | while training: not "
            "measured" in markdown)
    assert ("| MuJoCo Warp pixel cartpole to return 700 (on an H100) | < 15 min | seed1: not "
            "reached" in markdown)
    assert ("| dishwashing_video to 80% eval success, training seconds (eval.csv's wall_s) "
            "| <= 120 | seed1: not reached, best 0% in" in markdown)

    again = gpu_check(*args, "--only", "warp", timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    merged = json.loads(report.read_text())
    assert (merged["rows"]["smoke"] == rows["smoke"]
            and set(merged["rows"]["warp"]) == {"cartpole@2x32"})
    assert (merged["commands"]["warp"].endswith("--only warp")
            and not merged["commands"]["smoke"].endswith("warp"))
    assert f"Command: `{merged['commands']['warp']}`" in report.with_suffix(".md").read_text()


def test_a_spent_budget_marks_every_row_not_run_instead_of_overrunning_it(tmp_path):
    """`--minutes` below the margin a stopped run needs to save: no row starts, each says why, the
    report is written, and the command ends at once (a time limit kills a command, losing the row in
    flight)."""
    result = gpu_check(*TINY, "--out", tmp_path, "--only", "updates", "smoke", "warp", "--minutes",
                       "0.5")
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(next(tmp_path.glob("*.json")).read_text())["rows"]
    assert rows["smoke"] == {"seed1": NOT_RUN}
    assert rows["updates"] == {
        f"{name}@4": NOT_RUN for name in SIZES["tiny"]["encoders"]}
    assert rows["warp"] == {"cartpole@2x32": NOT_RUN}


def test_a_row_cut_short_by_the_budget_says_so_rather_than_looking_like_a_hang():
    """The first GPU report read `timed out after 19 s` for a row the --minutes budget had cut."""
    budget = Budget(minutes=(Budget.MARGIN_S + 1.0) / 60)  # one second left
    row = run_row("update_row",
                  {"config": DMC, "device": "cpu", "batch": 4, "seconds": 30.0, "settings": {}},
                  limit_s=600, budget=budget)
    assert (row["error"].startswith("stopped after")
            and row["error"].endswith(": the --minutes budget ran out"))


def test_the_claims_never_pass_updates_alone_off_as_training_utilisation():
    """The utilisation targets are for training, where the GPU waits on the envs; the updates rows
    keep it busy. Rows as the H200 report has them: r3d18's largest batch failed, so its largest
    that ran is shown."""
    rows = {"updates": {"r3d18@256": {"gpu_util_pct": 99.9},
                        "r3d18@512": {"error": "out of memory"},
                        "simple3dcnn@512": {"gpu_util_pct": 99.8}},
            "envs": {"dishwashing_video@1": {"gpu_util_pct": 12.5},
                     "cartpole_swingup@4": {"gpu_util_pct": 31.0}}}
    table = {claim: measured for claim, _, measured in claims(rows)}
    assert table["R3D18 GPU utilisation while training (%)"] == (
        "while training: not measured (envs rows train simple2dcnn); updates alone: 99.9 at batch "
        "256")
    assert (table[
        "Simple3DCNN GPU utilisation while training "
        "(%)"].endswith("updates alone: 99.8 at batch "
                                                                   "512"))
    assert table["GPU utilisation while training, Simple2DCNN (%; below 20: CPU-bound)"] == (
        "dishwashing_video@1: 12.5, cartpole_swingup@4: 31.0")


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="on a CUDA machine this command is the 20-minute check itself")
def test_without_cuda_the_full_check_says_how_to_run_on_the_cpu():
    result = gpu_check("--device", "cuda")
    assert result.returncode == 2 and result.stderr.strip() == (
        "error: --device cuda but no CUDA device is available; run with --device cpu --quick")


@pytest.mark.parametrize("option", ["--minutes", "--smoke-minutes"])
@pytest.mark.parametrize("minutes", ["0", "-1", "nan", "inf"])
def test_a_time_budget_that_is_not_a_positive_number_is_refused_before_any_row(
    tmp_path, option, minutes):
    """--minutes 0 ran no row and replaced the section's saved rows (by default in docs/gpu) with
    "not run"; --smoke-minutes took any float, 0 and nan included."""
    result = gpu_check(*TINY, "--only", "warp", "--out", tmp_path, option, minutes)
    assert result.returncode == 2 and not list(tmp_path.iterdir()), result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"gpu_check.py: error: argument {option}: must be a finite number above 0, got {minutes}")


@pytest.mark.parametrize("name", [*ENCODERS, *VARIANTS])
def test_every_row_is_a_valid_config_at_the_gpu_profile(name):
    """The tiny check runs a subset of the encoder rows; a row the config refuses would cost GPU
    time to learn."""
    settings = {**ENCODERS, **VARIANTS}[name]
    load_config(ROOT / DMC, ["profile=gpu", *(f"{key}={value}" for key, value in settings.items())])


@pytest.mark.parametrize("size", SIZES)
def test_the_warp_learning_run_is_a_valid_config_at_the_gpu_profile(size):
    settings = {"env.backend": "mujoco_warp", **SIZES[size]["warp_learn_overrides"]}
    cfg = load_config(ROOT / DMC,
                      ["profile=gpu", *(f"{key}={value}" for key, value in settings.items())])
    assert (cfg.env.backend == "mujoco_warp"
            and cfg.training.eval_every_episodes % cfg.env.num_envs == 0)


def test_missing_runs_only_the_rows_the_report_lacks_or_that_failed(tmp_path):
    """A command limited to minutes finishes part of a section; --missing lets the next one run the
    rest without paying again for the rows already measured, which stay as they were, and the
    section names both commands."""
    report = tmp_path / f"{slug(report_name('cpu', 'tiny'))}.json"
    # no real row reads exactly this: kept, not rerun
    measured = {"updates_per_s": 123.0, "device": "cpu"}
    first, smoked = ("python3 -m bench.gpu_check --only updates --minutes 4",
                     {"first_return": 1.0, "evals": []})
    commands = {"updates": first, "smoke": "python3 -m bench.gpu_check --only smoke",
                "warp": "python3 -m bench.gpu_check --only warp"}
    report.write_text(json.dumps({"commands": commands, "rows": {
        "updates": {"simple2dcnn@4": measured, "r3d18_frozen_112@4": NOT_RUN},
        "smoke": {"seed1": smoked},
        "warp": {"cartpole@2x32": NOT_RUN}}}))
    args = [*TINY, "--out", str(tmp_path), "--only", "updates", "smoke", "--missing"]
    result = gpu_check(*args, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    saved = json.loads(report.read_text())
    assert (saved["rows"]["updates"]["simple2dcnn@4"] == measured
            and saved["rows"]["smoke"] == {"seed1": smoked})
    assert saved["rows"]["updates"]["r3d18_frozen_112@4"]["updates_per_s"] > 0, (
        "the row that did not run, ran")
    assert saved["rows"]["warp"] == {"cartpole@2x32": NOT_RUN}, "a section not named is left alone"
    # a section's command line names the commands that measured its rows, and no other
    assert (saved["commands"]
            == commands | {"updates": f"{first}; python3 -m bench.gpu_check {' '.join(args)}"})
    assert result.stdout.count("updates ") == 1 and "smoke" not in result.stdout, result.stdout


def test_seeds_add_learning_rows_beside_the_kept_ones(tmp_path):
    """The GPU target is one seed's; --seeds with --missing runs another beside it, with its own
    training.seed, and the claim names every seed's result."""
    report = tmp_path / f"{slug(report_name('cpu', 'tiny'))}.json"
    first = {"wall_s": 256.0, "evals": [], "best_return": 772.6, "train_s_to_target": 239.7,
             "frames_to_target": 144000}
    report.write_text(json.dumps({"commands": {"warp_learn": "earlier"},
                                  "rows": {"warp_learn": {"seed1": first}}}))
    result = gpu_check(*TINY, "--out", tmp_path, "--only", "warp_learn", "--seeds", "1", "7", "8",
                       "--missing",
                       timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(report.read_text())["rows"]
    seven, eight = rows["warp_learn"]["seed7"], rows["warp_learn"]["seed8"]
    assert (rows["warp_learn"]["seed1"] == first and "error" not in seven
            and "error" not in eight), rows
    assert ([e["frames"] for e in seven["evals"]] == [e["frames"] for e in eight["evals"]]
            == [2 * 8 * 8, 4 * 8 * 8])
    assert [e["return"] for e in seven["evals"]] != [e["return"] for e in eight["evals"]], (
        "each ran its own seed")
    table = {claim: measured for claim, _, measured in claims(rows)}
    assert table["MuJoCo Warp pixel cartpole to return 700 (on an H100)"] == (
        "seed1: 4.0 min of training (144000 frames), seed7: not reached, best "
        f"{seven['best_return']:.0f} in {seven['wall_s'] / 60:.1f} min, seed8: not reached, best "
        f"{eight['best_return']:.0f} in {eight['wall_s'] / 60:.1f} min")


@pytest.mark.parametrize("value", ["-1", "1073741824", "x"])
def test_a_seed_the_trainer_would_refuse_is_a_usage_error_before_any_row(tmp_path, value):
    result = gpu_check(*TINY, "--only", "smoke", "--out", tmp_path, "--seeds", value)
    assert result.returncode == 2 and not list(tmp_path.iterdir()), result.stderr
    assert (result.stderr.strip().splitlines()[-1].startswith(
        "gpu_check.py: error: argument --seeds: "))


def test_e2e_candidate_settings_reach_the_runs_and_name_their_rows():
    """`--e2e-set` tries a setting beside the gpu profile's: its rows must say so, and keep the
    seed's row apart."""
    listed = {}
    run_sections(["e2e"], "cpu", SIZES["tiny"],
                 lambda section, name, measure: listed.setdefault(name, measure),
                 Budget(None), [1, 2], {"training.autocast": "true"})
    assert list(listed) == ["seed1 training.autocast=true", "seed2 training.autocast=true"]
    result = gpu_check(*TINY, "--only", "e2e", "--e2e-set", "training.autocast")
    assert (result.returncode == 2
            and "expected KEY=VALUE" in result.stderr.strip().splitlines()[-1]), result.stderr
