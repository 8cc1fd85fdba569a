"""Checkpoint files: atomic replacement, weights-only loading, checksums, clear errors for damaged
files, newest-good search where a damaged replay costs only the replay, replay sidecar retention,
full and unwritable disks, fresh starts that never overwrite a run, and refusal of structurally
incompatible configs."""

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from errors import UserError
from tests.conftest import ROOT, replay_state, run_cli, sets, tmpfs
from tests.conftest import checkpoint_payload as payload
from trainer.checkpoints import checkpoint
from trainer.checkpoints import files as checkpoint_files
from trainer.checkpoints.files import CheckpointError
from trainer.checkpoints.payload import descends, seal
from trainer.config import saved as saved_config
from trainer.config.load import Config, to_dict
from trainer.policy.trained import Policy
from trainer.process.signals import STOP_SIGNALS, Stopped, stop_at_once


def frames(replay: dict) -> list[float]:
    return replay["frames"].flatten().tolist()


def save(directory: Path, step: int, episode: int | None, keep_replays: int = 1, keep_last: int = 0,
         best: bool = False) -> Path:
    return checkpoint.save(directory, "run", payload(step), replay_state(step), env_step=step,
                           episode=episode, best=best, keep_replays=keep_replays,
                           keep_last=keep_last).latest


def test_save_writes_episode_latest_and_replay_files_that_load_weights_only(tmp_path):
    latest = save(tmp_path, step=10, episode=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_ep1.pt", "run_latest.pt",
                                                          "run_step10.replay.pt"]
    data, replay = checkpoint.load(latest)
    assert data["progress"]["env_step"] == 10 and frames(replay) == list(range(10))
    episode_file = torch.load(tmp_path / "run_ep1.pt", weights_only=True)
    assert torch.equal(episode_file["agent"]["critic"]["w"], torch.full((3,), 10.0))


def test_only_the_newest_replays_are_kept_and_pruned_ones_resume_empty(tmp_path, capsys):
    for step, episode in [(10, 1), (20, 2), (30, 3)]:
        save(tmp_path, step, episode, keep_replays=2)
    assert sorted(p.name for p in tmp_path.glob("*.replay.pt")) == ["run_step20.replay.pt",
                                                                    "run_step30.replay.pt"]
    data, replay = checkpoint.load(tmp_path / "run_ep1.pt")
    assert data["progress"]["episode"] == 10 and replay is None
    assert "run_step10.replay.pt was pruned (checkpoint.keep_replays)" in capsys.readouterr().err


def test_a_checkpoint_copied_without_its_sidecar_is_told_so_not_blamed_on_pruning(tmp_path, capsys):
    """The message blamed checkpoint.keep_replays for a sidecar left behind by a copy."""
    save(tmp_path / "run", step=10, episode=1)
    copied = tmp_path / "copy"
    copied.mkdir()
    (copied / "run_ep1.pt").write_bytes((tmp_path / "run" / "run_ep1.pt").read_bytes())
    assert checkpoint.load(copied / "run_ep1.pt")[1] is None
    assert capsys.readouterr().err == (
        f"warning: run_step10.replay.pt is not in {copied} (a checkpoint copied without its "
        "sidecar? copy it there "
        "and resume again to keep the replay); resuming with an empty replay buffer\n")


def test_keep_last_bounds_the_episode_files_and_reports_what_it_deleted(tmp_path):
    for step, episode in [(10, 1), (20, 2), (30, 3)]:
        saved = checkpoint.save(tmp_path, "run", payload(step), {}, env_step=step, episode=episode,
                                keep_replays=1,
                                keep_last=2)
    assert sorted(p.name for p in tmp_path.glob("run_ep*.pt")) == ["run_ep2.pt", "run_ep3.pt"]
    assert sorted(saved.deleted) == ["run_ep1.pt", "run_step20.replay.pt"]
    assert [p.name for p in saved.written] == ["run_step30.replay.pt", "run_ep3.pt",
                                               "run_latest.pt"]


def test_best_is_a_second_name_for_its_saves_payload_that_keep_last_never_prunes(tmp_path, capsys):
    """`_best.pt` shares its save's sidecar and is written before `_latest`, whose progress names it
    the best. It is none of keep_last's `_ep<N>` files: it stays, and once keep_replays prunes that
    sidecar it resumes with an empty replay, as an `_ep<N>` file does."""
    saved = checkpoint.save(tmp_path, "run", payload(10), replay_state(10), env_step=10, episode=1,
                            best=True,
                            keep_replays=1, keep_last=1)
    assert [p.name for p in saved.written] == ["run_step10.replay.pt", "run_ep1.pt", "run_best.pt",
                                               "run_latest.pt"]
    for step, episode in [(20, 2), (30, 3)]:
        save(tmp_path, step, episode, keep_last=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_best.pt", "run_ep3.pt",
                                                          "run_latest.pt",
                                                          "run_step30.replay.pt"]
    data, replay = checkpoint.load(tmp_path / "run_best.pt")
    assert data["progress"]["env_step"] == 10 and replay is None
    assert "run_step10.replay.pt was pruned (checkpoint.keep_replays)" in capsys.readouterr().err


