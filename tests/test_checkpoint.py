"""Checkpoint files: atomic replacement, weights-only loading, clear errors for damaged files, newest-good search,
replay sidecar retention, and refusal of structurally incompatible configs."""

from pathlib import Path

import pytest
import torch

from errors import UserError
from trainer import checkpoint
from trainer.checkpoint import CheckpointError
from trainer.config import Config, to_dict


def payload(step: int) -> dict:
    return {"config": to_dict(Config()), "agent": {"w": torch.full((3,), float(step))}, "progress": {"episode": step, "env_step": step}, "rng": {}}


def save(directory: Path, step: int, episode: int | None, keep_replays: int = 1, keep_last: int = 0) -> Path:
    return checkpoint.save(directory, "run", payload(step), {"frames": torch.arange(step)}, env_step=step, episode=episode,
                           keep_replays=keep_replays, keep_last=keep_last).latest


def test_save_writes_episode_latest_and_replay_files_that_load_weights_only(tmp_path):
    latest = save(tmp_path, step=10, episode=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_ep1.pt", "run_latest.pt", "run_step10.replay.pt"]
    data, replay = checkpoint.load(latest)
    assert data["progress"]["env_step"] == 10 and torch.equal(replay["frames"], torch.arange(10))
    assert torch.equal(torch.load(tmp_path / "run_ep1.pt", weights_only=True)["agent"]["w"], torch.full((3,), 10.0))


def test_only_the_newest_replays_are_kept_and_pruned_ones_resume_empty(tmp_path):
    for step, episode in [(10, 1), (20, 2), (30, 3)]:
        save(tmp_path, step, episode, keep_replays=2)
    assert sorted(p.name for p in tmp_path.glob("*.replay.pt")) == ["run_step20.replay.pt", "run_step30.replay.pt"]
    data, replay = checkpoint.load(tmp_path / "run_ep1.pt")
    assert data["progress"]["episode"] == 10 and replay is None


def test_keep_last_bounds_the_episode_files_and_reports_what_it_deleted(tmp_path):
    for step, episode in [(10, 1), (20, 2), (30, 3)]:
        saved = checkpoint.save(tmp_path, "run", payload(step), {}, env_step=step, episode=episode, keep_replays=1, keep_last=2)
    assert sorted(p.name for p in tmp_path.glob("run_ep*.pt")) == ["run_ep2.pt", "run_ep3.pt"]
    assert sorted(saved.deleted) == ["run_ep1.pt", "run_step20.replay.pt"]
    assert [p.name for p in saved.written] == ["run_step30.replay.pt", "run_ep3.pt", "run_latest.pt"]


def test_load_fetches_the_checkpoint_and_its_sidecar_through_the_callback(tmp_path):
    remote, local = tmp_path / "remote", tmp_path / "local"
    save(remote, step=10, episode=1)
    local.mkdir()
    fetched = []

    def fetch(name):
        fetched.append(name)
        (local / name).write_bytes((remote / name).read_bytes())

    path, data, replay = checkpoint.load_newest(local, "run", names=[p.name for p in remote.iterdir()], fetch=fetch)
    assert path == local / "run_latest.pt" and fetched == ["run_latest.pt", "run_step10.replay.pt"]
    assert data["progress"]["env_step"] == 10 and torch.equal(replay["frames"], torch.arange(10))


def test_a_truncated_checkpoint_is_a_clear_error(tmp_path):
    latest = save(tmp_path, step=10, episode=1)
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"run_latest.pt is unreadable \(truncated or corrupt"):
        checkpoint.load(latest)


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
        checkpoint.atomic_save(payload(20), latest)
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
    with pytest.raises(UserError, match="trained with env.frame_stack=3 but the config says env.frame_stack=4"):
        checkpoint.check_compatible(saved, current, Path("run_latest.pt"))
    current = to_dict(Config())
    current["training"]["episodes"] = 5000
    checkpoint.check_compatible(saved, current, Path("run_latest.pt"))


def test_settings_a_resume_may_change_are_listed_old_to_new():
    saved, current = to_dict(Config()), to_dict(Config())
    assert checkpoint.changed_settings(saved, current) == []
    current["sac"]["batch_size"], current["sac"]["nstep"], current["training"]["episodes"] = 64, 3, 130
    del saved["sac"]["augment_samples"]  # a checkpoint older than the key trained with its default, as now
    assert checkpoint.changed_settings(saved, current) == [
        f"sac.batch_size {Config().sac.batch_size} -> 64", "sac.nstep 1 -> 3",
        f"training.episodes {Config().training.episodes} -> 130",
    ]
    del saved["sac"]["nstep"]  # a checkpoint from before n-step returns trained with the default, one step
    assert "sac.nstep 1 -> 3" in checkpoint.changed_settings(saved, current)


def test_a_config_gaining_a_profile_block_is_no_changed_setting_but_the_settings_it_chooses_are():
    saved, current = to_dict(Config()), to_dict(Config())
    current["profiles"] = {"cpu_bf16": {"sac": {"batch_size": 128}}}
    assert checkpoint.changed_settings(saved, current) == []
    current["profile"], current["sac"]["batch_size"] = "cpu_bf16", 128
    assert checkpoint.changed_settings(saved, current) == ["profile auto -> cpu_bf16", f"sac.batch_size {Config().sac.batch_size} -> 128"]


def test_a_key_added_after_a_checkpoint_was_written_counts_as_its_default():
    saved, current = to_dict(Config()), to_dict(Config())
    del saved["sac"]["target_encoder"]
    checkpoint.check_compatible(saved, current, Path("run_latest.pt"))
    current["sac"]["target_encoder"] = False
    with pytest.raises(UserError, match="trained with sac.target_encoder=True but the config says sac.target_encoder=False"):
        checkpoint.check_compatible(saved, current, Path("run_latest.pt"))
