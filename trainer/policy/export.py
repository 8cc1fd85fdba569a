"""Export a checkpoint's policy to a folder that runs without this repository:

    python3 -m trainer.policy.export CHECKPOINT --out DIR [--episodes N] \\
        [--formats torchscript,onnx] [--push REPO_ID]

DIR gets policy.pt (TorchScript) and policy.onnx (uint8 frame stacks or float32 states in, actions
within the task's bounds out), policy.json (that contract), policy.safetensors (the weights
Policy.load reads), config.yaml, a model card README.md with an evaluation of N episodes,
episode.gif and episode.mp4. It is a Hugging Face Hub model repository as is (`hf upload REPO_ID
DIR`, or --push). See docs/deploy.md.
"""

import argparse
import contextlib
import copy
import fcntl
import json
import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime
import torch
from huggingface_hub import EvalResult, HfApi, ModelCardData
from safetensors.torch import save as safetensors_bytes
from tqdm import tqdm

from envs.rendering import configure
from errors import UserError, check_writable_folder, no_room
from trainer.config.load import EVAL_SEED_OFFSET, Config, to_yaml
from trainer.policy.trained import (
    CONFIG_FILE,
    SPEC_FILE,
    WEIGHTS_FILE,
    PolicyNet,
    load_checkpoint,
)
from trainer.process.cli import prog, run_command
from trainer.run.video import write_videos

FORMATS = ("torchscript", "onnx")
FILES = {"torchscript": "policy.pt", "onnx": "policy.onnx"}
ONNX_OPSET = 18  # the first with Resize's antialias, which encoder.video.input_size needs
STAGING = ".export.tmp"  # + pid: the hidden folder inside --out that an export writes in
# largest difference from the policy in this repository that a written format may show
TOLERANCE = 1e-5
# a frozen trunk's float16 features: another runtime's last-bit differences can move a feature one
# float16 step
FLOAT16_TOLERANCE = 1e-3
# settings of the machine a run trained on, at their defaults in the export's config.yaml: a shell
# command or a storage URL can carry credentials, and --push publishes the folder
MACHINE_KEYS = ("training.auto_shutdown", "checkpoint.dir", "checkpoint.local_dir",
                "logging.tensorboard_dir")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog("trainer.policy.export"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint",
                        help="<run>_latest.pt, <run>_best.pt or <run>_ep<N>.pt, a local file or a "
                        "URL (s3://...)")
    parser.add_argument("--out", required=True, help="the folder to write (new, or empty)")
    parser.add_argument("--formats", default=",".join(FORMATS), type=formats,
                        help="comma-separated, of torchscript and onnx (default both)")
    parser.add_argument("--episodes", type=int, default=10,
                        help="evaluation episodes for the model card (0: none; default 10)")
    parser.add_argument("--seed", type=int,
                        help="evaluation episode i starts from seed S + i (default: the run's)")
    parser.add_argument("--video-size", type=int,
                        help="pixels of episode.gif and .mp4 (default: the run's "
                             "logging.video_size)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key of the checkpoint's config (e.g. "
                             "encoder.video.weights=PATH)")
    parser.add_argument("--push", metavar="REPO_ID",
                        help="then upload the folder to this Hugging Face Hub repo")
    return parser.parse_args(argv)


def formats(text: str) -> list[str]:
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    if not chosen or any(name not in FORMATS for name in chosen):
        raise argparse.ArgumentTypeError(
            f"choose among {', '.join(FORMATS)}, comma-separated; got {text!r}")
    return chosen


def example_batch(spec, batch: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if spec.pixels:
        return torch.randint(0, 256, (batch, *spec.obs_shape), dtype=torch.uint8,
                             generator=generator)
    return torch.randn((batch, *spec.obs_shape), generator=generator)


def write_torchscript(net, example: torch.Tensor, path: Path) -> None:
    traced = torch.jit.trace(net, example, check_trace=False)
    with open(path, "wb") as f:  # torch's own file writer aborts the process on a full disk
        torch.jit.save(traced, f)


def write_onnx(net, example: torch.Tensor, path: Path) -> None:
    torch.onnx.export(net, (example,), str(path), verbose=False, input_names=["obs"],
                      output_names=["action"],
                      dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}},
                      opset_version=ONNX_OPSET,
                      dynamo=False)


def run_torchscript(path: Path, obs: torch.Tensor) -> np.ndarray:
    with torch.inference_mode():
        return torch.jit.load(str(path), map_location="cpu")(obs).numpy()


def run_onnx(path: Path, obs: torch.Tensor) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"obs": obs.numpy()})[0]


WRITERS = {"torchscript": (write_torchscript, run_torchscript), "onnx": (write_onnx, run_onnx)}


