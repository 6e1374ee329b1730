"""The per-file work of an index build, run in executor workers.

Top-level functions of plain arguments, so any ``concurrent.futures``
executor (processes under spawn, threads, a cluster) can run them. Only the
decoder and the meter are imported: no JAX, no Grain.
"""

from __future__ import annotations

from typing import Any, Sequence

from audiotree.index.quality import QUALITY_COLUMNS

__all__ = ["index_file", "index_chunk", "index_segments"]


def _error_text(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _empty_row(path: str, group: str | None) -> dict[str, Any]:
    return {
        "path": path, "group": group, "size": -1, "mtime_ns": -1, "container": None, "codec": None,
        "sample_rate": None, "channels": None, "frames": None, "duration": None, "readable": False,
        "error": None, "error_kind": None, "profile_step": None, "profile": None, "seek_points": None,
        **dict.fromkeys(QUALITY_COLUMNS), "clip_blocks": None,
    }


def _stored_profile(audio, mono: bool):
    """The profile of ``audio`` as the index stores it (int16, :func:`~audiotree.index.profile.encode_profile`),
    and its quality columns (:mod:`audiotree.index.quality`), measured in the same decode pass.

    Encoded here, in the worker: the rows sent back are half the size. A
    mean square that is not a finite float32 (samples too large, e.g. 1e25 in a
    float file) is no loudness, so it is an error naming the file.
    """
    import numpy as np

    from audiotree.index.profile import encode_profile, file_profile
    from audiotree.index.quality import encode_clip_blocks, quality_meter

    meter = quality_meter(audio.info)
    profile = file_profile(audio, mono=mono, on_frames=meter.push)
    if not np.all(np.isfinite(profile)):
        raise ValueError(f"'{audio.path}': the loudness of its samples is not finite (they are NaN, infinite, or so "
                         "large their mean square overflows float32), so it cannot be measured; fix or remove the file.")
    clips = encode_clip_blocks(meter.clip_blocks(profile.size), meter.step, meter.channels)
    return encode_profile(profile), {**meter.result(profile), "clip_blocks": clips}


def index_file(path: str, group: str | None, *, loudness: bool, mono: bool,
               storage_options: dict | None = None) -> dict[str, Any]:
    """One index row (base columns, ``path`` absolute or a URL, ``profile`` int16 or None); never raises for a bad
    file."""
    from audiotree.errors import AudioReadError
    from audiotree.index.profile import profile_step
    from audiotree.index import seek_build
    from audiotree.io import AudioFile, storage
    from audiotree.io.members import member_stat

    row = _empty_row(path, group)
    try:
        # Stat before reading: a file that changes during the build then looks stale, never fresh.
        row["size"], row["mtime_ns"] = member_stat(path, storage_options=storage_options)
        # A Parquet cell's format, sniffed from its first bytes, goes in its URL.
        path, data = seek_build.typed_cell(path, storage_options)
        row["path"] = path
        if loudness:  # every byte is read anyway: a FLAC file's are read once, for its seek points too
            audio, row["seek_points"] = seek_build.open_for_build(path, row["size"], storage_options, data)
        else:
            audio = AudioFile(path, storage_options=storage_options)
            row["seek_points"] = seek_build.header_points(path, storage_options, data)
        with audio as f:
            info = f.info
            row.update(
                container=info.format, codec=info.subtype, sample_rate=int(info.sample_rate),
                channels=int(info.channels), frames=int(info.frames), duration=float(info.duration),
            )
            if row["seek_points"] is None:  # a WAV or AIFF file: where its samples are (for planning reads)
                row["seek_points"] = seek_build.pcm_points(path, info, row["size"], storage_options, data)
            if loudness and (mono or info.channels <= 5):
                row["profile"], quality = _stored_profile(f, mono)
                row.update(quality)
                row["profile_step"] = profile_step(info.sample_rate)
        row["readable"] = True
    except (AudioReadError, OSError, ValueError, MemoryError) as exc:
        row["readable"] = False
        row["profile"] = row["profile_step"] = row["seek_points"] = None
        row.update(dict.fromkeys(QUALITY_COLUMNS), clip_blocks=None)
        row["error"] = _error_text(exc)
        # A storage that kept failing (resets, 503s) says nothing about the file: the next build reads it again.
        row["error_kind"] = "transient" if storage.is_transient(exc) else "permanent"
    return row


def index_segments(path: str, group: str | None, windows: Sequence[tuple[int, float, float]], *, loudness: bool,
                   mono: bool, storage_options: dict | None = None, tolerance: float = 0.01) -> list[dict[str, Any]]:
    """One row per segment ``(k, start, end)`` of one recording, opened and probed once; never raises for a bad file.

    Each row carries ``segment`` (``k``) and its ``start``/``end``; ``frames``,
    ``duration`` and ``profile`` describe the segment. A segment ending more
    than ``tolerance`` s past the file's end gets ``past_end`` (the file's
    duration); the build turns that into an error naming its line.
    """
    from audiotree.errors import AudioReadError
    from audiotree.index.profile import profile_step
    from audiotree.io import AudioFile, storage
    from audiotree.io.members import member_stat
    from audiotree.io.segment import SegmentFile, segment_frames

    base = _empty_row(path, group)
    rows = [dict(base, segment=int(w[0]), start=float(w[1]), end=float(w[2]), past_end=None, no_frames=None,
                 missing_channels=None, on=tuple(w[3]) if len(w) > 3 else None) for w in windows]
    failed = (AudioReadError, OSError, ValueError, MemoryError)
    try:
        base["size"], base["mtime_ns"] = member_stat(path, storage_options=storage_options)
        audio = AudioFile(path, storage_options=storage_options)
    except failed as exc:
        kind = "transient" if storage.is_transient(exc) else "permanent"
        for row in rows:
            row.update(size=base["size"], mtime_ns=base["mtime_ns"], error=_error_text(exc), error_kind=kind)
        return rows
    with audio:
        info = audio.info
        rate, total = int(info.sample_rate), int(info.frames)
        facts = dict(size=base["size"], mtime_ns=base["mtime_ns"], container=info.format, codec=info.subtype,
                     sample_rate=rate, channels=int(info.channels), readable=True)
        for row in rows:
            row.update(facts)
            if row["end"] != row["end"]:  # NaN: to the end of the file
                row["end"] = total / rate
            start, end = row["start"], row["end"]
            if end > total / rate + tolerance or start >= total / rate:
                row.update(past_end=total / rate, readable=False, error_kind="permanent",
                           error=f"segment [{start}, {end}) s is past the end of the file ({total / rate:.3f} s)")
                continue
            if row["on"] is not None:
                if max(row["on"]) >= info.channels:
                    row.update(missing_channels=int(info.channels), readable=False, error_kind="permanent",
                               error=f"segment is on channel(s) {list(row['on'])} of a {info.channels}-channel file")
                    continue
                row["channels"] = len(row["on"])
            first, stop = segment_frames((start, end), rate, total)
            if stop <= first:  # rounds to no sample at this rate: every read would fail
                row.update(no_frames=rate, readable=False, error_kind="permanent",
                           error=f"segment [{start}, {end}) s holds no sample at {rate} Hz")
                continue
            row.update(frames=stop - first, duration=(stop - first) / rate)
            if loudness and (mono or row["channels"] <= 5):
                try:
                    # A view of the open file (not closed here: the next segment reads it too), on its channels.
                    window = (start, end) if row["on"] is None else (start, end, row["on"])
                    row["profile"], quality = _stored_profile(SegmentFile(audio, window), mono)
                    row.update(quality)
                    row["profile_step"] = profile_step(rate)
                except failed as exc:
                    row.update(dict.fromkeys(QUALITY_COLUMNS), clip_blocks=None)
                    row.update(readable=False, profile=None, profile_step=None, error=_error_text(exc),
                               error_kind="transient" if storage.is_transient(exc) else "permanent")
    return rows


def index_chunk(items: Sequence[tuple], loudness: bool, mono: bool,
                storage_options: dict | None = None) -> list[dict[str, Any]]:
    """Rows for a chunk of ``(path, group)`` pairs (or ``(path, group, windows)`` of a segment build), in order."""
    out: list[dict[str, Any]] = []
    for item in items:
        if len(item) == 3:
            out += index_segments(item[0], item[1], item[2], loudness=loudness, mono=mono,
                                  storage_options=storage_options)
        else:
            out.append(index_file(item[0], item[1], loudness=loudness, mono=mono, storage_options=storage_options))
    return out
