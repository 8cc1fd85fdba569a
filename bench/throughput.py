"""Throughput and memory, side by side: this trainer against raw MuJoCo and Stable-Baselines3 on the
same pixel task.

    python3 -m bench.throughput    # HalfCheetah-v5, 84x84, stack 3, batch 32 (see --help)

Every row runs in its own subprocess (so `peak_rss_mb` is that row's, workers included) with the
same task and settings, and prints one JSON line; a last line holds the ratios the README reports.
Where a row compares several contenders it alternates between them in chunks, so that load from
other jobs on a shared machine hits all alike. Rows:
  raw_vs_wrapper    the task's model stepped with mujoco.mj_step and drawn by a bare mujoco.Renderer
                    (same render quality, same camera), against make_env(...).step: the wrapper
                    overhead
  collect           the trainer's own loop (`Trainer.run`), random actions, no updates (frames into
                    the replay): 1 env against 2 env workers; `collect_1thread` with
                    LP_NUM_THREADS=0 (each software renderer draws in its process's own thread, in
                    the 1-env process too: one core per env)
  train             one update per env step, each contender timed after --seed-steps random steps
                    and one untimed episode of updates (allocations, compiling), chunks of one
                    episode:
                      train             this trainer, the config's algorithm in float32, uncompiled
                                        (whatever its profile says): DrQ, whose target critic has
                                        its own encoder
                      train_drqv2       the same with sac.target_encoder=false: one encoder pass
                                        fewer per update
                      train_fast        train_drqv2 with the speed options: channels-last, compile,
                                        and bf16 autocast on the encoder where the device computes
                                        bf16 natively (emulated, it is several times slower)
                      sb3_equal_encoder SB3 SAC with this project's simple2dcnn conv stack as
                                        features_extractor_class
                      sb3_cnnpolicy     SB3 SAC with its default CnnPolicy
  overlap           the trainer's loop with updates on 2 env workers, `training.overlap` off
                    against on (the envs act with the policy of before the step's updates, one
                    batch a step), chunks of one episode; and the milliseconds of one publish of
                    the acting copy beside one update
  frozen            a frozen trunk (the config's encoder with encoder.video.freeze=true), episodes
                    per hour of training (--episode-steps agent steps each, one update per step) two
                    ways, in one run:
                      in_update  the trunk inside every update, on a replay of frames (the plain way
                                 to train on a frozen trunk), composed from the same public classes:
                                 SAC over the frozen encoder, frame ReplayBuffer, env; timed over
                                 --frozen-before-steps steps (seconds to minutes each)
                      stored     this trainer: the trunk once per agent step, features in the
                                 replay, updates on the heads only; timed over whole episodes
                                 (--steps, at least one)
                    and the replay's bytes per stored transition of each. E.g. for R3D-18 at
                    112 px on dishwashing:
                      python3 -m bench.throughput --rows frozen \\
                        --config configs/dishwashing_video.yaml --batch-size 128 \\
                        --set encoder.video.arch=r3d18 --set encoder.video.input_size=112
  phases            per-phase milliseconds: physics, render, replay sampling, augmentation, encoder
                    forward (the config's passes per update) and backward, optimiser steps, and one
                    whole update
SB3 is a benchmark-only dependency: pip install -r requirements-bench.txt.
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

import gymnasium as gym
import numpy as np
import torch

from encoders import build_encoder
from envs.pixels import resolve_camera
from envs.rendering import configure
from errors import UserError
from sac.agent import SAC
from sac.augment import random_shift
from sac.replay import ReplayBuffer
from trainer.config.load import load_config
from trainer.process.cli import explain
from trainer.process.device import native_bfloat16, resolve_device
from trainer.run.encoder_setup import build_video_encoder

# what loads mujoco is imported inside the functions that use it, after the command's
# configure() has checked MUJOCO_GL: a bad one is then one line, not mujoco's traceback
ROWS = ("raw_vs_wrapper", "collect", "collect_1thread", "train", "overlap", "frozen", "phases")
OURS = {
    "train": {},
    "train_drqv2": {"sac.target_encoder": False},
    # + autocast where bf16 is native
    "train_fast": {"sac.target_encoder": False, "encoder.video.channels_last": True,
                   "training.compile": True},
}
# Mesa's software renderer otherwise draws each frame with every core
ONE_RENDER_THREAD = {"LP_NUM_THREADS": "0"}


def config(args, **overrides):
    sets = {
        "env.image_size": args.image_size, "env.action_repeat": 1,
        "env.max_episode_steps": args.episode_steps,
        "sac.batch_size": args.batch_size,
        "sac.buffer_size": args.seed_steps + args.episode_steps
        + max(args.steps, args.collect_steps) + 10,
        "training.seed_steps": args.seed_steps, "training.device": "cpu" if args.cpu else "auto",
        "training.eval_every_episodes": 10**6, "checkpoint.every_episodes": 10**6,
        "logging.tensorboard": False, "logging.progress": False, "logging.curve": False,
        "logging.eval_video": False,
        # float32 unless a row says otherwise, whatever the profile
        "training.autocast": False, "training.compile": False,
        **overrides,
    }
    # a folder of its own, unless the caller names one
    for key in ("checkpoint.dir", "logging.tensorboard_dir"):
        if key not in sets:
            sets[key] = tempfile.mkdtemp()
    return load_config(args.config, [f"{key}={value}" for key, value in sets.items()] + args.set)


def rate(steps: int, seconds: float) -> dict:
    return {"steps": steps, "seconds": round(seconds, 2), "steps_per_s": round(steps / seconds, 2)}


def raw_vs_wrapper(args) -> dict:
    """The same model, camera and render quality stepped and drawn two ways, alternating in chunks
    so that load from other jobs hits both alike: bare mj_step x frame_skip + Renderer.update_scene
    + render into a preallocated buffer, and `make_env(...).step` (Gymnasium wrappers, action
    scaling, frame stack)."""
    import mujoco

    from envs.make import make_env

    cfg = config(args)
    env = make_env(cfg.env, cfg.pixels)
    base = env.unwrapped
    # the wrapper's own model: its render quality is already set
    model, data = base.model, base.data
    camera = resolve_camera(model, cfg.env.camera, base.mujoco_renderer.default_cam_config)
    renderer = mujoco.Renderer(model, cfg.env.image_size, cfg.env.image_size)
    frame = np.empty((cfg.env.image_size, cfg.env.image_size, 3), np.uint8)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    physics = render = wrapped = 0.0
    chunk = 25
    for _ in range(max(1, args.steps // chunk)):
        for _ in range(chunk):
            start = time.perf_counter()
            data.ctrl[:] = rng.uniform(-1, 1, model.nu)
            mujoco.mj_step(model, data, nstep=base.frame_skip)
            middle = time.perf_counter()
            renderer.update_scene(data, camera=camera)
            renderer.render(out=frame)
            render += time.perf_counter() - middle
            physics += middle - start
        start = time.perf_counter()
        for _ in range(chunk):
            _, _, terminated, truncated, _ = env.step(
                rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
            if terminated or truncated:
                env.reset()
        wrapped += time.perf_counter() - start
    steps = max(1, args.steps // chunk) * chunk
    renderer.close()
    env.close()
    return {
        "steps": steps, "raw_steps_per_s": round(steps / (physics + render), 1),
        "wrapper_steps_per_s": round(steps / wrapped, 1),
        "physics_ms": round(1e3 * physics / steps, 3), "render_ms": round(1e3 * render / steps, 3),
        "wrapper_overhead": round(wrapped / (physics + render) - 1, 3),
    }


def timed_run(trainer, steps: int) -> tuple[int, int, float]:
    """`Trainer.run` for `steps` more agent steps: (steps, updates, seconds)."""
    start, step_before, updates_before = (time.perf_counter(), trainer.progress.env_step,
                                          trainer.agent.updates)
    trainer.run(steps)
    return (trainer.progress.env_step - step_before, trainer.agent.updates - updates_before,
            time.perf_counter() - start)


def collect(args, chunks: int = 10) -> dict:
    """1 env (in process) against 2 env workers, random actions, no updates."""
    contenders = {n: OurTrainer(args, {"env.num_envs": n, "training.seed_steps": 10**9})
                  for n in (1, 2)}
    totals = interleave(contenders, chunks, args.collect_steps // chunks)
    rates = {n: steps / seconds for n, (steps, seconds) in totals.items()}
    return {"steps_1env": totals[1][0], "steps_per_s_1env": round(rates[1], 1),
            "steps_2env": totals[2][0],
            "steps_per_s_2env": round(rates[2], 1), "scaling": round(rates[2] / rates[1], 2),
            "render_threads": os.environ.get("LP_NUM_THREADS", "Mesa default")}


def interleave(contenders: dict, rounds: int, steps: int) -> dict:
    """Each contender `steps` more agent steps per round, in turn, so that load from other jobs on a
    shared machine hits all alike; closes them after. {name: [steps run, seconds]}."""
    totals = {name: [0, 0.0] for name in contenders}
    for _ in range(rounds):
        for name, contender in contenders.items():
            done, seconds = contender.run(steps)
            totals[name][0] += done
            totals[name][1] += seconds
    for contender in contenders.values():
        contender.close()
    return totals


class OurTrainer:
    """This trainer as a contender of the `train`, `collect` and `frozen` rows, with its config's
    settings plus `overrides`, warmed up untimed by the seed steps and one episode. Its config
    schedules no evaluation or checkpoint."""

    def __init__(self, args, overrides: dict):
        from trainer.run.loop import Trainer

        self.trainer = Trainer(config(args, **overrides))
        timed_run(self.trainer, args.seed_steps + args.episode_steps)

    def run(self, steps: int) -> tuple[int, float]:
        done, _, seconds = timed_run(self.trainer, steps)
        return done, seconds

    def replay_bytes(self) -> int:
        return self.trainer.replay.bytes_per_slot

    def close(self) -> None:
        self.trainer.close()


def train(args) -> dict:
    autocast = native_bfloat16(resolve_device("cpu" if args.cpu else "auto"))
    contenders = {
        name: OurTrainer(args,
                         overrides | ({"training.autocast": True} if name == "train_fast"
                                      and autocast else {}))
        for name, overrides in OURS.items()
    }
    contenders |= {
        "sb3_equal_encoder": SB3Trainer(args, equal_encoder=True),
        "sb3_cnnpolicy": SB3Trainer(args, equal_encoder=False),
    }
    replay_bytes = {name: contender.replay_bytes() for name, contender in contenders.items()}
    totals = interleave(contenders, max(1, args.steps // args.episode_steps), args.episode_steps)
    return {
        name: rate(*totals[name]) | {"replay_bytes_per_transition": replay_bytes[name]}
        for name in contenders
    } | {"train_fast_autocast": autocast}


def ms_per_call(fn, device: torch.device, repeats: int = 20) -> float:
    """Milliseconds per call of `fn`, after one untimed call; on CUDA until its work is done."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return round(1e3 * (time.perf_counter() - start) / repeats, 3)


