"""A segment of a recording read as if it were the whole file.

Long recordings cut into utterances (a Kaldi ``segments`` file, lhotse
supervisions, an index built with ``--segments``) are read through a
:class:`SegmentFile`: an open :class:`~audiotree.io.AudioFile` seen through the
window ``[start, end)`` seconds, and optionally on some of its channels (a
lhotse supervision of one speaker of a stereo call). Its ``info`` describes the
segment (``frames`` is the segment's length, ``channels`` its channel count) and ``read(start, n)`` counts frames from the
segment's first one, clamped at its last, so every excerpt strategy, the
``loudest`` search and the loudness profile run on a segment unchanged and can
never take audio from outside it.

Bounds are whole frames: ``first = round(start * rate)``, ``stop =
round(end * rate)``. For PCM (WAV, AIFF) and FLAC a segment is sample-exact
against ``soundfile.read(path, start=first, stop=stop)``. For lossy codecs the
frame positions are the same, and the samples are what a seek to ``first``
decodes (see :mod:`audiotree.io.decode` for each codec's seek tolerance).

>>> import numpy as np, soundfile, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "ramp.wav")
>>> soundfile.write(path, np.arange(8000, dtype=np.float32) / 8000, 8000, subtype="FLOAT")
>>> with open_audio(path, (0.25, 0.5)) as f:
...     f.info.frames, float(f.read(0, 1)[0, 0]), f.read(1990, 100).shape
(2000, 0.25, (10, 1))
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import numpy as np

from audiotree.io.decode import AudioFile

__all__ = ["SegmentFile", "open_audio", "segment_frames", "check_window"]


def check_window(window: Any) -> tuple | None:
    """``window`` as ``(start, end)`` seconds, or ``(start, end, channels)`` (``None`` stays ``None``).

    ``channels``: the file's channels the segment is on (distinct indices, in
    order; a lhotse supervision's ``channel``). ValueError when malformed.
    """
    if window is None:
        return None
    try:
        bounds, channels = (window[:2], window[2]) if len(window) == 3 else (window, None)
        start, end = (float(v) for v in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"window must be (start, end) seconds, got {window!r}.") from None
    if not (math.isfinite(start) and math.isfinite(end)) or start < 0 or end <= start:
        raise ValueError(f"window must satisfy 0 <= start < end (seconds), got {window!r}.")
    if channels is None:
        return start, end
    picked = tuple(int(c) for c in channels) if isinstance(channels, (tuple, list)) else ()
    if not picked or len(set(picked)) != len(picked) or min(picked) < 0 or list(picked) != list(channels):
        raise ValueError(f"a window's channels must be distinct channel indices >= 0, got {channels!r}.")
    return start, end, picked


def segment_frames(window: tuple[float, float], sample_rate: int, frames: int) -> tuple[int, int]:
    """The frames ``[first, stop)`` of ``window`` (seconds) in a file of ``frames`` frames at ``sample_rate``."""
    first = int(round(window[0] * sample_rate))
    stop = int(round(window[1] * sample_rate))
    return min(first, frames), min(max(stop, first), frames)


class SegmentFile:
    """The frames ``[first, stop)`` of an open ``AudioFile``, read as a whole file.

    Attributes:
      path: the recording's path.
      info: its ``AudioInfo`` with ``frames`` the segment's length.
      first: the segment's first frame in the recording (its offset).
      backend: the recording's decoder.
    """

    __slots__ = ("_file", "path", "info", "first", "backend", "channels")

    def __init__(self, audio: AudioFile, window: tuple):
        info = audio.info
        first, stop = segment_frames(window, info.sample_rate, info.frames)
        self.channels = list(window[2]) if len(window) == 3 else None  # the file's channels it is on (None: all)
        if self.channels is not None and max(self.channels) >= info.channels:
            audio.close()
            from audiotree.errors import AudioReadError

            raise AudioReadError(f"Segment [{window[0]:.3f}, {window[1]:.3f}) s is on channel(s) {self.channels} of "
                                 f"'{audio.path}', which has {info.channels}; the segment list and the recording "
                                 "disagree. Rebuild the index.", audio.path)
        if first >= info.frames or stop <= first:
            audio.close()
            from audiotree.errors import AudioReadError

            raise AudioReadError(
                f"Segment [{window[0]:.3f}, {window[1]:.3f}) s is past the end of '{audio.path}' "
                f"({info.duration:.3f} s); the segment list and the recording disagree. Rebuild the index.",
                audio.path,
            )
        self._file = audio
        self.path = audio.path
        self.first = first
        self.backend = audio.backend
        self.info = dataclasses.replace(info, frames=stop - first,
                                        channels=info.channels if self.channels is None else len(self.channels))

    def __enter__(self) -> "SegmentFile":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def close(self) -> None:
        self._file.close()

    def read(self, start_frame: int, num_frames: int | None = None) -> np.ndarray:
        """Frames ``[start_frame, start_frame + num_frames)`` of the segment, never past its end."""
        start = int(start_frame)
        if start < 0:
            raise ValueError(f"start_frame must be >= 0, got {start}.")
        left = max(self.info.frames - start, 0)
        count = left if num_frames is None else min(int(num_frames), left)
        if count <= 0:
            return np.empty((0, self.info.channels), dtype=np.float32)
        data = self._file.read(self.first + start, count)
        return data if self.channels is None else np.ascontiguousarray(data[:, self.channels])


def open_audio(path: str | os.PathLike, window: tuple[float, float] | None = None, **kwargs: Any):
    """``AudioFile(path)``, or its segment ``window = (start, end)`` seconds as a :class:`SegmentFile`.

    Inside :func:`audiotree.io.flac_indexed.seek_hint` for ``path`` (a corpus
    index row's FLAC seek table) the file opens as a
    :class:`~audiotree.io.flac_indexed.FlacSeekFile` instead.
    """
    from audiotree.io.flac_indexed import hinted

    audio = None if kwargs else hinted(os.fspath(path))
    if audio is None:
        audio = AudioFile(path, **kwargs)
    if window is None:
        return audio
    return SegmentFile(audio, window)