@contextlib.contextmanager
def quiet_stdout():
    """File descriptor 1 to /dev/null: torch's ONNX exporter logs its graph from C++, past
    sys.stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def write_format(name: str, net, spec, folder: Path) -> None:
    """One format of `net`, checked on a batch other than the one it was traced with."""
    write, run = WRITERS[name]
    path = folder / FILES[name]
    check = example_batch(spec, 3, seed=1)
    # the encoders' input asserts become constants (so the check runs another batch size), torch
    # calls both exporters deprecated (docs/deploy.md), and its ONNX exporter prints its whole graph
    # when an operator is missing
    with warnings.catch_warnings(), quiet_stdout():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        write(net, example_batch(spec, 2), path)
        actions = run(path, check)
    with torch.inference_mode():
        expected = net(check).numpy()
    worst = float(np.abs(actions - expected).max())
    if not worst <= (FLOAT16_TOLERANCE if net.float16_features else TOLERANCE):
        raise RuntimeError(f"its actions differ from this repository's policy by up to {worst:.2g}")


def export_formats(net, spec, folder: Path, chosen: list[str]) -> None:
    """Every format in `chosen`, or a one-line error naming those that work."""
    failed = {}
    for name in chosen:
        try:
            write_format(name, net, spec, folder)
        except Exception as err:
            # exporters raise many types; any failure means the format does not serve
            if no_room(err):
                raise  # the disk's fault, not the format's
            failed[name] = (str(err).strip().splitlines()[0] if str(err).strip()
                            else type(err).__name__)
    if not failed:
        return
    name, reason = next(iter(failed.items()))
    working = [f for f in chosen if f not in failed]
    fix = (f"export the format that works with --formats {','.join(working)}" if working
           else "use the checkpoint itself in Python (trainer.policy.trained.Policy.load)")
    raise UserError(f"the {spec.encoder} policy does not export to {name} ({reason}); {fix}")


def card_data(spec, cfg, evaluation: dict | None):
    """The card's metadata, as rl-baselines3-zoo's package_to_hub writes it: a model-index whose
    `mean_reward` is "mean +/- std" over the episodes, here with the return's 95% interval, the
    success rate and its Wilson interval where the task has one, and the episodes and first seed."""
    task, results = cfg.env.id, []
    if evaluation:
        run = {"episodes": evaluation["episodes"], "seed": evaluation["seed"]}

        def metric(kind: str, value, name: str) -> EvalResult:
            return EvalResult(task_type="reinforcement-learning",
                              task_name="reinforcement-learning", dataset_type=task,
                              dataset_name=task, dataset_args=run,
                              metric_type=kind, metric_name=name, metric_value=value,
                              verified=False)

        spread = f"{evaluation['return']:.2f} +/- {evaluation['return_std']:.2f}"
        results.append(metric("mean_reward", spread, "mean_reward"))
        if evaluation["return_ci"]:  # none for one episode
            interval = "{:.2f} to {:.2f}".format(*evaluation["return_ci"])
            results.append(metric("mean_reward_ci95", interval, "mean_reward 95% CI (Student's t)"))
        if evaluation["success"] is not None:
            interval = "{:.4f} to {:.4f}".format(*evaluation["success_ci"])
            results += [metric("success_rate", round(evaluation["success"], 4), "success_rate"),
                        metric("success_rate_ci95", interval, "success_rate 95% Wilson CI")]
    tags = ["reinforcement-learning", "soft-actor-critic", "mujoco", task.replace("/", "-"),
            "pixels" if spec.pixels else "state"]
    # no `license`: pixel-sac declares none yet (no LICENSE file, no license in pyproject.toml)
    return ModelCardData(library_name="pixel-sac", pipeline_tag="reinforcement-learning", tags=tags,
                         model_name="SAC", eval_results=results or None)


def model_card(spec, cfg, payload: dict, *, checkpoint: str, formats: list[str],
               evaluation: dict | None) -> str:
    """README.md: the metadata (card_data) and what the folder holds, how it was evaluated and how
    to evaluate it again from the folder, and how to run its files."""
    # here: mujoco loads after configure() has checked MUJOCO_GL
    from trainer.policy.evaluate import describe

    progress, env = payload["progress"], cfg.env
    frames = progress["env_step"] * env.action_repeat
    hours = payload.get("wall_s", 0.0) / 3600
    what = "states" if not spec.pixels else f"{env.image_size}x{env.image_size} camera frames"
    encoder = spec.encoder + (" (frozen, pretrained)" if spec.pixels and cfg.encoder.video.freeze
                              else "")
    lines = [f"# SAC policy for {env.id} from {what}", "",
             f"Soft Actor-Critic trained by pixel-sac (`train_sac.py`), encoder {encoder}: "
             f"{progress['env_step']} agent steps ({frames} env frames at action repeat "
             f"{env.action_repeat}), {progress['episode']} episodes, {hours:.2f} h of training. "
             f"Exported from `{Path(checkpoint).name}`.", ""]
    lines += ["## Evaluation", ""]
    installed = ("with pixel-sac installed (`pip install .` in its clone, where `python3 -m "
                 "trainer.policy.evaluate` runs the same), FOLDER being this folder (from the "
                 "Hub: `hf download REPO_ID --local-dir FOLDER`)")
    if evaluation:
        n, seed = evaluation["episodes"], evaluation["seed"]
        said = describe("", evaluation).removeprefix(": ")
        lines += [f"Deterministic policy (the actor's mean), episode i from seed {seed} + i: "
                  f"{said}.", "",
                  "Evaluate it again from the folder: "
                  f"`pixel-sac-evaluate FOLDER --episodes {n} --seed {seed}`, {installed}. The "
                  "same seeds give the same episodes.", "",
                  "![an evaluation episode](episode.gif)", ""]
    else:
        lines += ["Not evaluated at export (`--episodes 0`): `pixel-sac-evaluate FOLDER` measures "
                  f"it, {installed}.", ""]
    inside = ("normalisation, " + ("the frozen trunk, " if cfg.encoder.video.freeze
                                   else "") + "the encoder and the "
              "actor are" if spec.pixels else "the actor is")
    runtimes = {"onnx": ["import numpy as np, onnxruntime",
                         "session = onnxruntime.InferenceSession(\"policy.onnx\")",
                         "action = session.run(None, {\"obs\": obs})[0]          # obs as "
                         "above, a batch of 1 or more"],
                "torchscript": ["import torch", "policy = torch.jit.load(\"policy.pt\")",
                                "action = policy(torch.from_numpy(obs)).numpy()"]}
    files = {"torchscript": "- `policy.pt`: TorchScript (torch.jit.load runs its code: trust the "
                            "source)",
             "onnx": f"- `policy.onnx`: ONNX, opset {ONNX_OPSET}, dynamic batch (ONNX Runtime)"}
    camera = "the task's default camera" if env.camera is None else f"camera `{env.camera}`"
    state = f"float32 `obs` of shape (B, {spec.obs_shape[0]}): the state vector"
    stack = (f"uint8 `obs` of shape (B, {', '.join(map(str, spec.obs_shape))}): the last "
             f"{spec.obs_shape[0]} RGB frames of {camera}, oldest first, channels first; at an "
             "episode start the first frame fills the stack") if spec.pixels else state
    lines += ["## Use", "",
              f"Input: {stack}. Output: float32 `action` (B, {len(spec.action_low)}) within the "
              f"task's bounds {spec.action_low} to {spec.action_high}. One action per agent step: "
              f"apply it for {env.action_repeat} control steps of the task. The {inside} inside "
              "the file; `policy.json` states this contract.", "",
              "```python", *[line for name in formats for line in runtimes[name]], "```", "",
              "With pixel-sac installed, `Policy.load(folder)` keeps the frame stack itself: "
              "`policy.reset()`, then `policy.step(frame)` per uint8 (H, W, 3) frame.", "",
              "## Files", "", *[files[name] for name in formats],
              "- `policy.json`: inputs, outputs, action bounds, action repeat",
              "- `policy.safetensors`: the weights `Policy.load(folder)` reads (tensors, no code)",
              "- `config.yaml`: the run's resolved training config, less the training machine's "
              f"settings ({', '.join(MACHINE_KEYS)} at their defaults)",
              "- `README.md`: this card, its metadata the Hugging Face Hub reads",
              *(["- `episode.gif`: the first evaluation episode"] if evaluation else []),
              *(["- `episode.mp4`: the same episode, H.264"] if evaluation and evaluation["mp4"]
                else []), ""]
    return f"---\n{card_data(spec, cfg, evaluation).to_yaml()}\n---\n\n" + "\n".join(lines)


def shareable_yaml(cfg) -> str:
    """The config as config.yaml, with MACHINE_KEYS at their defaults."""
    shared, defaults = copy.deepcopy(cfg), Config()
    for key in MACHINE_KEYS:
        section, name = key.split(".")
        setattr(getattr(shared, section), name, getattr(getattr(defaults, section), name))
    return to_yaml(shared)


@contextlib.contextmanager
def output_folder(out: Path) -> Iterator[Path]:
    """A hidden folder inside `out` to write the export in, whose files move into `out` when the
    body ends: `out` may be new, an empty folder, a mount point or a link to either, and is checked
    before any work. An flock on `out` keeps a second export out; while it is held, a hidden folder
    there is a killed export's and is removed. On a failure `out` is left as it was (removed if
    made here), and a full disk is one line."""
    check_writable_folder(out, what=f"export to {out}",
                          fix="pass --out in a folder this process may write to")
    folder = out.resolve()  # where a link points
    made = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)  # exist_ok: another export may have made it
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:  # a full disk, or a file put there since the check
        raise UserError(f"cannot make --out {out} a folder ({err.strerror}); pass another "
                        "--out") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"another export is writing to {out}; wait for it to end, or pass "
                            "another --out") from None
        for stale in folder.glob(f"{STAGING}*"):
            shutil.rmtree(stale)
        if any(folder.iterdir()):
            raise UserError(f"--out {out} exists and is not an empty folder; pass a new folder or "
                            "move it aside")
        staging, moved = folder / f"{STAGING}{os.getpid()}", []
        try:
            staging.mkdir()
            yield staging
            for path in staging.iterdir():
                moved.append(folder / path.name)
                path.rename(moved[-1])
        except BaseException as err:
            for path in moved:
                path.unlink()
            shutil.rmtree(staging, ignore_errors=True)
            if made:
                folder.rmdir()
            if full := no_room(err):
                raise UserError(f"cannot write the export to {out} ({full.strerror}); free space "
                                "on its disk or pass --out on another disk, then export again "
                                "(nothing was written)") from None
            raise
        staging.rmdir()
    finally:
        os.close(fd)


def export(args: argparse.Namespace) -> Path:
    out = Path(args.out)
    with output_folder(out) as tmp:
        policy, cfg, payload = load_checkpoint(args.checkpoint, unit_actions=True,
                                               overrides=args.set)
        net = policy.net
        bounded = PolicyNet(net.encoder, net.actor, low=policy.low, high=policy.high,
                            float16_features=net.float16_features, unit_actions=False)
        export_formats(bounded, policy.spec, tmp, args.formats)
        evaluation = evaluate(policy, cfg, args, tmp)
        (tmp / SPEC_FILE).write_text(json.dumps(policy.spec.to_json(), indent=2) + "\n")
        weights = {key: value.contiguous() for key, value in bounded.state_dict().items()}
        # bytes written by Python: safetensors' own writer fails on a full disk without an errno
        (tmp / WEIGHTS_FILE).write_bytes(safetensors_bytes(weights))
        (tmp / CONFIG_FILE).write_text(shareable_yaml(cfg))
        (tmp / "README.md").write_text(model_card(policy.spec, cfg, payload,
                                                  checkpoint=args.checkpoint,
                                                  formats=args.formats, evaluation=evaluation))
    return out


def evaluate(policy, cfg, args: argparse.Namespace, folder: Path) -> dict | None:
    """The evaluation's summary (trainer.policy.evaluate.summary) with its first seed and whether an
    MP4 was written, its first episode written to episode.gif and episode.mp4 in `folder`; None for
    --episodes 0."""
    # here: mujoco loads after configure() has checked MUJOCO_GL
    from trainer.policy import evaluate as evaluation

    if args.episodes < 1:
        return None
    seed = cfg.training.seed + EVAL_SEED_OFFSET if args.seed is None else args.seed
    size = args.video_size or cfg.logging.video_size
    with tqdm(total=args.episodes, unit="ep", desc="evaluating", dynamic_ncols=True) as bar:
        rows, clip = evaluation.evaluate(args.checkpoint, policy, cfg, episodes=args.episodes,
                                         seed=seed,
                                         video_episodes=1, video_size=size, progress=bar)
    if no_mp4 := write_videos(clip, folder / "episode.gif"):
        print(f"warning: {no_mp4}", file=sys.stderr)
    return evaluation.summary(rows) | {"seed": seed, "mp4": not no_mp4}


def push(folder: Path, repo_id: str) -> None:
    """Upload the folder with huggingface_hub; any failure (offline, no token, no access) is one
    line."""
    try:
        api = HfApi()
        api.create_repo(repo_id, exist_ok=True)
        api.upload_folder(repo_id=repo_id, folder_path=str(folder))
    except Exception as err:
        # the hub client raises many types (offline mode, HTTP, auth); all are said the same way
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"cannot push {folder} to the Hugging Face Hub repo {repo_id} ({reason}); "
                        f"the folder is complete: upload it later with `hf upload {repo_id} "
                        f"{folder}` once online and logged in (`hf auth login`)") from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    written = []

    def export_and_push() -> None:
        configure()
        written.append(export(args))
        print(f"exported {args.checkpoint} to {args.out}: "
              f"{', '.join(sorted(path.name for path in written[0].iterdir()))}")
        if args.push:
            push(written[0], args.push)
            print(f"pushed {args.out} to https://huggingface.co/{args.push}")

    return run_command(export_and_push, cut_short=lambda: f"{args.out} is complete; not pushed"
                       if written
                       else f"{args.out} was not written")


if __name__ == "__main__":
    sys.exit(main())
