"""bench/eval_speed.py at a tiny size: one row per eval_envs setting, each timing the same
episodes."""

import json

from bench import eval_speed


def test_each_setting_times_the_same_episodes(capsys):
    eval_speed.main(["--envs", "1", "2", "--rounds", "1", "--set", "env.image_size=32", "--set",
                     "env.max_episode_steps=5", "--set", "training.eval_episodes=3", "--set",
                     "sac.hidden_dim=32"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()
            if line.startswith("{")]
    assert [row["eval_envs"] for row in rows] == [1, 2] and rows[0]["speedup"] == 1.0
    assert (abs(rows[0]["mean_return"] - rows[1]["mean_return"]) < 1e-6
            and rows[0]["mean_return"] < 0)
    assert all(row["episodes"] == 3 and row["seconds_per_evaluation"] > 0 for row in rows)
