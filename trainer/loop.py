"""The training loop: episodes of acting and learning, with evaluation, logging and checkpoints.

Determinism: with one env every episode starts from `env.reset(seed=training.seed + episode)`, evaluation uses its
own fixed seeds and the deterministic policy, and all other randomness comes from RNGs saved in the checkpoint. So a
CPU run stopped and resumed at an episode boundary ends with the same parameters as one that never stopped.

With `env.num_envs` > 1 the workers step in a fixed turn (envs/workers.py), each acting one round of updates
behind, and are seeded once per start, worker i with `training.seed + episode + i` (episode = completed episodes so
far), then autoreset from their own RNGs. A save at an episode boundary leaves the other workers mid-episode (and
one step of every worker in flight, not yet stored or counted); on resume they start fresh episodes, so their
partial episodes end in the replay as truncated ones: no transition is lost or stored twice, but the run is not
bitwise the one that never stopped.
"""

import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from encoders.frozen import FEATURE_DTYPE
from envs import make_env, make_vector_env
from envs.pixels import Camera
from sac.agent import SAC
from sac.replay import ReplayBuffer, frame_bytes
from trainer import checkpoint
from trainer.config import Config, to_dict, to_yaml
from trainer.encoders import build_encoders
from trainer.device import can_compile, native_bfloat16, replay_frames_device, resolve_device
from trainer.errors import UserError
from trainer.gpu_monitor import GpuMonitor
from trainer.logger import Logger
from trainer.remote import RemoteDir, is_remote
from trainer.signals import GracefulStop

EVAL_SEED_OFFSET = 1_000_000  # eval episodes never share a start state with training episodes


@dataclass
class Progress:
    episode: int = 0  # completed training episodes
    env_step: int = 0  # agent steps (each is env.action_repeat simulator steps)


def every(n: int, i: int) -> bool:
    return n > 0 and i > 0 and i % n == 0


def until(limit: int | None, i: int) -> bool:
    """True while `i` is below `limit` (no limit when None)."""
    return limit is None or i < limit


def crossed(n: int, before: int, after: int) -> bool:
    """True if a multiple of `n` lies in (before, after]: `every` for counters that advance by more than one."""
    return n > 0 and after // n > before // n


