"""DrQ's conv stack: the frames of a stack are concatenated on the channel axis and seen by a 2D
conv net. Cheap enough for CPU training and the encoder behind the published DrQ/CURL pixel-SAC
results."""

import torch
from torch import nn

from encoders.config import VideoEncoderConfig
from encoders.video_encoder import VideoEncoder, init_relu_convs


class Simple2DCNN(VideoEncoder):
    MEMORY_FORMAT = torch.channels_last

    def build(self, cfg: VideoEncoderConfig) -> int:
        frames, channels, _, _ = self.input_shape
        layers = [nn.Conv2d(frames * channels, cfg.num_filters, 3, stride=2), nn.ReLU()]
        for _ in range(cfg.num_layers - 1):
            layers += [nn.Conv2d(cfg.num_filters, cfg.num_filters, 3, stride=1), nn.ReLU()]
        self.convs = nn.Sequential(*layers, nn.Flatten())
        init_relu_convs(self.convs)
        return self.output_dim()

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.convs(self.layout(x.flatten(1, 2)))
