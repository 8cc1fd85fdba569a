"""An episode's videos (trainer/run/video.py): the GIF, and beside it an H.264 MP4 that PyAV decodes
to the same frames at the same rate, odd sizes padded to the even ones yuv420p needs; where PyAV or
its encoder is missing, the GIF alone and the reason, with the pin that fixes it."""

import sys

import av
import numpy as np
import pytest
from PIL import Image

from tests.conftest import ROOT
from trainer.run import video


def clip(height: int, width: int, frames: int = 12) -> list[np.ndarray]:
    """A bar moving right over a brightening background: no two frames alike, so the GIF keeps every
    one."""
    shots = []
    for i in range(frames):
        frame = np.full((height, width, 3), 20 * i, np.uint8)
        frame[:, i * width // frames:(i + 1) * width // frames] = (255, 40, 0)
        shots.append(frame)
    return shots


def decoded(mp4) -> tuple[av.video.stream.VideoStream, list[np.ndarray]]:
    """The MP4's video stream (its codec's name, pixel format and rate) and its frames as uint8
    RGB."""
    with av.open(str(mp4)) as container:
        stream = container.streams.video[0]
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
        return stream, frames


@pytest.mark.parametrize("height, width", [(40, 40), (41, 37)])
def test_an_episode_is_a_gif_and_an_h264_mp4_of_the_same_frames_at_the_gif_s_rate(
    tmp_path, height, width):
    shots = clip(height, width)
    assert video.write_videos(shots, tmp_path / "eval_ep3.gif") is None
    with Image.open(tmp_path / "eval_ep3.gif") as gif:
        assert gif.size == (width, height) and gif.n_frames == len(shots)
    stream, frames = decoded(tmp_path / "eval_ep3.mp4")
    assert (stream.codec_context.name,
            stream.codec_context.pix_fmt) == ("h264", "yuv420p"), "what every player opens"
    assert stream.average_rate == video.FRAMES_PER_S and len(frames) == len(shots)
    even = (height + height % 2, width + width % 2, 3)
    for shot, frame in zip(shots, frames, strict=True):
        assert frame.shape == even, "an odd size gets its last row or column repeated"
        padded = np.pad(shot, ((0, even[0] - height), (0, even[1] - width), (0, 0)), mode="edge")
        assert np.abs(frame.astype(int) - padded).mean() < 8, (
            "lossy, but the same picture in the same order")
    assert sorted(path.name
                  for path in tmp_path.iterdir()) == [
                      "eval_ep3.gif", "eval_ep3.mp4"], "no temporary left"


@pytest.mark.parametrize("missing", ["pyav", "encoder"])
def test_without_pyav_or_its_h264_encoder_the_gif_is_written_and_the_reason_names_the_pin(
        tmp_path, monkeypatch, missing):
    if missing == "pyav":
        monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError
    else:
        monkeypatch.setattr(video, "CODEC", "libx264-not-in-this-build")  # PyAV's UnknownCodecError
    said = video.write_videos(clip(32, 32), tmp_path / "episode.gif")
    assert said.startswith("videos as GIFs only: PyAV ") and "\n" not in said
    assert f"pip install {'--force-reinstall ' if missing == 'encoder' else ''}{video.PYAV}" in said
    if missing == "encoder":
        assert "(UnknownCodecError: libx264-not-in-this-build)" in said
    with Image.open(tmp_path / "episode.gif") as gif:
        assert gif.n_frames == 12
    assert [path.name for path in tmp_path.iterdir()] == ["episode.gif"]


def test_the_line_names_the_pin_requirements_txt_installs():
    assert video.PYAV in (ROOT / "requirements.txt").read_text().splitlines()
