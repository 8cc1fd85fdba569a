"""A frozen trunk run once per agent step outside the SAC update, so the replay stores its features
instead of frames (docs/encoders.md#frozen-trunks-features-computed-once-per-step)."""

import hashlib

import numpy as np
import torch
from torch import nn

from errors import UserError

# half of float32, 10-bit mantissa (bfloat16 has 7 and no numpy dtype); overflow is an error
FEATURE_DTYPE = np.float16


def fingerprint(encoder: nn.Module, arch: str) -> str:
    """What the stored features mean: the arch, the frames it sees and a hash of every tensor in its
    state dict."""
    digest = hashlib.sha256()
    for key, tensor in sorted(encoder.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{key}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    size = encoder.input_size or "native"
    return (f"{arch} on {'x'.join(map(str, encoder.obs_shape))} at {size} px, sha256 "
            f"{digest.hexdigest()[:16]}")


class ProjectedEncoder(nn.Module):
    """A frozen video encoder under the first layer of the head it was pretrained with
    (`projection`), so the replay stores that layer's few hundred features rather than the arch's
    tens of thousands; with `readout` (the head's last layer), the state the head estimates instead:
    what moves with the task, little of what moves with the scene."""

    def __init__(self, encoder: nn.Module, projection: nn.Linear, *,
                 readout: nn.Linear | None = None):
        super().__init__()
        assert projection.in_features == encoder.repr_dim, (
            "the projection reads the encoder's features")
        assert readout is None or readout.in_features == projection.out_features, (
            "the readout reads the projection")
        self.encoder, self.projection = encoder, projection.requires_grad_(False)
        self.readout = readout if readout is None else readout.requires_grad_(False)
        self.repr_dim = (readout or projection).out_features
        self.input_size, self.obs_shape = encoder.input_size, encoder.obs_shape
        self.train(False)

    def train(self, mode: bool = True) -> "ProjectedEncoder":
        return super().train(False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = torch.relu(self.projection(self.encoder(obs)))
        return (features if self.readout is None else self.readout(features)).float()


class FrozenTrunk:
    def __init__(self, encoder: nn.Module, arch: str, device: torch.device, *, autocast: bool):
        assert not any(p.requires_grad
                       for p in encoder.parameters()), "a FrozenTrunk needs a frozen encoder"
        self.encoder = encoder.to(device).eval()
        self.device, self.autocast = device, autocast
        self.repr_dim = encoder.repr_dim
        self.fingerprint = fingerprint(encoder, arch)

    def __call__(self, stacks: np.ndarray | torch.Tensor) -> np.ndarray:
        """uint8 (N, T, C, H, W) in, FEATURE_DTYPE (N, repr_dim) out."""
        with torch.inference_mode(), torch.autocast(self.device.type, torch.bfloat16,
                                                    enabled=self.autocast):
            features = self.encoder(torch.as_tensor(stacks, device=self.device))
        compact = features.to(torch.float16).cpu().numpy()
        if not np.isfinite(compact).all():
            largest = features.abs().max().item()
            raise UserError(f"the frozen encoder's features reach {largest:.3g}, beyond float16's "
                            "range; this trunk cannot be stored compactly: set `freeze`=false")
        return compact
