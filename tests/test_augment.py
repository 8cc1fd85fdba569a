"""Random shift equals replicate-pad then crop, with one shift per sample shared by its whole frame
stack."""

import torch
import torch.nn.functional as F

from sac.augment import random_shift


def all_crops(image: torch.Tensor, pad: int) -> list[torch.Tensor]:
    """Every crop of the replicate-padded (T, C, H, W) image: the reference definition of a random
    shift."""
    height, width = image.shape[-2:]
    padded = F.pad(image.float().flatten(0, 1)[None], (pad,) * 4, mode="replicate")[0].view(
        *image.shape[:2], height + 2 * pad, width + 2 * pad)
    return [padded[..., dy:dy + height, dx:dx + width].to(image.dtype)
            for dy in range(2 * pad + 1) for dx in range(2 * pad + 1)]


def test_each_sample_is_one_crop_of_its_padded_stack():
    torch.manual_seed(0)
    # not square: rows and columns kept apart
    obs = torch.randint(0, 256, (16, 3, 3, 20, 28), dtype=torch.uint8)
    out = random_shift(obs, pad=4)
    assert out.shape == obs.shape and out.dtype == torch.uint8
    for sample, shifted in zip(obs, out):
        assert any(torch.equal(shifted, crop)
                   for crop in all_crops(sample, 4)), "not a pad-and-crop of the whole stack"


def test_shifts_vary_across_the_batch_and_zero_pad_is_identity():
    torch.manual_seed(1)
    obs = torch.randint(0, 256, (64, 3, 3, 20, 20), dtype=torch.uint8)
    out = random_shift(obs, pad=4)
    unchanged = sum(torch.equal(a, b) for a, b in zip(obs, out))
    assert unchanged < 10, "about 1 in 81 samples keeps the zero shift"
    assert random_shift(obs, pad=0) is obs
