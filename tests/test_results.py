"""The results tables say what the committed CSVs say: each figure below is recomputed from docs/*.csv (the files
bench/learn.py writes, one row per evaluation) and must appear, so written, in its row of docs/results.md's table of
every result or of the README's headline table."""

import csv
import json
from pathlib import Path
from statistics import mean

import pytest

from tests.conftest import ROOT

WALL = "wall_s"  # training seconds at the evaluation
TOLERANCE = 2000  # frames: a resumed run's evaluations land a little past the round number


def runs(name: str) -> dict[int, list[dict]]:
    """seed -> its evaluations in order, from docs/<name>."""
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
        assert abs(float(row["frames"]) - frames) <= TOLERANCE, f"{name}: seed {seed} has no evaluation near {frames}"
        found.append(float(row["return"]))
    return found


def mean_and_seeds(name: str, frames: int) -> str:
    """'689 (793, 798, 477)': the mean, then each seed."""
    values = returns_at(name, frames)
    return f"{mean(values):.0f} ({', '.join(f'{value:.0f}' for value in values)})"


def first_success(name: str, level: float = 0.8) -> list[dict]:
    return [next(row for row in rows if float(row["success"]) >= level) for rows in runs(name).values()]


def last_five(name: str) -> str:
    """'91%, 95%': each seed's mean success over its last five evaluations."""
    return ", ".join(f"{100 * mean(float(row['success']) for row in rows[-5:]):.0f}%" for rows in runs(name).values())


def randomized(trained_with: str, scene: str) -> str:
    """'78%, 71%': each seed's success in docs/dishwashing_randomized.csv (already a mean of five evaluations)."""
    with open(ROOT / "docs" / "dishwashing_randomized.csv") as file:
        rows = [row for row in csv.DictReader(file) if (row["trained_with"], row["scene"]) == (trained_with, scene)]
    assert rows, f"no {trained_with}/{scene} rows in docs/dishwashing_randomized.csv"
    return ", ".join(f"{100 * float(row['success']):.0f}%" for row in rows)


def randomized_target() -> str:
    """'met by both seeds' where every randomised seed keeps >= 80% on the training scene and >= 70% held out."""
    with open(ROOT / "docs" / "dishwashing_randomized.csv") as file:
        success = {(row["seed"], row["scene"]): float(row["success"]) for row in csv.DictReader(file)
                   if row["trained_with"] == "randomized"}
    seeds = {seed for seed, _ in success}
    met = [seed for seed in seeds if success[seed, "train"] >= 0.8 and success[seed, "heldout"] >= 0.7]
    return "met by both seeds" if len(met) == len(seeds) == 2 else f"met by {len(met)} of {len(seeds)} seeds"


def thousands(rows: list[dict], key: str = "env_step", scale: float = 1000) -> list[str]:
    return [f"{float(row[key]) / scale:.1f}k" for row in rows]


def above_from(name: str, level: float) -> int:
    """The first evaluation's frames from which every seed stays above `level`."""
    by_frames: dict[float, list[float]] = {}
    for rows in runs(name).values():
        for row in rows:
            by_frames.setdefault(float(row["frames"]), []).append(float(row["return"]))
    frames = sorted(by_frames)
    return int(next(f for i, f in enumerate(frames) if all(min(by_frames[g]) > level for g in frames[i:])))


def never_without_demos() -> bool:
    return all(float(row["success"]) == 0 for rows in runs("dishwashing_state_nodemos.csv").values() for row in rows)


