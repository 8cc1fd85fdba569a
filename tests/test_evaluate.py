"""Evaluating checkpoints after training, through the real command: a tiny trained pixel run and a
state run of a task with success print their numbers with intervals and write episodes.csv, a GIF
and an MP4; the same seeds give the same numbers twice; the run's own evaluation is repeated
exactly; several checkpoints get the aggregate; s3:// checkpoints load; bad input is one line. The
interval formulas are checked against values worked by hand."""

import csv
import os
import signal
import subprocess
import sys

import boto3
import numpy as np
import pytest
from PIL import Image
from scipy import stats

from envs.make import make_eval_env
from tests.conftest import ROOT, fill, interrupt_when_started, pause, start_until, tmpfs
from tests.test_remote import s3  # noqa: F401  (the moto S3 server fixture)
from tests.test_video import decoded
from trainer.checkpoints.payload import load_weights
from trainer.config.load import load_config
from trainer.policy import evaluate
from trainer.policy.trained import load_checkpoint
from trainer.run import video
from trainer.run.curves import read_rows
from trainer.run.episodes import run_episodes
from trainer.run.loop import Trainer


def train(folder, config: str, *settings: str) -> Trainer:
    """A tiny run of `config` trained for 4 short episodes, evaluated every 2 on 2 episodes, saved
    every 2."""
    cfg = load_config(ROOT / "configs" / config, [
        "profile=cpu", "sac.hidden_dim=32", "sac.feature_dim=16", "sac.batch_size=8",
        "sac.buffer_size=200",
        "env.image_size=32", "env.max_episode_steps=15", "training.episodes=4",
        "training.seed_steps=20",
        "training.eval_every_episodes=2", "training.eval_episodes=2", "checkpoint.every_episodes=2",
        "logging.progress=false", "logging.eval_video=false", "demos.path=null",
        f"logging.tensorboard_dir={folder / 'runs'}", f"checkpoint.dir={folder / 'ckpt'}",
        *settings])
    run = Trainer(cfg)
    assert run.train() == 0
    return run


@pytest.fixture(scope="module")
def pixels(tmp_path_factory):
    return train(tmp_path_factory.mktemp("pixels"), "default.yaml")


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    return train(tmp_path_factory.mktemp("state"), "dishwashing_feasible.yaml")


def latest(run: Trainer) -> str:
    return str(run.checkpoints.directory / f"{run.cfg.run_name}_latest.pt")


