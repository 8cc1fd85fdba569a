"""Per-world random numbers keyed by (seed, episode, draw), computed batched on the device.

Written by hand because torch's generators are streams: a shared one makes a world's start depend on
the others' resets, and one per world costs N host calls per batched reset. A counter-based hash
(SplitMix64's finaliser) does not.
"""

import math

import torch


def _signed(value: int) -> int:
    """A 64-bit constant as the int64 torch stores (two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)
_MANTISSA = 53  # bits of a float64 mantissa: uniform floats on a 2^-53 grid


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical shift of int64 (torch's >> is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = (x ^ _shift_right(x, 30)) * _MIX1  # int64 products wrap around, as the hash needs
    x = (x ^ _shift_right(x, 27)) * _MIX2
    return x ^ _shift_right(x, 31)


def uniform(seeds: torch.Tensor, *, episodes: torch.Tensor, count: int) -> torch.Tensor:
    """float64 (N, count) in [0, 1): draw j of episode `episodes[i]` of the world seeded `seeds[i]`
    (int64 (N,))."""
    draws = torch.arange(count, device=seeds.device, dtype=torch.int64)
    key = _mix(seeds[:, None] * _GOLDEN + _mix(episodes[:, None] + 1))
    bits = _mix(key + (draws[None] + 1) * _GOLDEN)
    return _shift_right(bits, 64 - _MANTISSA).to(torch.float64) * 2.0 ** -_MANTISSA


def normal(seeds: torch.Tensor, *, episodes: torch.Tensor, count: int) -> torch.Tensor:
    """float64 (N, count) standard normal draws (Box-Muller on pairs of uniforms)."""
    u = uniform(seeds, episodes=episodes, count=2 * count)
    radius = torch.sqrt(-2.0 * torch.log1p(-u[:, :count]))  # 1 - u lies in (0, 1]: no log(0)
    return radius * torch.cos(2.0 * math.pi * u[:, count:])
