"""GPU utilisation and memory for TensorBoard, read through NVML; without it, nothing: monitoring
never stops a run."""

import time
from collections.abc import Callable

import pynvml
import torch


class GpuMonitor:
    def __init__(self, device: torch.device, every_s: float, report: Callable[[str], None]):
        self.every_s, self.handle, self._last = every_s, None, float("-inf")
        if device.type != "cuda":  # nothing to say: the run's first line names its device
            return
        try:
            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
            self._nvml = pynvml
        except Exception as err:  # missing library, driver or permission: all mean "no monitoring"
            report(f"GPU monitoring off: NVML unavailable ({err})")

    def poll(self) -> dict[str, float]:
        """Readings when due (at most every `every_s` seconds), else an empty dict."""
        if self.handle is None or time.monotonic() - self._last < self.every_s:
            return {}
        self._last = time.monotonic()
        rates = self._nvml.nvmlDeviceGetUtilizationRates(self.handle)
        memory = self._nvml.nvmlDeviceGetMemoryInfo(self.handle)
        return {
            "utilization_pct": float(rates.gpu),
            "memory_used_gb": memory.used / 2**30,
            "memory_total_gb": memory.total / 2**30,
        }
