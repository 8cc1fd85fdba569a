"""The state path: the simulator's state vector is already a good representation, so the encoder only checks
and casts it; the SAC heads' MLPs do the rest."""

import torch
from torch import nn


class StateEncoder(nn.Module):
    def __init__(self, obs_shape: tuple[int, ...]):
        super().__init__()
        assert len(obs_shape) == 1, f"state observations are vectors, got shape {obs_shape}"
        self.repr_dim = obs_shape[0]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        assert obs.dim() == 2 and obs.shape[1] == self.repr_dim, f"expected (B, {self.repr_dim}), got {tuple(obs.shape)}"
        return obs.float()