def test_auto_resumes_latest_or_an_episode_file_never_best(tmp_path, capsys):
    """Where `_latest` is damaged, `_best.pt` may be the newest file that loads: --resume auto still
    falls back to the newest `_ep<N>` only. A best resumes when named."""
    save(tmp_path, step=10, episode=1, keep_replays=5)
    save(tmp_path, step=20, episode=None, keep_replays=5, best=True)
    assert checkpoint.load_newest(tmp_path, "run")[0].name == "run_latest.pt"
    (tmp_path / "run_latest.pt").write_bytes(b"garbage")
    path, data, _ = checkpoint.load_newest(tmp_path, "run")
    assert path.name == "run_ep1.pt" and data["progress"]["env_step"] == 10
    assert checkpoint.load(tmp_path / "run_best.pt")[0]["progress"]["env_step"] == 20


@pytest.mark.parametrize("best_at, ahead", [(20, False), (30, True)])
def test_a_best_from_ahead_of_a_resume_goes_aside_with_that_future_and_one_from_before_stays(
        tmp_path, best_at, ahead):
    """`--resume _ep2.pt` of a run that went on to step 30: a `_best.pt` saved at step 30 is that
    future's (the branch's next best would replace it), one saved at step 20 is the branch's own."""
    for step in (10, 20, 30):
        save(tmp_path, step, episode=step // 10, keep_replays=3, best=step == best_at)
    best = (tmp_path / "run_best.pt").read_bytes()
    said = checkpoint.set_aside_future(tmp_path, "run", resumed=tmp_path / "run_ep2.pt", episode=2,
                                       env_step=20)
    [aside] = [p for p in tmp_path.iterdir() if p.is_dir()]
    future = {"run_ep3.pt", "run_latest.pt",
              "run_step30.replay.pt"} | ({"run_best.pt"} if ahead else set())
    assert {p.name for p in aside.iterdir()} == future and f"({', '.join(sorted(future))})" in said
    assert ((aside if ahead else tmp_path) / "run_best.pt").read_bytes() == best


def test_load_fetches_the_checkpoint_and_its_sidecar_through_the_callback(tmp_path):
    remote, local = tmp_path / "remote", tmp_path / "local"
    save(remote, step=10, episode=1)
    local.mkdir()
    fetched = []

    def fetch(name):
        fetched.append(name)
        (local / name).write_bytes((remote / name).read_bytes())

    path, data, replay = checkpoint.load_newest(local, "run",
                                                names=[p.name for p in remote.iterdir()],
                                                fetch=fetch)
    assert path == local / "run_latest.pt" and fetched == ["run_latest.pt", "run_step10.replay.pt"]
    assert data["progress"]["env_step"] == 10 and frames(replay) == list(range(10))


def test_a_truncated_checkpoint_is_a_clear_error(tmp_path):
    latest = save(tmp_path, step=10, episode=1)
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])
    with pytest.raises(CheckpointError,
                       match=r"run_latest.pt is unreadable \(truncated or corrupt"):
        checkpoint.load(latest)


# pickle protocols 236 and 2, zero bytes
@pytest.mark.parametrize("start", [b"\x80\xec", b"\x80\x02", b"\0"])
def test_bytes_that_are_no_checkpoint_are_a_clear_error_and_no_warning(tmp_path, start, recwarn):
    """Random bytes that begin like a pickle made torch warn about the protocol before its error
    (two more lines)."""
    latest = tmp_path / "run_latest.pt"
    latest.write_bytes(start + bytes(range(256)) * 16)
    said = r"run_latest.pt is unreadable \(truncated or corrupt: not a zip archive\); resume from"
    with pytest.raises(CheckpointError, match=said):
        checkpoint.load(latest)
    assert not recwarn.list, [str(w.message) for w in recwarn.list]


def test_a_folder_is_named_as_a_folder_not_as_missing(tmp_path):
    save(tmp_path, step=10, episode=1)
    with pytest.raises(CheckpointError,
                       match=rf"^checkpoint {tmp_path} is a folder, not a file; resume from"):
        checkpoint.load(tmp_path)


def test_a_checkpoint_in_a_folder_that_does_not_exist_is_named_a_typo_not_a_lost_save(tmp_path):
    """A missing file in an existing folder may be a pruned or damaged save, where an older one
    helps; a path whose folder is not there is a typo: in training, evaluation, export, Python."""
    with pytest.raises(CheckpointError, match=r"not found: .*/run_latest.pt; resume from an older"):
        checkpoint.load(tmp_path / "run_latest.pt")
    missing = tmp_path / "no" / "such" / "x.pt"
    said = f"checkpoint not found: {missing}: there is no folder {missing.parent}; check the path"
    with pytest.raises(CheckpointError) as raised:
        checkpoint.load(missing)
    assert str(raised.value) == f"{said} for a typo"
    with pytest.raises(UserError) as raised:
        Policy.load(missing)
    assert str(raised.value) == f"{said} for a typo"
    config = str(ROOT / "configs" / "inverted_pendulum_state.yaml")
    for command in (["train_sac.py", "--config", config, "--resume", str(missing)],
                    ["-m", "trainer.policy.evaluate", str(missing)],
                    ["-m", "trainer.policy.export", str(missing), "--out", str(tmp_path / "out")]):
        result = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 2 and result.stderr.strip() == f"error: {said} for a typo", (
            command, result.stderr)
    assert not (tmp_path / "out").exists()


