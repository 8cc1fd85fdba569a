"""What a checkpoint holds (its payload): the one place its keys are written (`build_payload`,
`seal`) and checked on load (`load_weights`: `is_checkpoint`, `damage`); the agent's own state is
sac's to check."""

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sac import agent, replay
from trainer.checkpoints.files import CheckpointError, NoSuchFolder, digest, non_finite, read
from trainer.config.load import Config

FORMAT = 2  # format 1 has no checksums: it loads unverified
READABLE_FORMATS = (1, 2)
PAYLOAD_KEYS = ("format", "config", "agent", "progress", "rng", "replay_file")
RESUME_FIX = "resume from an older <run>_ep<N>.pt or use --resume auto"


@dataclass
class Progress:
    """The counters a checkpoint carries (`progress` in its payload)."""

    episode: int = 0
    env_step: int = 0  # agent steps (each is env.action_repeat simulator steps)
    evaluation_due: bool = False  # cut short by a stop signal: the resume runs it first
    # with N > 1 envs, the training seeds (offsets from training.seed) below this went to envs at
    # earlier starts
    next_seed: int = 0
    # the highest mean eval return so far, which `<run>_best.pt` holds
    best_return: float | None = None
    # agent steps a person drove (demos.takeover), in all and at the last evaluation, and the step
    # of that evaluation: eval.csv's intervened share
    intervened: int = 0
    intervened_at_eval: int = 0
    step_at_eval: int = 0


# absent while no person has driven the run, as in checkpoints written before take-over (their
# defaults give the same shares): a trainer from before, which refuses progress keys it does not
# know, still resumes such a run
TAKEOVER_COUNTS = ("intervened", "intervened_at_eval", "step_at_eval")


def build_payload(*, config: dict, agent_state: dict, progress: Progress, trunk: str | None,
                  demos: dict | None,
                  learning_steps: int, wall_s: float, rng: np.random.Generator,
                  lineage: list[list] | None = None) -> dict:
    """The payload of a save, less what `seal` adds; `rng` is the run's numpy generator; `lineage`
    the [process id, first step] of every process the run has gone through (`descends`)."""
    return {
        "lineage": lineage or [],
        "config": config,
        "agent": agent_state,
        # no best before the first evaluation: absent, as in checkpoints written before there was
        # one
        "progress": {key: value for key, value in dataclasses.asdict(progress).items()
                     if value is not None
                     and (progress.intervened or key not in TAKEOVER_COUNTS)},
        "trunk": trunk,
        "demos": demos,
        "learning_steps": learning_steps,
        "wall_s": wall_s,
        "rng": {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": rng.bit_generator.state,
        },
    }


def seal(payload: dict, *, replay_file: str, replay_checksum: str) -> dict:
    """`payload` as written: its format, its replay sidecar's name and checksum, and its own
    checksum."""
    sealed = {**payload, "format": FORMAT, "replay_file": replay_file,
              "replay_checksum": replay_checksum}
    sealed["checksum"] = digest(sealed)
    return sealed


def load_weights(path: Path, fetch: Callable[[str], None] | None = None) -> dict:
    """A checkpoint's payload, its checksum verified and its tensors finite; CheckpointError
    otherwise."""
    if fetch:
        fetch(path.name)
    try:
        payload = read(path, "checkpoint")
    except NoSuchFolder:
        raise
    except CheckpointError as err:
        raise CheckpointError(f"{err}; {RESUME_FIX}") from None
    if not is_checkpoint(payload):
        raise CheckpointError(
            f"{path} is not a checkpoint of this trainer (format {FORMAT}); "
            "pass a <run>_latest.pt or <run>_ep<N>.pt file"
        )
    problem = damage(payload)
    if problem:
        raise CheckpointError(f"checkpoint {path} {problem}; {RESUME_FIX}")
    return payload


def is_checkpoint(payload) -> bool:
    """Whether a loaded file is a checkpoint of this trainer, of a format it reads (`damage` says if
    it is intact)."""
    known = isinstance(payload, dict) and all(key in payload for key in PAYLOAD_KEYS)
    return known and payload["format"] in READABLE_FORMATS


