"""A checkpoint's saved config against the one a resume runs with: what it may not change, and what
it did."""

import dataclasses
from pathlib import Path

from encoders.config import ARCH_KEYS
from envs.config import frame_settings
from errors import UserError
from trainer.config.load import Config

# Config keys whose change makes a checkpoint meaningless or unloadable for the run being resumed.
STRUCTURAL_KEYS = ("env.id", "env.num_envs", "encoder.type", "sac.hidden_dim", "sac.hidden_depth",
                   "sac.buffer_size",
                   "sac.critic_layer_norm")
PIXEL_KEYS = (
    "env.image_size", "env.frame_stack", "sac.feature_dim",
    *(f"encoder.video.{key}" for key in ARCH_KEYS),
    "sac.target_encoder", "encoder.video.freeze",  # whether the target critic holds encoder weights
    "encoder.video.frozen_features", "sac.critic_input",  # what the replay's stored features are
    "encoder.lr",  # null <-> a value changes the critic optimiser's parameter groups
)


def check_compatible(*, saved: dict, current: dict, path: Path) -> None:
    """Refuse to resume with a config that breaks the saved networks or replay, or draws other
    frames."""
    frames = tuple(f"env.{key}" for key in frame_settings(current["env"]["backend"]))
    keys = STRUCTURAL_KEYS + (PIXEL_KEYS + frames if current["encoder"]["type"] == "video" else ())
    old, new = _saved_settings(saved), _flat(current)
    for key in keys:
        if old[key] != new[key]:
            raise UserError(
                f"checkpoint {path.name} was trained with {key}={old[key]} but the config says "
                f"{key}={new[key]}; resume with the config it was trained with, or start a new run "
                "with another checkpoint.name"
            )


def check_trunk(*, saved: str | None, current: str | None, path: Path) -> None:
    """Refuse to resume a replay of stored features with another frozen trunk (None: no trunk,
    frames stored)."""
    if saved != current:
        def stored(trunk: str | None) -> str:
            return f"the features of frozen trunk {trunk}" if trunk else "frames"

        raise UserError(
            f"checkpoint {path.name} stored {stored(saved)} but this config stores "
            f"{stored(current)}; resume with the encoder.video arch, input_size, weights and "
            "freeze it was trained with (a weights file that trainer.tools.pretrain --replace "
            "wrote over is kept beside it as <name>.replaced-<time>.pt)"
        )


def run_name(saved: dict) -> str:
    """The run a checkpoint's saved config trained (Config.run_name of it)."""
    settings = _saved_settings(saved)
    return settings["checkpoint.name"] or f"sac_{settings['encoder.type']}"


def changed_settings(*, saved: dict, current: dict) -> list[str]:
    """The settings a resume changed, as "key old -> new" (the table of profiles left out)."""
    old, new = _saved_settings(saved), _flat(current)
    return [f"{key} {old.get(key)} -> {value}" for key, value in sorted(new.items())
            if old.get(key) != value and not key.startswith("profiles.")]


def _saved_settings(saved: dict) -> dict:
    """A checkpoint's config as {dotted key: value}; keys added after it was written count as their
    defaults."""
    return _flat(dataclasses.asdict(Config())) | _flat(saved)


def _flat(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat
