"""Logger: TensorBoard scalars, eval.csv (trimmed back to the checkpoint on resume), curve, GIF and
MP4, and W&B offline."""

import csv
import sys

import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import file_ops
from errors import UserError
from tests.conftest import ROOT
from tests.test_video import decoded
from trainer.config.checks import check_log_folder
from trainer.config.load import Config, load_config
from trainer.run import video
from trainer.run.logger import Logger, set_aside


def config(tmp_path, **logging) -> Config:
    cfg = Config()
    cfg.logging.tensorboard_dir, cfg.logging.progress, cfg.checkpoint.name = (
        str(tmp_path), False, "run")
    for key, value in logging.items():
        setattr(cfg.logging, key, value)
    return cfg


def evaluate(logger: Logger, steps: list[int]) -> None:
    clip = [np.full((8, 8, 3), i * 40, np.uint8) for i in range(4)]
    for step in steps:
        logger.evaluation(float(step), None, step=step, frames=step * 2, episode=step // 10,
                          wall_s=step / 4, clip=clip)


def test_resume_trims_eval_rows_past_the_checkpoint_step(tmp_path):
    logger = Logger(config(tmp_path), start_step=0, total_episodes=10, start_episode=0)
    evaluate(logger, [10, 20, 30])
    logger.close()
    Logger(config(tmp_path), start_step=20, total_episodes=10, start_episode=2).close()
    with open(tmp_path / "run" / "eval.csv", newline="") as f:
        assert [(row["env_step"], row["wall_s"])
                for row in csv.DictReader(f)] == [("10", "2.5"), ("20", "5.0")]
    assert ((tmp_path / "run" / "curve.png").exists()
            and (tmp_path / "run" / "videos" / "eval_ep3.gif").exists())


