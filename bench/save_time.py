"""How long the save on SIGTERM takes with a full replay buffer (the preemption bound).

    python3 -m bench.save_time --transitions 100000 --dir /tmp/save_bench

Builds the trainer of configs/default.yaml (simple2dcnn, 84x84, T=3, DrQ sizes, the `cpu` profile)
with a replay buffer of `--transitions`, fills it with frames of noise, makes one update (so the
optimiser state exists), saves once untimed (a run's disk holds its last checkpoint when a SIGTERM
comes), then times `Trainer.save` (replay sidecar + `_latest`, each written, fsynced and renamed):
the call the trainer makes on SIGTERM. Prints one JSON line.
"""

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import positive
from envs.rendering import configure
from errors import UserError
from trainer.config.load import load_config
from trainer.process.cli import error_exit

ROOT = Path(__file__).resolve().parent.parent
# distinct noise frames, cycled: what the replay holds does not change what a save costs
NOISE_FRAMES = 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transitions", type=positive(int), default=100_000)
    parser.add_argument("--dir", default="/tmp/save_bench")
    parser.add_argument("--repeats", type=positive(int), default=3)
    parser.add_argument("--keep", action="store_true",
                        help="leave the checkpoint in --dir (else it is removed)")
    args = parser.parse_args()

    try:
        print(json.dumps(measure(args)))
    except UserError as err:
        return error_exit(err)
    return 0


def measure(args) -> dict:

    configure()  # before trainer.run.loop loads mujoco: its import raises on a bad MUJOCO_GL
    from trainer.run.loop import Trainer

    directory = Path(args.dir)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        # the bench deletes its folder when done: never one that holds what it did not write
        raise UserError(f"--dir {directory} exists and is not an empty folder; name a new or empty "
                        "one (the benchmark removes it when done, unless --keep)")
    cfg = load_config(ROOT / "configs" / "default.yaml", [
        "profile=cpu", "training.device=cpu", f"sac.buffer_size={args.transitions}",
        f"checkpoint.dir={directory}",
        f"logging.tensorboard_dir={directory / 'runs'}", "logging.progress=false",
        "training.eval_every_episodes=0"])
    trainer = Trainer(cfg)
    replay, action = trainer.replay, np.zeros(trainer.action_dim, np.float32)
    frame_shape = trainer.env.single_observation_space.shape[1:]
    noise = np.random.default_rng(0).integers(0, 256, (NOISE_FRAMES, *frame_shape), dtype=np.uint8)
    for i in range(1, args.transitions):  # after the reset frame the trainer stored
        replay.add(action, 0.0, False, noise[i % NOISE_FRAMES][None])
    # fills the optimiser state, as in a real run
    trainer.agent.update(replay.sample(cfg.sac.batch_size))

    trainer.save(final_of_episode=False)  # the checkpoint a SIGTERM's save replaces
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        trainer.save(final_of_episode=False)
        seconds.append(time.perf_counter() - start)
    sizes = {p.name: p.stat().st_size for p in directory.iterdir() if p.is_file()}
    trainer.close()
    if not args.keep:
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "transitions": len(replay),
        "replay_gb": round(sum(v for k, v in sizes.items() if "replay" in k) / 1e9, 3),
        "latest_mb": round(sizes[f"{cfg.run_name}_latest.pt"] / 1e6, 1),
        "save_s": [round(s, 2) for s in seconds],
        "median_save_s": round(float(np.median(seconds)), 2),
    }


if __name__ == "__main__":
    sys.exit(main())
