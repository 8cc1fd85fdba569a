"""DrQ's conv stack: the frames of a stack are concatenated on the channel axis and seen by a 2D conv net.
Cheap enough for CPU training and the encoder behind the published DrQ/CURL pixel-SAC results."""

import torch
from torch import nn


class Simple2DCNN(nn.Module):
    def __init__(self, cfg, obs_shape: tuple[int, int, int, int]):
        super().__init__()
        frames, channels, height, width = obs_shape
        layers = [nn.Conv2d(frames * channels, cfg.num_filters, 3, stride=2), nn.ReLU()]
        for _ in range(cfg.num_layers - 1):
            layers += [nn.Conv2d(cfg.num_filters, cfg.num_filters, 3, stride=1), nn.ReLU()]
        self.convs = nn.Sequential(*layers, nn.Flatten())
        for layer in self.convs:
            if isinstance(layer, nn.Conv2d):
                nn.init.orthogonal_(layer.weight, nn.init.calculate_gain("relu"))
                nn.init.zeros_(layer.bias)
        self.obs_shape = tuple(obs_shape)
        with torch.no_grad():
            self.repr_dim = self.forward(torch.zeros(1, *obs_shape, dtype=torch.uint8)).shape[1]

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        assert obs.dtype == torch.uint8 and tuple(obs.shape[1:]) == self.obs_shape, f"expected uint8 (B, {self.obs_shape}), got {obs.dtype} {tuple(obs.shape)}"
        x = obs.flatten(1, 2).float() / 255.0 - 0.5
        return self.convs(x)
