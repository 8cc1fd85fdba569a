"""SAC updates/s before and after CUDA graphs, in one process on one device, and whether the graphed
update computes what the eager one does.

    python3 -m bench.update_speed --device cuda --batches 128 256 512 \\
        --csv docs/gpu/update_speed.csv

`before` is the update as it runs eagerly (`training.cuda_graph=false`), `after` the trainer's
default (on CUDA, one graph replay per update). Both agents exist side by side and are timed in
alternating chunks, so load from other jobs hits both alike. Updates include sampling the batch from
a replay of random frames on the training device. `--check` runs K updates of an eager and a graphed
agent from the same weights on the same batches and RNG seed and prints the largest parameter
difference. One JSON line per row; `--csv` appends `device,batch,path,updates_per_s` rows.
"""

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np
import torch

from bench.common import cpu_name, positive
from envs.rendering import configure
from sac.agent import SAC
from sac.graphs import WARMUP_UPDATES
from sac.replay import ReplayBuffer
from trainer.config.load import load_config
from trainer.run.encoder_setup import build_encoders

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "dishwashing_video.yaml"
# the update DrQ-v2 runs: no target encoder, actor and target every update, 1-step targets, one
# shift per sample
DRQV2 = ["sac.target_encoder=false", "sac.actor_update_every=1", "sac.target_update_every=1",
         "sac.nstep=1",
         "sac.augment_samples=1"]
PATHS = {"before": {"cuda_graph": False}, "after": {"cuda_graph": True}}


def build(cfg, device: torch.device, *, cuda_graph: bool, action_dim: int):
    encoder, _ = build_encoders(cfg, cfg.env.stack_shape, device)
    return SAC(encoder, action_dim, cfg.sac, device=device, pixels=True,
               autocast=cfg.training.autocast,
               cuda_graph=cuda_graph)


def filled_replay(cfg, device: torch.device, *, batch: int, action_dim: int):
    env, rng = cfg.env, np.random.default_rng(0)
    frame = (3, env.image_size, env.image_size)
    replay = ReplayBuffer(capacity=4 * batch + 64, frame_shape=frame, frame_dtype=np.uint8,
                          action_dim=action_dim,
                          frame_stack=env.frame_stack, seed=0, discount=cfg.sac.discount,
                          frames_on=device,
                          nstep=cfg.sac.nstep)
    replay.add_first(rng.integers(0, 256, (env.frame_stack, *frame), dtype=np.uint8))
    for _ in range(4 * batch):
        replay.add(rng.uniform(-1, 1, action_dim).astype(np.float32), float(rng.normal()), False,
                   rng.integers(0, 256, (env.frame_stack, *frame), dtype=np.uint8))
    return replay


def load(device: str, batch: int, *, profile: str = "gpu", sets: list[str] = ()):
    return load_config(CONFIG,
                       [f"profile={profile}", f"training.device={device}",
                        f"sac.batch_size={batch}", *DRQV2,
                        *sets])


def speed(cfg, device: torch.device, *, seconds: float, chunk: int, action_dim: int = 4,
          paths: tuple[str, ...] = tuple(PATHS)) -> list[dict]:
    """updates/s of each path at the config's batch size, alternating chunks of `chunk` updates for
    `seconds` each."""
    batch = cfg.sac.batch_size
    replay = filled_replay(cfg, device, batch=batch, action_dim=action_dim)
    agents = {path: build(cfg, device, action_dim=action_dim, **PATHS[path]) for path in paths}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for agent in agents.values():  # warm-up: allocations, the graphs' capture
        for _ in range(8):
            agent.update(replay.sample(batch, device))
    sync()
    spent, done = dict.fromkeys(agents, 0.0), dict.fromkeys(agents, 0)
    while min(spent.values()) < seconds:
        for path, agent in agents.items():
            start = time.perf_counter()
            for _ in range(chunk):
                agent.update(replay.sample(batch, device))
            sync()
            spent[path] += time.perf_counter() - start
            done[path] += chunk
    return [{"device": device_label(device), "batch": batch, "path": path,
             "updates_per_s": round(done[path] / spent[path], 2)} for path in agents]


