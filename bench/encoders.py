"""Encoder cost on this machine: parameters and milliseconds for one forward + backward pass at
batch 32 on the CPU, on uint8 (B, T, C, H, W) stacks of the default env (3 frames of 84 x 84 RGB).

    OMP_NUM_THREADS=1 python3 bench/encoders.py [--batch 32] [--repeats 3] \\
        [--only r3d18 timesformer]

Each row builds an arch from the config defaults plus the settings shown, from scratch (weights do
not change the cost). One warm-up pass, then the median of --repeats passes of forward + backward of
features.sum(); frozen rows time the forward only, which is all an update computes for them. Prints
a Markdown table, then one JSON line per row.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import cpu_name
from encoders import build_encoder
from encoders.config import EncoderConfig
from envs.config import EnvConfig

# (arch, settings): each arch's defaults, and the settings its example config in configs/dmc/ uses
ROWS = [
    ("simple2dcnn", {}),
    ("simple3dcnn", {}),
    ("r3d18", {}),
    ("r3d18", {"input_size": 112}),
    ("r3d18", {"input_size": 112, "freeze": True}),
    ("timesformer", {"preset": "tiny"}),
    ("timesformer", {"preset": "small"}),
    ("timesformer", {"preset": "base", "input_size": 224, "freeze": True}),
]


def measure(arch: str, settings: dict, batch: int, repeats: int) -> dict:
    cfg = EncoderConfig(type="video")
    cfg.video.arch = arch
    for key, value in settings.items():
        setattr(cfg.video, key, value)
    env = EnvConfig()
    obs_shape = env.stack_shape
    torch.manual_seed(0)
    encoder = build_encoder(cfg, obs_shape)
    obs = torch.randint(0, 256, (batch, *obs_shape), dtype=torch.uint8)

    def one_pass() -> None:
        features = encoder(obs)
        if features.requires_grad:
            features.sum().backward()
            encoder.zero_grad(set_to_none=True)

    one_pass()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        one_pass()
        seconds.append(time.perf_counter() - start)
    return {
        "arch": arch,
        "settings": settings,
        "params": sum(p.numel() for p in encoder.parameters()),
        "repr_dim": encoder.repr_dim,
        "pass": "fwd" if cfg.video.freeze else "fwd+bwd",
        "ms": round(1000 * statistics.median(seconds)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="+", metavar="ARCH", help="measure only these archs")
    args = parser.parse_args()

    rows = [(arch, settings) for arch, settings in ROWS if not args.only or arch in args.only]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
          f"{cpu_name()}, batch {args.batch}, CPU\n")
    print("| arch | settings | params | repr_dim | pass | ms |\n| --- | --- | ---: | ---: | --- | "
          "---: |", flush=True)
    results = []
    for arch, settings in rows:
        result = measure(arch, settings, args.batch, args.repeats)
        results.append(result)
        shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
        print(f"| {arch} | {shown} | {result['params'] / 1e6:.2f} M | {result['repr_dim']} | "
              f"{result['pass']} | {result['ms']} |", flush=True)
    print()
    for result in results:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
