"""The results tables say what the committed CSVs say: each figure below is recomputed from
docs/*.csv (the files bench/learn.py writes, one row per evaluation) or docs/gpu/*.csv and must
appear, so written, in its row of docs/results.md's table of every result or of the README's
headline table, or where another page repeats it."""

import csv
import json
from pathlib import Path
from statistics import mean

import pytest

from tests.conftest import ROOT

WALL = "wall_s"  # training seconds at the evaluation
TOLERANCE = 2000  # frames: a resumed run's evaluations land a little past the round number
# dishwashing end to end, two runs sharing one NVIDIA H100: each run's own eval.csv, so no seed
# column
H100_SHARED = "gpu/dishwashing_e2e_nvidia-h100_shared_seed{seed}.csv"


def runs(name: str) -> dict[int, list[dict]]:
    """seed -> its evaluations in order, from docs/<name>: one CSV with a seed column, or, where the
    name holds {seed}, one run's eval.csv per seed."""
    if "{seed}" in name:
        by_seed = {}
        for path in (ROOT / "docs").glob(name.format(seed="*")):
            with open(path) as file:
                by_seed[int(path.stem.rsplit("seed", 1)[1])] = list(csv.DictReader(file))
        assert by_seed, f"no docs/{name.format(seed='*')}"
        return dict(sorted(by_seed.items()))
    by_seed: dict[int, list[dict]] = {}
    with open(ROOT / "docs" / name) as file:
        for row in csv.DictReader(file):
            by_seed.setdefault(int(row["seed"]), []).append(row)
    return dict(sorted(by_seed.items()))


def returns_at(name: str, frames: int) -> list[float]:
    """Each seed's return at its evaluation nearest `frames`."""
    found = []
    for seed, rows in runs(name).items():
        row = min(rows, key=lambda row: abs(float(row["frames"]) - frames))
        assert abs(float(row["frames"]) - frames) <= TOLERANCE, (
            f"{name}: seed {seed} has no evaluation near {frames}")
        found.append(float(row["return"]))
    return found


def mean_and_seeds(name: str, frames: int) -> str:
    """'689 (793, 798, 477)': the mean, then each seed."""
    values = returns_at(name, frames)
    return f"{mean(values):.0f} ({', '.join(f'{value:.0f}' for value in values)})"


# the DeepMind Control tasks as the results table names them, in its order
DMC_SHORT = {"cartpole_swingup": "cartpole", "reacher_easy": "reacher", "cheetah_run": "cheetah",
             "finger_spin": "finger", "walker_walk": "walker", "ball_in_cup_catch": "cup"}


def dmc_state_means() -> dict[str, float]:
    """Each DeepMind Control task's mean return over its seeds at 100k frames from the simulator
    state (docs/dmc/state_100000.csv)."""
    with open(ROOT / "docs" / "dmc" / "state_100000.csv") as file:
        rows = list(csv.DictReader(file))
    return {task: mean(float(row["return"]) for row in rows
                       if row["task"] == task and row["episode"] == "100") for task in DMC_SHORT}


def first_success(name: str, level: float = 0.8) -> list[dict]:
    return [next(row for row in rows if float(row["success"]) >= level)
            for rows in runs(name).values()]


def last_five(name: str) -> str:
    """'91%, 95%': each seed's mean success over its last five evaluations."""
    return ", ".join(f"{100 * mean(float(row['success']) for row in rows[-5:]):.0f}%"
                     for rows in runs(name).values())


def randomized(trained_with: str, scene: str) -> str:
    """'78%, 71%': each seed's success in docs/dishwashing_randomized.csv (already a mean of five
    evaluations)."""
    with open(ROOT / "docs" / "dishwashing_randomized.csv") as file:
        rows = [row for row in csv.DictReader(file)
                if (row["trained_with"], row["scene"]) == (trained_with, scene)]
    assert rows, f"no {trained_with}/{scene} rows in docs/dishwashing_randomized.csv"
    return ", ".join(f"{100 * float(row['success']):.0f}%" for row in rows)