def episodes_csv(folder) -> list[dict]:
    with open(folder / "episodes.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_pixel_checkpoint_prints_its_return_and_writes_episodes_csv_and_a_video_the_same_twice(
        pixels, tmp_path, capsys):
    outputs = []
    for out in (tmp_path / "a", tmp_path / "b"):
        assert evaluate.main([latest(pixels), "--episodes", "3", "--seed", "5", "--out", str(out),
                              "--video",
                              "--video-size", "40", "--no-progress"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1].replace(str(tmp_path / "b"),
                                            str(tmp_path / "a")), "the same seeds, the same run"
    rows = episodes_csv(tmp_path / "a")
    assert rows == episodes_csv(tmp_path / "b")
    assert [(row["checkpoint"], row["seed"], row["length"], row["success"]) for row in rows] == [
        (latest(pixels), str(seed), "15", "") for seed in (5, 6, 7)]
    returns = np.array([float(row["return"]) for row in rows])
    mean, (low, high) = evaluate.mean_interval(returns)
    assert f"return {mean:.1f} (95% CI {low:.1f} to {high:.1f}), 3 episodes" in outputs[0]
    assert "success" not in outputs[0], "cartpole has no success"
    assert len(set(returns)) == 3, "three starts, three returns"
    gif = Image.open(tmp_path / "a" / "sac_video_latest.gif")
    assert gif.size == (40, 40) and gif.n_frames == 15
    _, frames = decoded(tmp_path / "a" / "sac_video_latest.mp4")
    assert [frame.shape for frame in frames] == [(40, 40, 3)] * 15
    wrote = ", ".join(str(tmp_path / "a" / name)
                      for name in ("episodes.csv", "sac_video_latest.gif",
                                     "sac_video_latest.mp4"))
    assert outputs[0].splitlines()[-1] == f"wrote {wrote}", "the last line names every file written"


def test_episodes_spread_over_worker_processes_are_the_episodes_of_one_process(
    pixels, state, tmp_path, capsys):
    """--envs K: the same episodes (seeds, lengths, successes, returns); a video then shows the
    policy's own frames, whole episodes one after another as one process films them, and a state
    policy has none to show."""
    for run, extra in ((pixels, ["--video", "--video-size", "40"]), (state, [])):
        for envs, out in ((1, tmp_path / "one"), (3, tmp_path / "three")):
            assert evaluate.main([latest(run), "--episodes", "5", "--seed", "9", "--envs",
                                  str(envs), "--out",
                                  str(out), "--no-progress", *extra]) == 0
        one, three = episodes_csv(tmp_path / "one"), episodes_csv(tmp_path / "three")
        assert one == three and len(one) == 5
    assert Image.open(tmp_path / "three" / "sac_video_latest.gif").size == (40, 40)
    policy, cfg, _ = load_checkpoint(latest(pixels), unit_actions=True)
    clips = []
    for envs in (1, 3):
        env, _ = make_eval_env(cfg.env, cfg.pixels, policy.device, worlds=5, processes=envs,
                               video_size=None)
        clips.append(run_episodes(policy.act, env, seed=9, episodes=5, film=2, video_size=40)[1])
        env.close()
    assert len(clips[0]) == 30 and all(np.array_equal(a, b) for a, b in zip(*clips, strict=True))
    capsys.readouterr()
    assert evaluate.main([latest(state), "--envs", "2", "--video", "--out",
                          str(tmp_path / "no")]) == 2
    assert "--video with --envs > 1 films the frames the policy sees" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()


def test_the_evaluator_repeats_the_run_s_own_evaluation_of_a_checkpoint(pixels, capsys):
    """At the default seeds and the run's eval_episodes, a checkpoint saved with an evaluation gives
    its number."""
    logged = read_rows(pixels.logger.eval_csv)[-1]
    assert evaluate.main([latest(pixels), "--episodes", "2", "--no-progress"]) == 0
    out = pixels.logger.dir / "evaluate"  # the default: beside the run's logs
    mean = np.mean([float(row["return"]) for row in episodes_csv(out)])
    assert abs(mean - logged["return"]) < 1e-3 and f"return {mean:.1f}" in capsys.readouterr().out


def test_best_is_the_run_s_best_evaluation_and_the_evaluator_repeats_its_number(pixels, tmp_path):
    """`<run>_best.pt` is the checkpoint of eval.csv's highest return (a tie keeps the earlier),
    evaluated as any."""
    rows = read_rows(pixels.logger.eval_csv)
    top = max(rows, key=lambda row: row["return"])  # the first of equals
    best = pixels.checkpoints.directory / f"{pixels.cfg.run_name}_best.pt"
    assert len(rows) == 2 and load_weights(best)["progress"]["env_step"] == top["env_step"]
    assert evaluate.main([str(best), "--episodes", "2", "--out", str(tmp_path),
                          "--no-progress"]) == 0
    assert abs(np.mean([float(row["return"])
                        for row in episodes_csv(tmp_path)]) - top["return"]) < 1e-3


def test_a_state_checkpoint_with_success_prints_a_wilson_interval_and_several_get_the_aggregate(
        state, tmp_path, capsys):
    first = str(state.checkpoints.directory / "sac_feasible_ep2.pt")
    assert evaluate.main([first, latest(state), "--episodes", "4", "--out", str(tmp_path),
                          "--no-progress"]) == 0
    printed = capsys.readouterr().out
    rows = episodes_csv(tmp_path)
    assert len(rows) == 8 and {row["success"] for row in rows} <= {"0", "1"}
    per_checkpoint = []
    for name in (first, latest(state)):
        mine = [row for row in rows if row["checkpoint"] == name]
        wins = sum(int(row["success"]) for row in mine)
        low, high = evaluate.wilson(wins, 4)
        assert (f"success {wins}/4 = {wins / 4:.0%} (95% Wilson CI {low:.0%} to "
                f"{high:.0%})" in printed)
        per_checkpoint.append(np.mean([float(row["return"]) for row in mine]))
    iqm = stats.trim_mean(per_checkpoint, 0.25)
    assert (f"across 2 checkpoints: return mean {np.mean(per_checkpoint):.1f}, IQM "
            f"{iqm:.1f}" in printed)


def test_without_an_mp4_encoder_each_checkpoint_gets_its_gif_and_the_command_says_why_once(
        state, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError
    first = str(state.checkpoints.directory / "sac_feasible_ep2.pt")
    assert evaluate.main([first, latest(state), "--episodes", "1", "--out", str(tmp_path),
                          "--video", "--video-size", "32", "--no-progress"]) == 0
    printed = capsys.readouterr()
    written = ["episodes.csv", "sac_feasible_ep2.gif", "sac_feasible_latest.gif"]
    assert sorted(os.listdir(tmp_path)) == [".episodes.csv.lock", *written]
    said = f"videos as GIFs only: PyAV is not installed; pip install {video.PYAV} adds the MP4s"
    assert printed.err == f"warning: {said}\n", "once for both checkpoints"
    assert printed.out.splitlines()[-1] == "wrote " + ", ".join(str(tmp_path / name)
                                                                for name in written)


def test_an_s3_checkpoint_is_fetched_and_evaluated(state, s3,  # noqa: F811
                                                   tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    boto3.client("s3").upload_file(latest(state), "ckpt", "eval/sac_feasible_latest.pt")
    url = f"{s3}/eval/sac_feasible_latest.pt"
    assert evaluate.main([url, "--episodes", "1", "--out", str(tmp_path / "out"),
                          "--no-progress"]) == 0
    assert [row["checkpoint"] for row in episodes_csv(tmp_path / "out")] == [url]
    assert evaluate.main([f"{s3}/eval/missing.pt", "--out", str(tmp_path / "out2")]) == 2
    assert "checkpoint not found: s3://ckpt/eval/missing.pt" in capsys.readouterr().err


def test_bad_input_is_one_line_and_writes_nothing(state, pixels, tmp_path, capsys):
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(open(latest(state), "rb").read()[:5000])
    for args, said in [([str(truncated)], "is unreadable (truncated or corrupt"),
                       ([latest(state), latest(pixels)], "belong to 2 runs"),
                       ([latest(state), "--set", "env.frame_stack=0"], "env.frame_stack")]:
        assert evaluate.main(args) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err, err
    assert not (tmp_path / "episodes.csv").exists()


def test_intervals_match_values_worked_by_hand():
    assert evaluate.wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert evaluate.wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    mean, (low, high) = evaluate.mean_interval(np.array([1.0, 2.0, 3.0]))
    # t(0.975, 2) = 4.303
    assert (mean, high - mean) == pytest.approx((2.0, 4.303 / np.sqrt(3)), abs=1e-3)
    iqm, low, high = evaluate.iqm_interval(np.arange(1.0, 9.0))
    assert iqm == 4.5 and 2.5 <= low < iqm < high <= 6.5
    assert evaluate.iqm_interval(np.array([3.0, 3.0, 3.0])) == (3.0, 3.0, 3.0)


def test_one_episode_is_said_to_have_no_interval_not_a_zero_width_one(state, tmp_path, capsys):
    args = [latest(state), "--episodes", "1", "--out", str(tmp_path), "--no-progress"]
    assert evaluate.main(args) == 0
    ret = float(episodes_csv(tmp_path)[0]["return"])
    printed = capsys.readouterr().out
    assert f": return {ret:.1f} (n=1, no interval), 1 episode of length" in printed
    assert "95% CI" not in printed
    assert "(95% Wilson CI" in printed, "a success rate has an interval even from one episode"
    assert evaluate.mean_interval(np.array([ret])) == (ret, None)


def test_ctrl_c_during_an_evaluation_is_one_line_and_writes_no_csv(state, tmp_path):
    out = tmp_path / "evaluation"
    command = [sys.executable, "-m", "trainer.policy.evaluate", latest(state), "--episodes",
               "100000",
               "--out", str(out)]
    status, stderr = interrupt_when_started(command, signal.SIGINT, started=b"/100000")
    assert status == 130 and "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == (  # a line of its own: the bar has ended its line
        "stopped by signal 2; the evaluation was cut short: no episodes.csv was written")
    assert not (out / "episodes.csv").exists()


def evaluate_command(checkpoint: str, out, *args: str) -> list[str]:
    return [sys.executable, "-m", "trainer.policy.evaluate", checkpoint, "--out", str(out), *args]


def seeds(folder) -> list[str]:
    return [row["seed"] for row in episodes_csv(folder)]


def test_an_earlier_evaluation_is_moved_aside_and_a_concurrent_one_refused(state, tmp_path, capsys):
    """A second evaluation into one --out replaced the first's episodes.csv and videos without a
    word; one cut short leaves them where they are."""
    out, gif, mp4 = tmp_path / "evaluation", "sac_feasible_latest.gif", "sac_feasible_latest.mp4"
    for seed in ("1", "2"):
        assert evaluate.main([latest(state), "--episodes", "1", "--seed", seed, "--out", str(out),
                              "--video", "--video-size", "32", "--no-progress"]) == 0
    aside = next(out.glob("replaced-*"))
    said = f"moved the earlier evaluation's episodes.csv, {gif}, {mp4} to {aside}\n"
    assert said in capsys.readouterr().out
    assert seeds(aside) == ["1"] and seeds(out) == ["2"]
    assert all((folder / video).exists() for folder in (aside, out) for video in (gif, mp4))
    command = evaluate_command(latest(state), out, "--episodes", "100000")
    running, _ = start_until(command, started=b"/100000")
    refused = evaluate.main([latest(state), "--episodes", "1", "--out", str(out), "--no-progress"])
    running.send_signal(signal.SIGINT)
    running.communicate(timeout=120)
    err = capsys.readouterr().err
    in_use = f"evaluation output {out / 'episodes.csv'} is in use by pid {running.pid} "
    assert refused == 2 and in_use in err, err
    assert seeds(out) == ["2"] and list(out.glob("replaced-*")) == [aside]


def test_a_full_disk_is_one_line_at_once_and_one_filling_later_keeps_the_csv(state, tmp_path):
    """The CSV was written after every episode had run, and a full disk then lost it with a
    traceback."""
    with tmpfs(tmp_path / "disk", "4m") as disk:
        out = disk / "evaluation"
        fill(disk)
        full = subprocess.run(evaluate_command(latest(state), out, "--episodes", "2"), cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert full.returncode == 2 and "return" not in full.stdout, full.stdout
        assert full.stderr == (
            f"error: cannot write the evaluation to {out} (No space left on device); free space "
            "on its disk or pass --out on another disk (no episode was run)\n"), full.stderr
        (disk / "filler").unlink()
        command = evaluate_command(latest(state), out, "--episodes", "3", "--seed", "5", "--video")
        filling, _ = start_until(command, started=b"/3")
        pause(filling)
        fill(disk)
        filling.send_signal(signal.SIGCONT)
        _, stderr = filling.communicate(timeout=120)
        assert filling.returncode == 2 and stderr.decode().strip().splitlines()[-1] == (
            f"error: cannot write the videos from {latest(state)} on to {out} (No space left on "
            "device), so the evaluation went on without them and its CSV files are written; free "
            "space on that disk, or pass --out on another, to film them with --video"), stderr
        assert seeds(out) == ["5", "6", "7"]
        assert sorted(os.listdir(out)) == [".episodes.csv.lock", "episodes.csv"]
