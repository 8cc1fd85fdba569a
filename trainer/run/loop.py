"""The training loop: episodes of acting and learning, with evaluation, logging and checkpoints.

The envs are always a vector with NEXT_STEP autoreset: worker processes (envs/workers.py; one env is
a vector of one) or MuJoCo Warp worlds (docs/warp.md). Seeding, and what a resume reproduces:
docs/guide.md#checkpoints-and-resume.
"""

import contextlib
import math
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

from encoders.frozen import FEATURE_DTYPE
from encoders.state import StateEncoder
from envs.make import make_batched_env, make_eval_env, make_vector_env, state_size
from errors import Diverged, UserError
from sac.agent import SAC
from sac.demos import mixed_sample
from sac.replay import ReplayBuffer, frame_bytes, host_bytes_per_slot, to_host
from trainer.checkpoints import files as checkpoint_files
from trainer.checkpoints.checkpoint import Checkpoints
from trainer.checkpoints.payload import Progress, build_payload
from trainer.config import saved as saved_config
from trainer.config.checks import check_log_folder
from trainer.config.load import EVAL_SEED_OFFSET, Config, to_dict, to_yaml
from trainer.process.device import (
    can_compile,
    check_host_memory,
    native_bfloat16,
    out_of_memory,
    replay_frames_device,
    resolve_device,
)
from trainer.process.signals import GracefulStop
from trainer.run import compiling
from trainer.run.demo_store import Demos
from trainer.run.encoder_setup import build_encoders
from trainer.run.episodes import run_episodes
from trainer.run.gpu_monitor import GpuMonitor
from trainer.run.logger import Logger, LogWriteError
from trainer.run.takeover import TakeOver


def every(n: int, i: int) -> bool:
    return n > 0 and i > 0 and i % n == 0


def until(limit: int | None, i: int) -> bool:
    """True while `i` is below `limit` (no limit when None)."""
    return limit is None or i < limit


def crossed(n: int, before: int, after: int) -> bool:
    """True if a multiple of `n` lies in (before, after]: `every` for counters that advance by more
    than one."""
    return n > 0 and after // n > before // n


def overdue(minutes: float, since: float) -> bool:
    """True once `minutes` (0: never) have passed since `since` (time.monotonic()): `crossed`
    for the clock."""
    return minutes > 0 and time.monotonic() - since >= 60 * minutes


def describe(cfg: Config) -> str:
    """What a run trains, in one line: task, input, encoder, batch and budget."""
    video = cfg.encoder.video
    kind = "frozen " if video.freeze else "pretrained " if video.pretrained or video.weights else ""
    what = (f"{cfg.env.image_size}x{cfg.env.image_size} frames through {kind}{video.arch}"
            if cfg.pixels else "states")
    training = cfg.training
    steps = "" if training.max_env_steps is None else f" or {training.max_env_steps} agent steps"
    return (f"{cfg.env.id} from {what}, batch {cfg.sac.batch_size}, {training.episodes} "
            f"episodes{steps}, {cfg.env.num_envs} env{'s' if cfg.env.num_envs > 1 else ''}")


