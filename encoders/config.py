"""The `encoder` config section: which encoder turns observations into features, and a video
encoder's shape."""

from dataclasses import dataclass, field

from settings import setting

ENCODER_TYPES = ("video", "state")
# encoders.ARCHS: tests/test_encoders.py holds them equal
VIDEO_ARCHS = ("simple2dcnn", "simple3dcnn", "r3d18", "timesformer")


@dataclass
class VideoEncoderConfig:
    arch: str = "simple2dcnn"
    pretrained: bool = False
    weights: str | None = None
    freeze: bool = False
    # what a frozen trunk stores: its pretraining head's first layer, or the state that head
    # estimates (its readout)
    frozen_features: str = setting("projection", choices=("projection", "state_estimate"))
    input_size: int | None = setting(None, ge=32, le=1024, note="null = frames as rendered")
    preset: str = setting("small", choices=("tiny", "small", "base"))
    num_filters: int = setting(32, ge=1, le=1024)
    num_layers: int = setting(4, ge=1, le=64)
    channels_last: bool = False


# the encoder.video keys that shape the network and what it sees
ARCH_KEYS = ("arch", "num_filters", "num_layers", "input_size", "preset")


@dataclass
class EncoderConfig:
    type: str = setting("video", choices=ENCODER_TYPES)
    lr: float | None = setting(None, gt=0, le=1, note="null = sac.lr")
    video: VideoEncoderConfig = field(default_factory=VideoEncoderConfig)
