"""A small 3D conv net over (C, T, H, W): every layer's kernels see neighbouring frames, so motion
is learnt at every depth, not mixed into channels once as in a 2D net. DrQ's widths and depth; the
first two layers halve the image."""

import torch
from torch import nn

from encoders.config import VideoEncoderConfig
from encoders.video_encoder import VideoEncoder, init_relu_convs

KERNEL = (3, 3, 3)
STRIDED_LAYERS = 2


class Simple3DCNN(VideoEncoder):
    MEMORY_FORMAT = torch.channels_last_3d

    def build(self, cfg: VideoEncoderConfig) -> int:
        _, channels, _, _ = self.input_shape
        layers, width = [], channels
        for i in range(cfg.num_layers):
            stride = (1, 2, 2) if i < STRIDED_LAYERS else 1
            layers += [nn.Conv3d(width, cfg.num_filters, KERNEL, stride=stride,
                                 padding=(KERNEL[0] // 2, 0, 0)),
                       nn.ReLU()]
            width = cfg.num_filters
        self.convs = nn.Sequential(*layers, nn.Flatten())
        init_relu_convs(self.convs)
        return self.output_dim()

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.convs(self.layout(x.transpose(1, 2)))
