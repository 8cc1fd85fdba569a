"""A deployed policy's speed: batch-1 actions per second per encoder at 84 px, in eager PyTorch,
TorchScript (policy.pt) and ONNX Runtime (policy.onnx), as python3 -m trainer.policy.export writes
them. A robot's control loop needs each action well under its 20-50 ms period.

    python3 bench/policy_speed.py [--threads 1] [--seconds 3] [--only simple2dcnn state]

Each row is the dishwashing policy's network (its config's SAC heads, 4 actions) with freshly
initialised weights (weights do not change the cost): uint8 frame stacks (3 frames of 84 x 84 RGB)
or the 26-number state in, bounded actions out. Frozen: simple2dcnn under a 256-unit projection, as
dishwashing_video_frozen.yaml's pretrained trunk. Per runtime: warm-up, then as many
single-observation calls as fit in --seconds; the median call time gives the rate. Prints a Markdown
table, then one JSON line per row.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import onnxruntime

from bench.common import cpu_name, positive
from encoders import build_encoder
from encoders.frozen import ProjectedEncoder
from sac.agent import Actor
from trainer.config.load import load_config
from trainer.policy import export
from trainer.policy.trained import PolicyNet, Spec

ROOT = Path(__file__).resolve().parent.parent
ROWS = {  # name -> (config, --set overrides)
    "simple2dcnn": ("dishwashing_video.yaml", []),
    "simple3dcnn": ("dishwashing_video.yaml", ["encoder.video.arch=simple3dcnn"]),
    "r3d18": ("dishwashing_video.yaml", ["encoder.video.arch=r3d18"]),
    "timesformer": ("dishwashing_video.yaml", ["encoder.video.arch=timesformer"]),
    "frozen simple2dcnn": ("dishwashing_video.yaml", ["encoder.video.freeze=true"]),
    "state": ("dishwashing_state.yaml", []),
}
ACTIONS, STATE = 4, 26  # the dishwashing task's


def policy_net(name: str) -> tuple[PolicyNet, Spec]:
    config, overrides = ROWS[name]
    cfg = load_config(ROOT / "configs" / config, ["profile=cpu", "demos.path=null", *overrides])
    obs_shape = cfg.env.stack_shape if cfg.pixels else (STATE,)
    encoder = build_encoder(cfg.encoder, obs_shape)
    frozen = cfg.pixels and cfg.encoder.video.freeze
    if frozen:
        encoder = ProjectedEncoder(encoder, nn.Linear(encoder.repr_dim, 256))
    actor = Actor(encoder.repr_dim, action_dim=ACTIONS, cfg=cfg.sac, pixels=cfg.pixels)
    low = -np.ones(ACTIONS, np.float32)
    net = PolicyNet(encoder, actor, low=low, high=-low, float16_features=frozen, unit_actions=False)
    spec = Spec(obs_shape=obs_shape, pixels=cfg.pixels, action_low=low.tolist(),
                action_high=(-low).tolist(),
                task=cfg.env.id, encoder=name, action_repeat=cfg.env.action_repeat)
    return net, spec


def rate(call, obs, seconds: float) -> tuple[float, float]:
    """(actions per second, median milliseconds) of batch-1 calls."""
    for _ in range(3):
        call(obs)
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        call(obs)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return 1 / median, 1000 * median


def measure(name: str, threads: int, seconds: float) -> dict:
    net, spec = policy_net(name)
    obs = export.example_batch(spec, 1)
    row = {"encoder": name, "params": sum(p.numel() for p in net.parameters())}
    with torch.inference_mode():
        row["eager"] = rate(net, obs, seconds)
    with tempfile.TemporaryDirectory() as folder:
        for runtime in export.FORMATS:
            try:
                export.write_format(runtime, net, spec, Path(folder))
            except Exception as err:
                # an encoder that does not export to this format: said in its cell
                row[runtime] = str(err).strip().splitlines()[0][:80]
                continue
            if runtime == "torchscript":
                scripted = torch.jit.load(str(Path(folder) / export.FILES[runtime]))
                with torch.inference_mode():
                    row[runtime] = rate(scripted, obs, seconds)
            else:
                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = options.inter_op_num_threads = threads
                session = onnxruntime.InferenceSession(str(Path(folder) / export.FILES[runtime]),
                                                       options,
                                                       providers=["CPUExecutionProvider"])
                row[runtime] = rate(lambda x: session.run(None, {"obs": x}), obs.numpy(), seconds)
    return row


def cell(value) -> str:
    return (f"{value[0]:,.0f}/s ({value[1]:.2f} ms)" if isinstance(value, tuple)
            else f"fails: {value}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=positive(int), default=1,
                        help="torch and ONNX Runtime threads")
    parser.add_argument("--seconds", type=positive(float), default=3.0,
                        help="timed calls per runtime")
    parser.add_argument("--only", nargs="+", choices=list(ROWS), help="these encoders only")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [measure(name, args.threads, args.seconds) for name in args.only or ROWS]
    print(f"CPU: {cpu_name()}, {args.threads} thread(s), torch {torch.__version__}, batch 1, 84 "
          "px\n")
    print("| encoder | parameters | eager PyTorch | TorchScript | ONNX Runtime |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['encoder']} | {row['params']:,} | {cell(row['eager'])} | "
              f"{cell(row['torchscript'])} | {cell(row['onnx'])} |")
    for row in rows:
        print(json.dumps(row | {"cpu": cpu_name(), "threads": args.threads}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
