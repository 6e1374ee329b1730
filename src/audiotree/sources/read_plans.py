"""What an item of a corpus index will read: the byte ranges the read-ahead fetches before it is asked for.

:func:`row_reads` draws the excerpt's offset exactly as
:func:`~audiotree.excerpts.strategies.select_clip` draws it (the same
``ExcerptConfig`` search, from the same per-item generator) and places its bytes
with :func:`audiotree.io.read_ahead.excerpt_ranges`, from what the index row
holds (:class:`RowFacts`). A tar member whose range the index records is that
range of its shard; so is a Parquet row's recorded cell, its format (and so its
seek table's plan) named in its URL (``&format=flac``). Nothing is planned for what cannot be known here: a local
file (its reads are not requests), ``loudest`` (it meters candidates first), a
member found by listing its shard.

>>> import numpy as np
>>> from audiotree.excerpts.config import ExcerptConfig
>>> class Loader:
...     excerpt, duration = ExcerptConfig(strategy="start"), 1.0
>>> facts = RowFacts(path="https://h/a.wav", size=320_044, duration=10.0)
>>> [(r.start, r.stop) for r in row_reads(facts, np.random.default_rng(0), Loader(), trust_size=True)]
[(0, 48708)]
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from audiotree.io import members, ranged_get, storage
from audiotree.io.byte_range import span_reads
from audiotree.io.read_ahead import PlannedRange, excerpt_ranges

__all__ = ["RowFacts", "row_reads", "UNCOMPRESSED"]

#: Extensions of files whose samples are stored at a constant byte rate (a plan places their excerpts exactly).
UNCOMPRESSED = (".wav", ".wave", ".aif", ".aiff", ".au", ".w64", ".caf")


@dataclasses.dataclass(frozen=True)
class RowFacts:
    """What an index row tells a plan: the item's path, its size in bytes and duration in seconds, its segment
    ``window`` (start, end seconds), its FLAC seek points' byte offsets (or ``None``) and its whole seek table
    (``seek_points``; an MP3's and an Ogg Vorbis file's excerpts are planned exactly by it,
    :func:`audiotree.io.mpeg_seek_points.planned_ranges`, :func:`audiotree.io.ogg_seek_points.planned_ranges`)."""

    path: str
    size: int
    duration: float | None
    window: tuple[float, float] | None = None
    seek_bytes: Any = None
    seek_points: Any = None


def row_reads(facts: RowFacts, rng: np.random.Generator, loader: Any, *, trust_size: bool) -> list[PlannedRange]:
    """The ranges reading ``facts``' item with ``loader`` (an ``ExcerptLoader``) and ``rng`` fetches (``[]``: none
    can be known). The object's size goes with the plan (saving the read its size request) only when
    ``trust_size`` (``on_stale="trust"``): otherwise the read checks the file first."""
    excerpt, duration = getattr(loader, "excerpt", None), getattr(loader, "duration", None)
    if excerpt is None or excerpt.strategy == "loudest" or not facts.duration or not facts.size:
        return []
    path = facts.path
    span = members.recorded_span(path) if members.is_member(path) else None
    if span is not None:
        url, base, size = span
    elif members.is_member(path):
        return []
    else:
        url, base, size = path, 0, facts.size
    if not storage.is_url(url):
        return []
    window = facts.window
    first, last = (0.0, float(facts.duration)) if window is None else (float(window[0]), float(window[1]))
    if excerpt.strategy == "full" or duration is None:
        start, length = first, (None if window is None else last - first)
        if excerpt.crop_to is not None:
            length = min(length if length is not None else float("inf"), float(excerpt.crop_to))
    elif excerpt.strategy == "random":
        start, length = first + excerpt.resolved_search(rng, 0.0, duration, last - first, 0, 1), duration
    else:
        start, length = first, duration
    name = members.format_name(path) if span is not None else url  # a member's own name (a cell's format) says it
    if facts.seek_points is not None and name.lower().endswith(".mp3"):
        from audiotree.io.mpeg_seek_points import planned_ranges

        ranges = planned_ranges(facts.seek_points, start, length, float(facts.duration))
    elif facts.seek_points is not None and name.lower().endswith((".ogg", ".oga")):
        from audiotree.io import ogg_seek_points

        ranges = ogg_seek_points.planned_ranges(facts.seek_points, start, length, float(facts.duration))
    else:
        ranges = None
        if span is None and facts.seek_points is not None and name.lower().endswith(UNCOMPRESSED):
            from audiotree.io import pcm_layout  # (a WAV or AIFF file's two-row table: where its samples are)

            ranges = pcm_layout.planned_ranges(facts.seek_points, start, length, float(facts.duration), int(size),
                                               ranged_get.HEAD_NEED)
    if ranges is None:
        ranges = excerpt_ranges(size=size, duration=float(facts.duration), start=start, length=length,
                                uncompressed=name.lower().endswith(UNCOMPRESSED), seek_bytes=facts.seek_bytes)
    if span is not None and not (facts.seek_points is not None or facts.seek_bytes is not None):
        # (a member read by its seek table fetches its own ranges; the others through byte_range.RemoteSpan)
        ranges = span_reads(ranges, int(size))
    fs = storage.filesystem(url)
    known = int(size) if trust_size and span is None else None
    return [PlannedRange(url, base + lo, base + hi, known, fs) for lo, hi in ranges]