def test_a_foreign_file_is_rejected(tmp_path):
    torch.save({"state_dict": {}}, tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match="not a checkpoint of this trainer"):
        checkpoint.load(tmp_path / "model.pt")


def test_newest_good_checkpoint_skips_damaged_files(tmp_path, capsys):
    save(tmp_path, step=10, episode=1, keep_replays=5)
    save(tmp_path, step=20, episode=2, keep_replays=5)
    (tmp_path / "run_latest.pt").write_bytes(b"garbage")
    (tmp_path / "run_ep2.pt").write_bytes(b"")
    path, data, replay = checkpoint.load_newest(tmp_path, "run")
    assert path.name == "run_ep1.pt" and data["progress"]["env_step"] == 10
    assert capsys.readouterr().err.count("trying an older checkpoint") == 2
    assert checkpoint.load_newest(tmp_path / "empty", "run") is None


def test_a_crash_while_writing_leaves_the_previous_file_intact(tmp_path, monkeypatch):
    latest = save(tmp_path, step=10, episode=None)

    def die_midway(obj, f):
        f.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", die_midway)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_files.atomic_save(payload(20), latest)
    monkeypatch.undo()
    assert checkpoint.load(latest)[0]["progress"]["env_step"] == 10


def test_temporary_files_of_killed_writers_are_cleaned_up(tmp_path):
    stale = tmp_path / ".run_latest.pt.tmp1"
    stale.write_bytes(b"partial")
    save(tmp_path, step=10, episode=None)
    assert not stale.exists() and not list(tmp_path.glob(".*tmp*"))


def test_structural_config_changes_are_refused_with_the_key_named():
    saved, current = to_dict(Config()), to_dict(Config())
    current["env"]["frame_stack"] = 4
    with pytest.raises(UserError,
                       match="trained with env.frame_stack=3 but the config says "
                             "env.frame_stack=4"):
        saved_config.check_compatible(saved=saved, current=current, path=Path("run_latest.pt"))
    current = to_dict(Config())
    current["training"]["episodes"] = 5000
    saved_config.check_compatible(saved=saved, current=current, path=Path("run_latest.pt"))


@pytest.mark.parametrize("backend, key, value, refused", [
    ("mujoco", "backend", "mujoco_warp", True),
    ("mujoco", "camera", "close", True),
    ("mujoco_warp", "warp_shadows", True, True),
    ("mujoco_warp", "warp_skybox", True, True),
    ("mujoco", "warp_shadows", True, False),  # the OpenGL renderer does not read it
])
def test_a_pixel_run_resumes_only_with_the_frames_it_stored(backend, key, value, refused):
    """The replay's frames and what the encoder learnt are of one picture: another renderer, camera,
    or warp's shadows or skybox would mix two (changing them was accepted with an info line)."""
    saved = to_dict(Config())
    saved["env"]["backend"] = backend
    current = to_dict(Config())
    current["env"] |= {"backend": backend, key: value}
    if not refused:
        saved_config.check_compatible(saved=saved, current=current, path=Path("run_latest.pt"))
        return
    with pytest.raises(UserError,
                       match=rf"trained with env.{key}=\S+ but the config says env.{key}={value}"):
        saved_config.check_compatible(saved=saved, current=current, path=Path("run_latest.pt"))
    # state vectors: one look whatever draws them
    saved["encoder"]["type"] = current["encoder"]["type"] = "state"
    saved_config.check_compatible(saved=saved, current=current, path=Path("run_latest.pt"))


def test_settings_a_resume_may_change_are_listed_old_to_new():
    saved, current = to_dict(Config()), to_dict(Config())
    assert saved_config.changed_settings(saved=saved, current=current) == []
    current["sac"]["batch_size"], current["sac"]["nstep"], current["training"]["episodes"] = (
        64, 3, 130)
    # a checkpoint older than the key trained with its default, as now
    del saved["sac"]["augment_samples"]
    assert saved_config.changed_settings(saved=saved, current=current) == [
        f"sac.batch_size {Config().sac.batch_size} -> 64", "sac.nstep 1 -> 3",
        f"training.episodes {Config().training.episodes} -> 130",
    ]
    # a checkpoint from before n-step returns trained with the default, one step
    del saved["sac"]["nstep"]
    assert "sac.nstep 1 -> 3" in saved_config.changed_settings(saved=saved, current=current)


def test_a_config_gaining_a_profile_block_is_no_changed_setting_but_the_settings_it_chooses_are():
    saved, current = to_dict(Config()), to_dict(Config())
    current["profiles"] = {"cpu_bf16": {"sac": {"batch_size": 128}}}
    assert saved_config.changed_settings(saved=saved, current=current) == []
    current["profile"], current["sac"]["batch_size"] = "cpu_bf16", 128
    assert saved_config.changed_settings(
        saved=saved, current=current) == ["profile auto -> cpu_bf16",
                                                           "sac.batch_size "
                                                           f"{Config().sac.batch_size} -> 128"]


