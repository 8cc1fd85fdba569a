"""An episode's videos, written for the run's evaluations and by the policy commands: the GIF that
the model card on the Hugging Face Hub and the docs embed, and an H.264 MP4 beside it, as
Stable-Baselines3's users know them, a fraction of the GIF's size. Where PyAV cannot encode, the GIF
alone, and a line that says why.
"""

import io
from pathlib import Path

import numpy as np
from PIL import Image

from file_ops import atomic_write

# one frame per agent step, whatever an agent step lasts in the task: one speed for every task
FRAMES_PER_S = 30
CODEC = "libx264"  # H.264, which PyAV's wheels encode through the x264 they bundle
PYAV = "av==18.1.0"  # requirements.txt's pin, for the line that says how to get the MP4s


def write_videos(frames: list[np.ndarray], gif: Path) -> str | None:
    """uint8 (H, W, 3) `frames` as `gif` and as the MP4 of the same name beside it, each atomically;
    None, or why there is no MP4 and how to get it. A disk's OSError propagates, as for any file
    written."""
    images = [Image.fromarray(frame) for frame in frames]
    atomic_write(gif,
                 lambda f: images[0].save(f, format="GIF", save_all=True, append_images=images[1:],
                                          duration=1000 // FRAMES_PER_S, loop=0))
    try:
        data = mp4_bytes(frames)
    except ImportError:
        return f"videos as GIFs only: PyAV is not installed; pip install {PYAV} adds the MP4s"
    except Exception as err:
        # FFmpeg's errors come in many types; any of them means no MP4, never a stopped run
        said = str(err).strip()
        reason = f"{type(err).__name__}: {said.splitlines()[0]}" if said else type(err).__name__
        return (f"videos as GIFs only: PyAV cannot encode H.264 with {CODEC} ({reason}); its "
                f"wheels bundle FFmpeg with x264: pip install --force-reinstall {PYAV} adds the "
                "MP4s")
    atomic_write(gif.with_suffix(".mp4"), lambda f: f.write(data))
    return None


def mp4_bytes(frames: list[np.ndarray]) -> bytes:
    """The MP4, encoded in memory so that an encoder's failure writes nothing: H.264 in yuv420p, the
    pixel format every player decodes, which needs an even width and height; an odd one gets its
    last row or column repeated."""
    import av  # here: a missing PyAV is an ImportError the caller turns into a GIF alone

    height, width = frames[0].shape[:2]
    pad = ((0, height % 2), (0, width % 2), (0, 0))
    out = io.BytesIO()
    with av.open(out, "w", format="mp4") as container:
        stream = container.add_stream(CODEC, rate=FRAMES_PER_S)
        stream.width, stream.height, stream.pix_fmt = (width + width % 2, height + height % 2,
                                                       "yuv420p")
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(np.pad(frame, pad, mode="edge"),
                                                                   format="rgb24")))
        container.mux(stream.encode())  # the frames the encoder still holds
    return out.getvalue()
