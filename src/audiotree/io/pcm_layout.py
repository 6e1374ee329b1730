"""Where an uncompressed file's samples sit: a WAV file's ``data`` chunk, an AIFF file's ``SSND`` chunk.

Samples of a PCM file are stored at a constant byte rate from one offset on, so two numbers place any
excerpt's bytes exactly. :func:`data_table` gives them as a two-row seek table ``[[0, data_offset],
[frames, data_offset + frames * block_align]]`` (the same ``[first sample, byte offset]`` rows as a FLAC
file's seek points), which an index keeps so the read-ahead fetches an excerpt's bytes and no more
(:func:`audiotree.sources.read_plans.row_reads`). A table never changes how the file is read: libsndfile
reads it as usual.

A chunk list that runs past the bytes at hand (a ``data`` chunk after a large ``LIST`` or ``bext`` chunk) is
followed by reading each chunk's 8-byte header only, through ``source``: a path, an open file, or a function
``(offset, count) -> bytes``.

>>> import struct
>>> fmt = struct.pack("<4sI2H2I2H", b"fmt ", 16, 1, 1, 16000, 32000, 2, 16)
>>> head = b"RIFF" + struct.pack("<I", 36 + 8 + 20) + b"WAVE" + fmt + b"data" + struct.pack("<I", 20)
>>> wav_data_chunk(head)
(44, 20)
>>> data_table(head, frames=10, channels=1, subtype="PCM_16", container="WAV").tolist()
[[0, 44], [10, 64]]
>>> data_table(head, frames=11, channels=1, subtype="PCM_16", container="WAV") is None  # (bytes and frames differ)
True
"""

from __future__ import annotations

import struct
from typing import Any, Iterator

import numpy as np

from audiotree.io.byte_reads import read_span

__all__ = ["wav_data_chunk", "aiff_sound_chunk", "sample_bytes", "data_table", "planned_ranges", "MARGIN_FRAMES"]

#: Frames planned on each side of an excerpt: the reader rounds its start to a frame (a segment's start and the
#: offset in it separately) and reads one frame more when it resamples.
MARGIN_FRAMES = 8

#: Chunks followed before giving up on finding the samples.
MAX_CHUNKS = 256

#: Bytes per sample of the libsndfile subtypes stored as plain samples.
_SAMPLE_BYTES = {"PCM_S8": 1, "PCM_U8": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4, "FLOAT": 4, "DOUBLE": 8,
                 "ULAW": 1, "ALAW": 1}


def _read(source: Any, offset: int, count: int) -> bytes:
    return source(offset, count) if callable(source) else read_span(source, offset, count)


def _chunk(head: bytes, source: Any, pos: int) -> bytes:
    header = head[pos : pos + 8]
    if len(header) < 8 and source is not None:
        header = _read(source, pos, 8)
    return header


def _walk(head: bytes, source: Any, endian: str) -> Iterator[tuple[int, bytes, int]]:
    """``(offset, id, size)`` of each chunk of a RIFF or IFF file after its 12-byte form header (chunks are
    word-aligned in both), at most :data:`MAX_CHUNKS`, until the bytes end."""
    pos = 12
    for _ in range(MAX_CHUNKS):
        header = _chunk(head, source, pos)
        if len(header) < 8:
            return
        size = struct.unpack_from(endian + "I", header, 4)[0]
        yield pos, header[:4], size
        pos += 8 + size + (size & 1)


def wav_data_chunk(head: bytes, source: Any = None) -> tuple[int, int] | None:
    """(offset, declared size) of a RIFF/WAVE file's ``data`` chunk, else None.

    ``head`` holds the file's first bytes. With ``source`` a chunk list that runs past ``head`` is followed by
    reading just each chunk's 8-byte header, never the chunks themselves.
    """
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    return next(((pos + 8, size) for pos, kind, size in _walk(head, source, "<") if kind == b"data"), None)


