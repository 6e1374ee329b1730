"""Encoding one excerpt to an audio file (soundfile: WAV, FLAC, AIFF, OGG, ...).

>>> import numpy as np, tempfile, os
>>> path = write_audio(os.path.join(tempfile.mkdtemp(), "a.wav"), np.zeros((2, 100), np.float32), 8000)
>>> path.suffix
'.wav'
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

__all__ = ["write_audio"]


def write_audio(
    path: str | os.PathLike,
    data: np.ndarray,
    sample_rate: int,
    *,
    subtype: str | None = None,
    format: str | None = None,
    endian: str | None = None,
) -> Path:
    """Writes ``data`` ``(C, T)`` at ``sample_rate`` Hz; the container comes from the extension.

    With no ``subtype``, soundfile's default for the container applies (PCM_16
    for WAV). Returns the path written.
    """
    import soundfile

    path = Path(path)
    soundfile.write(path, np.asarray(data).T, int(sample_rate), subtype=subtype, endian=endian, format=format)
    return path
