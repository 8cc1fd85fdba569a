"""The rules a whole config meets beyond each key's range: keys that constrain each other, and what
it names outside itself (packages, the env id, folders)."""

import importlib.util
import re

from encoders.config import VIDEO_ARCHS
from envs.config import MAX_WORKERS
from errors import UserError, check_writable_folder
from sac.ring import min_ring_slots
from settings import check_settings


def validate(cfg) -> None:
    """Every rule a config must meet (load_config applies it; configs built in code call it
    themselves)."""
    check_inside(cfg)
    check_outside(cfg)


def check_inside(cfg) -> None:
    """The rules a config meets on its own, whichever machine reads it (an exported policy's)."""
    video = cfg.encoder.video
    if video.arch not in VIDEO_ARCHS:
        raise UserError(
            f"unknown encoder.video.arch '{video.arch}'; allowed: {', '.join(VIDEO_ARCHS)}")
    if video.weights is not None and not video.pretrained:
        raise UserError(
            "encoder.video.weights is set but encoder.video.pretrained is false; "
            "set encoder.video.pretrained=true to load it"
        )
    if cfg.encoder.lr is not None and cfg.encoder.type != "video":
        raise UserError(
            f"encoder.lr applies to video encoders only; got {cfg.encoder.lr} with encoder.type "
            "state")
    check_settings(cfg)
    _check_cross_keys(cfg)


# a run name names files, a log folder and a tmux session: no separators, spaces, quotes, ':' or
# leading '.' or '-'
RUN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=-]{0,99}")
# 1 TiB of frames: beyond any machine, so a typo in buffer_size or image_size
REPLAY_BYTES_LIMIT = 2**40
# per episode (agent steps times action repeat): years of simulation at 100k steps/s
PHYSICS_STEPS_LIMIT = 10**7


def _check_cross_keys(cfg) -> None:
    env, sac, video = cfg.env, cfg.sac, cfg.encoder.video
    pixels = cfg.encoder.type == "video"
    if env.backend == "mujoco" and env.num_envs > MAX_WORKERS:
        raise UserError(f"env.num_envs must be at most {MAX_WORKERS} with env.backend=mujoco, a "
                        f"process each; got {env.num_envs}: lower it, or use "
                        "env.backend=mujoco_warp for more")
    if (env.backend == "mujoco_warp" and env.warp_processes is not None
        and env.warp_processes > env.num_envs):
        raise UserError(f"env.warp_processes ({env.warp_processes}) exceeds env.num_envs "
                        f"({env.num_envs}): a process steps one world at least; lower it, or set "
                        "it to null (one per core, at most one per world)")
    slots = min_ring_slots(cfg.replay_stack)
    if sac.buffer_size // env.num_envs < slots:
        raise UserError(f"sac.buffer_size must be at least {slots * env.num_envs} (a ring of "
                        f"{slots} slots per env), got {sac.buffer_size}; raise it")
    if sac.buffer_size < sac.batch_size:
        raise UserError(f"sac.buffer_size ({sac.buffer_size}) is below sac.batch_size "
                        f"({sac.batch_size}): the replay could never hold a batch, so the run "
                        "would never update; raise sac.buffer_size or lower sac.batch_size")
    if sac.augment_samples > 1 and (not pixels or sac.augment_pad == 0):
        raise UserError("sac.augment_samples > 1 needs a video encoder and sac.augment_pad > 0 "
                        "(unshifted copies would be identical); set sac.augment_samples=1")
    if sac.augment_samples > 1 and pixels and video.freeze:
        raise UserError("sac.augment_samples > 1 has nothing to shift with "
                        "encoder.video.freeze=true (the replay stores the frozen trunk's "
                        "features, not frames); set sac.augment_samples=1")
    if video.frozen_features != "projection" and not (pixels and video.freeze):
        raise UserError(f"encoder.video.frozen_features={video.frozen_features} is what a frozen "
                        "trunk stores, and this run trains its encoder; set "
                        "encoder.video.freeze=true, or frozen_features=projection")
    if sac.critic_input == "state" and not (pixels and video.freeze and env.backend == "mujoco"):
        raise UserError("sac.critic_input=state needs a frozen video encoder "
                        "(encoder.video.freeze=true: an encoder the critic trains would learn "
                        "nothing from it) and env.backend=mujoco; set sac.critic_input=features")
    if sac.log_std_min >= sac.log_std_max:
        raise UserError(
            f"sac.log_std_min must be below sac.log_std_max, got {sac.log_std_min} and "
            f"{sac.log_std_max}")
    scenes = env.randomize.enabled or env.randomize.heldout
    if scenes and not pixels:
        raise UserError("env.randomize changes what the camera sees, and encoder.type state sees "
                        "no frames; set env.randomize.enabled=false and "
                        "env.randomize.heldout=false, or use encoder.type video")
    if scenes and env.backend == "mujoco_warp" and env.randomize.ambient > 0:
        raise UserError("env.randomize.ambient cannot vary with env.backend=mujoco_warp: MuJoCo "
                        "Warp renders one headlight for every world, see "
                        "docs/warp.md#visual-domain-randomisation; set env.randomize.ambient=0, "
                        "or use env.backend=mujoco")
    evaluates = cfg.training.eval_every_episodes > 0
    if evaluates and cfg.training.eval_envs > 1 and cfg.logging.eval_video and not pixels:
        raise UserError("training.eval_envs > 1 evaluates in worker processes, whose state-mode "
                        "envs render no eval video; set logging.eval_video=false or "
                        "training.eval_envs=1")
    if cfg.demos.takeover and not (pixels and env.backend == "mujoco"
                                   and env.id.startswith("Dishwashing")):
        raise UserError("demos.takeover drives the dishwashing arm watching the frames of one "
                        "OpenGL env: it needs a Dishwashing env.id, encoder.type video and "
                        "env.backend=mujoco; set demos.takeover=null")
    physics_steps = (env.max_episode_steps or 1) * env.action_repeat
    if physics_steps > PHYSICS_STEPS_LIMIT:
        raise UserError(f"env.max_episode_steps * env.action_repeat is {physics_steps} simulator "
                        f"steps per episode, over the limit of {PHYSICS_STEPS_LIMIT}; lower one of "
                        "them")
    if not pixels:
        return
    if sac.augment_pad > env.image_size // 2:
        raise UserError("sac.augment_pad must be at most half of env.image_size "
                        f"({env.image_size // 2}), got {sac.augment_pad}")
    frame_bytes = 3 * env.image_size**2
    if sac.buffer_size * frame_bytes > REPLAY_BYTES_LIMIT:
        raise UserError("the frames of the replay buffer would take "
                        f"{sac.buffer_size * frame_bytes / 2**40:.1f} TiB (sac.buffer_size "
                        f"{sac.buffer_size} x {env.image_size}x{env.image_size} px), over the "
                        f"limit of {REPLAY_BYTES_LIMIT // 2**40} TiB; lower sac.buffer_size or "
                        "env.image_size")
    size = video.input_size or env.image_size
    left = _conv_output_size(video.arch, size, video.num_layers)
    if left is not None and left < 1:
        raise UserError(f"encoder.video.num_layers={video.num_layers} leaves no pixels of a {size} "
                        f"px frame for {video.arch}; use fewer layers or a larger "
                        "encoder.video.input_size")


