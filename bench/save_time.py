"""How long the save on SIGTERM takes with a full replay buffer (the preemption bound).

    python3 -m bench.save_time --transitions 100000 --dir /tmp/save_bench

Builds the default video agent (simple2dcnn, 84x84, T=3, DrQ sizes) and a replay buffer holding `--transitions`
frames of noise, makes one update (so the optimiser state exists), then times `checkpoint.save` (replay sidecar +
`_latest`, each written, fsynced and renamed), the same call the trainer makes on SIGTERM. Prints one JSON line.
"""

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from encoders import build_encoder
from sac.agent import SAC
from sac.replay import ReplayBuffer
from trainer import checkpoint
from trainer.config import Config, to_dict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transitions", type=int, default=100_000)
    parser.add_argument("--dir", default="/tmp/save_bench")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    cfg = Config()
    obs_shape = (cfg.env.frame_stack, 3, cfg.env.image_size, cfg.env.image_size)
    agent = SAC(build_encoder(cfg.encoder, obs_shape), 6, cfg.sac, device=torch.device("cpu"), pixels=True)
    replay = ReplayBuffer(capacity=args.transitions, frame_shape=obs_shape[1:], frame_dtype=np.uint8, action_dim=6,
                          frame_stack=cfg.env.frame_stack, seed=0, discount=cfg.sac.discount)
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (1000, *obs_shape[1:]), dtype=np.uint8)
    replay.add_first(noise[0][None])
    for i in range(1, args.transitions):
        replay.add(np.zeros(6, np.float32), 0.0, False, noise[i % len(noise)][None])
    agent.update(replay.sample(8))  # fills the optimiser state, as in a real run

    directory = Path(args.dir)
    seconds = []
    for repeat in range(args.repeats):
        shutil.rmtree(directory, ignore_errors=True)
        payload = {"config": to_dict(cfg), "agent": agent.state_dict(), "progress": {"episode": 0, "env_step": repeat},
                   "rng": {}}
        start = time.perf_counter()
        checkpoint.save(directory, "bench", payload, replay.state_dict(), env_step=repeat, episode=None, keep_replays=1,
                        keep_last=0)
        seconds.append(time.perf_counter() - start)
    sizes = {p.name: p.stat().st_size for p in directory.iterdir()}
    shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps({
        "transitions": len(replay), "replay_gb": round(sum(v for k, v in sizes.items() if "replay" in k) / 1e9, 3),
        "latest_mb": round(sizes["bench_latest.pt"] / 1e6, 1), "save_s": [round(s, 2) for s in seconds],
        "median_save_s": round(float(np.median(seconds)), 2),
    }))


if __name__ == "__main__":
    main()