class Trainer:
    """A training run, whole after construction; `resume`: a checkpoint path or "auto" (the newest
    valid one). `train()` runs it to its end, `run(steps)` by some agent steps. Rendering:
    envs/rendering.py."""

    def __init__(self, cfg: Config, resume: str | None = None, start_over: bool = False,
                 verbose: bool = False):
        self.cfg = cfg
        # the start prints the whole resolved config, not only a few lines of it
        self.verbose = verbose
        self.opened = contextlib.ExitStack()
        try:
            self.setup(resume, start_over)
        except BaseException:
            # bad input, a failed load, a stop signal: what had started (env workers) stops too
            self.opened.close()
            raise

    def setup(self, resume: str | None, start_over: bool) -> None:
        cfg = self.cfg
        check_log_folder(cfg)  # before a --start-over moves anything
        self.device = resolve_device(cfg.training.device)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = cfg.training.cudnn_benchmark
        # the run's lock on its checkpoint folder, and the uploader, which reports once the logger
        # exists
        self.checkpoints = Checkpoints(cfg, self.opened,
                                       report=lambda text: self.logger.message(text))
        found = self.find_start(resume, start_over)
        torch.manual_seed(cfg.training.seed)
        self.rng = np.random.default_rng(cfg.training.seed)
        self.build_envs()
        self.build_agent(found)
        self.build_replay()
        # last: bad input above fails before a run folder or a progress bar exists
        self.open_logger()
        if resume == "auto" and not found:
            self.logger.message(f"no usable checkpoint for run '{cfg.run_name}' in "
                                f"{cfg.checkpoint.dir}; starting fresh")
        elif not found:
            self.logger.message("a fresh start")
        if found:
            self.restore(*found)
            branch = self.checkpoints.branch_off(found[0], episode=self.progress.episode,
                                                 env_step=self.progress.env_step)
            if branch:
                self.logger.message(branch)
        # carried across resumes (time stopped does not count): eval.csv's wall_s column
        self.wall_start = (time.perf_counter(), found[1].get("wall_s", 0.0) if found else 0.0)
        self.stop = GracefulStop()
        self.start_episodes()

    def find_start(self, resume: str | None,
                   start_over: bool) -> tuple[Path, dict, dict | None] | None:
        """The checkpoint to resume (None for a fresh start, which never writes over an earlier run
        of this name), and the progress to start from."""
        found = self.checkpoints.resume(resume, start_over=start_over)
        self.progress = Progress(**found[1]["progress"]) if found else Progress()
        # [id, first step] of each process that trained the run, this one last: which checkpoints
        # are its ancestors
        self.lineage = [*(found[1].get("lineage", []) if found else []),
                        [os.urandom(6).hex(), self.progress.env_step]]
        self.saved_episode = self.progress.episode
        self.saved_step = self.progress.env_step
        # of the last save, or the start: checkpoint.every_minutes counts from it
        self.saved_at = time.monotonic()
        # a new best evaluation whose save, at this episode end, has not run yet
        self.best_due = False
        # (path, episode, step) of the newest checkpoint written or resumed, for a diverged run's
        # message
        self.last_saved = (found[0], self.saved_episode, self.saved_step) if found else None
        # agent steps taken since updates began; floor(sac.updates_per_step * it) are due
        self.learning_steps = 0
        # (time, env_step) of this process's first update: the ETA's speed counts from it
        self.learning_since = None
        return found

    def build_envs(self) -> None:
        cfg = self.cfg
        self.num_envs = cfg.env.num_envs
        self.batched = cfg.env.backend == "mujoco_warp"
        if self.batched:
            self.env = make_batched_env(cfg.env, cfg.pixels, self.device)
        else:
            self.env = make_vector_env(cfg.env, cfg.pixels, together=cfg.training.overlap)
        self.opened.callback(self.env.close)
        self.eval_env, self.eval_camera = self.make_eval_env()
        self.heldout_env = (self.make_eval_env(heldout=True)[0] if cfg.env.randomize.heldout
                            else None)
        self.action_dim = self.env.single_action_space.shape[0]
        self.takeover = None
        if cfg.demos.takeover:
            self.takeover = TakeOver(cfg.demos.takeover, self.env, env_id=cfg.env.id,
                                     action_repeat=cfg.env.action_repeat)
            self.opened.callback(self.takeover.close)
            self.env.driver = self.takeover.action

    def build_agent(self, found) -> None:
        cfg = self.cfg
        self.compiled = cfg.training.compile and can_compile(self.device)
        encoder, self.trunk = build_encoders(cfg, self.env.single_observation_space.shape,
                                             self.device)
        # the critic's simulator state, stored after the trunk's features (config checks: a frozen
        # trunk's run)
        self.privileged = state_size(cfg.env.id) if cfg.sac.critic_input == "state" else 0
        if self.privileged:
            encoder = StateEncoder((encoder.repr_dim + self.privileged,))
        if found:  # stored features that another trunk computed would silently mean something else
            saved_config.check_trunk(saved=found[1].get("trunk"),
                                     current=self.trunk.fingerprint if self.trunk else None,
                                     path=found[0])
        self.agent = SAC(encoder, self.action_dim, cfg.sac, device=self.device, pixels=cfg.pixels,
                         encoder_lr=cfg.encoder.lr, compile=self.compiled,
                         autocast=cfg.training.autocast,
                         augment=self.trunk is None, cuda_graph=cfg.training.cuda_graph,
                         privileged=self.privileged, overlap=cfg.training.overlap)

    def build_replay(self) -> None:
        """The replay buffer, and the demonstrations mixed into its batches."""
        cfg, obs_space = self.cfg, self.env.single_observation_space
        if self.trunk:
            frame_shape, frame_dtype = (self.trunk.repr_dim + self.privileged,), FEATURE_DTYPE
        else:
            frame_shape, frame_dtype = (obs_space.shape[1:] if cfg.pixels else obs_space.shape,
                                        obs_space.dtype)
        replay_bytes = cfg.sac.buffer_size * frame_bytes(frame_shape, frame_dtype)
        frames_on = replay_frames_device(cfg.replay.device, self.device, replay_bytes)
        slot_bytes = host_bytes_per_slot(frame_shape, frame_dtype, self.action_dim,
                                         frames_on is None)
        check_host_memory(buffer_size=cfg.sac.buffer_size, slot_bytes=slot_bytes)
        self.replay = ReplayBuffer(
            capacity=cfg.sac.buffer_size, frame_shape=frame_shape, frame_dtype=frame_dtype,
            action_dim=self.action_dim, frame_stack=cfg.replay_stack, seed=cfg.training.seed,
            discount=cfg.sac.discount,
            num_envs=self.num_envs, frames_on=frames_on, nstep=cfg.sac.nstep,
        )
        self.demos = (Demos(cfg, obs_space, self.action_dim, frames_on, self.trunk,
                            states=self.privileged)
                      if cfg.demos.path else None)

    def open_logger(self) -> None:
        """The logger and GPU monitor, and the run's first lines: what it trains, where it writes,
        what it warns of; the whole resolved config with --verbose (always in the run folder's
        config.yaml)."""
        cfg = self.cfg
        self.logger = Logger(cfg, start_step=self.progress.env_step,
                             total_episodes=cfg.training.episodes,
                             start_episode=self.progress.episode)
        self.opened.callback(self.logger.close)
        self.logger.message(
            f"run '{cfg.run_name}' on {self.device}, profile {cfg.profile}: {describe(cfg)}")
        self.logger.message(f"logs in {self.logger.dir} (the whole config: "
                            f"{self.logger.dir / 'config.yaml'}), checkpoints in "
                            f"{cfg.checkpoint.dir}")
        if self.verbose:
            self.logger.message(f"resolved config:\n{to_yaml(cfg)}")
        if self.demos:
            self.logger.message(
                f"training with {self.demos.describe()}: {cfg.demos.share:.0%} of every batch")
        self.gpu_monitor = GpuMonitor(self.device, cfg.logging.gpu_every_s, self.logger.message)
        if self.checkpoints.remote:
            self.logger.message(
                f"checkpoints for {cfg.checkpoint.dir} are staged in {self.checkpoints.directory}")
        if cfg.training.autocast and not native_bfloat16(self.device):
            self.logger.warning(
                f"training.autocast is on but this {self.device.type.upper()} has no native "
                "bfloat16, so every update is emulated and several times slower; set "
                "training.autocast=false here"
            )
        if cfg.training.compile and not self.compiled:
            self.logger.warning(
                "training.compile is on but no C++ compiler was found (torch.compile needs $CXX, "
                "default g++, on a CPU), so this run trains uncompiled; install g++ or set "
                "training.compile=false"
            )
        if self.compiled:
            compiling.prepare(self.logger.message)

    def make_eval_env(self, heldout: bool = False):
        """(eval env, camera for the videos or None), or (None, None) without evaluation; `heldout`:
        no video."""
        training, logging = self.cfg.training, self.cfg.logging
        if training.eval_every_episodes == 0:
            return None, None
        env, camera = make_eval_env(self.cfg.env, self.cfg.pixels, self.device,
                                    worlds=training.eval_episodes,
                                    processes=min(training.eval_envs, training.eval_episodes),
                                    video_size=logging.video_size if logging.eval_video
                                    and not heldout else None,
                                    heldout=heldout)
        # at once: a failure building the next one closes this one too
        self.opened.callback(env.close)
        if camera is not None:
            self.opened.callback(camera.close)
        return env, camera

    def save(self, final_of_episode: bool) -> Path:
        """`<run>_best.pt` too when a new best evaluation awaits its save (`save_if_best`)."""
        self.check_finite()
        best, self.best_due = self.best_due, False
        start = time.perf_counter()
        state = build_payload(
            config=to_dict(self.cfg), agent_state=self.agent.state_dict(), progress=self.progress,
            trunk=self.trunk.fingerprint if self.trunk else None, demos=self.demos.state_dict()
            if self.demos else None,
            learning_steps=self.learning_steps, wall_s=self.wall_seconds(), rng=self.rng,
            lineage=self.lineage)
        episode = self.progress.episode if final_of_episode else None
        self.saved_step, self.saved_at = self.progress.env_step, time.monotonic()
        if final_of_episode:
            self.saved_episode = self.progress.episode
        saved = self.checkpoints.save(state, self.replay.state_dict(),
                                      env_step=self.progress.env_step,
                                      episode=episode, best=best)
        self.last_saved = (saved.latest, self.progress.episode, self.progress.env_step)
        names = ", ".join(path.name for path in saved.written)
        why = (f"; the best evaluation so far, return {self.progress.best_return:.1f}" if best
               else "")
        self.logger.message(
            f"saved {names} (episode {self.progress.episode}, step {self.progress.env_step}{why}) "
            f"in {time.perf_counter() - start:.1f} s"
        )
        return saved.latest

    def check_finite(self) -> None:
        """A run whose losses, weights or optimiser states went NaN or inf stops before it saves or
        evaluates: a checkpoint of it would never load, and pruning would make room for it by
        deleting good ones."""
        if not self.agent.diverged():
            return
        sac, progress = self.cfg.sac, self.progress
        what = checkpoint_files.non_finite(self.agent.state_dict()) or "a loss"
        if self.last_saved:
            path, episode, step = self.last_saved
            kept = f"the last good checkpoint is {path} (episode {episode}, step {step})"
            then = "continue with --resume auto"
        else:
            kept, then = "no checkpoint of the run was saved before", "start again"
        raise Diverged(
            f"training diverged by step {progress.env_step}: {what} became NaN or inf, and nothing "
            f"of it was saved; {kept}: lower sac.lr (now {sac.lr:g}) or sac.alpha_lr (now "
            f"{sac.alpha_lr:g}), e.g. --set sac.lr={sac.lr / 10:g}, and {then}")

    def wall_seconds(self) -> float:
        start, carried = self.wall_start
        return carried + time.perf_counter() - start

    def restore(self, path: Path, payload: dict, replay_state: dict | None) -> None:
        try:
            self.agent.load_state_dict(payload["agent"])
        except (RuntimeError, KeyError, ValueError) as err:
            raise UserError(
                f"checkpoint {path} does not fit this config's networks "
                f"({str(err).splitlines()[0]}); resume with the config it was trained with"
            ) from None
        if replay_state is not None:
            self.replay.load_state_dict(replay_state)
        torch.set_rng_state(payload["rng"]["torch"])
        if payload["rng"]["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(payload["rng"]["cuda"])
        self.rng.bit_generator.state = payload["rng"]["numpy"]
        # only the fraction of an update it carries matters
        self.learning_steps = payload.get("learning_steps", 0)
        self.logger.message(
            f"resumed from {path}: episode {self.progress.episode}, step {self.progress.env_step}, "
            f"{len(self.replay)} transitions in replay"
        )
        if self.demos:
            self.logger.message(self.demos.load_state_dict(payload.get("demos")))
        changes = saved_config.changed_settings(saved=payload["config"], current=to_dict(self.cfg))
        if changes:
            self.logger.message(f"settings changed since that checkpoint: {', '.join(changes)}")
        saved_profile = payload["config"].get("profile")
        if saved_profile and saved_profile != self.cfg.profile:
            self.logger.message(
                f"the checkpoint trained with profile {saved_profile}; --set "
                f"profile={saved_profile} keeps its settings"
            )

    def observe(self, obs: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """Env observations (N, ...) to what the actor reads and the replay stores: a frozen trunk's
        features, or the observations (numpy from workers, device tensors from MuJoCo Warp)."""
        if self.trunk:
            return self.trunk(obs)
        # a copy: a worker's frames live in shared memory that its next step overwrites
        return obs.copy() if isinstance(obs, np.ndarray) else obs.clone()

    def stored(self, observed: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """What the replay stores of observations `observe` made: those, then the envs' simulator
        states when the critic reads them (`sac.critic_input: state`)."""
        if not self.privileged:
            return observed
        return np.concatenate([observed, self.env.states.astype(FEATURE_DTYPE)], axis=1)

    def seeding(self) -> bool:
        """Still in the seed phase: `training.seed_steps` agent steps of uniform actions and no
        updates."""
        return until(self.cfg.training.seed_steps, self.progress.env_step)

    def act(self, obs: np.ndarray | torch.Tensor) -> np.ndarray:
        """A batch of observations (N, ...) in, (N, A) actions out: uniform during the seed steps,
        then sampled."""
        if self.seeding():
            return self.rng.uniform(-1.0, 1.0, (len(obs), self.action_dim)).astype(np.float32)
        return self.agent.act(obs, sample=True, published=True)

    def learn(self, env_steps: int) -> None:
        """After k agent steps past the seed phase, floor(k * sac.updates_per_step) updates in
        all."""
        sac = self.cfg.sac
        # with training.overlap, the next actions read the policy before these updates
        self.agent.publish()
        if self.seeding() or len(self.replay) < sac.batch_size:
            return
        if self.learning_since is None:
            self.learning_since = (time.perf_counter(), self.progress.env_step)
        due = math.floor(sac.updates_per_step * self.learning_steps)
        self.learning_steps += env_steps
        for _ in range(math.floor(sac.updates_per_step * self.learning_steps) - due):
            if self.stop.requested:  # a spot reclaim leaves 30-120 s: every long loop listens
                return
            try:
                metrics = self.agent.update(self.sample(sac.batch_size))
            except torch.OutOfMemoryError:
                raise out_of_memory(self.device, batch_size=sac.batch_size) from None
            if every(self.cfg.logging.log_every_updates, self.agent.updates):
                self.logger.scalars(metrics | {"replay_size": len(self.replay)},
                                    self.progress.env_step, "train")

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """A batch from the replay, `demos.share` of it from the demonstrations and the steps a
        person took over, when the run has them."""
        return mixed_sample(self.replay, demos=self.demos.store if self.demos else None,
                            batch_size=batch_size, share=self.cfg.demos.share, device=self.device)

    def evaluate(self, env=None) -> tuple[float, float | None, list[np.ndarray]] | None:
        """(mean return, success rate or None, first episode's frames) of the deterministic policy
        over fixed starts; None when a stop signal cuts it short. `env`: the held-out scenes' env,
        no video."""
        if self.eval_env is None:
            raise UserError("this run has no evaluation env (training.eval_every_episodes is 0); "
                            "set it above 0 to evaluate")
        cfg = self.cfg
        filmed = cfg.logging.eval_video and env is None
        env = self.eval_env if env is None else env
        ran = run_episodes(lambda batch: self.agent.act(batch, sample=False), env,
                           observe=self.observe,
                           seed=cfg.training.seed + EVAL_SEED_OFFSET,
                           episodes=cfg.training.eval_episodes,
                           camera=self.eval_camera, film=1 if filmed else 0,
                           video_size=cfg.logging.video_size,
                           max_frames=cfg.logging.video_max_frames,
                           stopped=lambda: self.stop.requested)
        if ran is None:
            return None
        episodes, clip = ran
        success = (float(np.mean([e.success for e in episodes])) if env.terminates_on_success
                   else None)
        return float(np.mean([e.ret for e in episodes])), success, clip

    def train(self) -> int:
        """Train to the end, save, release everything; returns the process exit status: 0, or
        128+signal when a stop signal cut the run short (after saving `_latest`)."""
        cfg, progress = self.cfg, self.progress
        try:
            with self.stop:
                try:
                    self.run()
                except LogWriteError as err:
                    raise self.save_after(err) from None
                if self.stop.requested:
                    path = self.save(final_of_episode=False)
                    self.logger.message(
                        f"stopped by signal {self.stop.signum}; saved {path}; continue with "
                        "--resume auto"
                    )
                    return 128 + self.stop.signum
                if progress.episode != self.saved_episode:
                    self.save(final_of_episode=True)
                self.logger.message(
                    f"done: {progress.episode} episodes, {progress.env_step} steps; checkpoints in "
                    f"{cfg.checkpoint.dir}"
                )
                if cfg.training.auto_shutdown:
                    self.logger.message(
                        f"running training.auto_shutdown: {cfg.training.auto_shutdown}")
        finally:
            self.close()
        if cfg.training.auto_shutdown:
            subprocess.run(cfg.training.auto_shutdown, shell=True, check=False)
        return 0

    def save_after(self, failure: LogWriteError) -> UserError:
        """A log write failed (a full disk): save `_latest` (maybe on another disk) and say what was
        saved."""
        last = self.saved_step
        try:
            path = self.save(final_of_episode=False)
        except checkpoint_files.CheckpointError as err:
            lost = (f"the steps after {last} (the last checkpoint) were not saved" if last
                    else "nothing was saved")
            return UserError(f"{failure}, and the run could not be saved either: {lost}; {err}")
        return UserError(f"{failure}; saved {path} at step {self.progress.env_step}: free space or "
                         "set logging.tensorboard_dir to another disk, then continue with "
                         "--resume auto")

    def run(self, steps: int | None = None) -> None:
        """Act and learn until the run completes, about `steps` more agent steps are taken, or a
        stop arrives."""
        cfg, progress = self.cfg, self.progress
        last = None if steps is None else progress.env_step + steps
        # an evaluation a stop signal cut short; saved as done, else a finished run keeps it due for
        # good
        if self.evaluate_if_due():
            self.save(final_of_episode=False)
        if self.complete():
            return
        while until(last, progress.env_step) and not self.stop.requested:
            before = progress.env_step
            action, obs, reward, terminated, truncated = self.env.step(self.act, self.observe)
            action, reward, terminated, truncated = (to_host(x)
                                                     for x in (action, reward, terminated,
                                                               truncated))
            # an env returning its reset frame ignored its action: no agent step
            stepped = ~self.first
            driven = self.env.driven & stepped if self.takeover else np.zeros_like(stepped)
            self.replay.add_batch(self.stored(obs), action, reward, terminated, self.first,
                                  intervened=driven)
            progress.env_step += int(stepped.sum())
            progress.intervened += int(driven.sum())
            self.returns += np.where(stepped, reward, 0.0)
            self.lengths += stepped
            self.driven_steps += driven
            self.learn(int(stepped.sum()))
            self.first = stepped & (terminated | truncated)
            complete = (self.end_episodes(np.flatnonzero(self.first), terminated)
                        if self.first.any() else False)
            # after the episodes' bookkeeping: a checkpoint at a step holds everything logged at
            # that step
            if crossed(cfg.checkpoint.every_steps, before,
                       progress.env_step) and self.saved_step != progress.env_step:
                self.save(final_of_episode=False)
            if complete:
                return

    def complete(self) -> bool:
        """`training.episodes` done, or `training.max_env_steps` reached: asked at the start and at
        episode ends."""
        training = self.cfg.training
        return self.progress.episode >= training.episodes or not until(training.max_env_steps,
                                                                       self.progress.env_step)

    def start_episodes(self) -> None:
        """Reset the envs and store their first frames. Env i starts from `training.seed + first +
        i`, `first` past every seed an earlier start gave out (`progress.next_seed`), so no env
        repeats another's start states."""
        n, progress = self.num_envs, self.progress
        first = max(progress.episode, progress.next_seed)
        obs = self.observe(self.env.reset(seed=self.cfg.training.seed + first))
        if n > 1:
            progress.next_seed = first + n
        self.replay.add_resets(self.stored(obs))
        # envs whose next frame is a reset frame (NEXT_STEP autoreset)
        self.first = np.zeros(n, dtype=bool)
        self.returns, self.lengths = np.zeros(n), np.zeros(n, dtype=int)
        self.driven_steps = np.zeros(n, dtype=int)  # of each env's episode, by a person
        self.clock = (time.perf_counter(), self.progress.env_step, self.agent.updates)

    def end_episodes(self, ended: np.ndarray, terminated: np.ndarray) -> bool:
        """Log and count the episodes `ended`, then evaluate and save if due; returns whether the
        run is complete. `terminated`: of every env, whether its episode ended in the task's own end
        (a success, where it has one)."""
        cfg, progress = self.cfg, self.progress
        start, step, updates = self.clock
        seconds = time.perf_counter() - start
        rates = {"env_steps_per_s": (progress.env_step - step) / seconds,
                 "updates_per_s": (self.agent.updates - updates) / seconds}
        before = progress.episode
        for i in ended:
            episode = {"episode_return": float(self.returns[i]),
                       "episode_length": int(self.lengths[i])}
            if self.takeover:
                episode["intervened_share"] = self.driven_steps[i] / max(self.lengths[i], 1)
            progress.episode += 1
            self.logger.episode(episode | rates, step=progress.env_step, episode=progress.episode,
                                eta_s=self.eta(),
                                frames=progress.env_step * cfg.env.action_repeat,
                                wall_s=self.wall_seconds(),
                                success=bool(terminated[i]) if self.env.terminates_on_success
                                else None)
            self.returns[i], self.lengths[i], self.driven_steps[i] = 0.0, 0, 0
            if self.complete():
                break
        self.logger.scalars(self.gpu_monitor.poll(), progress.env_step, "gpu")
        self.clock = (time.perf_counter(), progress.env_step, self.agent.updates)
        self.check_finite()  # before an evaluation of NaN actions
        progress.evaluation_due |= crossed(cfg.training.eval_every_episodes, before,
                                           progress.episode)
        self.evaluate_if_due()
        complete = self.complete()
        if crossed(cfg.checkpoint.every_episodes, before, progress.episode):
            self.save(final_of_episode=True)
        # at an episode end, so a resume is exact; the run's end saves anyway
        elif (self.best_due
              or overdue(cfg.checkpoint.every_minutes, self.saved_at)) and not complete:
            self.save(final_of_episode=False)
        return complete

    def eta(self) -> float | None:
        """Seconds to the run's end at the speed since updates began, evaluations and saves
        included; None before (the seed steps, with no updates, run many times faster)."""
        if self.learning_since is None or self.progress.env_step == self.learning_since[1]:
            return None
        start, step = self.learning_since
        training, progress = self.cfg.training, self.progress
        steps_left = ((training.episodes - progress.episode) * progress.env_step
                      / max(progress.episode, 1))
        if training.max_env_steps is not None:
            steps_left = min(steps_left, training.max_env_steps - progress.env_step)
        return max(steps_left, 0) * (time.perf_counter() - start) / (progress.env_step - step)

    def evaluate_if_due(self) -> bool:
        """Evaluate and log, if due; returns whether one ran. A stop signal leaves it due, in the
        checkpoint too."""
        progress = self.progress
        evaluation = (self.evaluate() if progress.evaluation_due and self.eval_env is not None
                      else None)
        held_out = self.heldout_env is not None
        heldout = self.evaluate(self.heldout_env) if evaluation and held_out else None
        if evaluation is None or held_out and heldout is None:  # both, or neither: it stays due
            return False
        frames = progress.env_step * self.cfg.env.action_repeat
        steps = progress.env_step - progress.step_at_eval
        intervened = ((progress.intervened - progress.intervened_at_eval) / max(steps, 1)
                      if self.takeover else None)
        if heldout:  # first: eval.csv's row, written last, says the evaluation was logged whole
            self.logger.evaluation(*heldout[:2], step=progress.env_step, frames=frames,
                                   episode=progress.episode,
                                   wall_s=self.wall_seconds(), clip=[], split="eval_heldout")
        self.logger.evaluation(*evaluation[:2], step=progress.env_step, frames=frames,
                               episode=progress.episode,
                               wall_s=self.wall_seconds(), clip=evaluation[2],
                               intervened=intervened)
        # after logging it: a save after a failed log write runs it again on resume
        progress.evaluation_due = False
        progress.intervened_at_eval, progress.step_at_eval = progress.intervened, progress.env_step
        self.save_if_best(evaluation[0])
        return True

    def save_if_best(self, mean_return: float) -> None:
        """An evaluation that beats the best so far (a tie keeps the earlier) makes the next save,
        due at this episode end, write `<run>_best.pt` too: one save, whether or not another was due
        here anyway."""
        best = self.progress.best_return
        # a checkpoint holds no inf
        if not math.isfinite(mean_return) or best is not None and mean_return <= best:
            return
        self.progress.best_return = mean_return
        self.best_due = True

    def close(self) -> None:
        """Flush logs, release the renderers and env workers, wait for pending uploads, then release
        the run's lock."""
        self.opened.close()