def test_a_key_added_after_a_checkpoint_was_written_counts_as_its_default():
    saved, current = to_dict(Config()), to_dict(Config())
    del saved["sac"]["target_encoder"]
    saved_config.check_compatible(saved=saved, current=current, path=Path("run_latest.pt"))
    current["sac"]["target_encoder"] = False
    with pytest.raises(UserError,
                       match="trained with sac.target_encoder=True but the config says "
                             "sac.target_encoder=False"):
        saved_config.check_compatible(saved=saved, current=current, path=Path("run_latest.pt"))


def test_a_frozen_run_resumes_only_with_the_features_its_replay_stored():
    """A checkpoint from before encoder.video.frozen_features stored the projection's features."""
    saved, current = to_dict(Config()), to_dict(Config())
    del saved["encoder"]["video"]["frozen_features"]
    current["encoder"]["video"]["frozen_features"] = "state_estimate"
    with pytest.raises(UserError,
                       match="trained with encoder.video.frozen_features=projection but the "
                             "config says encoder.video.frozen_features=state_estimate"):
        saved_config.check_compatible(saved=saved, current=current, path=Path("run_latest.pt"))


# ---- damage beyond truncation, full disks, fresh starts ------------------------------------------

def flip_value(path: Path, old: float, new: float) -> None:
    """Overwrite the stored bytes of every float32 `old` in a checkpoint file with `new`: silent
    damage that torch still loads (a flipped sector, a bad copy)."""
    data = path.read_bytes()
    before, after = torch.tensor([old]).numpy().tobytes(), torch.tensor([new]).numpy().tobytes()
    assert before in data
    path.write_bytes(data.replace(before, after))


def test_a_checkpoint_with_flipped_bytes_fails_its_checksum_and_auto_falls_back(tmp_path, capsys):
    save(tmp_path, step=10, episode=1, keep_replays=5)
    save(tmp_path, step=20, episode=2, keep_replays=5)
    # the NaN that killed the fuzzed run at its first update
    flip_value(tmp_path / "run_ep2.pt", 20.0, float("nan"))
    with pytest.raises(CheckpointError,
                       match=r"run_ep2.pt is corrupt \(its checksum does not match"):
        checkpoint.load(tmp_path / "run_ep2.pt")
    # a finite change: only the checksum can see it
    flip_value(tmp_path / "run_latest.pt", 20.0, 21.0)
    path, data, replay = checkpoint.load_newest(tmp_path, "run")
    assert path.name == "run_ep1.pt" and torch.equal(data["agent"]["critic"]["w"],
                                                     torch.full((3,), 10.0))
    assert frames(replay) == list(range(10)), "its own sidecar"
    assert capsys.readouterr().err.count("checksum does not match") == 2


def test_a_replay_sidecar_with_flipped_bytes_or_of_another_save_is_damage(tmp_path):
    latest = checkpoint.save(tmp_path, "run", payload(10), {"rewards": torch.full((4,), 7.0)},
                             env_step=10, episode=1,
                             keep_replays=1, keep_last=0).latest
    flip_value(tmp_path / "run_step10.replay.pt", 7.0, 8.0)
    with pytest.raises(CheckpointError,
                       match=r"replay sidecar .*run_step10.replay.pt is corrupt or from another "
                             r"save.*move it aside to resume run_latest.pt with an empty replay "
                             r"buffer"):
        checkpoint.load(latest)
    other = tmp_path / "other"  # an intact sidecar, but not the one this checkpoint was saved with
    checkpoint.save(other, "run", payload(10), {"rewards": torch.full((4,), 9.0)}, env_step=10,
                    episode=1,
                    keep_replays=1, keep_last=0)
    (other / "run_step10.replay.pt").replace(tmp_path / "run_step10.replay.pt")
    with pytest.raises(CheckpointError, match="corrupt or from another save"):
        checkpoint.load(latest)


def diverged_payload(step: int) -> dict:
    diverged = payload(step)
    diverged["agent"]["critic_opt"] = {"state": {0: {"exp_avg": torch.tensor([1.0, float("inf")])}},
                                       "param_groups": []}
    return diverged


def test_non_finite_weights_are_rejected_even_with_a_valid_checksum(tmp_path):
    """A file sealed by hand, since the trainer's own writer refuses such a state (next test)."""
    latest = tmp_path / "run_latest.pt"
    checkpoint_files.atomic_save(seal(diverged_payload(10), replay_file="run_step10.replay.pt",
                                      replay_checksum="crc32:00000000"), latest)
    with pytest.raises(CheckpointError, match=r"holds NaN or inf in critic_opt.state.0.exp_avg"):
        checkpoint.load(latest)


@pytest.mark.parametrize("part", ["agent", "replay"])
def test_a_non_finite_state_is_never_written_and_prunes_nothing(tmp_path, part):
    """keep_last 1 would delete the good `_ep1` to make room for a file that never loads."""
    save(tmp_path, step=10, episode=1, keep_last=1)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    replay = replay_state(20)
    replay["rewards"][3] = float("nan")
    with pytest.raises(CheckpointError, match=r"refusing to save run 'run' at step 20: "
                                              r"(critic_opt.state.0.exp_avg|rewards) holds NaN or "
                                              r"inf"):
        checkpoint.save(tmp_path, "run", diverged_payload(20) if part == "agent" else payload(20),
                        replay if part == "replay" else replay_state(20), env_step=20, episode=2,
                        keep_replays=1,
                        keep_last=1)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def lineage(*processes) -> dict:
    """A payload whose run went through `processes` ([id, first step] each) and was saved at the
    last one's step, given as a last element."""
    *processes, step = processes
    return {"lineage": [list(p) for p in processes], "progress": {"env_step": step}}


