"""Run configuration: every default lives in the dataclasses below; how a file resolves and which values each key
takes: docs/configs.md. Shell scripts read resolved values as the trainer does:
    python3 -m trainer.config CONFIG [--set key=value ...] --print run_name --print logging.tensorboard_dir
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from errors import UserError, check_writable_folder
from sac.ring import min_ring_slots

PROFILES = ("cpu", "cpu_bf16", "gpu")
ENCODER_TYPES = ("video", "state")
BACKENDS = ("mujoco", "mujoco_warp")
MAX_WORKERS = 256  # env.num_envs with the backend mujoco: a process and a renderer each
MAX_WORLDS = 65536
# encoders.ARCHS: tests/test_config.py holds them equal
VIDEO_ARCHS = ("simple2dcnn", "simple3dcnn", "r3d18", "timesformer")
# the parameters that low layers name in their messages (in backticks, see errors.py) -> the config keys that set them
PARAMETER_KEYS = {
    "env_id": "env.id", "camera": "env.camera", "backend": "env.backend", "num_envs": "env.num_envs",
    "warp_processes": "env.warp_processes",
    "parts": "env.randomize.parts", "light_tilt_deg": "env.randomize.light_tilt_deg",
    "camera_pos": "env.randomize.camera_pos", "camera_rot_deg": "env.randomize.camera_rot_deg",
    "camera_fov_deg": "env.randomize.camera_fov_deg",
    "capacity": "sac.buffer_size",
    "arch": "encoder.video.arch", "pretrained": "encoder.video.pretrained", "weights": "encoder.video.weights",
    "preset": "encoder.video.preset", "input_size": "encoder.video.input_size", "freeze": "encoder.video.freeze",
}


class _Loader(yaml.SafeLoader):
    """Reads `3e-4` as a float (YAML 1.1: a string); a key twice in one mapping is an error (PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, typing.Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key}' (first at line {seen[key].line + 1})", key_node.start_mark)
            if isinstance(key, typing.Hashable):
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"), list("-+0123456789.")
)