def randomized_target() -> str:
    """'met by both seeds' where every randomised seed keeps >= 80% on the training scene and >= 70%
    held out."""
    with open(ROOT / "docs" / "dishwashing_randomized.csv") as file:
        success = {(row["seed"], row["scene"]): float(row["success"])
                   for row in csv.DictReader(file)
                   if row["trained_with"] == "randomized"}
    seeds = {seed for seed, _ in success}
    met = [seed for seed in seeds if success[seed, "train"] >= 0.8
           and success[seed, "heldout"] >= 0.7]
    return ("met by both seeds" if len(met) == len(seeds) == 2
            else f"met by {len(met)} of {len(seeds)} seeds")


def thousands(rows: list[dict], key: str = "env_step", scale: float = 1000) -> list[str]:
    return [f"{float(row[key]) / scale:.1f}k" for row in rows]


def percents(rows: list[dict]) -> list[str]:
    return [f"{100 * float(row['success']):.0f}%" for row in rows]


def span(values: list[float], form: str) -> str:
    """'9.6k-11.1k' for form '{:.1f}k': the least and the most of `values`, each as `form` writes
    it; one figure where they agree."""
    low, high = form.format(min(values)), form.format(max(values))
    return low if low == high else f"{low}-{high}"


def above_from(name: str, level: float) -> int:
    """The first evaluation's frames from which every seed stays above `level`."""
    by_frames: dict[float, list[float]] = {}
    for rows in runs(name).values():
        for row in rows:
            by_frames.setdefault(float(row["frames"]), []).append(float(row["return"]))
    frames = sorted(by_frames)
    return int(next(f for i, f in enumerate(frames)
                    if all(min(by_frames[g]) > level for g in frames[i:])))


def never_without_demos() -> bool:
    return all(float(row["success"]) == 0
               for rows in runs("dishwashing_state_nodemos.csv").values() for row in rows)


def claims():
    frozen, warp = (first_success("dishwashing_video_frozen.csv"),
                    first_success("dishwashing_video_frozen_warp_lit.csv"))
    dmc = dmc_state_means()
    return [
        ("the six PlaNet DeepMind Control tasks, 100k frames | state",
         f"**{mean(dmc.values()):.0f}**, the mean of the six tasks' means: "
         + ", ".join(f"{DMC_SHORT[task]} {value:.0f}" for task, value in dmc.items())),
        ("cartpole swing-up, 100k frames | pixels | `cpu_bf16`",
         f"**{mean_and_seeds('cartpole_swingup_b128_bf16.csv', 100_000).replace(' (', '** (', 1)}"),
        ("cartpole swing-up, 100k frames | pixels | `cpu`: batch 64",
         f"{mean_and_seeds('cartpole_swingup_nstep3.csv', 100_000)}; "
         f"{mean(returns_at('cartpole_swingup_nstep3.csv', 130_000)):.0f} at 130k"),
        ("cartpole swing-up, 100k frames | pixels | `cpu` with DrQ's one-step targets",
         f"{mean_and_seeds('cartpole_swingup.csv', 100_000)}; "
         f"{mean(returns_at('cartpole_swingup.csv', 130_000)):.0f} at 130k"),
        ("MuJoCo Warp backend (10 worlds", mean_and_seeds("cartpole_swingup_warp.csv", 100_000)),
        ("MuJoCo Warp backend (10 worlds",
         f"{mean(returns_at('cartpole_swingup_warp_cpu.csv', 100_000)):.0f} against "
         f"{mean(returns_at('cartpole_swingup_frames_opengl_cpu.csv', 100_000)):.0f}"),
        ("cartpole swing-up, 100k frames | state",
         f"**{mean_and_seeds('cartpole_swingup_state.csv', 100_000).replace(' (', '** (', 1)}, "
         f"every seed above 800 from {above_from('cartpole_swingup_state.csv', 800) // 1000}k "
         "frames"),
        ("`Dishwashing-v0`), 20 scripted demonstrations",
         "mean of the last five evaluations "
         f"{last_five('dishwashing_state_demos.csv').replace('%', '')}%"),
        ("`Dishwashing-v0`), 20 scripted demonstrations",
         "without demonstrations 0% at every evaluation" if never_without_demos()
         else "some success without"),
        ("from 84x84 frames, 20 demonstrations",
         f"first at {' and '.join(thousands(frozen))} agent steps"),
        ("from 84x84 frames, 20 demonstrations",
         f"last five evaluations {last_five('dishwashing_video_frozen.csv')}"),
        ("from 84x84 ray-traced frames",
         f"first at {' and '.join(thousands(warp))} agent steps, "
         f"{' and '.join(f'{float(row[WALL]) / 60:.0f}' for row in warp)} min of training"),
        ("from 84x84 ray-traced frames",
         f"last five evaluations {last_five('dishwashing_video_frozen_warp_lit.csv')}, as OpenGL's "
         "route on the same CPU and profile "
         f"({last_five('dishwashing_video_frozen_opengl_cpu.csv')})"),
        ("under visual randomisation", f"{randomized_target()}**"),
        ("under visual randomisation",
         f"trained with randomisation {randomized('randomized', 'train')} on the training scene "
         f"and {randomized('randomized', 'heldout')} held out "
         f"({randomized('randomized', 'train_randomized')} on its own randomised scenes)"),
        ("under visual randomisation",
         f"trained on the fixed scene {randomized('none', 'train')} on it and "
         f"{randomized('none', 'heldout')} held out"),
    ]