def test_a_checkpoint_descends_from_those_on_the_way_to_it_not_from_an_abandoned_future():
    # process a trained from 0 and saved at 100 and 200; b resumed a's step-100 file and saved at
    # 150 and 300
    newest = lineage(("a", 0), ("b", 100), 300)
    assert descends(newest, lineage(("a", 0), 100)) and descends(newest, lineage(("a", 0), 50))
    assert descends(newest, lineage(("a", 0), ("b", 100), 150)) and descends(newest, newest)
    assert descends(newest, lineage(("a", 0), 200)) is False, "a's future past the step b resumed"
    assert descends(newest, lineage(("c", 0), 100)) is False, (
        "another run, perhaps of the same name")
    assert descends(newest, lineage(("a", 0), ("d", 100), 150)) is False, "a sibling branch"
    assert descends(lineage(("a", 0), 100), newest) is False, "a descendant is no ancestor"
    assert descends(newest, {"progress": {"env_step": 10}}) is None, (
        "a checkpoint from before lineages")


def test_resuming_the_episode_file_a_kill_left_ahead_of_latest_is_no_foreign_resume(tmp_path):
    """Killed between writing `_ep2` and the `_latest` after it: `_latest` is still episode 1's, and
    `_ep2`, which it leads to, may resume by hand; a file of another history may not."""
    def sealed(step: int, process: str) -> dict:
        state = payload(step)
        state["lineage"] = [[process, 0]]
        return state

    checkpoint.save(tmp_path, "run", sealed(10, "a"), replay_state(10), env_step=10, episode=1,
                    keep_replays=2,
                    keep_last=0)
    ep2 = checkpoint.save(tmp_path, "run", sealed(20, "a"), replay_state(20), env_step=20,
                          episode=2,
                          keep_replays=2, keep_last=0).written[1]
    shutil.copy(tmp_path / "run_ep1.pt", tmp_path / "run_latest.pt")  # _latest as the kill left it
    resumed = checkpoint.load_weights(ep2)
    checkpoint.check_resume_into(tmp_path, "run", resumed=ep2, payload=resumed, trained_as="run")
    other = tmp_path / "elsewhere"
    other_ep2 = checkpoint.save(other, "run", sealed(20, "b"), replay_state(20), env_step=20,
                                episode=2,
                                keep_replays=1, keep_last=0).written[1]
    with pytest.raises(CheckpointError, match="is not on the way to run 'run''s newest"):
        checkpoint.check_resume_into(tmp_path, "run", resumed=other_ep2,
                                     payload=checkpoint.load_weights(other_ep2),
                                     trained_as="run")


def test_a_damaged_sidecar_costs_the_replay_never_the_weights(tmp_path, capsys):
    """`_ep2` and `_latest` share one truncated sidecar. Both weights load; the newest does, with
    the newest intact older replay if there is one, else an empty one; it says so."""
    save(tmp_path, step=10, episode=1, keep_replays=1)
    save(tmp_path, step=20, episode=2, keep_replays=1)
    sidecar = tmp_path / "run_step20.replay.pt"
    sidecar.write_bytes(sidecar.read_bytes()[:100])
    path, data, replay = checkpoint.load_newest(tmp_path, "run")
    assert path.name == "run_latest.pt" and data["progress"]["env_step"] == 20 and replay is None
    assert "resuming the weights at step 20 with an empty replay buffer" in capsys.readouterr().err

    keep = tmp_path / "keep"
    save(keep, step=10, episode=1, keep_replays=5)
    save(keep, step=20, episode=2, keep_replays=5)
    (keep / "run_step20.replay.pt").write_bytes(b"\0" * 4096)
    path, data, replay = checkpoint.load_newest(keep, "run")
    assert path.name == "run_latest.pt" and frames(replay) == list(range(10))
    assert "with the older replay run_step10.replay.pt (10 steps)" in capsys.readouterr().err


def test_auto_never_reports_no_checkpoint_where_the_run_has_only_damaged_ones(tmp_path):
    save(tmp_path, step=10, episode=1)
    # seeded: os.urandom's bytes at times began
    for seed, name in enumerate(("run_latest.pt", "run_ep1.pt")):
        # like a pickle header, and torch warned
        (tmp_path / name).write_bytes(random.Random(seed).randbytes(2048))
    with pytest.raises(CheckpointError,
                       match=r"none of the 2 checkpoints of run 'run' .* loads .*--start-over"):
        checkpoint.load_newest(tmp_path, "run")