def claims():
    frozen, warp = first_success("dishwashing_video_frozen.csv"), first_success("dishwashing_video_frozen_warp_lit.csv")
    return [
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
         f"**{mean_and_seeds('cartpole_swingup_state.csv', 100_000).replace(' (', '** (', 1)}, every seed above 800 "
         f"from {above_from('cartpole_swingup_state.csv', 800) // 1000}k frames"),
        ("`Dishwashing-v0`), 20 scripted demonstrations",
         f"mean of the last five evaluations {last_five('dishwashing_state_demos.csv').replace('%', '')}%"),
        ("`Dishwashing-v0`), 20 scripted demonstrations",
         "without demonstrations 0% at every evaluation" if never_without_demos() else "some success without"),
        ("from 84x84 frames, 20 demonstrations",
         f"first at {' and '.join(thousands(frozen))} agent steps"),
        ("from 84x84 frames, 20 demonstrations", f"last five evaluations {last_five('dishwashing_video_frozen.csv')}"),
        ("from 84x84 ray-traced frames",
         f"first at {' and '.join(thousands(warp))} agent steps, "
         f"{' and '.join(f'{float(row[WALL]) / 60:.0f}' for row in warp)} min of training"),
        ("from 84x84 ray-traced frames",
         f"last five evaluations {last_five('dishwashing_video_frozen_warp_lit.csv')}, as OpenGL's route on the same "
         f"CPU and profile ({last_five('dishwashing_video_frozen_opengl_cpu.csv')})"),
        ("under visual randomisation", f"{randomized_target()}**"),
        ("under visual randomisation",
         f"trained with randomisation {randomized('randomized', 'train')} on the training scene and "
         f"{randomized('randomized', 'heldout')} held out ({randomized('randomized', 'train_randomized')} on its own "
         "randomised scenes)"),
        ("under visual randomisation",
         f"trained on the fixed scene {randomized('none', 'train')} on it and {randomized('none', 'heldout')} held "
         "out"),
    ]


def headlines():
    """The README's rows: the same figures, shorter."""
    warp_learn = json.loads((ROOT / "docs" / "gpu" / "nvidia-h200.json").read_text())["rows"]["warp_learn"]["seed1"]
    return [
        ("cartpole swing-up, 100k frames | 84x84 frames",
         f"**{mean(returns_at('cartpole_swingup_b128_bf16.csv', 100_000)):.0f}** return, 3 seeds"),
        ("16 MuJoCo Warp worlds | NVIDIA H200",
         f"**{warp_learn['last_return']:.0f}** return in {warp_learn['train_s_to_target'] / 60:.0f} minutes"),
        ("| simulator state | 2-core CPU",
         f"**{last_five('dishwashing_state_demos.csv').replace('%', '')}%** success, 3 seeds"),
        ("| simulator state | 2-core CPU",
         "(0% without demonstrations)" if never_without_demos() else "some success without"),
        ("20 scripted demonstrations | 84x84 frames, frozen",
         f"**{last_five('dishwashing_video_frozen.csv')}** success"),
        ("under visual randomisation",
         f"**{randomized('randomized', 'heldout')}** on held-out scenes, **{randomized('randomized', 'train')}** on "
         f"the training scene (fixed-scene training: {randomized('none', 'heldout')} held out)"),
    ]


RESULTS, README = ROOT / "docs" / "results.md", ROOT / "README.md"


def table_row(page: Path, start: str) -> str:
    heading = "## Every result in one table" if page == RESULTS else "## Results"
    rows = [line for line in page.read_text().split(heading + "\n", 1)[1].split("\n## ", 1)[0].splitlines()
            if line.startswith("|") and start in line]
    assert len(rows) == 1, f"{len(rows)} rows of {page.name}'s results table contain {start!r}"
    return rows[0]


@pytest.mark.parametrize("row, figure", claims())
def test_the_table_of_every_result_says_what_the_committed_csvs_say(row, figure):
    assert figure in table_row(RESULTS, row)


@pytest.mark.parametrize("row, figure", headlines())
def test_the_readme_headlines_say_what_the_committed_csvs_say(row, figure):
    assert figure in table_row(README, row)


def test_a_changed_figure_is_caught(tmp_path):
    changed = tmp_path / "README.md"
    changed.write_text(README.read_text().replace("**689** return", "**699** return"))
    row, figure = headlines()[0]
    assert figure == "**689** return, 3 seeds" and figure in table_row(README, row)
    assert figure not in table_row(changed, row)


def test_every_csv_the_claims_read_is_committed():
    names = {"cartpole_swingup_b128_bf16.csv", "cartpole_swingup_nstep3.csv", "cartpole_swingup.csv",
             "cartpole_swingup_warp.csv", "cartpole_swingup_warp_cpu.csv", "cartpole_swingup_frames_opengl_cpu.csv",
             "cartpole_swingup_state.csv", "dishwashing_state_demos.csv", "dishwashing_state_nodemos.csv",
             "dishwashing_video_frozen.csv", "dishwashing_video_frozen_warp_lit.csv",
             "dishwashing_video_frozen_opengl_cpu.csv", "dishwashing_randomized.csv"}
    assert all(Path(ROOT / "docs" / name).is_file() for name in names)
