"""Reading excerpts of audio files: seek, decode, downmix, resample, fit to length.

:func:`read_excerpt` reads ``duration`` seconds at a given offset; :func:`read_at`
is the same single open with the offset chosen from the file's header (what the
excerpt strategies of :mod:`audiotree.excerpts` build on). Results are plain
arrays (a :class:`Clip` carries them with where they came from); wrapping them
in an ``AudioTree`` is the caller's business (``AudioTree.from_file`` and
``AudioTree.excerpt`` do it), so this module knows nothing of the container,
and nothing of how an excerpt is chosen.

>>> import numpy as np, soundfile, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "tone.wav")
>>> soundfile.write(path, np.full((8000, 2), 0.25, np.float32), 8000)
>>> data, rate = read_excerpt(path, offset=0.5, duration=0.25, mono=True)
>>> data.shape, rate
((1, 2000), 8000)
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable

import numpy as np

from audiotree.dsp.edits import downmix
from audiotree.errors import AudioReadError
from audiotree.io.segment import open_audio
from audiotree.validation import check_duration, check_pad_mode

__all__ = ["Clip", "OffsetPastEndError", "finish_frames", "native_frames", "read_at", "read_excerpt"]

@dataclasses.dataclass(frozen=True, eq=False)
class Clip:
    """One excerpt read from a file, before it becomes an ``AudioTree``.

    Attributes:
      path: the file it was read from.
      data: ``(C, T)`` float32 samples at ``sample_rate``.
      sample_rate: Hz.
      offset: seconds into the file of the first sample.
      lufs: gated loudness (LUFS) when the strategy measured it (``loudest``), else ``None``.
      lufs_windows: ``(W,)`` float32 ungated 0.4 s window loudness, with ``lufs``.
      lengths: real samples of a whole-file read (``full``), else ``None``.
      method: how ``loudest`` chose it (``"index"`` or ``"search"``), else ``None``.
    """

    path: str
    data: np.ndarray
    sample_rate: int
    offset: float
    lufs: float | None = None
    lufs_windows: np.ndarray | None = None
    lengths: int | None = None
    method: str | None = None


# ------------------------------------------------------------------ reading
def _fit_length(data: np.ndarray, target: int, pad_mode: str | None) -> np.ndarray:
    """Trims or right-pads ``data`` ``(C, n)`` to ``target`` samples."""
    n = data.shape[-1]
    if n >= target:
        return data[..., :target]
    if pad_mode is None:
        return data
    if pad_mode == "constant" or n == 0:
        out = np.zeros(data.shape[:-1] + (target,), dtype=data.dtype)
        out[..., :n] = data
        return out
    return np.pad(data, [(0, 0)] * (data.ndim - 1) + [(0, target - n)], mode=pad_mode)


def finish_frames(frames: np.ndarray, native_rate: int, sample_rate: int | None, duration: float | None,
            mono: bool, pad_mode: str | None) -> tuple[np.ndarray, int]:
    """Native ``(n, C)`` frames -> ``(C, T)`` float32 at the target rate and length."""
    rate = int(sample_rate or native_rate)
    if mono:
        frames = downmix(frames, axis=1)
    if rate != native_rate and frames.shape[0]:
        from audiotree.dsp.resample import resample

        frames = resample(frames, native_rate, rate, axis=0)
    data = np.ascontiguousarray(frames.T, dtype=np.float32)
    if duration is not None:
        data = _fit_length(data, int(round(duration * rate)), pad_mode)
    return data, rate


class OffsetPastEndError(AudioReadError, ValueError):
    """An excerpt's offset at or past the end of its file, as the file's header gives it.

    Either the offset is wrong or the file is shorter than whoever chose the
    offset believed (its header is damaged, or it changed since it was
    indexed). Both an :class:`~audiotree.errors.AudioReadError` (so
    ``on_read_error`` handles it like any other unreadable file) and a
    ``ValueError`` (what it was before). ``reason`` is the fault alone, for a
    caller that knows more (where the offset came from) to put in its own message.
    """

    def __init__(self, message: str, file_path: str | None = None, reason: str = ""):
        super().__init__(message, file_path)
        self.reason = reason or message

    def __reduce__(self):
        return (type(self), (str(self), self.file_path, self.reason))


def _start_frame(path: str, info: Any, offset: float) -> int:
    start = int(round(float(offset) * info.sample_rate))
    if offset < 0:
        raise ValueError(f"offset must be >= 0 seconds, got {offset!r}.")
    if offset > 0 and start >= info.frames:
        reason = f"offset {float(offset):.3f} s is at or past the end of the file (duration {info.duration:.3f} s by its header)"
        raise OffsetPastEndError(
            f"Failed to read audio file '{path}': {reason}. If the file is longer than that, its header is damaged: "
            "re-encode it; otherwise read at an offset within its duration, or use on_read_error=\"skip\" to skip it.",
            path, reason,
        )
    return start


def native_frames(duration: float | None, native_rate: int, target_rate: int) -> int | None:
    if duration is None:
        return None
    # One spare frame when resampling so the output covers the target length.
    return int(math.ceil(duration * native_rate)) + (1 if target_rate != native_rate else 0)


def read_excerpt(
    path: str | os.PathLike,
    *,
    offset: float = 0.0,
    duration: float | None = None,
    sample_rate: int | None = None,
    mono: bool = False,
    pad_mode: str | None = "constant",
    check_info: Callable[[Any], None] | None = None,
) -> tuple[np.ndarray, int]:
    """Seeks to ``offset`` s and decodes ``duration`` s; returns ``((C, T) float32, rate)``.

    Only the requested frames are decoded. ``T == round(duration * rate)`` unless
    ``pad_mode`` is None and the file ends first. ``check_info`` is called with
    the file's :class:`~audiotree.io.decode.AudioInfo` before anything is
    decoded (raise to refuse the file): the same single open, where a separate
    ``probe`` would open a remote file twice.
    """
    check_duration(duration)
    check_pad_mode(pad_mode)

    def checked(info):
        check_info(info)
        return offset

    data, rate, _ = read_at(os.fspath(path), checked if check_info is not None else None, offset, duration,
                             sample_rate, mono, pad_mode)
    return data, rate


def read_at(path, choose_offset, offset, duration, sample_rate, mono, pad_mode,
            window=None) -> tuple[np.ndarray, int, float]:
    """Opens ``path`` once (its segment ``window``, when given), reads at ``offset``
    (or ``choose_offset(info)``) within it, finishes.

    Returns ``((C, T) float32, rate, start in seconds into the file)``.
    """
    with open_audio(path, window) as f:
        info = f.info
        if choose_offset is not None:
            offset = choose_offset(info)
        start = _start_frame(path, info, offset)
        frames = f.read(start, native_frames(duration, info.sample_rate, int(sample_rate or info.sample_rate)))
        first = getattr(f, "first", 0)
    data, rate = finish_frames(frames, info.sample_rate, sample_rate, duration, mono, pad_mode)
    return data, rate, (first + start) / info.sample_rate
