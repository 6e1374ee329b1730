"""Header information about an audio file: :class:`AudioInfo`.

>>> AudioInfo("a.wav", 48_000, 16_000, 1, "WAV", "PCM_16").duration
3.0
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AudioInfo"]

# ---------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AudioInfo:
    """Header information about an audio file.

    Attributes:
        path: The file path, as given (``os.fsdecode``-ed to ``str``).
        frames: Length in frames (samples per channel). Exact for every
            libsndfile format; for PyAV files it comes from container metadata
            (see :func:`probe`).
        sample_rate: Native sample rate in Hz.
        channels: Number of channels.
        format: Container format: libsndfile's major format name (``"WAV"``,
            ``"FLAC"``, ``"OGG"``, ``"MP3"``, ``"AIFF"``, ...) or, for PyAV,
            FFmpeg's demuxer name upper-cased (``"MOV"`` for MP4/M4A,
            ``"ASF"`` for WMA, ...).
        subtype: Sample encoding / codec: libsndfile's subtype
            (``"PCM_16"``, ``"FLOAT"``, ``"VORBIS"``, ``"MPEG_LAYER_III"``,
            ...) or, for PyAV, the FFmpeg codec name upper-cased (``"AAC"``).
            ``None`` if unknown.
    """

    path: str
    frames: int
    sample_rate: int
    channels: int
    format: str
    subtype: str | None

    @property
    def duration(self) -> float:
        """Length in seconds (``frames / sample_rate``; 0.0 if the rate is 0)."""
        if self.sample_rate <= 0:
            return 0.0
        return self.frames / self.sample_rate