def check(cfg, device: torch.device, *, updates: int, action_dim: int = 4) -> dict:
    """How far apart an eager and a graphed agent are after `updates` updates from the same weights,
    on the same batches, each run from the same RNG seed: the largest parameter difference; the
    largest relative difference of the losses at the first graphed update (the weights still equal
    then: the warm-up updates are eager in both), which separates the arithmetic from Adam's
    amplification of it; and whether both drew as many random numbers."""
    batch = cfg.sac.batch_size
    replay = filled_replay(cfg, device, batch=batch, action_dim=action_dim)
    batches = [replay.sample(batch, device) for _ in range(updates)]
    torch.manual_seed(0)
    agents = [build(cfg, device, action_dim=action_dim, **flags) for flags in PATHS.values()]
    for module in ("critic", "critic_target", "actor"):
        getattr(agents[1], module).load_state_dict(getattr(agents[0], module).state_dict())
    rng_after, losses = [], []
    for agent in agents:
        torch.manual_seed(1)
        losses.append([{key: value.item() for key, value in agent.update(sampled).items()}
                       for sampled in batches])
        rng_after.append(torch.cuda.get_rng_state(device) if device.type == "cuda"
                         else torch.get_rng_state())
    differences = [(a - b).abs().max().item() for module in ("critic", "critic_target", "actor")
                   for a, b in zip(getattr(agents[0], module).parameters(),
                                   getattr(agents[1], module).parameters())]
    first = min(WARMUP_UPDATES, updates - 1)  # the first graphed update, or the last if none is
    eager, graphed = losses[0][first], losses[1][first]
    return {"device": device_label(device), "batch": batch, "updates": updates,
            "graphed_updates": max(0, updates - WARMUP_UPDATES) if agents[1].graphs is not None
            else 0,
            "max_abs_difference": max(differences), "same_rng_state": bool(torch.equal(*rng_after)),
            "first_graphed_loss_rel_difference": max(abs(eager[key] - graphed[key])
                                                     / max(abs(eager[key]), 1e-12)
                                                     for key in eager),
            "largest_parameter": max(p.abs().max().item() for p in agents[0].critic.parameters()),
            "lr": cfg.sac.lr}


def device_label(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--profile", default="gpu")
    parser.add_argument("--batches", type=positive(int), nargs="+", default=[128, 256, 512])
    parser.add_argument("--seconds", type=positive(float), default=6.0,
                        help="timed seconds per path and batch")
    parser.add_argument("--chunk", type=positive(int), default=20, help="updates per timed chunk")
    parser.add_argument("--action-dim", type=positive(int), default=4,
                        help="the dishwashing task's")
    parser.add_argument("--paths", nargs="+", choices=tuple(PATHS), default=list(PATHS))
    parser.add_argument("--check", type=int, default=0, metavar="K",
                        help="also compare K updates, eager and graphed")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config overrides")
    parser.add_argument("--csv", help="append the rows here")
    args = parser.parse_args(argv)
    configure()
    device = torch.device(args.device)
    if args.check:
        cfg = load(args.device, args.batches[0], profile=args.profile, sets=args.set)
        print(json.dumps(check(cfg, device, updates=args.check, action_dim=args.action_dim)),
              flush=True)
    for batch in args.batches:
        cfg = load(args.device, batch, profile=args.profile, sets=args.set)
        rows = speed(cfg, device, seconds=args.seconds, chunk=args.chunk,
                     action_dim=args.action_dim,
                     paths=tuple(args.paths))
        for row in rows:
            print(json.dumps(row | {"settings": args.set}), flush=True)
        if args.csv:
            path = Path(args.csv)
            new = not path.exists()
            with path.open("a", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                if new:
                    writer.writeheader()
                writer.writerows(rows)

if __name__ == "__main__":
    main()
