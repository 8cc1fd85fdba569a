"""Plotting any run's eval.csv, from the command line."""

import csv

import pytest
from PIL import Image

from trainer.plot import main


def write_eval(path, returns):
    path.mkdir(parents=True)
    with open(path / "eval.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["env_step", "frames", "episode", "return"])
        writer.writerows((i * 100, i * 800, i * 10, r) for i, r in enumerate(returns))


def test_plot_writes_one_png_for_several_runs(tmp_path, capsys):
    write_eval(tmp_path / "a", [1, 5, 9])
    write_eval(tmp_path / "b", [2, 3])
    main([str(tmp_path / "a"), str(tmp_path / "b" / "eval.csv"), "--out", str(tmp_path / "curves.png")])
    with Image.open(tmp_path / "curves.png") as image:
        assert image.format == "PNG" and image.size == (600, 400)
    assert "wrote" in capsys.readouterr().out


def test_a_folder_without_eval_csv_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        main([str(tmp_path)])
    assert exit.value.code == 2 and "no eval.csv" in capsys.readouterr().err