def test_a_checkpoint_from_before_checksums_still_loads(tmp_path):
    old = {**payload(10), "format": 1, "replay_file": "run_step10.replay.pt"}
    torch.save(old, tmp_path / "run_latest.pt")
    torch.save(replay_state(10), tmp_path / "run_step10.replay.pt")
    data, replay = checkpoint.load(tmp_path / "run_latest.pt")
    assert data["progress"]["env_step"] == 10 and frames(replay) == list(range(10))


def old_format(tmp_path: Path, *, damage_payload=None, damage_replay=None) -> Path:
    """A format-1 checkpoint and sidecar (no checksums: nothing catches damage but the structure),
    damaged by the functions given, which edit the dicts in place."""
    old, replay = {**payload(10), "format": 1,
                   "replay_file": "run_step10.replay.pt"}, replay_state(10)
    for damage, state in ((damage_payload, old), (damage_replay, replay)):
        if damage:
            damage(state)
    torch.save(old, tmp_path / "run_latest.pt")
    torch.save(replay, tmp_path / "run_step10.replay.pt")
    return tmp_path / "run_latest.pt"


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.update(progress="x"),
     r"its progress is not \{episode, env_step, evaluation_due, next_seed, best_return, "
     r"intervened, intervened_at_eval, step_at_eval\}"),
    (lambda p: p["progress"].update(bogus=1), r"its progress is not"),
    (lambda p: p["progress"].update(episode=-5), r"progress.episode is -5, not a count"),
    (lambda p: p["progress"].update(env_step="7"), r"progress.env_step is '7', not a count"),
    (lambda p: p["progress"].update(evaluation_due=1), r"progress.evaluation_due is 1, not a bool"),
    (lambda p: p["progress"].update(best_return=float("inf")),
     r"progress.best_return is inf, not a mean return"),
    (lambda p: p["progress"].update(best_return="7"),
     r"progress.best_return is '7', not a mean return"),
    (lambda p: p.update(rng="x"), r"its random generators' states are not torch's and numpy's"),
    (lambda p: p["rng"].update(torch=torch.zeros(3)), r"its random generators' states"),
    (lambda p: p["rng"].update(numpy={"bit_generator": "MT19937"}),
     r"its random generators' states"),
    # numpy: OverflowError
    (lambda p: p["rng"]["numpy"]["state"].update(state=-1), r"its random generators' states"),
    (lambda p: p.update(agent=[1]), r"its agent is not a dict of weights"),
    (lambda p: p["agent"].pop("actor_opt"), r"its agent lacks actor_opt"),
    (lambda p: p["agent"].update(critic="x"),
     r"its agent holds critic, critic_target, actor that are not all dicts of "
                                               r"tensors"),
    (lambda p: p["agent"].update(log_alpha=torch.zeros(2)),
     r"its agent holds a log_alpha that is not one number"),
    (lambda p: p["agent"].update(alpha_opt={}),
     r"its agent holds critic_opt, actor_opt, alpha_opt that are not all "
                                                r"torch optimiser states"),
    (lambda p: p["agent"].update(updates=2.5), r"its agent counts 2.5 updates"),
    (lambda p: p.update(config=[1]), r"its config is not a config of sections"),
    (lambda p: p["config"].update(sac="x"), r"its config is not a config of sections"),
    (lambda p: p.update(replay_file="../../elsewhere.replay.pt"),
     r"its replay_file '../../elsewhere.replay.pt' is not the name of a .replay.pt file beside it"),
    (lambda p: p.update(learning_steps="x"), r"learning_steps is 'x', not a count"),
    (lambda p: p.update(wall_s=float("nan")), r"wall_s is nan, not seconds"),
    (lambda p: p.update(demos="x"), r"its demonstrations' sampling state is not the trainer's"),
])
def test_an_old_checkpoint_that_is_not_what_save_writes_is_one_line_naming_the_damage(
    tmp_path, damage, message):
    """Format 1 has no checksum: without these checks each of these failed deep in the trainer with
    a traceback."""
    path = old_format(tmp_path, damage_payload=damage)
    with pytest.raises(CheckpointError,
                       match=rf"checkpoint .*run_latest.pt is damaged or not from this trainer: "
                                              rf"{message}.*; resume from an older"):
        checkpoint.load(path)


@pytest.mark.parametrize("damage, message", [
    (lambda r: r.update(count=10**6),
     r"it holds arrays of \(slots, envs\) \[\(10, 1\)\] that do not fit its count "
                                      r"1000000"),
    (lambda r: r.update(count=-1),
     r"it holds a count, num_transitions or capacity that is not a count"),
    (lambda r: r.update(num_transitions=999), r"it counts 999 transitions where its slots hold 9"),
    (lambda r: r.pop("pos"), r"it lacks pos"),
    (lambda r: r.update(frames=[1]),
     r"it holds frames, actions, rewards, terminated, pos that are not all \(slots, "
                                     r"envs, ...\) tensors"),
    (lambda r: r.update(pos=torch.tensor(0)),
     r"it holds .* that are not all \(slots, envs, ...\) tensors"),
    (lambda r: r.update(actions=r["actions"][:5]),
     r"it holds arrays of \(slots, envs\) \[\(5, 1\), \(10, 1\)\]"),
    (lambda r: r.update(rng=3), r"it holds a sampler state that is not numpy's"),
    # numpy: OverflowError
    (lambda r: r["rng"].update(uinteger=-1), r"it holds a sampler state that is not numpy's"),
])
def test_an_old_sidecar_that_does_not_hold_together_is_damage_that_costs_only_the_replay(
    tmp_path, damage, message):
    path = old_format(tmp_path, damage_replay=damage)
    with pytest.raises(CheckpointError,
                       match=rf"replay sidecar .*run_step10.replay.pt is damaged or not from this "
                                              rf"trainer: {message}.*; move it aside"):
        checkpoint.load(path)
    found, data, replay = checkpoint.load_newest(tmp_path, "run")
    assert found == path and data["progress"]["env_step"] == 10 and replay is None


