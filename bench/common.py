"""What the benchmarks share: the CPU's name for their reports (timings are read beside the CPU that made them), and
an argparse type for their counts and durations. Standard library only: gpu_check imports it before anything heavy."""

import argparse
import math
import platform
import re
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (e.g. "AMD EPYC 9B14"), else what `platform` knows."""
    try:
        return re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text()).group(1).strip()
    except (OSError, AttributeError):
        return platform.processor() or platform.machine()


def positive(kind):
    """An argparse type: `kind` (int or float) finite and above zero, else a one-line usage error."""
    def parse(text: str):
        value = kind(text)
        if not 0 < value < math.inf:
            raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its error: "invalid int value: 'x'"
    return parse
