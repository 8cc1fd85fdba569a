"""A frozen trunk through the real command line: the replay holds float16 features, a run stopped
and resumed at an episode boundary ends with the parameters and replay of one that never stopped,
and resuming with another trunk (other weights) or unfrozen is a one-line error, exit status 2."""

from unittest.mock import ANY

import torch

from tests.conftest import DEFAULT_CONFIG as CONFIG
from tests.conftest import run_cli, sets
from tests.test_loop import run_args as loop_args
from trainer.checkpoints import checkpoint

FROZEN = sets(encoder__video__freeze="true")


def run_args(directory, episodes: int) -> list[str]:
    """test_loop's tiny run (a later --set wins), with shorter episodes and a frozen trunk."""
    return loop_args(directory, episodes) + sets(env__max_episode_steps=20,
                                                 training__seed_steps=10) + FROZEN


def test_a_stopped_and_resumed_frozen_run_ends_as_one_that_never_stopped(tmp_path):
    straight = run_cli("--config", CONFIG, *run_args(tmp_path / "straight", 3))
    assert straight.returncode == 0, straight.stderr
    first = run_cli("--config", CONFIG, *run_args(tmp_path / "stopped", 2))
    assert first.returncode == 0, first.stderr
    resumed = run_cli("--config", CONFIG, *run_args(tmp_path / "stopped", 3), "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr

    a, replay_a = checkpoint.load(tmp_path / "straight" / "ckpt" / "sac_video_latest.pt")
    b, replay_b = checkpoint.load(tmp_path / "stopped" / "ckpt" / "sac_video_latest.pt")
    assert a["progress"] == b["progress"] == {"episode": 3, "env_step": 60, "evaluation_due": False,
                                              "next_seed": 0,
                                              "best_return": ANY}
    assert a["trunk"] == b["trunk"] and a["trunk"].startswith("simple2dcnn on 3x3x64x64")
    assert not any(key.startswith("encoder.")
                   for key in a["agent"]["critic"]), "no trunk in the agent"
    for net in ("actor", "critic", "critic_target"):
        for name, tensor in a["agent"][net].items():
            assert torch.equal(tensor, b["agent"][net][name]), f"{net}.{name} differs after resume"
    features = replay_a["frames"]
    # 3 episodes of 1 + 20 slots
    assert features.dtype == torch.float16 and features.shape == (63, 1, 32 * 25 * 25)
    assert torch.equal(features, replay_b["frames"])


def test_resuming_stored_features_with_another_trunk_or_unfrozen_is_a_one_line_error(tmp_path):
    other = run_cli("--config", CONFIG, *run_args(tmp_path / "other", 1),
                    *sets(encoder__video__freeze="false"))
    assert other.returncode == 0, other.stderr
    run = run_cli("--config", CONFIG, *run_args(tmp_path / "run", 1))
    assert run.returncode == 0, run.stderr
    # an end-to-end run: its critic's encoder
    trained = tmp_path / "other" / "ckpt" / "sac_video_latest.pt"
    other_weights = sets(encoder__video__pretrained="true", encoder__video__weights=trained)
    for changed, message in ((other_weights, "stored the features of frozen trunk simple2dcnn"),
                             (sets(encoder__video__freeze="false"),
                              "encoder.video.freeze=True but the config says")):
        resumed = run_cli("--config", CONFIG, *run_args(tmp_path / "run", 2), *changed, "--resume",
                          "auto")
        assert resumed.returncode == 2 and message in resumed.stderr, resumed.stderr
        assert len(resumed.stderr.strip().splitlines()) == 1, resumed.stderr
