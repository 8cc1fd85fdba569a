"""The vector path: the simulator's state vector, or a frozen trunk's stored features
(encoders/frozen.py, float16), is already a representation, so the encoder only checks it and casts
it to float32; the SAC heads do the rest."""

import torch
from torch import nn


class StateEncoder(nn.Module):
    def __init__(self, obs_shape: tuple[int, ...]):
        super().__init__()
        assert len(obs_shape) == 1, f"state observations are vectors, got shape {obs_shape}"
        self.repr_dim = obs_shape[0]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        assert obs.dim() == 2 and obs.shape[1] == self.repr_dim, (
            f"expected (B, {self.repr_dim}), got {tuple(obs.shape)}"
        )
        return obs.float()
