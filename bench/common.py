"""What the benchmarks share: the CPU's name for their reports (timings are read beside the CPU that
made them), an argparse type for their counts and durations, and the GPU's utilisation while one
runs. Standard library only (NVML is imported when measured): gpu_check imports it before anything
heavy."""

import argparse
import math
import platform
import re
import threading
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (e.g. "AMD EPYC 9B14"), else what `platform`
    knows."""
    try:
        return re.search(r"model name\s*:\s*(.+)",
                         Path("/proc/cpuinfo").read_text()).group(1).strip()
    except (OSError, AttributeError):
        return platform.processor() or platform.machine()


def positive(kind):
    """An argparse type: `kind` (int or float) finite and above zero, else a one-line usage
    error."""
    def parse(text: str):
        value = kind(text)
        if not 0 < value < math.inf:
            raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its error: "invalid int value: 'x'"
    return parse


class Utilisation:
    """Mean NVML GPU utilisation over its lifetime, sampled every 0.1 s in a thread; None without
    NVML or CUDA."""

    def __init__(self, device):
        self.samples, self.handle, self.done = [], None, threading.Event()
        if device.type != "cuda":
            return
        try:
            import pynvml  # here: this module is standard library only (above)

            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        except Exception:  # no driver library or no permission: utilisation is simply not reported
            return
        self.thread = threading.Thread(target=self._sample, args=(pynvml,), daemon=True)
        self.thread.start()

    def _sample(self, pynvml) -> None:
        while not self.done.wait(0.1):
            self.samples.append(pynvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

    def stop(self, *, skip: float = 0.0) -> float | None:
        """The mean, leaving out the first `skip` fraction of the samples (a training run's start
        and seed steps)."""
        if self.handle is None:
            return None
        self.done.set()
        self.thread.join()
        kept = self.samples[int(skip * len(self.samples)):]
        return round(sum(kept) / len(kept), 1) if kept else None


def scalars(run: Path) -> dict:
    """{tag: [values in step order]} from a run's TensorBoard events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not run.is_dir():
        return {}
    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [event.value for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
