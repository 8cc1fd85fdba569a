"""Hardware questions: bfloat16 counts as native on a CPU only with bfloat16 units, replay frames
stay in host memory without a GPU, and compiling on a CPU needs the C++ compiler that torch.compile
would call."""

import os
import platform
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from errors import UserError
from sac.replay import host_bytes_per_slot
from tests.conftest import DEFAULT_CONFIG, run_cli, sets
from trainer.process.device import (
    can_compile,
    check_host_memory,
    native_bfloat16,
    oom_error,
    replay_frames_device,
)


@pytest.mark.skipif(platform.machine() != "x86_64" or not Path("/proc/cpuinfo").exists(),
                    reason="reads Linux x86 CPU flags")
def test_a_cpu_computes_bfloat16_natively_only_with_avx512_bf16_or_amx_units():
    flags = set(Path("/proc/cpuinfo").read_text().split())
    assert native_bfloat16(torch.device("cpu")) == bool(flags & {"avx512_bf16", "amx_bf16"}), (
        "plain AVX-512 emulates it")


def test_plain_avx512_does_not_count_as_native_bfloat16_although_onednn_runs_it(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert not native_bfloat16(torch.device("cpu"))
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert native_bfloat16(torch.device("cpu"))


def test_a_replay_buffer_larger_than_free_ram_is_refused_before_allocation():
    with pytest.raises(UserError, match=r"needs .* GiB .* lower sac.buffer_size to at most \d+"):
        check_host_memory(buffer_size=10**9,
                          slot_bytes=host_bytes_per_slot((3, 84, 84), np.uint8, action_dim=6,
                                                         frames_on_host=True))
    check_host_memory(buffer_size=1000,
                      slot_bytes=host_bytes_per_slot((3, 84, 84), np.uint8, action_dim=6,
                                                     frames_on_host=True))


def test_replay_frames_stay_in_host_memory_without_a_gpu_and_asking_for_cuda_there_is_a_clear_error(
    monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert replay_frames_device("auto", torch.device("cpu"), 10**6) is None
    assert replay_frames_device("cpu", torch.device("cpu"), 10**6) is None
    with pytest.raises(UserError,
                       match="replay.device is cuda but no CUDA device is available; use "
                             "replay.device=auto or cpu"):
        replay_frames_device("cuda", torch.device("cpu"), 10**6)


def test_compiling_on_a_cpu_needs_the_compiler_named_by_cxx(monkeypatch, tmp_path):
    compiler = tmp_path / "my-c++"
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(compiler.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CXX", "my-c++")
    assert can_compile(torch.device("cpu"))
    monkeypatch.setenv("CXX", "no-such-compiler")
    assert not can_compile(torch.device("cpu"))


def test_cuda_out_of_memory_names_the_setting_and_a_batch_that_fits():
    """The commonest GPU problem, out of memory: one line, the key to lower and a value scaled from
    the peak reached."""
    gib = 2**30
    message = str(oom_error(batch_size=512, free=1 * gib, total=24 * gib, peak=60 * gib))
    assert ("\n" not in message and "sac.batch_size=512" in message
            and "1.0 of 24.0 GiB free" in message)
    assert "lower sac.batch_size to 184 or less" in message  # 512 * 0.9 * 24 / 60
    small_peak = str(oom_error(batch_size=512, free=0, total=24 * gib, peak=8 * gib))
    assert "lower sac.batch_size to 256 or less" in small_peak, (
        "never more than half the batch that failed")
    assert "lower sac.batch_size to 1 or less" in str(oom_error(batch_size=1, free=0, total=gib,
                                                                peak=gib))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="an out-of-memory needs a CUDA device")
def test_an_update_that_runs_out_of_cuda_memory_is_one_line_and_exit_2(tmp_path):
    free = torch.cuda.mem_get_info()[0]
    # float frames of this many stacks alone exceed the free memory
    batch = int(free // (3 * 3 * 84 * 84 * 4)) * 4
    result = run_cli("--config", DEFAULT_CONFIG, *sets(
        training__device="cuda", sac__batch_size=batch, sac__buffer_size=batch + 100,
        training__seed_steps=batch + 10,
        training__episodes=1, env__max_episode_steps=batch + 20, checkpoint__dir=tmp_path / "ckpt",
        logging__tensorboard_dir=tmp_path / "runs", replay__device="cpu"))
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
    assert "CUDA ran out of memory" in result.stderr and "lower sac.batch_size to" in result.stderr
