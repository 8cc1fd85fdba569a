"""GPU monitoring never stops a run: silent on a CPU, one notice on CUDA without NVML, no readings
from either."""

import torch

from trainer.run.gpu_monitor import GpuMonitor


def test_cpu_training_reports_no_notice_and_no_readings():
    notices = []
    monitor = GpuMonitor(torch.device("cpu"), every_s=0.0, report=notices.append)
    assert monitor.poll() == {} and monitor.poll() == {}
    assert notices == [], "the run's first line names the CPU already"


def test_a_cuda_device_without_an_nvml_driver_is_a_notice_not_a_crash():
    notices = []
    monitor = GpuMonitor(torch.device("cuda", 0), every_s=0.0, report=notices.append)
    if torch.cuda.is_available():  # on a GPU machine the real readings come back
        assert 0 <= monitor.poll()["utilization_pct"] <= 100
    else:
        assert monitor.poll() == {}
        assert len(notices) == 1 and notices[0].startswith("GPU monitoring off: NVML unavailable")
