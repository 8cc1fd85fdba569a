"""The run's config: the sections composed into `Config` (each layer declares its own), and
`load_config`, which resolves a file, its profile and `--set` overrides; how a file resolves:
docs/configs.md. Shell scripts read resolved values as the trainer does: python3 -m trainer.config
(trainer/config/__main__.py)"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from encoders.config import EncoderConfig
from envs.config import MAX_WORKERS, EnvConfig
from errors import UserError
from sac.config import SACConfig
from settings import MILLION, check_settings, setting
from trainer.config.checks import check_outside, validate
from trainer.config.yaml_files import parse_set, read_config

PROFILES = ("cpu", "cpu_bf16", "gpu")
# what `profile: auto` means on this machine, for every config (a test suite that must not depend on
# the CPU)
AUTO_PROFILE_VARIABLE = "PIXEL_SAC_PROFILE"
# eval episode i starts from training.seed + EVAL_SEED_OFFSET + i: no training start reaches it
# within 2**30 episodes, and it stays below 2**32, the bound of dm_control's numpy RandomState
SEED_LIMIT = 2**30
EVAL_SEED_OFFSET = 2 * SEED_LIMIT
DEVICES = ("auto", "cpu", "cuda")

# what each key means: docs/configs.md#where-each-key-is-described


@dataclass
class ReplayConfig:
    device: str = setting("auto", choices=DEVICES)


@dataclass
class LeRobotKeys:
    # a LeRobot dataset's features read as the task's (envs/lerobot_format.py)
    camera: str | None = setting(None, note="null = the dataset's only camera")
    state: str | None = setting("observation.state",
                                note="null = none: a camera-only dataset, for pixel runs")
    action: str = "action"
    reward: str = "next.reward"
    done: str = "next.done"


@dataclass
class DemosConfig:
    path: str | None = setting(
        None, note="null = no demonstrations; a Minari or LeRobot folder, or hf://datasets/<id>")
    share: float = setting(0.5, ge=0, lt=1)
    lerobot: LeRobotKeys = field(default_factory=LeRobotKeys)
    # a person takes env 0 over with this device while the run learns (trainer/run/takeover.py)
    takeover: str | None = setting(None, choices=("keyboard", "gamepad"),
                                   note="null = no take-over")


@dataclass
class TrainingConfig:
    episodes: int = setting(1000, ge=1, le=10 * MILLION)
    max_env_steps: int | None = setting(None, ge=1, le=10**12, note="null = episodes only")
    seed: int = setting(1, ge=0, lt=SEED_LIMIT)
    seed_steps: int = setting(1000, ge=0, le=10**9)
    eval_every_episodes: int = setting(10, ge=0, le=10 * MILLION, note="0 = no evaluation")
    eval_episodes: int = setting(5, ge=1, le=10_000)
    # processes an evaluation's episodes are spread over
    eval_envs: int = setting(1, ge=1, le=MAX_WORKERS)
    device: str = setting("auto", choices=DEVICES)
    auto_shutdown: str | None = setting(None, note="null = none")
    compile: bool = False
    autocast: bool = False
    cudnn_benchmark: bool = False
    cuda_graph: bool = True
    # the envs act with the policy of before the update in flight, one batch a step (sac/published)
    overlap: bool = False


@dataclass
class CheckpointConfig:
    dir: str = "checkpoints"
    local_dir: str | None = setting(None, note="null = a staging folder unique to the URL and run")
    name: str | None = setting(None, note="null = sac_<encoder.type>")
    every_episodes: int = setting(100, ge=1, le=10 * MILLION)
    every_steps: int = setting(0, ge=0, le=10**12, note="0 = off")
    # `_latest` at the first episode end this long after the last save (long episodes: every_steps)
    every_minutes: float = setting(10.0, ge=0, le=MILLION, note="0 = off")
    keep_last: int = setting(0, ge=0, le=MILLION, note="0 = keep all")
    keep_replays: int = setting(1, ge=1, le=1000)
    upload_retries: int = setting(5, ge=1, le=1000)
    upload_backoff_s: float = setting(2.0, ge=0, le=3600)
    upload_timeout_s: float = setting(60.0, ge=0, le=7 * 86400)


@dataclass
class LoggingConfig:
    tensorboard: bool = True
    tensorboard_dir: str = "runs"
    log_every_updates: int = setting(100, ge=1, le=10**9)
    progress: bool = True
    eval_video: bool = True
    video_size: int = setting(128, ge=16, le=2048)
    video_max_frames: int = setting(300, ge=1, le=100_000)
    curve: bool = True
    gpu_every_s: float = setting(30.0, gt=0, le=86400)
    wandb: bool = False
    wandb_project: str = "pixel-sac"


@dataclass
class Config:
    profile: str = setting("auto", choices=("auto", *PROFILES))
    profiles: dict = field(default_factory=dict)
    env: EnvConfig = field(default_factory=EnvConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    sac: SACConfig = field(default_factory=SACConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    demos: DemosConfig = field(default_factory=DemosConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    @property
    def run_name(self) -> str:
        return self.checkpoint.name or f"sac_{self.encoder.type}"

    @property
    def pixels(self) -> bool:
        return self.encoder.type == "video"

    @property
    def replay_stack(self) -> int | None:
        """The frame stack the replay stores, or None for one entry a slot (states, a frozen trunk's
        features)."""
        return self.env.frame_stack if self.pixels and not self.encoder.video.freeze else None


def load_config(path: str | Path, overrides: list[str] = ()) -> Config:
    """Read a YAML config, apply the profile and `--set` overrides, validate, return the resolved
    config."""
    if not str(path):
        raise UserError("--config is empty; pass a YAML file, e.g. --config configs/default.yaml")
    raw = read_config(Path(path))
    sets = [parse_set(item) for item in overrides]
    profiles = raw.get("profiles") or {}
    _check_profiles(profiles)
    if profiles:  # one order, whichever base brought which block: the printed config reads the same
        raw["profiles"] = profiles = {name: profiles[name] for name in PROFILES if name in profiles}

    cfg = Config()
    _apply(cfg, raw)
    for override in sets:
        _apply(cfg, override)
    # single keys now, so a bad value fails before choosing a profile imports torch; validate checks
    # all again
    check_settings(cfg)
    check_outside(cfg)
    named = cfg.profile != "auto"
    cfg.profile = _choose_profile(cfg.profile, profiles)
    # else the run would name one profile and train another's settings
    if named and profiles and cfg.profile not in profiles:
        raise UserError(
            f"profile {cfg.profile} has no profiles.{cfg.profile} block in {path}; "
            f"use auto or one of {', '.join(profiles)}"
        )
    _apply(cfg, profiles.get(cfg.profile, {}))
    for override in sets:  # --set always has the last word
        _apply(cfg, override)
    cfg.profile = _choose_profile(cfg.profile, profiles)
    validate(cfg)
    return cfg


def config_from_dict(data: dict) -> Config:
    """Rebuild a resolved config (as saved in a checkpoint) without re-applying profiles."""
    cfg = Config()
    _apply(cfg, data)
    return cfg


def with_overrides(cfg: Config, overrides: list[str]) -> Config:
    """A resolved config (as saved in a checkpoint) with `key=value` overrides applied and checked,
    as --set does."""
    for item in overrides:
        _apply(cfg, parse_set(item))
    if overrides:
        validate(cfg)
    return cfg


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def _check_profiles(profiles) -> None:
    if not isinstance(profiles, dict):
        raise UserError(f"profiles must be a mapping with keys among {', '.join(PROFILES)}")
    for name, block in profiles.items():
        if name not in PROFILES:
            raise UserError(
                f"unknown profile {f'profiles.{name}'!r}; allowed: {', '.join(PROFILES)}")
        if not isinstance(block, dict):
            raise UserError(f"profiles.{name} must be a mapping of config keys")
        if "profile" in block or "profiles" in block:
            raise UserError(f"profiles.{name} cannot set profile or profiles")
        # validate now, even if this profile is not chosen
        check_settings(_apply(Config(), block, prefix=f"profiles.{name}."),
                       prefix=f"profiles.{name}.")


def _choose_profile(profile: str, profiles: dict) -> str:
    """`auto`: $PIXEL_SAC_PROFILE where set; else gpu with CUDA; else cpu_bf16 where the config has
    one and the CPU has native bfloat16 and a compiler; else cpu."""
    if profile == "auto" and os.environ.get(AUTO_PROFILE_VARIABLE):
        profile = os.environ[AUTO_PROFILE_VARIABLE]
        if profile not in PROFILES:
            raise UserError(
                f"{AUTO_PROFILE_VARIABLE} must be one of {', '.join(PROFILES)}; got '{profile}'")
        return profile
    if profile == "auto":
        # only here: reading and checking a config loads no torch (python3 -m trainer.config)
        import torch

        from trainer.process.device import can_compile, native_bfloat16

        cpu = torch.device("cpu")
        if torch.cuda.is_available():
            return "gpu"
        return ("cpu_bf16" if "cpu_bf16" in profiles and native_bfloat16(cpu) and can_compile(cpu)
                else "cpu")
    if profile not in PROFILES:
        raise UserError(f"profile must be one of auto, {', '.join(PROFILES)}; got '{profile}'")
    return profile


def _apply(target, data: dict, prefix: str = ""):
    hints = typing.get_type_hints(type(target))
    names = [f.name for f in dataclasses.fields(target)]
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in names:
            raise UserError(
                f"unknown config key {path!r}; allowed under '{prefix or '<top>'}': "
                f"{', '.join(names)}")
        current = getattr(target, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise UserError(
                    f"config key '{path}' must be a mapping "
                    f"(sub-keys: {', '.join(f.name for f in dataclasses.fields(current))})"
                )
            _apply(current, value, prefix=f"{path}.")
        else:
            setattr(target, key, _coerce(path, value, hints[key]))
    return target


def _coerce(path: str, value, hint):
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    allowed = typing.get_args(hint) if union else (hint,)
    for kind in allowed:
        if kind is type(None) and value is None:
            return None
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind in (str, dict) and isinstance(value, kind):
            return value
    names = " or ".join("null" if k is type(None) else k.__name__ for k in allowed)
    raise UserError(f"config key '{path}' must be {names}, got {value!r} ({type(value).__name__})")

