"""The training loop's evaluation: the deterministic policy's mean return, and the success rate of tasks that
report `info["success"]` (judged on each episode's last step)."""

import numpy as np

from envs.dishwashing.scripted import scripted_action
from tests.conftest import ROOT
from trainer.config import load_config
from trainer.loop import Trainer


def trainer(config: str, **training) -> Trainer:
    overrides = ["sac.hidden_dim=32", "sac.batch_size=8", "sac.buffer_size=1000", *(f"training.{k}={v}" for k, v in training.items())]
    return Trainer(load_config(ROOT / "configs" / config, overrides))


def test_success_rate_is_the_share_of_eval_episodes_that_end_in_success():
    run = trainer("dishwashing_feasible.yaml", eval_episodes=3)
    run.agent.act = lambda obs, sample: scripted_action(obs)
    mean_return, success_rate = run.evaluate()
    assert success_rate == 1.0 and -20 < mean_return < 0

    run.agent.act = lambda obs, sample: np.array([-1, 0, 0, 1], np.float32)  # carries the plate away from the rack
    assert run.evaluate()[1] == 0.0


def test_tasks_without_success_report_no_success_rate():
    run = trainer("inverted_pendulum_state.yaml", eval_episodes=1)
    mean_return, success_rate = run.evaluate()
    assert success_rate is None and mean_return > 0
