"""Every video arch trains through the real command line on a rendered MuJoCo task: one episode
writes a checkpoint, a second run resumes from it; and a checkpoint of one arch refuses to resume
under another with a clear error. (simple2dcnn's runs are in tests/test_train_sac.py.)"""

import pytest
import torch
from torchvision.models.video import r3d_18

from errors import UserError
from tests.conftest import DEFAULT_CONFIG as CONFIG
from tests.conftest import run_cli, sets
from trainer.checkpoints import checkpoint
from trainer.config import saved as saved_config
from trainer.config.load import load_config, to_dict

STEPS = 12  # agent steps per episode; updates start after SEED_STEPS
SEED_STEPS = 8


def arch_settings(arch: str, tmp_path) -> list[str]:
    """Each arch at its cheapest: r3d18 through the pretrained path (a local weights file, frozen)
    on 32 px inputs, timesformer's tiny preset on frames resized to 60 px, which its 12 px patches
    tile."""
    if arch == "r3d18":
        torch.save(r3d_18().state_dict(), tmp_path / "r3d18.pth")
        return sets(encoder__video__pretrained="true",
                    encoder__video__weights=tmp_path / "r3d18.pth",
                    encoder__video__freeze="true", encoder__video__input_size=32)
    if arch == "timesformer":
        return sets(encoder__video__preset="tiny", encoder__video__input_size=60)
    return []


def run_args(tmp_path, arch: str, episodes: int) -> list[str]:
    return sets(
        encoder__video__arch=arch, training__episodes=episodes, env__max_episode_steps=STEPS,
        env__image_size=64,
        training__seed_steps=SEED_STEPS, sac__batch_size=4, sac__buffer_size=500,
        sac__hidden_dim=64, sac__feature_dim=16,
        checkpoint__dir=tmp_path / "ckpt", checkpoint__every_episodes=1,
        logging__tensorboard_dir=tmp_path / "runs",
        logging__progress="false",
    )


@pytest.fixture(scope="module")
def first_episode(tmp_path_factory):
    """One training episode per arch, run once and shared: arch -> (run directory, extra
    settings)."""
    done = {}

    def run(arch: str):
        if arch not in done:
            tmp = tmp_path_factory.mktemp(arch)
            extra = arch_settings(arch, tmp)
            result = run_cli("--config", CONFIG, *run_args(tmp, arch, episodes=1), *extra)
            assert result.returncode == 0, result.stderr
            done[arch] = tmp, extra
        return done[arch]

    return run


@pytest.mark.parametrize("arch", ["simple3dcnn", "r3d18", "timesformer"])
def test_one_episode_writes_a_checkpoint_that_a_second_run_resumes(first_episode, arch):
    tmp, extra = first_episode(arch)
    data, _ = checkpoint.load(tmp / "ckpt" / "sac_video_ep1.pt")
    assert data["config"]["encoder"]["video"]["arch"] == arch
    assert data["progress"] == {"episode": 1, "env_step": STEPS, "evaluation_due": False,
                                "next_seed": 0}
    assert data["agent"]["updates"] > 0

    resumed = run_cli("--config", CONFIG, *run_args(tmp, arch, episodes=2), *extra, "--resume",
                      "auto")
    assert resumed.returncode == 0, resumed.stderr
    assert (f"resumed from {tmp / 'ckpt' / 'sac_video_latest.pt'}: episode 1, step "
            f"{STEPS}" in resumed.stdout)
    latest, _ = checkpoint.load(tmp / "ckpt" / "sac_video_latest.pt")
    assert latest["progress"] == {"episode": 2, "env_step": 2 * STEPS, "evaluation_due": False,
                                  "next_seed": 0}
    assert latest["agent"]["updates"] == data["agent"]["updates"] + STEPS


def test_resuming_under_another_arch_is_a_clear_error_not_a_shape_mismatch(first_episode):
    """The check the command line runs before loading any weights (its one-line printing of
    UserError is covered in tests/test_train_sac.py); in-process, to spare a third start-up."""
    tmp, _ = first_episode("simple3dcnn")
    path = tmp / "ckpt" / "sac_video_ep1.pt"
    saved, _ = checkpoint.load(path)
    other_arch = load_config(CONFIG, run_args(tmp, "simple2dcnn", episodes=2)[1::2])
    expected = (
        "trained with encoder.video.arch=simple3dcnn but the config says "
        "encoder.video.arch=simple2dcnn")
    with pytest.raises(UserError, match=expected):
        saved_config.check_compatible(saved=saved["config"], current=to_dict(other_arch), path=path)
