"""torchvision's R3D-18 (Tran et al., 2018), a 3D ResNet, as the trunk: features are the pooled
512-d output, and Kinetics-400 weights load with `pretrained`
(docs/encoders.md#pretrained-weights-offline)."""

import urllib.error
from pathlib import Path

import torch
from torchvision.models.video import R3D_18_Weights, r3d_18

from encoders.config import VideoEncoderConfig
from encoders.video_encoder import VideoEncoder
from errors import UserError

KINETICS = R3D_18_Weights.KINETICS400_V1
CLASSIFIER = "fc."


def default_weights_path() -> Path:
    return Path(torch.hub.get_dir()) / "checkpoints" / Path(KINETICS.url).name


def download(path: Path) -> str | None:
    """Fetch the Kinetics-400 file into torch's hub cache as torchvision does; None when it arrived,
    else why not."""
    try:
        torch.hub.download_url_to_file(KINETICS.url, str(path),
                                       hash_prefix=path.stem.rsplit("-", 1)[-1])
    except (urllib.error.URLError, OSError, RuntimeError) as err:
        path.unlink(missing_ok=True)
        return str(getattr(err, "reason", err)).strip().splitlines()[0] or type(err).__name__
    return None


def read_weights(weights: str | None) -> dict[str, torch.Tensor]:
    """The Kinetics-400 state dict without its classifier, from `weights` or the hub cache;
    UserError if neither."""
    path = Path(weights) if weights else default_weights_path()
    failed = None
    if not weights and not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        failed = download(path)
    if not path.is_file():
        offline = f" and could not be downloaded ({failed})" if failed else ""
        raise UserError(
            f"r3d18 pretrained weights not found at {path}{offline}; on a connected machine "
            f"download {KINETICS.url} (or run: python -c \"import torchvision; "
            "torchvision.models.video.r3d_18(weights='KINETICS400_V1')\" and take it from "
            f"~/.cache/torch/hub/checkpoints/), then copy it to {path} or set `weights`=<file>"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        # torch raises many types for a damaged or foreign file; all mean the same here
        raise UserError(
            f"cannot read r3d18 weights {path} ({type(err).__name__}); replace it with "
            f"{KINETICS.url}"
        ) from None
    return {key: value for key, value in state.items() if not key.startswith(CLASSIFIER)}


class R3D18(VideoEncoder):
    MEAN, STD = tuple(KINETICS.transforms().mean), tuple(KINETICS.transforms().std)
    MEMORY_FORMAT = torch.channels_last_3d
    PRETRAINED = True

    def build(self, cfg: VideoEncoderConfig) -> int:
        assert self.input_shape[1] == len(self.MEAN), (
            f"r3d18 takes RGB frames, got {self.input_shape[1]} channels")
        self.net = r3d_18()
        repr_dim = self.net.fc.in_features
        self.net.fc = torch.nn.Identity()
        if cfg.pretrained:
            try:
                self.net.load_state_dict(read_weights(cfg.weights))
            except RuntimeError as err:
                raise UserError(
                    f"{cfg.weights or default_weights_path()} does not hold r3d_18 weights "
                    f"({str(err).splitlines()[0]}); use {KINETICS.url}"
                ) from None
        return repr_dim

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.layout(x.transpose(1, 2)))