def test_a_save_after_resuming_an_older_checkpoint_keeps_its_own_sidecar(tmp_path):
    """Resuming `_ep1` where the abandoned run went on to step 30: pruning by number alone kept step
    30's sidecar and deleted the one the new `_latest` names."""
    save(tmp_path, step=10, episode=1)
    save(tmp_path, step=30, episode=3)
    latest = save(tmp_path, step=20, episode=2)
    assert sorted(p.name for p in tmp_path.glob("*.replay.pt")) == ["run_step20.replay.pt"]
    assert checkpoint.load(latest)[1] is not None


def test_start_fresh_refuses_an_existing_run_and_start_over_moves_it_aside(tmp_path, capsys):
    save(tmp_path, step=10, episode=1)
    # another run's name: nothing in the way
    checkpoint.start_fresh(tmp_path, "other", start_over=False)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(CheckpointError,
                       match=r"run 'run' already has checkpoints in .* \(run_latest.pt, "
                             r"run_ep1.pt, run_step10.replay.pt\); continue it with --resume "
                             r"auto"):
        checkpoint.start_fresh(tmp_path, "run", start_over=False)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before

    checkpoint.start_fresh(tmp_path, "run", start_over=True)
    [folder] = tmp_path.iterdir()
    assert folder.is_dir() and folder.name.startswith("run.replaced-")
    assert {p.name: p.read_bytes()
            for p in folder.iterdir()} == before, "moved whole, nothing deleted"
    assert f"moved 3 files of run 'run' into {folder}/" in capsys.readouterr().out
    checkpoint.start_fresh(tmp_path, "run", start_over=False)  # the way is clear now



class SignalledMirror:
    """A remote mirror (trainer.checkpoints.remote.RemoteDir's interface) holding two files of the
    run, that receives SIGTERM while it moves the first one aside, as a slow copy of a large sidecar
    in a bucket would."""

    url = "s3://bucket/runs"

    def __init__(self):
        self.names, self.moved = ["run_latest.pt", "run_step10.replay.pt"], []

    def listdir(self) -> list[str]:
        return list(self.names)

    def move_aside(self, names: list[str], folder: str) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        self.moved += names


def test_a_stop_signal_while_start_over_moves_a_run_aside_waits_for_the_last_file(tmp_path, capsys):
    """A run split between its folder and the folder it was being moved into would resume from
    neither whole."""
    save(tmp_path, step=10, episode=1)
    mirror = SignalledMirror()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    stop_at_once()  # as the command line has it while starting
    try:
        with pytest.raises(Stopped):
            checkpoint.start_fresh(tmp_path, "run", mirror, start_over=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    [folder] = tmp_path.iterdir()
    assert sorted(p.name for p in folder.iterdir()) == ["run_ep1.pt", "run_latest.pt",
                                                        "run_step10.replay.pt"]
    assert mirror.moved == mirror.names and "moved 4 files" not in capsys.readouterr().out

@pytest.fixture
def tiny_disk(tmp_path):
    """A real 1 MiB tmpfs."""
    with tmpfs(tmp_path / "disk", "1m") as mount:
        yield mount


def test_a_full_disk_is_one_line_that_leaves_no_temporary_file_and_the_previous_checkpoint(
    tiny_disk):
    ckpt = tiny_disk / "ckpt"
    checkpoint_files.prepare(ckpt, "run")
    latest = save(ckpt, step=10, episode=None)
    big = {"frames": torch.zeros(2**20, dtype=torch.uint8)}  # 1 MiB: more than the disk has left
    with pytest.raises(CheckpointError,
                       match=r"^cannot save run_step20.replay.pt: the disk holding .* is full "
                             r"\(this file needs about 1.0 MB, \d+ KB free\)") as err:
        checkpoint.save(ckpt, "run", payload(20), big, env_step=20, episode=None, keep_replays=1,
                        keep_last=0)
    assert "\n" not in str(err.value)
    assert sorted(p.name for p in ckpt.iterdir()) == [".run.lock", "run_latest.pt",
                                                      "run_step10.replay.pt"], (
        "no temporary left")
    assert checkpoint.load(latest)[0]["progress"]["env_step"] == 10

    # a killed writer's
    (ckpt / ".run_latest.pt.tmp999999").write_bytes(b"\0" * (tiny_disk.stat().st_blksize * 64))
    filler = tiny_disk / "filler"
    with open(filler, "wb") as f, pytest.raises(OSError):  # fill what is left
        f.write(b"\0" * 2**20)
    with pytest.raises(CheckpointError,
                       match=r"cannot write checkpoints to .* \(the disk is full\)"):
        checkpoint_files.prepare(tiny_disk / "elsewhere", "run")
    filler.unlink()
    # the next start sweeps the killed writer's temporary file
    checkpoint_files.prepare(ckpt, "run")
    assert sorted(p.name for p in ckpt.iterdir()) == [".run.lock", "run_latest.pt",
                                                      "run_step10.replay.pt"]


def test_a_save_that_fails_midway_removes_what_no_checkpoint_names(tmp_path, monkeypatch):
    """ENOSPC on the checkpoint after its sidecar was written: neither the temporary file nor the
    new sidecar stays (they would hold the space the next try needs). Simulated, to reach the second
    file's write."""
    latest = save(tmp_path, step=10, episode=None)
    real_save = torch.save

    def full_on_checkpoints(obj, f):
        if "agent" in obj:
            f.write(b"partial")
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(obj, f)

    monkeypatch.setattr(torch, "save", full_on_checkpoints)
    with pytest.raises(CheckpointError,
                       match="cannot save run_ep2.pt: the disk holding .* is full"):
        save(tmp_path, step=20, episode=2)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_latest.pt", "run_step10.replay.pt"]
    assert checkpoint.load(latest)[0]["progress"]["env_step"] == 10


def test_an_unwritable_folder_is_reported_at_start(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() == 0:  # root writes through permission bits: a read-only mount is what stops it
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                       check=True)
    else:
        folder.chmod(0o500)
    try:
        unwritable = (
            r"cannot write checkpoints to .*ro \((Read-only file system|Permission denied)\)")
        with pytest.raises(CheckpointError, match=unwritable):
            checkpoint_files.prepare(folder, "run")
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(folder)], check=True)
        folder.chmod(0o700)


