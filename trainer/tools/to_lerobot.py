"""Write a recording (trainer.tools.record's Minari dataset) as a LeRobot dataset, to share it on
the Hugging Face Hub or train LeRobot's policies on it:

    python3 -m trainer.tools.to_lerobot datasets/dishwashing_scripted \\
        --out datasets/dishwashing_lerobot --task "put the plate in the rack"
    huggingface-cli upload --repo-type dataset <you>/<name> datasets/dishwashing_lerobot

Frames are stored as PNG (bit-exact), the state as `observation.state`; see
envs/lerobot_format.py for the layout and what one row holds.
"""

import argparse
import sys

from envs import demos, lerobot_format
from envs.rendering import configure
from errors import UserError
from trainer.process import lock
from trainer.process.cli import prog, run_command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog("trainer.tools.to_lerobot"), description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", help="a recording of python3 -m trainer.tools.record")
    parser.add_argument("--out", required=True, help="LeRobot dataset folder to create")
    parser.add_argument("--task", default="the recorded task",
                        help="the episodes' task, as LeRobot's policies read it")
    parser.add_argument("--fps", type=int, help="agent steps per second (default: the task's)")
    args = parser.parse_args(argv)

    def convert() -> None:
        configure()  # before mujoco loads: its import raises on a bad MUJOCO_GL
        from envs.make import control_fps

        data = demos.read(args.dataset)
        env_id = data.recording.get("env_id")
        if args.fps is None and env_id is None:
            raise UserError(f"{args.dataset} does not say its task; pass --fps")
        fps = args.fps or control_fps(env_id, data.recording.get("action_repeat", 1))
        if fps < 1:
            raise UserError(f"--fps must be >= 1, got {fps}")
        with lock.hold_output(args.out, what="dataset"):
            lerobot_format.write(args.out, data, fps=fps, task=args.task,
                                 robot_type=env_id or "unknown",
                                 camera=data.recording.get("camera") or "camera")
        print(f"wrote {args.out}: {len(data.episodes)} episodes, {data.steps} steps at {fps} fps "
              "(LeRobot v3.0)")

    return run_command(convert, cut_short=f"no dataset was written to {args.out}")


if __name__ == "__main__":
    sys.exit(main())
