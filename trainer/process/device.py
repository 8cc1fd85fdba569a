"""What the hardware offers (device, native bfloat16, a compiler, memory for the replay): asked here
by both `profile: auto` and the trainer, so they cannot disagree."""

import os
import platform
import shutil

import psutil
import torch

from errors import UserError

MEMORY_HEADROOM = 0.9  # leave a tenth of free RAM (or device memory) to the rest of the process


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "training.device is cuda but no CUDA device is available; use training.device=auto or "
            "cpu")
    return torch.device(name)


def native_bfloat16(device: torch.device) -> bool:
    """Whether `device` computes bfloat16 in hardware; oneDNN calls plain AVX-512 capable, but
    emulates it there."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if platform.machine().lower() in ("x86_64", "amd64"):
        return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def can_compile(device: torch.device) -> bool:
    """On a CPU, whether the C++ compiler Inductor needs ($CXX, default g++) exists; GPUs are not
    checked."""
    return device.type != "cpu" or shutil.which(os.environ.get("CXX", "g++")) is not None


def replay_frames_device(setting: str, device: torch.device,
                         needed_bytes: int) -> torch.device | None:
    """Where replay frames live: a device, or None for host memory."""
    if setting == "cpu" or (setting == "auto" and device.type != "cuda"):
        return None
    if setting == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "replay.device is cuda but no CUDA device is available; use replay.device=auto or cpu")
    target = torch.device("cuda") if setting == "cuda" else device
    free = torch.cuda.mem_get_info(target)[0]
    if needed_bytes <= MEMORY_HEADROOM * free:
        return target
    if setting == "cuda":
        raise UserError(f"replay.device is cuda but the frames need {needed_bytes / 2**30:.1f} GiB "
                        f"and {free / 2**30:.1f} GiB of GPU memory is free; lower sac.buffer_size "
                        "or set replay.device=auto")
    return None


def check_host_memory(*, buffer_size: int, slot_bytes: int) -> None:
    """Refuse a replay buffer of `buffer_size` slots of `slot_bytes` host bytes that the free RAM
    cannot hold."""
    needed, available = buffer_size * slot_bytes, psutil.virtual_memory().available
    if needed > MEMORY_HEADROOM * available:
        fits = int(MEMORY_HEADROOM * available // slot_bytes)
        raise UserError(
            f"replay buffer of sac.buffer_size={buffer_size} needs {needed / 2**30:.1f} GiB but "
            f"only {available / 2**30:.1f} GiB of RAM is free; lower sac.buffer_size to at most "
            f"{fits}"
        )


def out_of_memory(device: torch.device, *, batch_size: int) -> UserError:
    """A CUDA out-of-memory in an update as a one-line error naming a batch size that fits."""
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    return oom_error(batch_size=batch_size, free=free, total=total,
                     peak=torch.cuda.max_memory_allocated(device))


def oom_error(*, batch_size: int, free: int, total: int, peak: int) -> UserError:
    """The message of `out_of_memory`, from its readings (bytes): at most half the batch, less when
    the peak says so."""
    scaled = int(batch_size * MEMORY_HEADROOM * total / peak) if peak else batch_size
    fits = max(1, min(batch_size // 2, scaled))
    return UserError(
        f"CUDA ran out of memory in an update at sac.batch_size={batch_size} ({free / 2**30:.1f} "
        f"of {total / 2**30:.1f} GiB free, peak {peak / 2**30:.1f} GiB); lower sac.batch_size to "
        f"{fits} or less (or sac.augment_samples, encoder.video.input_size); the last checkpoint "
        "is intact"
    )
