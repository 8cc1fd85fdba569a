"""DrQ's random-shift augmentation: replicate-pad each image by `pad` pixels, crop back to the original size at a
random offset. One shift per sample, shared by all frames of its stack.

Written as a clamped-index gather, which equals pad-then-crop exactly, keeps uint8 (4x less memory traffic than
float) and runs on whatever device the batch is on.
"""

import torch


def random_shift(obs: torch.Tensor, pad: int) -> torch.Tensor:
    """uint8 (B, T, C, H, W) in, same shape and dtype out."""
    if pad == 0:
        return obs
    batch, height, width = obs.shape[0], obs.shape[-2], obs.shape[-1]
    shifts = torch.randint(0, 2 * pad + 1, (batch, 2), device=obs.device) - pad
    rows = (torch.arange(height, device=obs.device) + shifts[:, :1]).clamp_(0, height - 1)
    cols = (torch.arange(width, device=obs.device) + shifts[:, 1:]).clamp_(0, width - 1)
    samples = torch.arange(batch, device=obs.device)[:, None, None]
    channels_last = obs.permute(0, 3, 4, 1, 2)  # (B, H, W, T, C): the gathered axes first
    shifted = channels_last[samples, rows[:, :, None], cols[:, None, :]]
    return shifted.permute(0, 3, 4, 1, 2).contiguous()
