"""Remote checkpoint folders: a real S3-compatible server (moto, on loopback) and a local fsspec
URL. Files are uploaded in write order, failures are retried and reported, and `--resume auto`
continues from the remote copy after the local disk is gone (a new spot instance). Files are staged
in a folder of the run's own, and a fresh start never overwrites the remote run. Two staging folders
play two machines on one run: a staged copy is used only while it is the remote object, whatever its
size."""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest
import s3fs
from moto.server import ThreadedMotoServer

from tests.conftest import DEFAULT_CONFIG as CONFIG
from tests.conftest import ROOT, checkpoint_payload, pause, popen_cli, replay_state, run_cli, sets
from trainer.checkpoints import checkpoint
from trainer.checkpoints import files as checkpoint_files
from trainer.checkpoints.files import CheckpointError
from trainer.checkpoints.remote import RemoteDir
from trainer.policy import trained as policy

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
               "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on loopback with one bucket; the env vars point boto/s3fs (here and in
    subprocesses) at it."""
    port = free_port()
    # fsspec reuses a filesystem made for an earlier module's server
    s3fs.S3FileSystem.clear_instance_cache()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    saved = {k: os.environ.get(k) for k in (*CREDENTIALS, "AWS_ENDPOINT_URL")}
    os.environ.update(CREDENTIALS, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
    boto3.client("s3").create_bucket(Bucket="ckpt")
    yield "s3://ckpt"
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_uploads_mirror_the_folder_in_write_order_and_fetch_brings_files_back(s3, tmp_path):
    messages = []
    local = tmp_path / "local"
    remote = RemoteDir(f"{s3}/unit", local, retries=2, backoff_s=0.01, report=messages.append)
    for step, episode in [(10, 1), (20, 2)]:
        saved = checkpoint.save(local, "run", checkpoint_payload(step), replay_state(step),
                                env_step=step,
                                episode=episode, keep_replays=1, keep_last=1)
        remote.upload(saved.written, saved.deleted)
    assert remote.close(timeout_s=30) and messages == [], "no warning"
    assert sorted(remote.listdir()) == ["run_ep2.pt", "run_latest.pt", "run_step20.replay.pt"]

    shutil.rmtree(local)
    again = RemoteDir(f"{s3}/unit", local, retries=1, backoff_s=0.01, report=messages.append)
    path, data, replay = checkpoint.load_newest(local, "run", again.listdir(), again.fetch)
    assert (path.name == "run_latest.pt" and data["progress"]["env_step"] == 20
            and replay["count"] == 20)
    again.close(timeout_s=5)


def test_a_failing_upload_is_retried_and_reported_not_dropped(s3, tmp_path):
    messages = []
    remote = RemoteDir("s3://no-such-bucket/x", tmp_path, retries=3, backoff_s=0.01,
                       report=messages.append)
    (tmp_path / "run_latest.pt").write_bytes(b"data")
    remote.upload([tmp_path / "run_latest.pt"], [])
    assert not remote.close(timeout_s=30)
    assert sum("retry" in m for m in messages) == 2
    assert "could not upload run_latest.pt" in messages[-1] and "after 3 tries" in messages[-1]


STUCK_UPLOAD = """
import sys, time
from pathlib import Path
from trainer.checkpoints import checkpoint
from trainer.checkpoints import files as checkpoint_files
from trainer.checkpoints.remote import RemoteDir
local = Path(sys.argv[1])
remote = RemoteDir("s3://ckpt/stuck", local, retries=5, backoff_s=600, report=lambda text: None)
payload = {"config": {}, "agent": {}, "progress": {"env_step": 10}, "rng": {}}
saved = checkpoint.save(local, "run", payload, {}, env_step=10, episode=1, keep_replays=1,
                        keep_last=1)