def check_log_folder(cfg) -> None:
    """The run's TensorBoard folder can be written (the trainer's check; other users of a config
    never log there)."""
    logs = cfg.logging.tensorboard_dir
    check_writable_folder(logs, what=f"log to logging.tensorboard_dir {logs}",
                          fix="set it to a folder under one")


def _conv_output_size(arch: str, size: int, layers: int) -> int | None:
    """The side of a conv arch's last feature map; None for archs whose own constructor checks the
    size."""
    strided = {"simple2dcnn": 1, "simple3dcnn": 2}.get(arch)
    if strided is None:
        return None
    for layer in range(layers):
        size = (size - 3) // 2 + 1 if layer < strided else size - 2
    return size


def check_outside(cfg) -> None:
    """What the config names outside itself, where checking is cheap (run name, packages, the env
    id)."""
    ckpt = cfg.checkpoint
    if ckpt.name is not None and not RUN_NAME.fullmatch(ckpt.name):
        raise UserError(f"checkpoint.name {ckpt.name!r} cannot name files and tmux sessions; use "
                        "letters, digits and _ . + = - (not first: . or -), at most 100 "
                        "characters, e.g. exp_seed1")
    if "://" in ckpt.dir:
        import fsspec  # only for a remote dir: checking a config stays light

        try:
            fsspec.get_filesystem_class(ckpt.dir.split("://", 1)[0])
        except (ImportError, ValueError) as err:
            raise UserError(f"checkpoint.dir {ckpt.dir} needs a filesystem package "
                            f"({str(err).splitlines()[0]}); install it (s3fs for s3://, gcsfs for "
                            "gs://) or use a local folder") from None
    if cfg.logging.wandb and importlib.util.find_spec("wandb") is None:
        raise UserError("logging.wandb is true but wandb is not installed; pip install "
                        "wandb==0.31.0, or set logging.wandb=false")
    import gymnasium  # here: reading a config loads no gymnasium

    spec = gymnasium.envs.registry.get(cfg.env.id)
    entry = spec.entry_point if spec is not None and isinstance(spec.entry_point, str) else ""
    if entry.startswith("gymnasium.envs.") and not entry.startswith("gymnasium.envs.mujoco"):
        family = entry.split(".")[2].split(":")[0]
        raise UserError(f"env.id '{cfg.env.id}' is a Gymnasium {family} task, not a MuJoCo one; "
                        "this trainer runs MuJoCo tasks, e.g. HalfCheetah-v5 or "
                        "dm_control/cartpole-swingup-v0")