def h100_shared() -> tuple[list[dict], str]:
    """Each seed's first evaluation at >= 80% success, and '**85-90%** success at 9.6k-11.1k agent
    steps, 2 seeds'."""
    first = first_success(H100_SHARED)
    success = span([100 * float(row["success"]) for row in first], "{:.0f}")
    steps = span([float(row["env_step"]) / 1000 for row in first], "{:.1f}k")
    return first, f"**{success}%** success at {steps} agent steps, {len(first)} seeds"


def headlines():
    """The README's rows: the same figures, shorter."""
    warp_learn = (json.loads((ROOT / "docs" / "gpu"
                              / "nvidia-h200.json").read_text())["rows"]["warp_learn"]["seed1"])
    return [
        ("cartpole swing-up, 100k frames | 84x84 frames",
         f"**{mean(returns_at('cartpole_swingup_b128_bf16.csv', 100_000)):.0f}** return, 3 seeds"),
        ("16 MuJoCo Warp worlds | NVIDIA H200",
         f"**{warp_learn['last_return']:.0f}** return in "
         f"{warp_learn['train_s_to_target'] / 60:.0f} minutes"),
        ("20 scripted demonstrations | simulator state | 2-core CPU",
         f"**{last_five('dishwashing_state_demos.csv').replace('%', '')}%** success, 3 seeds"),
        ("20 scripted demonstrations | simulator state | 2-core CPU",
         "(0% without demonstrations)" if never_without_demos() else "some success without"),
        ("DeepMind Control tasks, 100k frames | simulator state",
         f"**{mean(dmc_state_means().values()):.0f}** mean return, 3 seeds a task"),
        ("20 scripted demonstrations | 84x84 frames, frozen",
         f"**{last_five('dishwashing_video_frozen.csv')}** success"),
        ("under visual randomisation",
         f"**{randomized('randomized', 'heldout')}** on held-out scenes, "
         f"**{randomized('randomized', 'train')}** on the training scene (fixed-scene training: "
         f"{randomized('none', 'heldout')} held out)"),
        ("84x84 frames, end to end | NVIDIA H100, two runs sharing the card", h100_shared()[1]),
    ]


RESULTS, README, DISHWASHING = (ROOT / "docs" / "results.md", ROOT / "README.md",
                                ROOT / "docs" / "dishwashing.md")
