"""The training loop: episodes of acting and learning, with evaluation, logging and checkpoints.

Determinism: every episode starts from `env.reset(seed=training.seed + episode)`, evaluation uses its own fixed
seeds and the deterministic policy, and all other randomness comes from RNGs saved in the checkpoint. So a CPU run
stopped and resumed at an episode boundary ends with the same parameters as one that never stopped.
"""

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from encoders import build_encoder
from envs import make_env
from sac.agent import SAC
from sac.replay import ReplayBuffer
from trainer import checkpoint
from trainer.config import Config, to_dict, to_yaml
from trainer.errors import UserError
from trainer.logger import Logger
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


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError("training.device is cuda but no CUDA device is available; use training.device=auto or cpu")
    return torch.device(name)


class Trainer:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.device = resolve_device(cfg.training.device)
        torch.manual_seed(cfg.training.seed)
        self.rng = np.random.default_rng(cfg.training.seed)
        self.env, self.eval_env = make_env(cfg), make_env(cfg)
        pixels = cfg.encoder.type == "video"
        obs_space = self.env.observation_space
        self.action_dim = self.env.action_space.shape[0]
        encoder = build_encoder(cfg.encoder, obs_space.shape)
        self.agent = SAC(encoder, self.action_dim, cfg.sac, self.device, pixels)
        frame_shape = obs_space.shape[1:] if pixels else obs_space.shape
        self.replay = ReplayBuffer(
            cfg.sac.buffer_size, frame_shape, obs_space.dtype, self.action_dim,
            frame_stack=cfg.env.frame_stack if pixels else None, seed=cfg.training.seed,
        )
        self.progress = Progress()
        self.checkpoint_dir = Path(cfg.checkpoint.dir)

    # ---- checkpoints -------------------------------------------------------------------------------------------
    def save(self, final_of_episode: bool) -> Path:
        payload = {
            "config": to_dict(self.cfg),
            "agent": self.agent.state_dict(),
            "progress": asdict(self.progress),
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "numpy": self.rng.bit_generator.state,
            },
        }
        episode = self.progress.episode if final_of_episode else None
        return checkpoint.save(self.checkpoint_dir, self.cfg.run_name, payload, self.replay.state_dict(),
                               self.progress.env_step, episode, self.cfg.checkpoint.keep_replays)

    def resume(self, target: str) -> None:
        if target == "auto":
            found = checkpoint.load_newest(self.checkpoint_dir, self.cfg.run_name)
            if found is None:
                print(f"no usable checkpoint for run '{self.cfg.run_name}' in {self.checkpoint_dir}; starting fresh")
                return
            path, payload, replay_state = found
        else:
            path = Path(target)
            payload, replay_state = checkpoint.load(path)
        checkpoint.check_compatible(payload["config"], to_dict(self.cfg), path)
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

    # ---- acting ------------------------------------------------------------------------------------------------
    def act(self, obs: np.ndarray) -> np.ndarray:
        if self.progress.env_step < self.cfg.training.seed_steps:
            return self.rng.uniform(-1.0, 1.0, self.action_dim).astype(np.float32)
        return self.agent.act(obs, sample=True)

    def learn(self) -> dict:
        sac, metrics = self.cfg.sac, {}
        ready = len(self.replay) >= max(sac.batch_size, self.cfg.env.frame_stack + 2)
        if self.progress.env_step < self.cfg.training.seed_steps or not ready:
            return metrics
        for _ in range(sac.updates_per_step):
            metrics = self.agent.update(self.replay.sample(sac.batch_size, self.device))
            if every(self.cfg.logging.log_every_updates, self.agent.updates):
                self.logger.scalars(metrics | {"replay_size": len(self.replay)}, self.progress.env_step, "train")
        return metrics

    def run_episode(self, stop: GracefulStop) -> bool:
        """One training episode; False if a stop signal cut it short."""
        obs, _ = self.env.reset(seed=self.cfg.training.seed + self.progress.episode)
        self.replay.add_first(obs)
        episode_return, length, updates_before, start = 0.0, 0, self.agent.updates, time.perf_counter()
        done = False
        while not done:
            if stop.requested:
                return False
            action = self.act(obs)
            obs, reward, terminated, truncated, _ = self.env.step(action)
            self.replay.add(action, reward, terminated, obs)
            self.progress.env_step += 1
            episode_return += float(reward)
            length += 1
            self.learn()
            done = terminated or truncated
        seconds = time.perf_counter() - start
        self.logger.episode({
            "episode_return": episode_return,
            "episode_length": length,
            "env_steps_per_s": length / seconds,
            "updates_per_s": (self.agent.updates - updates_before) / seconds,
        }, self.progress.env_step)
        return True

    def evaluate(self) -> tuple[float, float | None]:
        """Mean return of the deterministic policy, and its success rate when the task reports `info["success"]`
        (an episode counts as a success if its last step does); None for tasks that do not."""
        returns, successes = [], []
        for i in range(self.cfg.training.eval_episodes):
            obs, _ = self.eval_env.reset(seed=self.cfg.training.seed + EVAL_SEED_OFFSET + i)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, info = self.eval_env.step(self.agent.act(obs, sample=False))
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
            if "success" in info:
                successes.append(float(info["success"]))
        return float(np.mean(returns)), float(np.mean(successes)) if successes else None

    # ---- the loop ----------------------------------------------------------------------------------------------
    def train(self) -> int:
        """Train until `training.episodes` (or `training.max_env_steps`); returns the process exit status."""
        cfg, progress = self.cfg, self.progress
        print(f"run '{cfg.run_name}' on {self.device}, profile {cfg.profile}; resolved config:\n{to_yaml(cfg)}", flush=True)
        self.logger = Logger(cfg, progress.env_step, cfg.training.episodes, progress.episode)
        saved_episode = progress.episode
        try:
            with GracefulStop() as stop:
                while progress.episode < cfg.training.episodes and until(cfg.training.max_env_steps, progress.env_step):
                    if not self.run_episode(stop):
                        break
                    progress.episode += 1
                    if every(cfg.training.eval_every_episodes, progress.episode):
                        frames = progress.env_step * cfg.env.action_repeat
                        mean_return, success_rate = self.evaluate()
                        self.logger.evaluation(mean_return, success_rate, progress.env_step, frames, progress.episode)
                    if every(cfg.checkpoint.every_episodes, progress.episode):
                        self.save(final_of_episode=True)
                        saved_episode = progress.episode
                if stop.requested:
                    path = self.save(final_of_episode=False)
                    self.logger.message(f"stopped by signal {stop.signum}; saved {path}; continue with --resume auto")
                    return 128 + stop.signum
            if progress.episode != saved_episode:
                self.save(final_of_episode=True)
            self.logger.message(f"done: {progress.episode} episodes, {progress.env_step} steps; checkpoints in {self.checkpoint_dir}")
            return 0
        finally:
            self.logger.close()
            self.env.close()
            self.eval_env.close()