remote.upload(saved.written, saved.deleted)
print("queued", flush=True)
time.sleep(600)
"""


def test_a_run_killed_with_uploads_pending_leaves_nothing_in_the_way_of_its_resume(s3, tmp_path):
    """A run killed while its uploads wait (here on an unreachable server) leaves its hard links in
    the staging folder, which a restart on the same machine uses again. The resumed run removes them
    (they hold the bytes of sidecars it prunes) and its own uploads go through: links named like the
    killed run's made os.link fail."""
    local = tmp_path / "local"
    unreachable = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    stuck = subprocess.Popen([sys.executable, "-c", STUCK_UPLOAD, str(local)], cwd=ROOT,
                             env=unreachable,
                             stdout=subprocess.PIPE, text=True)
    assert stuck.stdout.readline() == "queued\n"
    stuck.kill()
    stuck.wait()
    assert [n for n in os.listdir(local)
            if n.startswith(".upload")], "the killed run's links are left behind"

    checkpoint_files.prepare(local, "run")
    assert not [n for n in os.listdir(local) if n.startswith(".upload")]
    remote = RemoteDir(f"{s3}/resumed", local, retries=2, backoff_s=0.01, report=print)
    saved = checkpoint.save(local, "run",
                            {"config": {}, "agent": {}, "progress": {"env_step": 20}, "rng": {}},
                            {},
                            env_step=20, episode=2, keep_replays=1, keep_last=1)
    remote.upload(saved.written, saved.deleted)
    assert remote.close(timeout_s=30)
    assert {"run_ep2.pt", "run_latest.pt"} <= set(remote.listdir())


def tiny_run(tmp_path, url: str, episodes: int, local_dir: str = "local") -> list[str]:
    """A tiny run into `url`, staged in tmp_path/`local_dir` (None: the default staging folder)."""
    staged = sets(checkpoint__local_dir=tmp_path / local_dir) if local_dir else []
    return staged + sets(
        training__episodes=episodes, env__max_episode_steps=20,
        env__image_size=64, sac__batch_size=8, sac__buffer_size=500,
        sac__hidden_dim=32, sac__feature_dim=8, training__seed_steps=10,
        training__eval_every_episodes=0,
        checkpoint__dir=url, checkpoint__every_episodes=1,
        logging__tensorboard_dir=tmp_path / "runs", logging__progress="false",
    )