def aiff_sound_chunk(head: bytes, source: Any = None) -> tuple[int, int] | None:
    """(offset of the first sample, bytes of samples) of an AIFF/AIFC file's ``SSND`` chunk, else None.

    The samples start after the chunk's header, its ``offset`` and ``blockSize`` fields and ``offset`` bytes more.
    """
    if len(head) < 12 or head[:4] != b"FORM" or head[8:12] not in (b"AIFF", b"AIFC"):
        return None
    for pos, kind, chunk_size in _walk(head, source, ">"):
        if kind != b"SSND":
            continue
        fields = head[pos + 8 : pos + 16]
        if len(fields) < 8 and source is not None:
            fields = _read(source, pos + 8, 8)
        if len(fields) < 8:
            return None
        skip = struct.unpack_from(">I", fields, 0)[0]
        if chunk_size < 8 + skip:
            return None
        return pos + 16 + skip, chunk_size - 8 - skip
    return None


def sample_bytes(subtype: str) -> int | None:
    """Bytes per sample of a libsndfile ``subtype`` stored as plain samples (``None``: any other, e.g. ADPCM)."""
    return _SAMPLE_BYTES.get(str(subtype))


def data_table(head: bytes, source: Any = None, *, frames: int, channels: int, subtype: str,
               container: str, size: int | None = None) -> np.ndarray | None:
    """The two-row table ``[[0, data_offset], [frames, data_offset + frames * block_align]]`` of a WAV (``WAV``,
    ``WAVEX``) or AIFF file (``AIFF``: libsndfile's ``container``), or ``None``.

    Only when the chunk's bytes are exactly ``frames * channels * sample_bytes(subtype)`` (libsndfile's count of
    the open file) and, given ``size``, end within the file: anything else (an unknown size left by a streaming
    writer, a compressed subtype, RF64, W64, CAF, AU) gets no table.
    """
    width = sample_bytes(subtype)
    if width is None or frames <= 0 or channels <= 0:
        return None
    if container in ("WAV", "WAVEX"):
        found = wav_data_chunk(head, source)
    elif container == "AIFF":
        found = aiff_sound_chunk(head, source)
    else:
        return None
    if found is None:
        return None
    offset, nbytes = found
    block_align = width * int(channels)
    if nbytes != int(frames) * block_align or (size is not None and offset + nbytes > int(size)):
        return None
    return np.array([[0, offset], [int(frames), offset + nbytes]], dtype=np.int64)


def planned_ranges(points: Any, start: float, length: float | None, duration: float, size: int,
                   head: int) -> list[tuple[int, int]] | None:
    """The byte ranges reading ``length`` s (``None``: to the end) at ``start`` s of a file of ``size`` bytes
    reads, by its two-row table ``points`` (:func:`data_table`; ``None`` for any other table): the first ``head``
    bytes and the chunks before the samples (libsndfile's open), the excerpt's frames and :data:`MARGIN_FRAMES`
    on each side, and the chunks after the samples (libsndfile's open parses them too), up to ``head`` bytes.

    >>> planned_ranges([[0, 44], [16000, 32044]], 0.5, 0.25, 1.0, 32044, 8192)
    [(0, 8192), (16028, 24062)]
    >>> planned_ranges([[0, 44], [16000, 32044]], 0.5, 0.25, 1.0, 40000, 8192)[-1]  # (a LIST chunk after the data)
    (32044, 40000)
    """
    table = np.asarray(points, dtype=np.int64)
    if table.shape != (2, 2) or table[0, 0] != 0 or not duration or duration <= 0:
        return None
    frames, first, end = int(table[1, 0]), int(table[0, 1]), int(table[1, 1])
    if frames <= 0 or end <= first or (end - first) % frames or end > size:
        return None
    block_align, rate = (end - first) // frames, round(frames / float(duration))
    lo = max(0, int(round(max(0.0, start) * rate)) - MARGIN_FRAMES)
    hi = frames if length is None else min(frames, int(round(start * rate)) + int(np.ceil(length * rate)) + 1
                                           + MARGIN_FRAMES)
    ranges = [(0, min(size, max(head, first))), (first + lo * block_align, first + max(lo, hi) * block_align)]
    if end < size:
        ranges.append((end, min(size, end + head)))
    merged: list[tuple[int, int]] = []
    for a, b in sorted(r for r in ranges if r[1] > r[0]):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged
