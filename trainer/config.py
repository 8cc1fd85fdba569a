"""Run configuration: every default lives in the dataclasses below.

Resolution order: dataclass defaults <- YAML file <- the chosen `profiles.<cpu|cpu_bf16|gpu>` block <- `--set key=value`.
Every key and type is checked against the dataclasses, so a typo is an error, never a silently ignored setting.

Shell scripts read resolved values the same way the trainer does (`scripts/tmux_train.sh` names its session and log):
    python3 -m trainer.config CONFIG [--set key=value ...] --print run_name --print logging.tensorboard_dir
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from errors import UserError

PROFILES = ("cpu", "cpu_bf16", "gpu")
ENCODER_TYPES = ("video", "state")
VIDEO_ARCHS = ("simple2dcnn", "simple3dcnn", "r3d18", "timesformer")  # encoders.ARCHS: tests/test_config.py holds them equal
# the parameters that low layers name in their messages (in backticks, see errors.py) -> the config keys that set them
PARAMETER_KEYS = {
    "env_id": "env.id", "camera": "env.camera", "backend": "env.backend", "num_envs": "env.num_envs", "capacity": "sac.buffer_size",
    "arch": "encoder.video.arch", "pretrained": "encoder.video.pretrained", "weights": "encoder.video.weights",
    "preset": "encoder.video.preset", "input_size": "encoder.video.input_size",
}


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads `3e-4` as a string; learning rates are written that way, so read it as a float."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"), list("-+0123456789.")
)


@dataclass
class EnvConfig:
    id: str = "dm_control/cartpole-swingup-v0"
    image_size: int = 84
    camera: str | int | None = None  # name or index; None = the task's default view
    frame_stack: int = 3
    action_repeat: int = 1
    max_episode_steps: int | None = None  # agent steps (after action repeat); None = the task's own limit
    render_shadow_size: int = 512  # MuJoCo's default 4096 costs ~7x in software rendering
    render_offsamples: int = 0  # multisample anti-aliasing samples; 0 is fastest
    num_envs: int = 1  # parallel env worker processes (frames through shared memory); resume is exact only for 1
    # mujoco: Gymnasium/dm_control envs rendered by OpenGL (num_envs worker processes); mujoco_warp: num_envs worlds
    # stepped and ray-traced together by MuJoCo Warp on the training device (requirements-warp.txt; docs/warp.md)
    backend: str = "mujoco"


@dataclass
class VideoEncoderConfig:
    arch: str = "simple2dcnn"  # simple2dcnn | simple3dcnn | r3d18 | timesformer
    pretrained: bool = False  # Kinetics-400 weights (r3d18; timesformer with preset base), read offline
    weights: str | None = None  # where the pretrained weights are: r3d18 a .pth file, timesformer a checkpoint directory; None = the default cache
    freeze: bool = False  # no gradients, BatchNorm in eval mode, features under no_grad: for pretrained trunks
    input_size: int | None = None  # resize frames to this many pixels square on the device; None = as rendered
    preset: str = "small"  # timesformer size: tiny | small (from scratch, 84 px) | base (the public checkpoint's)
    num_filters: int = 32  # simple2dcnn, simple3dcnn
    num_layers: int = 4  # simple2dcnn, simple3dcnn
    channels_last: bool = False  # channels-last memory for the conv archs: faster convolutions on GPUs


@dataclass
class EncoderConfig:
    type: str = "video"  # video | state
    lr: float | None = None  # the video encoder's own learning rate (e.g. lower for a pretrained trunk); None = sac.lr
    video: VideoEncoderConfig = field(default_factory=VideoEncoderConfig)


@dataclass
class SACConfig:
    batch_size: int = 256
    buffer_size: int = 100_000
    lr: float = 1e-3
    alpha_lr: float = 1e-3
    # the temperature's Adam beta1: torch's default 0.9, as DrQ (lr 1e-3, default betas); SAC-AE's 0.5 goes with its
    # alpha_lr 1e-4. The key stays so that configs saved with it still load.
    alpha_beta: float = 0.9
    discount: float = 0.99
    nstep: int = 1  # steps summed per target (1 = DrQ, SAC); 3 as DrQ-v2 propagates reward faster, with some bias
    critic_tau: float = 0.01
    init_temperature: float = 0.1
    actor_update_every: int = 2
    target_update_every: int = 2
    hidden_dim: int = 1024
    hidden_depth: int = 2
    feature_dim: int = 50
    log_std_min: float = -10.0
    log_std_max: float = 2.0
    augment_pad: int = 4  # random-shift pixels; 0 disables augmentation
    # shifted copies of each sample (DrQ's K = M): the target averages over the copies of next_obs, the critic loss
    # sums over the copies of obs. The published DrQ results use 2; each copy costs a full set of encoder passes.
    augment_samples: int = 1
    updates_per_step: int = 1
    # the target critic keeps its own slowly moving encoder copy (DrQ); false: its heads read the online encoder's
    # next_obs features (DrQ-v2), one encoder pass fewer per update. A frozen encoder never gets a copy.
    target_encoder: bool = True


@dataclass
class ReplayConfig:
    device: str = "auto"  # where replay frames live: auto (the training device when they fit there) | cpu | cuda


@dataclass
class TrainingConfig:
    episodes: int = 1000
    max_env_steps: int | None = None  # stop early after this many agent steps; None = episodes only
    seed: int = 1
    seed_steps: int = 1000  # uniform random actions before the policy acts and updates start
    eval_every_episodes: int = 10
    eval_episodes: int = 5
    device: str = "auto"  # auto | cpu | cuda
    auto_shutdown: str | None = None  # shell command run when training completes (not on a signal), e.g. a VM stop
    compile: bool = False  # torch.compile the encoder and critics (tens of seconds to minutes at start; for long runs)
    autocast: bool = False  # bfloat16 autocast for the encoder passes (GPUs from Ampere on, CPUs with AMX)


@dataclass
class CheckpointConfig:
    dir: str = "checkpoints"  # a folder (a mounted bucket works), or an fsspec URL such as s3://bucket/prefix
    local_dir: str = "checkpoints"  # where files are written first when `dir` is a URL, then uploaded
    name: str | None = None  # file prefix; None = sac_<encoder.type>
    every_episodes: int = 100
    every_steps: int = 0  # also replace _latest every this many agent steps; 0 = off
    keep_last: int = 0  # _ep<N> files kept, newest first; 0 = keep all
    keep_replays: int = 1  # replay sidecars kept (newest first); each is the size of the buffer
    upload_retries: int = 5
    upload_backoff_s: float = 2.0  # first retry delay; doubles each retry
    upload_timeout_s: float = 60.0  # how long the run waits at exit for pending uploads


@dataclass
class LoggingConfig:
    tensorboard: bool = True
    tensorboard_dir: str = "runs"
    log_every_updates: int = 100  # losses are read back from the device only this often
    progress: bool = True
    eval_video: bool = True  # a GIF of the first eval episode per evaluation, in <run>/videos/
    video_size: int = 128  # pixels of the eval GIF (independent of what the encoder sees)
    video_max_frames: int = 300
    curve: bool = True  # redraw <run>/curve.png (eval return vs frames) after each evaluation
    gpu_every_s: float = 30.0  # GPU utilisation/memory to TensorBoard at most this often (NVML)
    wandb: bool = False  # also log to Weights & Biases (WANDB_MODE=offline works without an account)
    wandb_project: str = "pixel-sac"


@dataclass
class Config:
    profile: str = "auto"  # auto | cpu | cpu_bf16 | gpu: see _choose_profile
    profiles: dict = field(default_factory=dict)
    env: EnvConfig = field(default_factory=EnvConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    sac: SACConfig = field(default_factory=SACConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    @property
    def run_name(self) -> str:
        return self.checkpoint.name or f"sac_{self.encoder.type}"

    @property
    def pixels(self) -> bool:
        """Whether the envs render camera frames (a video encoder) rather than return state vectors."""
        return self.encoder.type == "video"


def load_config(path: str | Path, overrides: list[str] = ()) -> Config:
    """Read a YAML config, apply the profile and `--set` overrides, validate, return the resolved config."""
    raw = _read_yaml(path)
    sets = [_parse_set(item) for item in overrides]
    profiles = raw.get("profiles") or {}
    _check_profiles(profiles)

    cfg = Config()
    _apply(cfg, raw)
    for override in sets:
        _apply(cfg, override)
    named = cfg.profile != "auto"
    cfg.profile = _choose_profile(cfg.profile, profiles)
    if named and profiles and cfg.profile not in profiles:  # else the run would name one profile and train another's settings
        raise UserError(f"profile {cfg.profile} has no profiles.{cfg.profile} block in {path}; use auto or one of {', '.join(profiles)}")
    _apply(cfg, profiles.get(cfg.profile, {}))
    for override in sets:  # --set always has the last word
        _apply(cfg, override)
    cfg.profile = _choose_profile(cfg.profile, profiles)
    _validate(cfg)
    return cfg


def explain(err: UserError) -> str:
    """The error's message with config keys in place of the parameters low layers name in backticks."""
    return re.sub(r"`(\w+)`", lambda m: PARAMETER_KEYS.get(m.group(1), m.group(0)), str(err))


def config_from_dict(data: dict) -> Config:
    """Rebuild a resolved config (as saved in a checkpoint) without re-applying profiles."""
    cfg = Config()
    _apply(cfg, data)
    return cfg


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def _read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file not found: {path}; pass an existing file, e.g. --config configs/default.yaml")
    try:
        data = yaml.load(path.read_text(), Loader=_Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"cannot parse {path}{where}: {getattr(err, 'problem', err)}; fix the YAML syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a mapping of config keys, got {type(data).__name__}")
    return data


def _parse_set(item: str) -> dict:
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise UserError(f"--set expects key=value (e.g. --set sac.batch_size=128), got '{item}'")
    try:
        value = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError:
        value = text
    nested: dict = {}
    node = nested
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return nested


def _check_profiles(profiles) -> None:
    if not isinstance(profiles, dict):
        raise UserError(f"profiles must be a mapping with keys among {', '.join(PROFILES)}")
    for name, block in profiles.items():
        if name not in PROFILES:
            raise UserError(f"unknown profile 'profiles.{name}'; allowed: {', '.join(PROFILES)}")
        if not isinstance(block, dict):
            raise UserError(f"profiles.{name} must be a mapping of config keys")
        if "profile" in block or "profiles" in block:
            raise UserError(f"profiles.{name} cannot set profile or profiles")
        _apply(Config(), block, prefix=f"profiles.{name}.")  # validate now, even if this profile is not chosen