def damage(payload: dict) -> str | None:
    """Why a loaded checkpoint is unusable (checksum, layout, NaN or inf), as the end of "checkpoint
    <file> ..."; None when intact. Removes the checksum from `payload`."""
    if payload["format"] >= 2:
        stored = payload.pop("checksum", None)
        if stored != digest(payload):
            return "is corrupt (its checksum does not match its contents)"
    problem = _payload_problem(payload)
    # format 1 has no checksum: a damaged or hand-made file would fail deep in the trainer
    if problem:
        return f"is damaged or not from this trainer: {problem}"
    bad = non_finite(payload["agent"])
    if bad:
        return f"holds NaN or inf in {bad} (damaged, or the run diverged before this save)"
    return None


def _payload_problem(payload: dict) -> str | None:
    """What in a payload is not what `save` writes (None: nothing), checked before the trainer reads
    it."""
    progress, rng = payload["progress"], payload["rng"]
    sections = [name for name, value in dataclasses.asdict(Config()).items()
                if isinstance(value, dict)]
    if not isinstance(payload["config"], dict) or any(
            not isinstance(payload["config"].get(name, {}), dict) for name in sections):
        return "its config is not a config of sections"
    if not isinstance(payload["agent"], dict):
        return "its agent is not a dict of weights"
    if problem := agent.state_problem(payload["agent"]):
        return f"its agent {problem}"
    kinds = {f.name: type(f.default) for f in dataclasses.fields(Progress)}
    if not isinstance(progress, dict) or not set(progress) <= kinds.keys():
        return f"its progress is not {{{', '.join(kinds)}}}"
    best = progress.get("best_return")
    if best is not None and (type(best) is not float or not math.isfinite(best)):
        return f"progress.best_return is {best!r}, not a mean return"
    for name, value in progress.items():
        if name != "best_return" and (type(value) is not kinds[name] or value < 0):
            return (f"progress.{name} is {value!r}, not a "
                    f"{'bool' if kinds[name] is bool else 'count'}")
    if not isinstance(rng, dict) or _rng_problem(rng):
        return "its random generators' states are not torch's and numpy's"
    name = payload["replay_file"]
    if not isinstance(name, str) or not name.endswith(".replay.pt") or Path(name).name != name:
        return f"its replay_file {name!r} is not the name of a .replay.pt file beside it"
    steps = payload.get("learning_steps", 0)
    if type(steps) is not int or steps < 0:
        return f"learning_steps is {steps!r}, not a count"
    wall = payload.get("wall_s", 0.0)
    if not isinstance(wall, (int, float)) or not 0 <= wall < float("inf"):
        return f"wall_s is {wall!r}, not seconds"
    lineage = payload.get("lineage", [])
    if not isinstance(lineage, list) or not all(
            isinstance(p, list) and len(p) == 2 and type(p[0]) is str and type(p[1]) is int
            for p in lineage):
        return "its lineage is not a list of [process id, step]"
    demos = payload.get("demos")
    if demos is not None and (not isinstance(demos, dict)
                              or not {"rng", "fingerprint", "path"} <= set(demos)
                              or replay.numpy_state_problem(demos["rng"])):
        return "its demonstrations' sampling state is not the trainer's"
    return None


def descends(newest: dict, resumed: dict) -> bool | None:
    """Whether the run that wrote checkpoint `newest` went through checkpoint `resumed` (one of its
    ancestors or itself); None when either was written before checkpoints kept a lineage. Every
    process that trains a run adds [its id, its first step] to the lineage it resumed: `resumed`
    lies on the way to `newest` when both agree up to the process that saved `resumed`, and the next
    process on the way started at or after its step."""
    mine, theirs = resumed.get("lineage"), newest.get("lineage")
    if not mine or not theirs:
        return None
    last = len(mine) - 1
    if theirs[:last + 1] != mine:
        return False
    went_on_from = theirs[last + 1][1] if len(theirs) > last + 1 else newest["progress"]["env_step"]
    return resumed["progress"]["env_step"] <= went_on_from


def _rng_problem(rng: dict) -> bool:
    """True unless `rng` holds torch's CPU generator state, CUDA's (a list, empty without CUDA) and
    numpy's."""
    torch_state, cuda = rng.get("torch"), rng.get("cuda")
    return (not _byte_tensor(torch_state) or torch_state.shape != torch.get_rng_state().shape
            or not isinstance(cuda, list) or not all(map(_byte_tensor, cuda))
            or replay.numpy_state_problem(rng.get("numpy")))


def _byte_tensor(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.uint8