@pytest.mark.parametrize("kind", ["s3", "file"])
def test_a_new_machine_resumes_from_the_remote_checkpoint(s3, tmp_path, kind):
    url = f"{s3}/cli" if kind == "s3" else f"file://{tmp_path / 'bucket'}"
    first = run_cli("--config", CONFIG, *tiny_run(tmp_path, url, 2))
    assert first.returncode == 0, first.stderr
    shutil.rmtree(tmp_path / "local")  # the instance's disk is gone

    resumed = run_cli("--config", CONFIG, *tiny_run(tmp_path, url, 3), "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout and "episode 2, step 40" in resumed.stdout
    data, _ = checkpoint.load(tmp_path / "local" / "sac_video_latest.pt")
    assert data["progress"] == {"episode": 3, "env_step": 60, "evaluation_due": False,
                                "next_seed": 0}
    names = RemoteDir(url, tmp_path / "check", 1, 0.01, print)
    assert {"sac_video_ep3.pt", "sac_video_latest.pt",
            "sac_video_step60.replay.pt"} <= set(names.listdir())
    names.close(timeout_s=5)


def test_a_remote_run_stages_in_a_folder_of_its_own_and_says_where(s3, tmp_path, monkeypatch):
    """Not the working directory's checkpoints/ (which may be another run's): a folder for this URL
    and run under the user's cache, named at start: the URL made readable, beside a hash of it. Two
    URLs that read alike (`/` and `_` both become `_`) stage apart: sharing one folder, the second
    run found the first's files."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cwd_checkpoints = ROOT / "checkpoints"
    before = sorted(p.name for p in cwd_checkpoints.iterdir())
    staged = []
    for url in (f"{s3}/cartpole/seed_1", f"{s3}/cartpole_seed/1"):
        result = run_cli("--config", CONFIG, *tiny_run(tmp_path, url, 1, local_dir=None))
        assert result.returncode == 0, result.stderr
        [staging] = [line.rsplit(" are staged in ", 1)[1] for line in result.stdout.splitlines()
                     if line.startswith(f"checkpoints for {url} are staged in ")]
        staged.append(Path(staging))
    cache = tmp_path / "cache" / "pixel-sac" / "staging"
    assert [folder.parent.parent for folder in staged] == [cache, cache] and staged[0] != staged[1]
    assert all(folder.parent.name.startswith("s3_ckpt_cartpole_seed_1-") for folder in staged)
    assert all((folder / "sac_video_latest.pt").exists() for folder in staged)
    assert sorted(p.name for p in cwd_checkpoints.iterdir()) == before


def machine(url: str, folder: Path) -> RemoteDir:
    """One machine's view of the remote run: its own staging `folder`."""
    return RemoteDir(url, folder, retries=2, backoff_s=0.01, report=print)


def save_at(remote: RemoteDir | None, folder: Path, step: int) -> None:
    """A save of run 'run' at `step` into `folder`, uploaded through `remote` (None: never
    uploaded)."""
    saved = checkpoint.save(folder, "run", checkpoint_payload(step), replay_state(step),
                            env_step=step,
                            episode=step // 10, keep_replays=1, keep_last=0)
    if remote:
        remote.upload(saved.written, saved.deleted)
        assert remote.close(timeout_s=30)


def test_best_is_uploaded_with_its_save_and_a_best_ahead_of_a_resume_goes_aside_in_the_bucket(
        s3, tmp_path):
    """A new machine (its staging folder empty) resumes `_ep2` of a run whose best is at step 30:
    the bucket's `_best.pt`, read to know it is ahead, moves aside with the rest of that future and
    leaves no staged copy."""
    url, a, b = f"{s3}/best", tmp_path / "a", tmp_path / "b"
    on_a = machine(url, a)
    for step in (10, 20, 30):
        saved = checkpoint.save(a, "run", checkpoint_payload(step), replay_state(step),
                                env_step=step,
                                episode=step // 10, best=step == 30, keep_replays=1, keep_last=0)
        on_a.upload(saved.written, saved.deleted)
    assert on_a.close(timeout_s=30)
    assert "run_best.pt" in machine(url, tmp_path / "check").listdir()
    on_b = machine(url, b)
    checkpoint.load(b / "run_ep2.pt", on_b.fetch)
    said = checkpoint.set_aside_future(b, "run", on_b, resumed=b / "run_ep2.pt", episode=2,
                                       env_step=20)
    assert "(run_best.pt, run_ep3.pt, run_latest.pt, run_step30.replay.pt)" in said
    assert "run_best.pt" not in on_b.listdir() and not (b / "run_best.pt").exists()


def test_a_staged_copy_is_used_only_while_it_is_the_remote_object(s3, tmp_path, capsys):
    """Two staging folders play two machines on one remote run. Every checkpoint of a run has the
    same size, so a staged `_latest` the size of the remote one may be any save: machine A must take
    the one B uploaded since. A save of A's own that never reached the remote (killed before its
    upload) is further ahead: it stays."""
    url, a, b = f"{s3}/two_machines", tmp_path / "a", tmp_path / "b"
    save_at(machine(url, a), a, 10)
    on_b = machine(url, b)
    assert (checkpoint.load_newest(b, "run", on_b.listdir(), on_b.fetch)[1]["progress"]["env_step"]
            == 10)
    save_at(on_b, b, 20)
    assert (a / "run_latest.pt").stat().st_size == (b / "run_latest.pt").stat().st_size

    on_a = machine(url, a)
    path, data, replay = checkpoint.load_newest(a, "run", on_a.listdir(), on_a.fetch)
    assert (path == a / "run_latest.pt" and data["progress"]["env_step"] == 20
            and replay["count"] == 20)

    save_at(None, a, 30)
    capsys.readouterr()
    on_a = machine(url, a)
    path, data, replay = checkpoint.load_newest(a, "run", on_a.listdir(), on_a.fetch)
    assert data["progress"]["env_step"] == 30 and replay["count"] == 30
    assert (f"warning: keeping {a / 'run_latest.pt'}, a save that never reached "
            f"{url}" in capsys.readouterr().err)


def test_a_checkpoint_url_is_the_object_there_now(s3, tmp_path, monkeypatch, capsys):
    """What `Policy.load` and `trainer.policy.evaluate` read of an s3:// URL: fetched again once the
    run has saved over it (a cached copy made a second evaluation report the old checkpoint), not
    found once it is gone, and with no word of uploads, which a fetch has none of."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    run, url = tmp_path / "run", f"{s3}/evaluated/run_latest.pt"
    save_at(machine(f"{s3}/evaluated", run), run, 10)
    assert checkpoint.load_weights(policy.fetch(url))["progress"]["env_step"] == 10
    save_at(machine(f"{s3}/evaluated", run), run, 20)
    assert checkpoint.load_weights(policy.fetch(url))["progress"]["env_step"] == 20
    assert capsys.readouterr().out == ""
    machine(f"{s3}/evaluated", tmp_path / "check").fs.rm_file("ckpt/evaluated/run_latest.pt")
    with pytest.raises(CheckpointError, match=f"checkpoint not found: {url}"):
        policy.fetch(url)


def test_a_machine_resuming_after_another_went_further_continues_from_the_bucket(s3, tmp_path):
    """Machine A trains, B resumes and goes further, A resumes: A continues from B's newest (its own
    staged copy is older, and often of the same size), moves none of B's files aside and writes over
    none of them. A staged file named by hand (--resume) stands for the bucket's too."""
    url = f"{s3}/machines"
    first = run_cli("--config", CONFIG, *tiny_run(tmp_path, url, 2, local_dir="a"))
    assert first.returncode == 0, first.stderr
    for folder, episodes, resume in [("b", 3, "auto"), ("a", 4, "auto"),
                                     ("b", 5, str(tmp_path / "b" / "sac_video_latest.pt"))]:
        resumed = run_cli("--config", CONFIG, *tiny_run(tmp_path, url, episodes, local_dir=folder),
                          "--resume", resume)
        assert resumed.returncode == 0, resumed.stderr
        latest = tmp_path / folder / "sac_video_latest.pt"
        assert f"resumed from {latest}: episode {episodes - 1}," in resumed.stdout
        assert "abandoned" not in resumed.stdout
    remote = machine(url, tmp_path / "check")
    names = remote.listdir()
    assert {f"sac_video_ep{n}.pt" for n in range(1, 6)} <= set(names)
    assert not [n for n in names if ".abandoned-" in n]
    remote.fetch("sac_video_latest.pt")
    assert (checkpoint.load_weights(tmp_path / "check"
                                    / "sac_video_latest.pt")["progress"]["episode"] == 5)


def test_a_fresh_start_over_a_remote_run_refuses_and_start_over_moves_the_remote_files_aside(
    s3, tmp_path):
    url = f"{s3}/again"
    first = run_cli("--config", CONFIG, *tiny_run(tmp_path, url, 1))
    assert first.returncode == 0, first.stderr
    shutil.rmtree(tmp_path / "local")  # a new machine: only the bucket knows the run
    again = run_cli("--config", CONFIG, *tiny_run(tmp_path, url, 1))
    assert (again.returncode == 2
            and f"run 'sac_video' already has checkpoints in {url}" in again.stderr)
    over = run_cli("--config", CONFIG, *tiny_run(tmp_path, url, 1), "--start-over")
    assert over.returncode == 0, over.stderr
    remote = RemoteDir(url, tmp_path / "check", 1, 0.01, print)
    [folder] = [n for n in remote.listdir() if n.startswith("sac_video.replaced-")]
    moved = {path.rsplit("/", 1)[-1] for path in remote.fs.ls(f"ckpt/again/{folder}")}
    assert {"sac_video_ep1.pt", "sac_video_latest.pt"} <= moved
    remote.close(timeout_s=5)


def test_the_lock_of_a_remote_run_is_the_machines_own_a_second_machine_is_not_stopped(s3, tmp_path):
    """What docs/checkpoints.md says of two machines on one remote run. On one machine a second
    trainer refuses (the lock is on the staging folder). A second machine stages elsewhere: it
    resumes from the uploaded files and its own saves replace the remote `_latest`, so the first
    machine's later saves and this one's overwrite each other."""
    url = f"{s3}/shared"
    first = popen_cli("--config", CONFIG, "--resume", "auto", *tiny_run(tmp_path, url, 10**6))
    names = RemoteDir(url, tmp_path / "check", 1, 0.01, print)
    try:
        # the first machine's first save is uploaded
        while "sac_video_latest.pt" not in names.listdir():
            assert first.poll() is None, first.communicate()
            time.sleep(0.2)
            names.fs.invalidate_cache()  # s3fs keeps listings
        pause(first)
        names.fetch("sac_video_latest.pt")
        uploaded = (checkpoint.load_weights(tmp_path / "check"
                                            / "sac_video_latest.pt")["progress"]["episode"])
        same_machine = run_cli("--config", CONFIG, "--resume", "auto",
                               *tiny_run(tmp_path, url, uploaded + 1))
        assert (same_machine.returncode == 2
                and "error: run 'sac_video' is in use by pid" in same_machine.stderr)

        other_machine = run_cli("--config", CONFIG, "--resume", "auto",
                                *tiny_run(tmp_path, url, uploaded + 1, local_dir="other"))
        assert other_machine.returncode == 0, other_machine.stderr
        assert (f"resumed from {tmp_path / 'other' / 'sac_video_latest.pt'}: episode "
                f"{uploaded}," in other_machine.stdout)
    finally:
        first.kill()
        first.communicate()
    (tmp_path / "check" / "sac_video_latest.pt").unlink()
    names.fs.invalidate_cache()
    names.fetch("sac_video_latest.pt")
    latest = (checkpoint.load_weights(tmp_path / "check"
                                      / "sac_video_latest.pt")["progress"]["episode"])
    assert latest == uploaded + 1, "the remote _latest is now the second machine's"
    names.close(timeout_s=5)
