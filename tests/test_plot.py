"""Plotting any run's eval.csv, or several seeds' bench/learn.py CSVs side by side, from the command
line."""

import csv
import os

import matplotlib.axes
import pytest
from PIL import Image

from trainer.tools.plot import main


def write_eval(path, returns):
    path.mkdir(parents=True)
    with open(path / "eval.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_step", "frames", "episode", "return"])
        writer.writerows((i * 100, i * 800, i * 10, r) for i, r in enumerate(returns))


def test_plot_writes_one_png_for_several_runs(tmp_path, capsys):
    write_eval(tmp_path / "a", [1, 5, 9])
    write_eval(tmp_path / "b", [2, 3])
    main([str(tmp_path / "a"), str(tmp_path / "b" / "eval.csv"), "--out",
          str(tmp_path / "curves.png")])
    with Image.open(tmp_path / "curves.png") as image:
        assert image.format == "PNG" and image.size == (600, 400)
    assert "wrote" in capsys.readouterr().out


def test_runs_in_folders_of_the_same_name_each_get_a_curve(tmp_path, monkeypatch):
    write_eval(tmp_path / "a" / "seed1", [1, 5])
    write_eval(tmp_path / "b" / "seed1", [2, 3])
    labels, plot = [], matplotlib.axes.Axes.plot

    # records each curve's label and still draws it (the legend needs the artists)
    def spy(ax, x, y, **kw):
        labels.append(kw["label"])
        return plot(ax, x, y, **kw)

    monkeypatch.setattr("matplotlib.axes.Axes.plot", spy)
    main([str(tmp_path / "a" / "seed1"), str(tmp_path / "b" / "seed1"), "--out",
          str(tmp_path / "curves.png")])
    assert labels == [str(tmp_path / "a" / "seed1" / "eval.csv"),
                      str(tmp_path / "b" / "seed1" / "eval.csv")]


def write_seeds(path, seeds, returns):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["frames", "seed", "return", "success", "env_step"])
        writer.writerows((i * 10_000, seed, r + seed, "", i * 1250) for seed in seeds
                         for i, r in enumerate(returns))


def test_bench_csvs_of_several_seeds_compare_as_mean_curves_in_one_png(
    tmp_path, capsys, monkeypatch):
    write_seeds(tmp_path / "batch64.csv", [1, 2, 3], [10, 200, 400])
    write_seeds(tmp_path / "nstep3.csv", [1, 2], [10, 300])
    drawn = {}
    monkeypatch.setattr("matplotlib.axes.Axes.fill_between",
                        lambda ax, x, low, high, **kw: drawn.setdefault("bands",
                                                                        []).append(list(high
                                                                                        - low)))
    main([str(tmp_path / "batch64.csv"), str(tmp_path / "nstep3.csv"), "--out",
          str(tmp_path / "compare.png")])
    with Image.open(tmp_path / "compare.png") as image:
        assert image.format == "PNG"
    # seeds offset by 1 from each other: std sqrt(2/3) over 3 seeds, 1/2 over 2
    (three, two) = drawn["bands"]
    assert three == pytest.approx([2 * (2 / 3) ** 0.5] * 3) and two == pytest.approx([1.0, 1.0]), (
        "a +/- std band over each file's seeds")
    assert "wrote" in capsys.readouterr().out


def test_a_csv_without_evaluations_is_a_usage_error(tmp_path, capsys):
    write_seeds(tmp_path / "empty.csv", [1], [])
    with pytest.raises(SystemExit) as exit:
        main([str(tmp_path / "empty.csv")])
    assert exit.value.code == 2 and "no evaluations yet" in capsys.readouterr().err


def test_a_folder_without_eval_csv_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        main([str(tmp_path)])
    assert exit.value.code == 2 and "no eval.csv" in capsys.readouterr().err


@pytest.mark.parametrize("text, out, message", [
    ("env_step,frames,episode,return\n1,8,1,abc\n", "c.png",
     "cannot read {tmp}/run.csv as an eval.csv or bench/learn"),
    ("step,return\n1,5\n", "c.png",
     "cannot read {tmp}/run.csv as an eval.csv or bench/learn.py CSV (KeyError"),
    ("env_step,frames,episode,return\n1,8\n", "c.png",
     "cannot read {tmp}/run.csv as an eval.csv or bench/learn"),
    ("env_step,frames,episode,return\n1,8,1,5\n", "curves",
     "--out {tmp}/curves: pass an image file in an existing"),
    ("env_step,frames,episode,return\n1,8,1,5\n", "no/c.png",
     "--out {tmp}/no/c.png: pass an image file in an"),
])
def test_a_file_it_cannot_read_or_write_is_a_usage_error(tmp_path, capsys, text, out, message):
    """Each was a traceback; `--out curves` wrote curves.png and reported `wrote curves`."""
    (tmp_path / "run.csv").write_text(text)
    with pytest.raises(SystemExit) as exit:
        main([str(tmp_path / "run.csv"), "--out", str(tmp_path / out)])
    assert exit.value.code == 2 and message.format(tmp=tmp_path) in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["run.csv"]


def test_tasks_that_report_success_get_a_success_panel_beside_the_return(tmp_path, monkeypatch):
    with open(tmp_path / "dish.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["frames", "seed", "return", "success", "env_step"])
        writer.writerows((i * 1000, seed, -90 + 30 * i, success, i * 1000)
                         for seed, rates in ((1, [0.0, 0.5, 1.0]), (2, [0.0, 0.0, 0.9]))
                         for i, success in enumerate(rates))
    drawn = []
    monkeypatch.setattr("matplotlib.axes.Axes.plot", lambda ax, x, y, **kw: drawn.append(list(y)))
    main([str(tmp_path / "dish.csv"), "--out", str(tmp_path / "dish.png")])
    assert drawn == [[-90, -60, -30], [0.0, 0.25, 0.95]], (
        "mean return, then mean success rate, one panel each")
    with Image.open(tmp_path / "dish.png") as image:
        assert image.size == (1200, 400), "two panels side by side"
    write_seeds(tmp_path / "plain.csv", [1], [1, 2])
    main([str(tmp_path / "plain.csv"), "--out", str(tmp_path / "plain.png")])
    with Image.open(tmp_path / "plain.png") as image:
        assert image.size == (600, 400), "no success column, no success panel"


def test_wall_time_is_an_axis_and_a_file_without_it_is_a_usage_error(tmp_path, monkeypatch, capsys):
    with open(tmp_path / "timed.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["frames", "seed", "return", "success", "env_step", "wall_s"])
        writer.writerows([(1000, 1, -50, "", 1000, 60.0), (2000, 1, -20, "", 2000, 150.0)])
    drawn = []
    monkeypatch.setattr("matplotlib.axes.Axes.plot",
                        lambda ax, x, y, **kw: drawn.append((list(x), list(y))))
    main([str(tmp_path / "timed.csv"), "--x", "wall_s", "--out", str(tmp_path / "timed.png")])
    assert drawn == [([60.0, 150.0], [-50, -20])]
    write_seeds(tmp_path / "untimed.csv", [1], [1, 2])
    with pytest.raises(SystemExit) as exit:
        main([str(tmp_path / "untimed.csv"), "--x", "wall_s"])
    assert exit.value.code == 2 and "logged no wall_s" in capsys.readouterr().err
