"""DrQ's random shift: replicate-pad by `pad` pixels, crop back at a random offset, one shift per
sample. Stays uint8: one gather over a strided view of every window."""

import torch
import torch.nn.functional as F


def random_shift(obs: torch.Tensor, pad: int) -> torch.Tensor:
    """uint8 (B, T, C, H, W) in, same shape and dtype out."""
    if pad == 0:
        return obs
    batch, frames, channels, height, width = obs.shape
    padded = F.pad(obs.flatten(1, 2), (pad, pad, pad, pad), mode="replicate")
    s_batch, s_channel, s_row, s_col = padded.stride()
    offsets = 2 * pad + 1
    windows = padded.as_strided((batch, offsets, offsets, frames * channels, height, width),
                                # [b, dy, dx] = crop at (dy, dx)
                                (s_batch, s_row, s_col, s_channel, s_row, s_col))
    shifts = torch.randint(0, offsets, (batch, 2), device=obs.device)
    return windows[torch.arange(batch, device=obs.device), shifts[:, 0],
                   shifts[:, 1]].unflatten(1, (frames, channels))