def _choose_profile(profile: str, profiles: dict) -> str:
    """`auto`: gpu where CUDA is available; else cpu_bf16 where the config has one, the CPU computes bfloat16
    natively (AMX, AVX-512 BF16) and torch.compile can build kernels, because there it buys twice the batch for the
    same time per update; else cpu."""
    if profile == "auto":
        import torch

        from trainer.device import can_compile, native_bfloat16

        cpu = torch.device("cpu")
        if torch.cuda.is_available():
            return "gpu"
        return "cpu_bf16" if "cpu_bf16" in profiles and native_bfloat16(cpu) and can_compile(cpu) else "cpu"
    if profile not in PROFILES:
        raise UserError(f"profile must be one of auto, {', '.join(PROFILES)}; got '{profile}'")
    return profile


def _apply(target, data: dict, prefix: str = "") -> None:
    hints = typing.get_type_hints(type(target))
    names = [f.name for f in dataclasses.fields(target)]
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in names:
            raise UserError(f"unknown config key '{path}'; allowed under '{prefix or '<top>'}': {', '.join(names)}")
        current = getattr(target, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise UserError(f"config key '{path}' must be a mapping (sub-keys: {', '.join(f.name for f in dataclasses.fields(current))})")
            _apply(current, value, prefix=f"{path}.")
        else:
            setattr(target, key, _coerce(path, value, hints[key]))


def _coerce(path: str, value, hint):
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union else (hint,)
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


def _validate(cfg: Config) -> None:
    if cfg.encoder.type not in ENCODER_TYPES:
        raise UserError(f"encoder.type must be one of {', '.join(ENCODER_TYPES)}; got '{cfg.encoder.type}'")
    video = cfg.encoder.video
    if video.arch not in VIDEO_ARCHS:
        raise UserError(f"unknown encoder.video.arch '{video.arch}'; allowed: {', '.join(VIDEO_ARCHS)}")
    if video.weights is not None and not video.pretrained:
        raise UserError("encoder.video.weights is set but encoder.video.pretrained is false; set encoder.video.pretrained=true to load it")
    if video.input_size is not None and video.input_size < 32:
        raise UserError(f"encoder.video.input_size must be >= 32 or null (frames as rendered), got {video.input_size}")
    if cfg.encoder.lr is not None and (cfg.encoder.lr <= 0 or cfg.encoder.type != "video"):
        raise UserError(f"encoder.lr must be > 0 and applies to video encoders only; got {cfg.encoder.lr} with encoder.type {cfg.encoder.type}")
    for key, value in (("training.device", cfg.training.device), ("replay.device", cfg.replay.device)):
        if value not in ("auto", "cpu", "cuda"):
            raise UserError(f"{key} must be auto, cpu or cuda; got '{value}'")
    positive = {
        "env.image_size": cfg.env.image_size,
        "env.frame_stack": cfg.env.frame_stack,
        "env.action_repeat": cfg.env.action_repeat,
        "env.num_envs": cfg.env.num_envs,
        "sac.batch_size": cfg.sac.batch_size,
        "sac.hidden_dim": cfg.sac.hidden_dim,
        "sac.feature_dim": cfg.sac.feature_dim,
        "sac.actor_update_every": cfg.sac.actor_update_every,
        "sac.target_update_every": cfg.sac.target_update_every,
        "sac.augment_samples": cfg.sac.augment_samples,
        "sac.nstep": cfg.sac.nstep,
        "training.episodes": cfg.training.episodes,
        "checkpoint.every_episodes": cfg.checkpoint.every_episodes,
        "checkpoint.keep_replays": cfg.checkpoint.keep_replays,
        "logging.log_every_updates": cfg.logging.log_every_updates,
    }
    for key, value in positive.items():
        if value < 1:
            raise UserError(f"config key '{key}' must be >= 1, got {value}")
    if cfg.env.image_size < 32:
        raise UserError(f"env.image_size must be >= 32 (84 default, 64 for speed), got {cfg.env.image_size}")
    if cfg.sac.buffer_size // cfg.env.num_envs <= cfg.env.frame_stack + 1:
        raise UserError(f"sac.buffer_size must exceed env.num_envs * (env.frame_stack + 1) (a ring per env), got {cfg.sac.buffer_size}")
    for key in ("every_steps", "keep_last"):
        if getattr(cfg.checkpoint, key) < 0:
            raise UserError(f"config key 'checkpoint.{key}' must be >= 0 (0 = off), got {getattr(cfg.checkpoint, key)}")
    if cfg.checkpoint.upload_retries < 1:
        raise UserError(f"config key 'checkpoint.upload_retries' must be >= 1, got {cfg.checkpoint.upload_retries}")
    if cfg.sac.augment_samples > 1 and (cfg.encoder.type != "video" or cfg.sac.augment_pad == 0):
        raise UserError("sac.augment_samples > 1 needs a video encoder and sac.augment_pad > 0 (unshifted copies would be identical); set sac.augment_samples=1")
    if not 0 < cfg.sac.critic_tau <= 1 or not 0 <= cfg.sac.discount <= 1:
        raise UserError("sac.critic_tau must be in (0, 1] and sac.discount in [0, 1]")


def main(argv: list[str] | None = None) -> int:
    """Print resolved config values, one per line; a bad config or key is the trainer's one-line error, exit 2."""
    parser = argparse.ArgumentParser(prog="python3 -m trainer.config", description=main.__doc__)
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)")
    parser.add_argument("--print", action="append", required=True, dest="keys", metavar="KEY",
                        help="dotted key (logging.tensorboard_dir) or run_name (repeatable)")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.set)
        values = [_resolved(cfg, key) for key in args.keys]
    except UserError as err:
        print(f"error: {explain(err)}", file=sys.stderr)
        return 2
    print("\n".join(str(value) for value in values))
    return 0


def _resolved(cfg: Config, key: str):
    try:
        return functools.reduce(getattr, key.split("."), cfg)
    except AttributeError:
        raise UserError(f"unknown config key '{key}'; pass a dotted key such as logging.tensorboard_dir, or run_name") from None


if __name__ == "__main__":
    sys.exit(main())
