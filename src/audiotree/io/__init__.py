"""Decoding layer: open audio files once and read sample-exact excerpts.

Re-exports the public API of :mod:`audiotree.io.decode` and
:mod:`audiotree.io.extensions`.
"""

from __future__ import annotations

from audiotree.io.decode import AudioFile, AudioInfo, probe, read_frames
from audiotree.io.extensions import (
    PYAV_EXTENSIONS,
    SOUNDFILE_EXTENSIONS,
    normalize_extension,
    pyav_available,
    supported_extensions,
)

__all__ = [
    "AudioFile",
    "AudioInfo",
    "probe",
    "read_frames",
    "SOUNDFILE_EXTENSIONS",
    "PYAV_EXTENSIONS",
    "pyav_available",
    "supported_extensions",
    "normalize_extension",
]