def test_the_save_time_benchmark_times_the_trainers_own_save(tmp_path):
    """bench/save_time.py (docs/results.md's preemption bound) saves through Trainer.save, so what
    it times is the checkpoint a SIGTERM writes: a sidecar of the replay it filled and a `_latest`
    that resumes."""
    command = [sys.executable, "-m", "bench.save_time", "--transitions", "64", "--repeats", "2",
               "--dir"]
    for keep in ([], ["--keep"]):
        folder = tmp_path / f"bench{len(keep)}"
        result = subprocess.run([*command, str(folder), *keep], cwd=ROOT, capture_output=True,
                                text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-2000:]
        row = json.loads(result.stdout.strip().splitlines()[-1])
        assert (row["transitions"] == 63 and len(row["save_s"]) == 2 and row["latest_mb"] > 1
                and row["replay_gb"] > 0)
        assert folder.exists() == bool(keep), (
            "the benchmark removes what it wrote, unless told to keep it")
    saved, replay = checkpoint.load(folder / "sac_video_latest.pt")  # checked as a resume checks it
    assert saved["progress"]["env_step"] == 0 and replay["count"] == 64
    too_small = subprocess.run([*command, str(tmp_path / "small"), "--transitions", "3"], cwd=ROOT,
                               capture_output=True, text=True, timeout=600)
    assert too_small.returncode == 2 and too_small.stderr == (
        "error: sac.buffer_size must be at least 5 (a ring of 5 slots per env), got 3; raise it\n")
    # it removes its folder when done, so it refuses one that holds anything it did not write
    users = tmp_path / "project"
    users.mkdir()
    (users / "notes.txt").write_text("a user's work")
    refused = subprocess.run([*command, str(users)], cwd=ROOT, capture_output=True, text=True,
                             timeout=600)
    assert refused.returncode == 2 and refused.stderr == (
        f"error: --dir {users} exists and is not an empty folder; name a new or empty one (the "
        "benchmark removes it "
        "when done, unless --keep)\n")
    assert (users / "notes.txt").read_text() == "a user's work"


def test_a_checkpoint_saved_by_an_earlier_version_resumes(tmp_path):
    """tests/data holds a tiny inverted-pendulum run saved at episode 2 by the trainer before its
    config and checkpoint modules were split; it must go on resuming (and its replay with it)
    whatever the modules' layout becomes."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for name in ("inverted_pendulum_state_ep2.pt", "inverted_pendulum_state_step19.replay.pt"):
        shutil.copy(ROOT / "tests" / "data" / name, ckpt / name)
    result = run_cli("--config", str(ROOT / "configs" / "inverted_pendulum_state.yaml"),
                     "--resume", str(ckpt / "inverted_pendulum_state_ep2.pt"),
                     *sets(sac__hidden_dim=16, sac__batch_size=8, sac__buffer_size=64,
                           training__episodes=3,
                           training__seed_steps=10, training__eval_every_episodes=0,
                           logging__progress="false",
                           env__max_episode_steps=20, checkpoint__dir=ckpt,
                           logging__tensorboard_dir=tmp_path / "runs"))
    assert result.returncode == 0, result.stderr
    assert "resumed from" in result.stdout, result.stdout
    assert "episode 2, step 19, 19 transitions in replay" in result.stdout, result.stdout
    assert checkpoint.load(ckpt / "inverted_pendulum_state_ep3.pt")[0]["progress"]["episode"] == 3