class Trainer:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.device = resolve_device(cfg.training.device)
        if cfg.training.autocast and not native_bfloat16(self.device):
            print(f"warning: training.autocast is on but this {self.device.type.upper()} has no native bfloat16, so every "
                  "update is emulated and several times slower; set training.autocast=false here", file=sys.stderr)
        compiled = cfg.training.compile and can_compile(self.device)
        if cfg.training.compile and not compiled:
            print("warning: training.compile is on but no C++ compiler was found (torch.compile needs $CXX, default g++, "
                  "on a CPU), so this run trains uncompiled; install g++ or set training.compile=false", file=sys.stderr)
        torch.manual_seed(cfg.training.seed)
        self.rng = np.random.default_rng(cfg.training.seed)
        self.num_envs = cfg.env.num_envs
        self.env = make_env(cfg) if self.num_envs == 1 else make_vector_env(cfg)
        self.eval_env = make_env(cfg)
        self.eval_camera = None
        if cfg.logging.eval_video:
            env = cfg.env
            self.eval_camera = Camera(self.eval_env, cfg.logging.video_size, env.camera, env.render_shadow_size, env.render_offsamples)
        pixels = cfg.encoder.type == "video"
        obs_space = self.eval_env.observation_space
        self.action_dim = self.eval_env.action_space.shape[0]
        encoder, self.trunk = build_encoders(cfg, obs_space.shape, self.device)
        self.agent = SAC(encoder, self.action_dim, cfg.sac, self.device, pixels, encoder_lr=cfg.encoder.lr,
                         compile=compiled, autocast=cfg.training.autocast, augment=self.trunk is None)
        if self.trunk:  # one feature vector per step: its stack is already inside it
            frame_shape, frame_dtype, frame_stack = (self.trunk.repr_dim,), FEATURE_DTYPE, None
        else:
            frame_shape, frame_dtype = obs_space.shape[1:] if pixels else obs_space.shape, obs_space.dtype
            frame_stack = cfg.env.frame_stack if pixels else None
        replay_bytes = cfg.sac.buffer_size * frame_bytes(frame_shape, frame_dtype)
        frames_on = replay_frames_device(cfg.replay.device, self.device, replay_bytes)
        self.replay = ReplayBuffer(
            cfg.sac.buffer_size, frame_shape, frame_dtype, self.action_dim,
            frame_stack=frame_stack, seed=cfg.training.seed, discount=cfg.sac.discount,
            num_envs=self.num_envs, frames_on=frames_on, nstep=cfg.sac.nstep,
        )
        self.progress = Progress()
        ckpt = cfg.checkpoint
        self.remote = None
        if is_remote(ckpt.dir):
            self.remote = RemoteDir(ckpt.dir, Path(ckpt.local_dir), ckpt.upload_retries, ckpt.upload_backoff_s, report=print)
        self.checkpoint_dir = Path(ckpt.local_dir if self.remote else ckpt.dir)

    # ---- checkpoints -------------------------------------------------------------------------------------------
    def save(self, final_of_episode: bool) -> Path:
        start = time.perf_counter()
        payload = {
            "config": to_dict(self.cfg),
            "agent": self.agent.state_dict(),
            "progress": asdict(self.progress),
            "trunk": self.trunk.fingerprint if self.trunk else None,
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "numpy": self.rng.bit_generator.state,
            },
        }
        ckpt = self.cfg.checkpoint
        episode = self.progress.episode if final_of_episode else None
        saved = checkpoint.save(self.checkpoint_dir, self.cfg.run_name, payload, self.replay.state_dict(),
                                self.progress.env_step, episode, ckpt.keep_replays, ckpt.keep_last)
        if self.remote:
            self.remote.upload(saved.written, saved.deleted)
        names = ", ".join(path.name for path in saved.written)
        self.logger.message(f"saved {names} (episode {self.progress.episode}, step {self.progress.env_step}) in {time.perf_counter() - start:.1f} s")
        return saved.latest

    def resume(self, target: str) -> None:
        if target == "auto":
            names, fetch = (self.remote.listdir(), self.remote.fetch) if self.remote else (None, None)
            found = checkpoint.load_newest(self.checkpoint_dir, self.cfg.run_name, names, fetch)
            if found is None:
                print(f"no usable checkpoint for run '{self.cfg.run_name}' in {self.cfg.checkpoint.dir}; starting fresh")
                return
            path, payload, replay_state = found
        else:
            path = Path(target)
            payload, replay_state = checkpoint.load(path)
        checkpoint.check_compatible(payload["config"], to_dict(self.cfg), path)
        checkpoint.check_trunk(payload.get("trunk"), self.trunk.fingerprint if self.trunk else None, path)
        try:
            self.agent.load_state_dict(payload["agent"])
        except (RuntimeError, KeyError, ValueError) as err:
            raise UserError(f"checkpoint {path} does not fit this config's networks ({str(err).splitlines()[0]}); resume with the config it was trained with") from None
        if replay_state is not None:
            self.replay.load_state_dict(replay_state)
        self.progress = Progress(**payload["progress"])
        torch.set_rng_state(payload["rng"]["torch"])
        if payload["rng"]["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(payload["rng"]["cuda"])
        self.rng.bit_generator.state = payload["rng"]["numpy"]
        print(f"resumed from {path}: episode {self.progress.episode}, step {self.progress.env_step}, {len(self.replay)} transitions in replay")
        changes = checkpoint.changed_settings(payload["config"], to_dict(self.cfg))
        if changes:
            print(f"settings changed since that checkpoint: {', '.join(changes)}")
        saved_profile = payload["config"].get("profile")
        if saved_profile and saved_profile != self.cfg.profile:
            print(f"the checkpoint trained with profile {saved_profile}; --set profile={saved_profile} keeps its settings")

    # ---- acting ------------------------------------------------------------------------------------------------
    def observe(self, obs: np.ndarray) -> np.ndarray:
        """Env observations (N, ...) to what the actor reads and the replay stores: with a frozen trunk its features
        (N, repr_dim), computed once per step for all N; else the observations themselves."""
        return self.trunk(obs) if self.trunk else obs.copy()

    def act(self, obs: np.ndarray) -> np.ndarray:
        """A batch of observations (N, ...) in, (N, A) actions out: uniform during the seed steps, then sampled."""
        if self.progress.env_step < self.cfg.training.seed_steps:
            return self.rng.uniform(-1.0, 1.0, (len(obs), self.action_dim)).astype(np.float32)
        return self.agent.act(obs, sample=True)

    def learn(self, env_steps: int = 1) -> None:
        """`sac.updates_per_step` updates per agent step taken (a vector step takes one per stepping env), once the
        seed phase is over and the replay can fill a batch."""
        sac = self.cfg.sac
        ready = len(self.replay) >= max(sac.batch_size, self.cfg.env.frame_stack + 2)
        if self.progress.env_step < self.cfg.training.seed_steps or not ready:
            return
        for _ in range(sac.updates_per_step * env_steps):
            metrics = self.agent.update(self.replay.sample(sac.batch_size, self.device))
            if every(self.cfg.logging.log_every_updates, self.agent.updates):
                self.logger.scalars(metrics | {"replay_size": len(self.replay)}, self.progress.env_step, "train")

    def run_episode(self, stop: GracefulStop) -> bool:
        """One training episode; False if a stop signal cut it short."""
        obs, _ = self.env.reset(seed=self.cfg.training.seed + self.progress.episode)
        obs = self.observe(obs[None])[0]
        self.replay.add_first(obs)
        episode_return, length, updates_before, start = 0.0, 0, self.agent.updates, time.perf_counter()
        done = False
        while not done:
            if stop.requested:
                return False
            action = self.act(obs[None])[0]
            obs, reward, terminated, truncated, _ = self.env.step(action)
            obs = self.observe(obs[None])[0]
            self.replay.add(action, reward, terminated, obs)
            self.progress.env_step += 1
            episode_return += float(reward)
            length += 1
            self.learn()
            if every(self.cfg.checkpoint.every_steps, self.progress.env_step):
                self.save(final_of_episode=False)
            done = terminated or truncated
        seconds = time.perf_counter() - start
        self.log_episode(episode_return, length, length, self.agent.updates - updates_before, seconds)
        return True

    def log_episode(self, episode_return: float, length: int, env_steps: int, updates: int, seconds: float) -> None:
        """One finished episode; the rates are over the `env_steps` and `updates` done in the last `seconds`."""
        self.logger.episode({
            "episode_return": episode_return,
            "episode_length": length,
            "env_steps_per_s": env_steps / seconds,
            "updates_per_s": updates / seconds,
        }, self.progress.env_step)
        self.logger.scalars(self.gpu_monitor.poll(), self.progress.env_step, "gpu")

    def episodes(self, stop: GracefulStop):
        """Yield once per completed training episode; return when a stop signal cuts an episode short."""
        if self.num_envs > 1:
            yield from self.parallel_episodes(stop)
            return
        while self.run_episode(stop):
            yield True

    def parallel_episodes(self, stop: GracefulStop):
        """`env.num_envs` workers stepped in turn (envs/workers.py); yields once per episode any of them completes.
        The workers compute their next steps while this process runs the updates."""
        cfg, progress, n = self.cfg, self.progress, self.num_envs
        obs = self.observe(self.env.reset(seed=cfg.training.seed + progress.episode))
        self.replay.add_batch(obs, np.zeros((n, self.action_dim), np.float32), np.zeros(n), np.zeros(n, bool), np.ones(n, bool))
        first = np.zeros(n, dtype=bool)  # workers whose next frame is a reset frame (NEXT_STEP autoreset)
        returns, lengths = np.zeros(n), np.zeros(n, dtype=int)
        steps_since, updates_before, start = 0, self.agent.updates, time.perf_counter()
        while not stop.requested:
            action, obs, reward, terminated, truncated = self.env.step(self.act, self.observe)
            self.replay.add_batch(obs, action, reward, terminated, first)
            stepped = ~first  # a resetting worker ignored its action: no agent step
            before, taken = progress.env_step, int(stepped.sum())
            progress.env_step += taken
            steps_since += taken
            returns += np.where(stepped, reward, 0.0)
            lengths += stepped
            self.learn(taken)
            if crossed(cfg.checkpoint.every_steps, before, progress.env_step):
                self.save(final_of_episode=False)
            first = stepped & (terminated | truncated)
            for worker in np.flatnonzero(first):
                seconds = time.perf_counter() - start
                self.log_episode(float(returns[worker]), int(lengths[worker]), steps_since, self.agent.updates - updates_before, seconds)
                returns[worker], lengths[worker] = 0.0, 0
                steps_since, updates_before, start = 0, self.agent.updates, time.perf_counter()
                yield True

    def evaluate(self) -> tuple[float, float | None, list[np.ndarray]]:
        """The deterministic policy over `training.eval_episodes` fixed starts: mean return; success rate when the
        task reports `info["success"]` (an episode counts if its last step does), else None; and the first episode's
        frames for the eval video."""
        returns, successes, clip = [], [], []
        for i in range(self.cfg.training.eval_episodes):
            obs, _ = self.eval_env.reset(seed=self.cfg.training.seed + EVAL_SEED_OFFSET + i)
            total, done = 0.0, False
            while not done:
                if i == 0 and self.eval_camera and len(clip) < self.cfg.logging.video_max_frames:
                    clip.append(self.eval_camera.render().copy())
                action = self.agent.act(self.observe(obs[None]), sample=False)[0]
                obs, reward, terminated, truncated, info = self.eval_env.step(action)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
            if "success" in info:
                successes.append(float(info["success"]))
        return float(np.mean(returns)), float(np.mean(successes)) if successes else None, clip

    # ---- the loop ----------------------------------------------------------------------------------------------
    def train(self) -> int:
        """Train until `training.episodes` (or `training.max_env_steps`); returns the process exit status."""
        cfg = self.cfg
        print(f"run '{cfg.run_name}' on {self.device}, profile {cfg.profile}; resolved config:\n{to_yaml(cfg)}", flush=True)
        self.logger = Logger(cfg, self.progress.env_step, cfg.training.episodes, self.progress.episode)
        self.gpu_monitor = GpuMonitor(self.device, cfg.logging.gpu_every_s, self.logger.message)
        try:
            with GracefulStop() as stop:
                self.run(stop)
                if stop.requested:
                    path = self.save(final_of_episode=False)
                    self.logger.message(f"stopped by signal {stop.signum}; saved {path}; continue with --resume auto")
                    return 128 + stop.signum
        finally:
            self.close()
        if cfg.training.auto_shutdown:
            print(f"running training.auto_shutdown: {cfg.training.auto_shutdown}", flush=True)
            subprocess.run(cfg.training.auto_shutdown, shell=True, check=False)
        return 0

    def run(self, stop: GracefulStop) -> None:
        """The episodes themselves, with evaluation and checkpoints; returns early when a stop is requested."""
        cfg, progress = self.cfg, self.progress
        saved_episode = progress.episode
        episodes = self.episodes(stop)
        while progress.episode < cfg.training.episodes and until(cfg.training.max_env_steps, progress.env_step):
            if not next(episodes, False):
                return
            progress.episode += 1
            if every(cfg.training.eval_every_episodes, progress.episode):
                mean_return, success_rate, clip = self.evaluate()
                frames = progress.env_step * cfg.env.action_repeat
                self.logger.evaluation(mean_return, success_rate, progress.env_step, frames, progress.episode, clip)
            if every(cfg.checkpoint.every_episodes, progress.episode):
                self.save(final_of_episode=True)
                saved_episode = progress.episode
        if progress.episode != saved_episode:
            self.save(final_of_episode=True)
        self.logger.message(f"done: {progress.episode} episodes, {progress.env_step} steps; checkpoints in {cfg.checkpoint.dir}")

    def close(self) -> None:
        """Flush logs and pending uploads, release the renderers."""
        self.logger.close()
        self.env.close()
        if self.eval_camera:
            self.eval_camera.close()
        self.eval_env.close()
        if self.remote:
            self.remote.close(self.cfg.checkpoint.upload_timeout_s)