def test_a_resume_drops_eval_rows_that_do_not_parse_with_a_warning(tmp_path, capsys):
    """An edited eval.csv, or one whose last row a full disk cut short, does not stop the run from
    resuming."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run"
     / "eval.csv").write_text("env_step,frames,episode,return,success,wall_s\n10,20,1,-5.0,,2.5\n"
                              "abc,1,1,1,,1\n\n20,40,2,-4.0,,5.0\n30,6")
    Logger(config(tmp_path), start_step=20, total_episodes=10, start_episode=2).close()
    with open(tmp_path / "run" / "eval.csv", newline="") as f:
        assert [row["env_step"] for row in csv.DictReader(f)] == ["10", "20"]
    assert "eval.csv: dropped 3 rows that do not parse" in capsys.readouterr().err, (
        "30,6 was cut short")


def train_episodes(logger: Logger, steps: list[int]) -> None:
    for step in steps:
        logger.episode({"episode_return": step / 2, "episode_length": 10, "env_steps_per_s": 1.0},
                       step=step,
                       frames=step * 2, episode=step // 10, success=step % 20 == 0, wall_s=step / 4,
                       eta_s=None)


def episode_rows(tmp_path) -> list[tuple[str, ...]]:
    with open(tmp_path / "run" / "episodes.csv", newline="") as f:
        return [tuple(row.values()) for row in csv.DictReader(f)]


def test_episodes_csv_holds_every_training_episode_across_resumes_and_a_fresh_start_moves_it_aside(
    tmp_path):
    """Stable-Baselines3's monitor.csv: a row per training episode on disk, as it ends (a SIGKILL
    keeps it); a resume keeps the rows up to its checkpoint and drops a last row cut short."""
    logger = Logger(config(tmp_path), start_step=0, total_episodes=10, start_episode=0)
    train_episodes(logger, [10, 20, 30])
    assert episode_rows(tmp_path) == [("10", "20", "1", "5.000", "10", "0", "2.5"),
                                      ("20", "40", "2", "10.000", "10", "1", "5.0"),
                                      ("30", "60", "3", "15.000", "10", "0",
                                       "7.5")], "flushed before close"
    logger.close()
    with open(tmp_path / "run" / "episodes.csv", "a") as f:
        f.write("40,80,4,20.0")  # a power cut mid-line
    logger = Logger(config(tmp_path), start_step=40, total_episodes=10, start_episode=4)
    train_episodes(logger, [50])
    logger.close()
    assert [row[0] for row in episode_rows(tmp_path)] == ["10", "20", "30", "50"]
    logger = Logger(config(tmp_path), start_step=20, total_episodes=10, start_episode=2)
    train_episodes(logger, [30])
    logger.close()
    assert [row[0]
            for row in episode_rows(tmp_path)] == [
                "10", "20", "30"], "the rows past the resume are gone"
    before = (tmp_path / "run" / "episodes.csv").read_bytes()
    Logger(config(tmp_path), start_step=0, total_episodes=10, start_episode=0).close()
    [aside] = tmp_path.glob("run.replaced-*")
    assert (aside / "episodes.csv").read_bytes() == before and episode_rows(tmp_path) == []


def test_logs_that_cannot_be_written_or_read_are_one_line_errors(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(UserError,
                       match="cannot log to logging.tensorboard_dir .*runs: .*file is not a "
                             "folder this process may write to; set it to a folder under one"):
        check_log_folder(load_config(ROOT / "configs" / "default.yaml",
                                     [f"logging.tensorboard_dir={tmp_path / 'file' / 'runs'}"]))
    (tmp_path / "run" / "eval.csv").mkdir(parents=True)
    with pytest.raises(UserError,
                       match=r"cannot read .*eval.csv \(.*\); move it aside and the run starts a "
                             r"new one"):
        Logger(config(tmp_path), start_step=20, total_episodes=10, start_episode=2)


def test_resuming_a_run_logged_before_wall_s_was_a_column_keeps_one_header(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "eval.csv").write_text(
        "env_step,frames,episode,return,success\n10,20,1,-5.000,\n")
    logger = Logger(config(tmp_path), start_step=10, total_episodes=10, start_episode=1)
    evaluate(logger, [20])
    logger.close()
    with open(tmp_path / "run" / "eval.csv", newline="") as f:
        assert [(row["env_step"], row["wall_s"])
                for row in csv.DictReader(f)] == [("10", ""), ("20", "5.0")]


def test_scalars_and_eval_stills_reach_tensorboard_with_their_step(tmp_path):
    logger = Logger(config(tmp_path), start_step=0, total_episodes=10, start_episode=0)
    logger.scalars({"critic_loss": 1.5, "alpha": 0.1}, 7, "train")
    evaluate(logger, [10])
    logger.close()
    events = EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/critic_loss")] == [(7, 1.5)]
    assert [e.step for e in events.Images("eval/frames")] == [10]


def test_an_evaluation_s_episode_is_a_gif_and_beside_it_an_mp4_of_the_same_frames(tmp_path):
    logger = Logger(config(tmp_path), start_step=0, total_episodes=10, start_episode=0)
    evaluate(logger, [10])
    logger.close()
    videos = tmp_path / "run" / "videos"
    with Image.open(videos / "eval_ep1.gif") as gif:
        assert gif.size == (8, 8) and gif.n_frames == 4
    stream, frames = decoded(videos / "eval_ep1.mp4")
    assert (stream.codec_context.name == "h264"
            and [frame.shape for frame in frames] == [(8, 8, 3)] * 4)


@pytest.mark.parametrize("missing", ["pyav", "encoder"])
def test_without_an_mp4_encoder_each_evaluation_still_writes_its_gif_and_the_run_says_why_once(
        tmp_path, capsys, monkeypatch, missing):
    """A video never stops a run: every evaluation is logged whole, and one line says how to get the
    MP4s."""
    if missing == "pyav":
        monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError
    else:
        monkeypatch.setattr(video, "CODEC", "libx264-not-in-this-build")
    logger = Logger(config(tmp_path), start_step=0, total_episodes=10, start_episode=0)
    evaluate(logger, [10, 20, 30])
    logger.close()
    assert sorted(path.name for path in (tmp_path / "run" / "videos").iterdir()) == [
        "eval_ep1.gif", "eval_ep2.gif", "eval_ep3.gif"]
    with open(tmp_path / "run" / "eval.csv", newline="") as f:
        assert [row["env_step"] for row in csv.DictReader(f)] == ["10", "20", "30"]
    [line] = capsys.readouterr().err.splitlines()
    assert (line.startswith("warning: videos as GIFs only: PyAV ")
            and line.endswith(f"{video.PYAV} adds the MP4s"))


def test_wandb_logging_runs_offline_and_writes_its_run_files(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = Logger(config(tmp_path, wandb=True), start_step=0, total_episodes=10, start_episode=0)
    logger.scalars({"critic_loss": 1.5}, 7, "train")
    evaluate(logger, [10])
    logger.close()
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*/run-run.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0



def test_logs_moved_aside_twice_in_one_second_keep_both_earlier_runs(tmp_path, monkeypatch):
    """Two fresh starts in the same second (a script, a quick Ctrl-C and restart): the second move
    must not land on the files the first one kept."""
    monkeypatch.setattr(file_ops.time, "strftime", lambda _: "20260101-000000")
    run = tmp_path / "run"
    run.mkdir()
    for text in ("first", "second"):
        (run / "eval.csv").write_text(text)
        set_aside(run)
    kept = sorted(path.read_text() for path in tmp_path.glob("run.replaced-*/eval.csv"))
    assert kept == ["first", "second"]