def setting(default, *, ge=None, gt=None, le=None, lt=None, choices=None, note: str = ""):
    """A config key's default and its valid values: numbers a range (ge/gt, le/lt), strings choices or else any
    non-empty printable text."""
    return field(default=default, metadata={"ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices, "note": note})


MILLION = 10**6
# eval episode i starts from training.seed + EVAL_SEED_OFFSET + i: no training start reaches it within 2**30
# episodes, and it stays below 2**32, the bound of dm_control's numpy RandomState
SEED_LIMIT = 2**30
EVAL_SEED_OFFSET = 2 * SEED_LIMIT
DEVICES = ("auto", "cpu", "cuda")


def frame_settings(backend: str) -> tuple[str, ...]:
    """The `env` settings that frames depend on beyond their size, for `env.backend` = `backend`."""
    return ("camera", "backend", *(("warp_shadows", "warp_skybox") if backend == "mujoco_warp" else ()))


def frames_of(env) -> dict:
    return {key: getattr(env, key) for key in frame_settings(env.backend)}


# what each key means: docs/configs.md#where-each-key-is-described


@dataclass
class RandomizeConfig:
    # ranges of the scene drawn per episode: docs/dishwashing.md#visual-domain-randomisation
    enabled: bool = False
    parts: str = "all"
    color: float = setting(0.2, ge=0, le=1)
    light_tilt_deg: float = setting(20.0, ge=0, le=90)
    light_intensity: float = setting(0.3, ge=0, le=1)
    ambient: float = setting(0.15, ge=0, le=1)
    camera_pos: float = setting(0.02, ge=0, le=1)
    camera_rot_deg: float = setting(2.0, ge=0, le=45)
    camera_fov_deg: float = setting(2.0, ge=0, le=45)
    heldout: bool = False
    heldout_scale: float = setting(1.0, ge=1, le=10)


@dataclass
class EnvConfig:
    id: str = "dm_control/cartpole-swingup-v0"
    image_size: int = setting(84, ge=32, le=1024)
    camera: str | int | None = setting(None, ge=-1, le=1000)
    frame_stack: int = setting(3, ge=1, le=64)
    action_repeat: int = setting(1, ge=1, le=1000)
    max_episode_steps: int | None = setting(None, ge=1, le=MILLION, note="null = the task's own limit")
    render_shadow_size: int = setting(512, ge=1, le=16384)
    render_offsamples: int = setting(0, ge=0, le=16)
    num_envs: int = setting(1, ge=1, le=MAX_WORLDS)
    backend: str = setting("mujoco", choices=BACKENDS)
    warp_processes: int | None = setting(None, ge=1, le=1024, note="null = one per core")
    warp_shadows: bool = False
    warp_skybox: bool = False
    randomize: RandomizeConfig = field(default_factory=RandomizeConfig)


@dataclass
class VideoEncoderConfig:
    arch: str = "simple2dcnn"
    pretrained: bool = False
    weights: str | None = None
    freeze: bool = False
    input_size: int | None = setting(None, ge=32, le=1024, note="null = frames as rendered")
    preset: str = setting("small", choices=("tiny", "small", "base"))
    num_filters: int = setting(32, ge=1, le=1024)
    num_layers: int = setting(4, ge=1, le=64)
    channels_last: bool = False


# the encoder.video keys that shape the network and what it sees
ARCH_KEYS = ("arch", "num_filters", "num_layers", "input_size", "preset")


@dataclass
class EncoderConfig:
    type: str = setting("video", choices=ENCODER_TYPES)
    lr: float | None = setting(None, gt=0, le=1, note="null = sac.lr")
    video: VideoEncoderConfig = field(default_factory=VideoEncoderConfig)


@dataclass
class SACConfig:
    batch_size: int = setting(256, ge=1, le=65536)
    buffer_size: int = setting(100_000, ge=1, le=10**9)
    lr: float = setting(1e-3, gt=0, le=1)
    alpha_lr: float = setting(1e-3, gt=0, le=1)
    alpha_beta: float = setting(0.9, ge=0, lt=1)  # the temperature's Adam beta1 (DrQ: 0.9, SAC-AE: 0.5)
    discount: float = setting(0.99, ge=0, le=1)
    nstep: int = setting(1, ge=1, le=100)
    critic_tau: float = setting(0.01, gt=0, le=1)
    init_temperature: float = setting(0.1, gt=0, le=1e4)
    actor_update_every: int = setting(2, ge=1, le=MILLION)
    target_update_every: int = setting(2, ge=1, le=MILLION)
    hidden_dim: int = setting(1024, ge=1, le=16384)
    hidden_depth: int = setting(2, ge=1, le=64)
    feature_dim: int = setting(50, ge=1, le=16384)
    log_std_min: float = setting(-10.0, ge=-20, le=20)  # exp(+-20) stays well inside float32
    log_std_max: float = setting(2.0, ge=-20, le=20)
    augment_pad: int = setting(4, ge=0, le=512)
    augment_samples: int = setting(1, ge=1, le=16)
    updates_per_step: float = setting(1.0, gt=0, le=100, note="fractions allowed: 0.25 = one update per 4 agent steps")
    target_encoder: bool = True
    critic_layer_norm: bool = False


@dataclass
class ReplayConfig:
    device: str = setting("auto", choices=DEVICES)


@dataclass
class DemosConfig:
    path: str | None = setting(None, note="null = no demonstrations")
    share: float = setting(0.5, ge=0, lt=1)


@dataclass
class TrainingConfig:
    episodes: int = setting(1000, ge=1, le=10 * MILLION)
    max_env_steps: int | None = setting(None, ge=1, le=10**12, note="null = episodes only")
    seed: int = setting(1, ge=0, lt=SEED_LIMIT)
    seed_steps: int = setting(1000, ge=0, le=10**9)
    eval_every_episodes: int = setting(10, ge=0, le=10 * MILLION, note="0 = no evaluation")
    eval_episodes: int = setting(5, ge=1, le=10_000)
    device: str = setting("auto", choices=DEVICES)
    auto_shutdown: str | None = setting(None, note="null = none")
    compile: bool = False
    autocast: bool = False
    cudnn_benchmark: bool = False
    cuda_graph: bool = True


@dataclass
class CheckpointConfig:
    dir: str = "checkpoints"
    local_dir: str | None = setting(None, note="null = a staging folder unique to the URL and run")
    name: str | None = setting(None, note="null = sac_<encoder.type>")
    every_episodes: int = setting(100, ge=1, le=10 * MILLION)
    every_steps: int = setting(0, ge=0, le=10**12, note="0 = off")
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
        """The frame stack the replay stores, or None for one entry a slot (states, a frozen trunk's features)."""
        return self.env.frame_stack if self.pixels and not self.encoder.video.freeze else None


def load_config(path: str | Path, overrides: list[str] = ()) -> Config:
    """Read a YAML config, apply the profile and `--set` overrides, validate, return the resolved config."""
    if not str(path):
        raise UserError("--config is empty; pass a YAML file, e.g. --config configs/default.yaml")
    raw = _read_config(Path(path))
    sets = [_parse_set(item) for item in overrides]
    profiles = raw.get("profiles") or {}
    _check_profiles(profiles)
    if profiles:  # one order, whichever base brought which block: the printed config reads the same
        raw["profiles"] = profiles = {name: profiles[name] for name in PROFILES if name in profiles}

    cfg = Config()
    _apply(cfg, raw)
    for override in sets:
        _apply(cfg, override)
    # single keys now, so a bad value fails before choosing a profile imports torch; validate checks all again
    _check_settings(cfg)
    _check_outside(cfg)
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


USER_ERROR_STATUS = 2  # argparse's status for a usage error: bad input from the command line or a file


def explain(err: UserError) -> str:
    """The error's message with config keys in place of the parameters low layers name in backticks."""
    return re.sub(r"`(\w+)`", lambda m: PARAMETER_KEYS.get(m.group(1), m.group(0)), str(err))


def error_exit(err: UserError) -> int:
    """Every command's way out on bad input: the explained message as one line on stderr, and the exit status."""
    print(f"error: {explain(err)}", file=sys.stderr)
    return USER_ERROR_STATUS


def config_from_dict(data: dict) -> Config:
    """Rebuild a resolved config (as saved in a checkpoint) without re-applying profiles."""
    cfg = Config()
    _apply(cfg, data)
    return cfg


def with_overrides(cfg: Config, overrides: list[str]) -> Config:
    """A resolved config (as saved in a checkpoint) with `key=value` overrides applied and checked, as --set does."""
    for item in overrides:
        _apply(cfg, _parse_set(item))
    if overrides:
        validate(cfg)
    return cfg


def to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def _read_config(path: Path, chain: tuple[Path, ...] = ()) -> dict:
    """The file's own keys merged over its bases', with `base` resolved away; `chain` holds the files that named it."""
    if path.resolve() in chain:
        cycle = " -> ".join(str(p) for p in (*chain, path.resolve()))
        raise UserError(f"config files inherit in a cycle: {cycle}; remove one of these base entries")
    raw = _read_yaml(path, named_by=chain[-1] if chain else None)
    bases = raw.pop("base", None)
    if bases is None:
        return raw
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not all(isinstance(base, str) and base for base in bases):
        raise UserError(f"base in {path} must be a file path or a list of them (relative to the file), got {bases!r}")
    merged: dict = {}
    for base in bases:
        merged = _merge(merged, _read_config(path.parent / base, (*chain, path.resolve())))
    return _merge(merged, raw)


def _merge(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merge(merged[key], value) if both else value
    return merged


def _read_yaml(path: Path, named_by: Path | None = None) -> dict:
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a config file; pass a YAML file, e.g. --config configs/default.yaml")
    if not path.is_file():
        if named_by:
            raise UserError(
                f"base config {path} named in {named_by} not found; fix its base entry (relative to that file)"
            )
        raise UserError(f"config file not found: {path}; pass an existing file, e.g. --config configs/default.yaml")
    return read_yaml(path, what="config keys")


def read_yaml(path: Path, *, what: str) -> dict:
    """The mapping (of `what`, for the message) in the YAML file `path`, read as configs are (`_Loader`)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path} is not UTF-8 text (byte {err.start}); save it as UTF-8 YAML") from None
    except OSError as err:
        raise UserError(f"cannot read {path} ({err.strerror or err}); check its permissions, or pass another") from None
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = " ".join((getattr(err, "problem", None) or str(err)).split())
        raise UserError(f"cannot parse {path}{where}: {problem}; fix the YAML syntax") from None
    except RecursionError:
        raise UserError(f"cannot parse {path}: it nests deeper than Python can follow; fix the YAML syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path} must hold a mapping of {what}, got {type(data).__name__}")
    return data


def _parse_set(item: str) -> dict:
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise UserError(f"--set expects key=value (e.g. --set sac.batch_size=128), got {item!r}")
    parts = key.strip().split(".")
    if not all(parts):
        raise UserError(f"--set key {key!r} has an empty part; write dotted keys such as sac.batch_size")
    if parts[0] == "profiles":
        raise UserError("profiles cannot be changed with --set; set the key itself (--set sac.batch_size=128)")
    try:
        value = yaml.load(text, Loader=_Loader)
    except (yaml.YAMLError, RecursionError):
        value = text
    nested: dict = {}
    node = nested
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return nested


def _check_profiles(profiles) -> None:
    if not isinstance(profiles, dict):
        raise UserError(f"profiles must be a mapping with keys among {', '.join(PROFILES)}")
    for name, block in profiles.items():
        if name not in PROFILES:
            raise UserError(f"unknown profile {f'profiles.{name}'!r}; allowed: {', '.join(PROFILES)}")
        if not isinstance(block, dict):
            raise UserError(f"profiles.{name} must be a mapping of config keys")
        if "profile" in block or "profiles" in block:
            raise UserError(f"profiles.{name} cannot set profile or profiles")
        # validate now, even if this profile is not chosen
        _check_settings(_apply(Config(), block, prefix=f"profiles.{name}."), prefix=f"profiles.{name}.")


def _choose_profile(profile: str, profiles: dict) -> str:
    """`auto`: gpu with CUDA; else cpu_bf16 where the config has one and the CPU has native bfloat16 and a
    compiler; else cpu."""
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


def _apply(target, data: dict, prefix: str = ""):
    hints = typing.get_type_hints(type(target))
    names = [f.name for f in dataclasses.fields(target)]
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in names:
            raise UserError(f"unknown config key {path!r}; allowed under '{prefix or '<top>'}': {', '.join(names)}")
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


def validate(cfg: Config) -> None:
    """Every rule a config must meet (load_config applies it; configs built in code call it themselves)."""
    video = cfg.encoder.video
    if video.arch not in VIDEO_ARCHS:
        raise UserError(f"unknown encoder.video.arch '{video.arch}'; allowed: {', '.join(VIDEO_ARCHS)}")
    if video.weights is not None and not video.pretrained:
        raise UserError(
            "encoder.video.weights is set but encoder.video.pretrained is false; "
            "set encoder.video.pretrained=true to load it"
        )
    if cfg.encoder.lr is not None and cfg.encoder.type != "video":
        raise UserError(f"encoder.lr applies to video encoders only; got {cfg.encoder.lr} with encoder.type state")
    _check_settings(cfg)
    _check_cross_keys(cfg)
    _check_outside(cfg)


# a run name names files, a log folder and a tmux session: no separators, spaces, quotes, ':' or leading '.' or '-'
RUN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=-]{0,99}")
REPLAY_BYTES_LIMIT = 2**40  # 1 TiB of frames: beyond any machine, so a typo in buffer_size or image_size
PHYSICS_STEPS_LIMIT = 10**7  # per episode (agent steps times action repeat): years of simulation at 100k steps/s


def _check_settings(node, prefix: str = "") -> None:
    for spec in dataclasses.fields(node):
        key, value = f"{prefix}{spec.name}", getattr(node, spec.name)
        if dataclasses.is_dataclass(value):
            _check_settings(value, f"{key}.")
        elif value is not None and not isinstance(value, (bool, dict)):
            _check_value(key, value, spec.metadata)


def _check_value(key: str, value, rule) -> None:
    note = f" or null ({rule['note']})" if rule.get("note", "").startswith("null") else ""
    if isinstance(value, str):
        if rule.get("choices") and value not in rule["choices"]:
            raise UserError(f"config key '{key}' must be one of {', '.join(rule['choices'])}, got {value!r}")
        if not value or not value.isprintable():
            raise UserError(f"config key '{key}' must be a non-empty line of text{note}, got {value!r}")
        return
    low = f"[{rule['ge']}" if rule.get("ge") is not None else f"({rule['gt']}"
    high = f"{rule['le']}]" if rule.get("le") is not None else f"{rule['lt']})"
    inside = (math.isfinite(value)
              and (value >= rule["ge"] if rule.get("ge") is not None else value > rule["gt"])
              and (value <= rule["le"] if rule.get("le") is not None else value < rule["lt"]))
    if not inside:
        extra = f" ({rule['note']})" if rule.get("note") and not note else ""
        raise UserError(f"config key '{key}' must be in {low}, {high}{extra}{note}, got {value}")


def _check_cross_keys(cfg: Config) -> None:
    env, sac, video = cfg.env, cfg.sac, cfg.encoder.video
    pixels = cfg.encoder.type == "video"
    if env.backend == "mujoco" and env.num_envs > MAX_WORKERS:
        raise UserError(f"env.num_envs must be at most {MAX_WORKERS} with env.backend=mujoco, a process each; got "
                        f"{env.num_envs}: lower it, or use env.backend=mujoco_warp for more")
    if env.backend == "mujoco_warp" and env.warp_processes is not None and env.warp_processes > env.num_envs:
        raise UserError(f"env.warp_processes ({env.warp_processes}) exceeds env.num_envs ({env.num_envs}): a process "
                        "steps one world at least; lower it, or set it to null (one per core, at most one per world)")
    slots = min_ring_slots(cfg.replay_stack)
    if sac.buffer_size // env.num_envs < slots:
        raise UserError(f"sac.buffer_size must be at least {slots * env.num_envs} (a ring of {slots} slots per env), "
                        f"got {sac.buffer_size}; raise it")
    if sac.buffer_size < sac.batch_size:
        raise UserError(f"sac.buffer_size ({sac.buffer_size}) is below sac.batch_size ({sac.batch_size}): the replay "
                        "could never hold a batch, so the run would never update; raise sac.buffer_size or lower "
                        "sac.batch_size")
    if sac.augment_samples > 1 and (not pixels or sac.augment_pad == 0):
        raise UserError("sac.augment_samples > 1 needs a video encoder and sac.augment_pad > 0 (unshifted copies would "
                        "be identical); set sac.augment_samples=1")
    if sac.augment_samples > 1 and pixels and video.freeze:
        raise UserError("sac.augment_samples > 1 has nothing to shift with encoder.video.freeze=true (the replay "
                        "stores the frozen trunk's features, not frames); set sac.augment_samples=1")
    if sac.log_std_min >= sac.log_std_max:
        raise UserError(f"sac.log_std_min must be below sac.log_std_max, got {sac.log_std_min} and {sac.log_std_max}")
    scenes = env.randomize.enabled or env.randomize.heldout
    if scenes and not pixels:
        raise UserError("env.randomize changes what the camera sees, and encoder.type state sees no frames; set "
                        "env.randomize.enabled=false and env.randomize.heldout=false, or use encoder.type video")
    if scenes and env.backend == "mujoco_warp" and env.randomize.ambient > 0:
        raise UserError("env.randomize.ambient cannot vary with env.backend=mujoco_warp: MuJoCo Warp renders one "
                        "headlight for every world, see docs/warp.md#visual-domain-randomisation; set "
                        "env.randomize.ambient=0, or use env.backend=mujoco")
    physics_steps = (env.max_episode_steps or 1) * env.action_repeat
    if physics_steps > PHYSICS_STEPS_LIMIT:
        raise UserError(f"env.max_episode_steps * env.action_repeat is {physics_steps} simulator steps per episode, "
                        f"over the limit of {PHYSICS_STEPS_LIMIT}; lower one of them")
    if not pixels:
        return
    if sac.augment_pad > env.image_size // 2:
        raise UserError(f"sac.augment_pad must be at most half of env.image_size ({env.image_size // 2}), "
                        f"got {sac.augment_pad}")
    frame_bytes = 3 * env.image_size**2
    if sac.buffer_size * frame_bytes > REPLAY_BYTES_LIMIT:
        raise UserError(f"the frames of the replay buffer would take {sac.buffer_size * frame_bytes / 2**40:.1f} TiB "
                        f"(sac.buffer_size {sac.buffer_size} x {env.image_size}x{env.image_size} px), over the "
                        f"limit of {REPLAY_BYTES_LIMIT // 2**40} TiB; lower sac.buffer_size or env.image_size")
    size = video.input_size or env.image_size
    left = _conv_output_size(video.arch, size, video.num_layers)
    if left is not None and left < 1:
        raise UserError(f"encoder.video.num_layers={video.num_layers} leaves no pixels of a {size} px frame for "
                        f"{video.arch}; use fewer layers or a larger encoder.video.input_size")


def check_log_folder(cfg: Config) -> None:
    """The run's TensorBoard folder can be written (the trainer's check; other users of a config never log there)."""
    logs = cfg.logging.tensorboard_dir
    check_writable_folder(logs, what=f"log to logging.tensorboard_dir {logs}", fix="set it to a folder under one")


def _conv_output_size(arch: str, size: int, layers: int) -> int | None:
    """The side of a conv arch's last feature map; None for archs whose own constructor checks the size."""
    strided = {"simple2dcnn": 1, "simple3dcnn": 2}.get(arch)
    if strided is None:
        return None
    for layer in range(layers):
        size = (size - 3) // 2 + 1 if layer < strided else size - 2
    return size


def _check_outside(cfg: Config) -> None:
    """What the config names outside itself, where checking is cheap (run name, packages, the env id)."""
    ckpt = cfg.checkpoint
    if ckpt.name is not None and not RUN_NAME.fullmatch(ckpt.name):
        raise UserError(f"checkpoint.name {ckpt.name!r} cannot name files and tmux sessions; use letters, digits "
                        "and _ . + = - (not first: . or -), at most 100 characters, e.g. exp_seed1")
    if "://" in ckpt.dir:
        import fsspec

        try:
            fsspec.get_filesystem_class(ckpt.dir.split("://", 1)[0])
        except (ImportError, ValueError) as err:
            raise UserError(f"checkpoint.dir {ckpt.dir} needs a filesystem package ({str(err).splitlines()[0]}); "
                            "install it (s3fs for s3://, gcsfs for gs://) or use a local folder") from None
    if cfg.logging.wandb and importlib.util.find_spec("wandb") is None:
        raise UserError("logging.wandb is true but wandb is not installed; pip install wandb==0.31.0, "
                        "or set logging.wandb=false")
    import gymnasium

    spec = gymnasium.envs.registry.get(cfg.env.id)
    entry = spec.entry_point if spec is not None and isinstance(spec.entry_point, str) else ""
    if entry.startswith("gymnasium.envs.") and not entry.startswith("gymnasium.envs.mujoco"):
        family = entry.split(".")[2].split(":")[0]
        raise UserError(f"env.id '{cfg.env.id}' is a Gymnasium {family} task, not a MuJoCo one; this trainer runs "
                        "MuJoCo tasks, e.g. HalfCheetah-v5 or dm_control/cartpole-swingup-v0")


def main(argv: list[str] | None = None) -> int:
    """Print resolved config values, one per line; a bad config or key is the trainer's one-line error, exit 2."""
    parser = argparse.ArgumentParser(prog="python3 -m trainer.config", description=main.__doc__)
    parser.add_argument("config", help="YAML config file")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)"
    )
    parser.add_argument("--print", action="append", required=True, dest="keys", metavar="KEY",
                        help="dotted key (logging.tensorboard_dir) or run_name (repeatable)")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config, args.set)
        values = [_resolved(cfg, key) for key in args.keys]
    except UserError as err:
        return error_exit(err)
    print("\n".join(str(value) for value in values))
    return 0


def _resolved(cfg: Config, key: str):
    """The value of a dotted config key or `run_name`; no other attribute (`sac.lr.real`) is a key."""
    value = cfg
    for part in key.split("."):
        names = {f.name for f in dataclasses.fields(value)} if dataclasses.is_dataclass(value) else set()
        if value is cfg:
            names.add("run_name")
        if part not in names:
            raise UserError(f"unknown config key {key!r}; pass a dotted key such as logging.tensorboard_dir, "
                            "or run_name")
        value = getattr(value, part)
    return value


if __name__ == "__main__":
    sys.exit(main())