def overlap(args) -> dict:
    """2 env workers, one update per agent step: `training.overlap` off against on."""
    contenders = {name: OurTrainer(args, {"env.num_envs": 2, "training.overlap": on})
                  for name, on in (("off", False), ("on", True))}
    trainer = contenders["on"].trainer
    agent, data = trainer.agent, trainer.sample(args.batch_size)
    timed = {"publish_ms": ms_per_call(lambda: agent.published.refresh(agent.updates, force=True),
                                       trainer.device),
             "update_ms": ms_per_call(lambda: agent.update(data), trainer.device)}
    totals = interleave(contenders, max(1, args.steps // args.episode_steps), args.episode_steps)
    rates = {name: rate(*totals[name]) for name in contenders}
    return rates | {"speedup": round(rates["on"]["steps_per_s"] / rates["off"]["steps_per_s"],
                                     2)} | timed


def frozen(args) -> dict:
    """Episodes per hour with a frozen trunk: inside every update on stored frames, against stored
    features."""
    from envs.make import make_env

    overrides = {"encoder.video.freeze": True}
    cfg = config(args, **overrides)
    env = make_env(cfg.env, cfg.pixels)
    shape, action_dim = env.observation_space.shape, env.action_space.shape[0]
    device = resolve_device("cpu" if args.cpu else "auto")
    torch.manual_seed(cfg.training.seed)
    agent = SAC(build_video_encoder(cfg.encoder, shape), action_dim, cfg.sac, device=device,
                pixels=True,
                autocast=cfg.training.autocast)
    frames = ReplayBuffer(capacity=cfg.sac.buffer_size, frame_shape=shape[1:], frame_dtype=np.uint8,
                          action_dim=action_dim, frame_stack=cfg.env.frame_stack,
                          seed=cfg.training.seed,
                          discount=cfg.sac.discount, nstep=cfg.sac.nstep)
    rng = np.random.default_rng(cfg.training.seed)
    obs, _ = env.reset(seed=cfg.training.seed)
    frames.add_first(obs)
    # seed steps, one untimed step, the timed ones
    for step in range(args.seed_steps + args.frozen_before_steps + 1):
        if step == args.seed_steps + 1:
            start = time.perf_counter()
        seeding = step < args.seed_steps
        action = (rng.uniform(-1, 1, action_dim).astype(np.float32) if seeding
                  else agent.act(obs[None], sample=True)[0])
        obs, reward, terminated, truncated, _ = env.step(action)
        frames.add(action, reward, terminated, obs)
        if terminated or truncated:
            obs, _ = env.reset()
            frames.add_first(obs)
        if step >= args.seed_steps:
            agent.update(frames.sample(cfg.sac.batch_size, device))
    in_update = (time.perf_counter() - start) / args.frozen_before_steps
    env.close()
    stored = OurTrainer(args, overrides)
    steps, seconds = stored.run(args.steps)
    features_bytes = stored.replay_bytes()
    stored.close()
    per_hour = {name: 3600 / (args.episode_steps * seconds_per_step)
                for name, seconds_per_step in (("in_update", in_update),
                                               ("stored", seconds / steps))}
    return {
        "arch": cfg.encoder.video.arch, "input_size": cfg.encoder.video.input_size,
        "batch": cfg.sac.batch_size,
        "autocast": cfg.training.autocast, "in_update_steps": args.frozen_before_steps,
        "stored_steps": steps,
        "in_update_s_per_step": round(in_update, 3), "stored_s_per_step": round(seconds / steps, 3),
        **{f"{name}_episodes_per_hour": round(value, 2) for name, value in per_hour.items()},
        "speedup": round(per_hour["stored"] / per_hour["in_update"], 1),
        "frames_bytes_per_transition": frames.bytes_per_slot,
        "features_bytes_per_transition": features_bytes,
    }


def phases(args) -> dict:
    """Milliseconds per call of each piece of an update on a replay filled by the real env."""
    from trainer.run.loop import Trainer

    # random actions, no updates: just fill the replay
    cfg = config(args, **{"training.seed_steps": 10**9})
    trainer = Trainer(cfg)
    trainer.run(4 * args.batch_size)
    agent, device = trainer.agent, trainer.device

    def ms(fn) -> float:
        return ms_per_call(fn, device)

    batch = trainer.replay.sample(args.batch_size, device)
    shifted = random_shift(batch["obs"], cfg.sac.augment_pad)
    encoder = agent.critic.encoder

    def forward_passes():
        encoder(shifted)
        with torch.no_grad():
            encoder(shifted)
            if agent.critic_target.encoder is not None:
                agent.critic_target.encoder(shifted)

    def forward_backward():
        encoder(shifted).mean().backward()

    def optimisers():
        agent.critic_opt.step()
        agent.actor_opt.step()

    # every parameter has a gradient and optimiser state for the optimiser timing
    agent.update(batch)
    row = {
        "replay_sample_ms": ms(lambda: trainer.replay.sample(args.batch_size, device)),
        "augment_ms": ms(
            lambda: (
                random_shift(batch["obs"], cfg.sac.augment_pad),
                random_shift(batch["next_obs"], cfg.sac.augment_pad)
            )
        ),
        "encoder_forward_ms": ms(forward_passes),
        "encoder_backward_ms": round(ms(forward_backward) - ms(lambda: encoder(shifted)), 3),
        "optimiser_ms": ms(optimisers),
        "update_ms": ms(lambda: agent.update(trainer.replay.sample(args.batch_size, device))),
        "device": str(device),
    }
    trainer.close()
    return row


def channels_stacked(env):
    """SB3 sees images as (C, H, W): the (T, 3, H, W) frame stack becomes (3T, H, W), channel order
    kept."""
    shape = env.observation_space.shape
    space = gym.spaces.Box(0, 255, (shape[0] * shape[1], *shape[2:]), np.uint8)
    return gym.wrappers.TransformObservation(env, lambda obs: obs.reshape(space.shape), space)


class SB3Trainer:
    """Stable-Baselines3 SAC on the same task and settings as a `train` contender: this project's
    conv stack as its features extractor (equal_encoder) or its default CnnPolicy."""

    def __init__(self, args, equal_encoder: bool):
        # requirements-bench.txt: only this contender needs Stable-Baselines3
        from stable_baselines3 import SAC as SB3SAC
        from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

        from envs.make import make_env

        cfg = config(args)
        self.env = channels_stacked(make_env(cfg.env, cfg.pixels))
        stack_shape = cfg.env.stack_shape

        class Simple2DCNNExtractor(BaseFeaturesExtractor):
            """This project's conv stack and trunk (Linear, LayerNorm, tanh to sac.feature_dim) as
            an SB3 extractor. SB3 hands it floats in [0, 1]; the conv stack gets them centred, as
            Simple2DCNN does with uint8."""

            def __init__(self, observation_space):
                super().__init__(observation_space, cfg.sac.feature_dim)
                self.convs = build_encoder(cfg.encoder, stack_shape).convs
                repr_dim = self.convs(torch.zeros(1, *observation_space.shape)).shape[1]
                self.trunk = torch.nn.Sequential(
                    torch.nn.Linear(repr_dim, cfg.sac.feature_dim),
                    torch.nn.LayerNorm(cfg.sac.feature_dim),
                    torch.nn.Tanh(),
                )

            def forward(self, obs):
                return self.trunk(self.convs(obs - 0.5))

        policy_kwargs = {"net_arch": [cfg.sac.hidden_dim] * cfg.sac.hidden_depth}
        if equal_encoder:
            policy_kwargs["features_extractor_class"] = Simple2DCNNExtractor
        self.model = SB3SAC(
            "CnnPolicy", self.env, batch_size=args.batch_size, buffer_size=cfg.sac.buffer_size,
            learning_starts=args.seed_steps, train_freq=1, gradient_steps=1,
            learning_rate=cfg.sac.lr,
            policy_kwargs=policy_kwargs, seed=cfg.training.seed,
            device="cpu" if args.cpu else "auto", verbose=0,
        )
        self.model.learn(args.seed_steps + args.episode_steps)

    def run(self, steps: int) -> tuple[int, float]:
        start = time.perf_counter()
        self.model.learn(steps, reset_num_timesteps=False)
        return steps, time.perf_counter() - start

    def replay_bytes(self) -> int:
        buffer = self.model.replay_buffer
        arrays = [
            buffer.observations, buffer.next_observations, buffer.actions, buffer.rewards,
            buffer.dones, buffer.timeouts
        ]
        return sum(a.nbytes for a in arrays) // buffer.buffer_size

    def close(self) -> None:
        self.env.close()


def run_row(name: str, args) -> dict:
    functions = {
        "raw_vs_wrapper": raw_vs_wrapper, "collect": collect, "collect_1thread": collect,
        "train": train, "overlap": overlap,
        "frozen": frozen, "phases": phases,
    }
    row = functions[name](args)
    peak_kb = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    )
    return {"row": name, **row, "peak_rss_mb": round(peak_kb / 1024)}


def summary(rows: dict) -> dict:
    trained = rows.get("train", {})

    def ratio(a: str, b: str, key: str = "steps_per_s"):
        return (round(trained[a][key] / trained[b][key], 2) if a in trained and b in trained
                else None)

    return {
        "row": "summary",
        **{f"{name}_vs_sb3_equal_encoder": ratio(name, "sb3_equal_encoder") for name in OURS},
        "train_vs_sb3_cnnpolicy": ratio("train", "sb3_cnnpolicy"),
        "sb3_replay_bytes_vs_ours": ratio("sb3_equal_encoder", "train",
                                          "replay_bytes_per_transition"),
        "wrapper_overhead_vs_raw": rows.get("raw_vs_wrapper", {}).get("wrapper_overhead"),
        "collect_2env_vs_1env": rows.get("collect", {}).get("scaling"),
        "collect_2env_vs_1env_1thread": rows.get("collect_1thread", {}).get("scaling"),
        "frozen_stored_vs_in_update": rows.get("frozen", {}).get("speedup"),
        "overlap_on_vs_off": rows.get("overlap", {}).get("speedup"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/half_cheetah_video.yaml")
    parser.add_argument("--image-size", type=int, default=84)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=300, help="timed agent steps per row")
    parser.add_argument(
        "--collect-steps", type=int, default=2000,
        help="timed agent steps per env count in the collect rows (cheap: no updates)",
    )
    parser.add_argument(
        "--seed-steps", type=int, default=100,
        help="random-action steps before the timed training steps"
    )
    parser.add_argument("--episode-steps", type=int, default=100, help="env.max_episode_steps")
    parser.add_argument("--frozen-before-steps", type=int, default=3,
                        help="timed agent steps of the frozen row's in-update contender")
    parser.add_argument("--cpu", action="store_true",
                        help="train on the CPU even when CUDA is available")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="config override for our rows, after the benchmark's own (e.g. "
             "training.autocast=true)",
    )
    parser.add_argument("--row", choices=ROWS, help=argparse.SUPPRESS)  # one row, in this process
    args = parser.parse_args()
    if args.row:

        configure()  # before a row loads mujoco: its import raises on a bad MUJOCO_GL
        print(json.dumps(run_row(args.row, args)), flush=True)
        return

    try:  # once here, not once per row: every row would print the same error
        config(args,
               **{"checkpoint.dir": tempfile.gettempdir(),
                  "logging.tensorboard_dir": tempfile.gettempdir()})
    except UserError as err:
        parser.error(explain(err))
    rows = {}
    forwarded = [arg for arg in sys.argv[1:] if arg != "--rows" and arg not in ROWS]
    for name in args.rows:
        env = os.environ | (ONE_RENDER_THREAD if name.endswith("_1thread") else {})
        result = subprocess.run(
            [sys.executable, "-m", "bench.throughput", *forwarded, "--row", name],
            capture_output=True, text=True, env=env,
        )
        if result.returncode != 0:
            errors = [line for line in result.stderr.splitlines()
                      if re.match(r"[\w.]+(Error|Exception)\b", line)]
            print(json.dumps({"row": name,
                              "error": (errors or [f"exit status {result.returncode}"])[0]}),
                  flush=True)
            continue
        rows[name] = json.loads(result.stdout.strip().splitlines()[-1])
        print(json.dumps(rows[name]), flush=True)
    print(json.dumps(summary(rows)), flush=True)


if __name__ == "__main__":
    main()