HEADINGS = {RESULTS: "## Every result in one table",
            DISHWASHING: "## What to expect: today's figures"}


def section(page: Path, heading: str) -> str:
    return page.read_text().split(heading + "\n", 1)[1].split("\n## ", 1)[0]


def table_row(page: Path, start: str) -> str:
    rows = [line for line in section(page, HEADINGS.get(page, "## Results")).splitlines()
            if line.startswith("|") and start in line]
    assert len(rows) == 1, f"{len(rows)} rows of {page.name}'s results table contain {start!r}"
    return rows[0]


def bullet(page: Path, heading: str, start: str) -> str:
    """The bullet under `heading` that begins with `start`, its lines joined by single spaces."""
    items = [" ".join(item.split()) for item in section(page, heading).split("\n- ")
             if item.startswith(start)]
    assert len(items) == 1, (
        f"{len(items)} bullets of {page.name}'s {heading!r} begin with {start!r}")
    return items[0]


def elsewhere():
    """The places on other pages that repeat a headline: (page, a table row or a bullet, how it
    begins, the figure)."""
    first, headline = h100_shared()
    return [
        (DISHWASHING, "row", "84x84 frames, end to end, NVIDIA H100, two runs sharing the card",
         f"first >= 80% at {' and '.join(thousands(first))} agent steps "
         f"({', '.join(percents(first))}), "
         f"{' and '.join(f'{float(row[WALL]) / 60:.0f}' for row in first)} min of training"),
        (RESULTS, "bullet", "**On a GPU**",
         f"dishwashing from 84x84 frames end to end reaches {headline}"),
    ]


@pytest.mark.parametrize("row, figure", claims())
def test_the_table_of_every_result_says_what_the_committed_csvs_say(row, figure):
    assert figure in table_row(RESULTS, row)


@pytest.mark.parametrize("row, figure", headlines())
def test_the_readme_headlines_say_what_the_committed_csvs_say(row, figure):
    assert figure in table_row(README, row)


@pytest.mark.parametrize("page, place, start, figure", elsewhere())
def test_the_pages_that_repeat_a_headline_say_what_the_committed_csvs_say(
    page, place, start, figure):
    assert figure in (table_row(page, start) if place == "row"
                      else bullet(page, HEADINGS[page], start))


def test_a_changed_figure_is_caught(tmp_path):
    changed = tmp_path / "README.md"
    changed.write_text(README.read_text().replace("**689** return", "**699** return"))
    row, figure = headlines()[0]
    assert figure == "**689** return, 3 seeds" and figure in table_row(README, row)
    assert figure not in table_row(changed, row)


def test_every_csv_the_claims_read_is_committed():
    names = {"cartpole_swingup_b128_bf16.csv", "cartpole_swingup_nstep3.csv",
             "cartpole_swingup.csv",
             "cartpole_swingup_warp.csv", "cartpole_swingup_warp_cpu.csv",
             "cartpole_swingup_frames_opengl_cpu.csv",
             "cartpole_swingup_state.csv", "dishwashing_state_demos.csv",
             "dishwashing_state_nodemos.csv",
             "dishwashing_video_frozen.csv", "dishwashing_video_frozen_warp_lit.csv",
             "dishwashing_video_frozen_opengl_cpu.csv", "dishwashing_randomized.csv",
             *(H100_SHARED.format(seed=seed) for seed in (1, 2))}
    assert all(Path(ROOT / "docs" / name).is_file() for name in names)


def test_the_readmes_default_run_says_what_its_committed_csv_says():
    """The sentence under the two commands: the minutes of training and the return at 100k frames,
    from the run's own eval.csv."""
    with open(ROOT / "docs" / "default_run_eval.csv") as file:
        last = list(csv.DictReader(file))[-1]
    assert int(last["frames"]) == 100_000
    said = " ".join(README.read_text().split())
    assert (f"trained for **{float(last[WALL]) / 60:.0f} minutes** and reached an eval return of "
            f"**{float(last['return']):.0f}** at 100k frames") in said
