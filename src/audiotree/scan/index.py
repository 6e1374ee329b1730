"""The scan of a corpus index: the report from its rows and loudness profiles; no audio file is opened."""

from __future__ import annotations

import math
import os
from typing import Any

from audiotree.scan.quality import WORST_SHOWN, quality_section
from audiotree.scan.summary import loudness_section, reason_text, summarise

__all__ = ["index_scan_report", "index_has_profiles", "DEFAULT_WINDOW_CUTOFF", "SEGMENT_NOTE"]

#: The note of a segment index's report: its ``files`` (and every per-file list) count segments, one row each.
SEGMENT_NOTE = "a segment index: 'files' counts segments, one row each."

#: The cutoff (LUFS) of the windows section when none is given.
DEFAULT_WINDOW_CUTOFF = -40.0


def index_has_profiles(path: str | os.PathLike) -> bool:
    """Whether the index at ``path`` holds loudness profiles (it was not built with ``--no-loudness``).

    Reads the footer only; a file that is not an index raises the errors of
    :func:`audiotree.index.open_index`.

    >>> import os, tempfile, soundfile, numpy as np
    >>> from audiotree.index import build_index
    >>> folder = tempfile.mkdtemp()
    >>> soundfile.write(os.path.join(folder, "a.wav"), np.zeros(800, np.float32), 8000)
    >>> _ = build_index(folder, os.path.join(folder, "h.parquet"), loudness=False, executor="serial",
    ...                 show_progress=False)
    >>> index_has_profiles(os.path.join(folder, "h.parquet"))
    False
    """
    import pyarrow.parquet as pq

    from audiotree.index import open_index
    from audiotree.index.table_schema import decode_metadata

    path = os.fspath(path)
    try:
        schema = pq.read_schema(path)
    except Exception:  # not Parquet, missing, truncated: open_index's messages name the file and what to do
        open_index(path, columns=["path"])
        raise
    meta, _ = decode_metadata(schema.metadata, path)
    return bool(meta["loudness"].get("enabled"))


def _sources(meta: dict) -> dict[str, list[str]]:
    """The build's sources in the report's form (``{group: entries}``); ``{}`` when the index does not say."""
    described = meta.get("sources")
    if not isinstance(described, dict):
        return {}
    if isinstance(described.get("groups"), dict):
        return {str(g): [str(e) for e in entries] for g, entries in described["groups"].items()
                if isinstance(entries, list)}
    if isinstance(described.get("pool"), list):
        return {"(all)": [str(e) for e in described["pool"]]}
    return {}


def index_scan_report(path: str | os.PathLike, *, duration: float = 1.0, lufs_cutoff: float | None = None,
                      loudness: bool = False, loudness_seconds: float = 30.0,
                      durations_out: list | None = None, worst: int | None = WORST_SHOWN) -> dict[str, Any]:
    """The health report of a corpus index (the keys of :func:`audiotree.scan.scan_report`).

    Counts, formats, rates, channels and durations come from the rows. With
    profiles, ``windows`` gives each file's share of ``duration``-second
    windows (100 ms apart) above ``lufs_cutoff`` (default
    :data:`DEFAULT_WINDOW_CUTOFF`) and the files with none above it; a file
    shorter than ``duration`` has no full window (``windows`` 0, listed under
    ``short`` as the folder scan lists it). ``loudness`` adds the integrated
    loudness of each file's first ``loudness_seconds``, from its profile (of the
    channel average when the index was built with ``--mono``; within 0.1 LU of
    the meter on the same signal). ``quality``, for an index with quality
    columns, gives each column's histogram and its ``worst`` files (``None``:
    every file; :mod:`audiotree.scan.quality`).

    Raises:
      ValueError: ``loudness`` or ``lufs_cutoff`` on an index without profiles,
        bad arguments, or a bad index (the message names the file).

    >>> import os, tempfile, soundfile, numpy as np
    >>> from audiotree.index import build_index
    >>> folder = tempfile.mkdtemp()
    >>> soundfile.write(os.path.join(folder, "a.wav"), 0.1 * np.ones(8000, np.float32), 8000)
    >>> out = os.path.join(folder, "i.parquet")
    >>> _ = build_index(folder, out, executor="serial", show_progress=False)
    >>> report = index_scan_report(out, duration=0.5)
    >>> report["files"], report["windows"]["files"][0]["windows"]
    (1, 6)
    """
    import numpy as np

    from audiotree.index import open_index, window_blocks, window_loudness
    from audiotree.index.quality import has_quality
    from audiotree.index.table_schema import BLOCK_SEC

    if not (isinstance(duration, (int, float)) and math.isfinite(duration) and duration > 0):
        raise ValueError(f"duration must be a positive number of seconds, got {duration!r}.")
    ix = open_index(path, columns="all")
    if not ix.has_profile and (loudness or lufs_cutoff is not None):
        asked = "loudness" if loudness else "a LUFS cutoff"
        raise ValueError(f"{ix.path} has no loudness profiles (it was built with --no-loudness), so {asked} cannot "
                         f"be read from it: rebuild it without --no-loudness, or scan the folders.")
    readable = ix.column("readable").astype(bool).tolist()
    durations = ix.column("duration").tolist()
    groups = ix.table.column("group").to_pylist()
    names = files = ix.paths()  # errors name the file as the build read it
    notes = []
    if ix.has_segments:  # one row per segment: a row is named by its recording and its bounds
        starts, ends = ix.column("start").tolist(), ix.column("end").tolist()
        names = [f"{p} [{s:.3f}, {e:.3f}) s" for p, s, e in zip(names, starts, ends)]
        notes.append(SEGMENT_NOTE)
    errors = ix.table.column("error").to_pylist()
    containers = ix.table.column("container").to_pylist()
    codecs = ix.table.column("codec").to_pylist()
    rates = ix.table.column("sample_rate").to_pylist()
    channels = ix.table.column("channels").to_pylist()
    facts = []
    for i, name in enumerate(names):
        if not readable[i]:
            facts.append({"group": groups[i], "path": name, "reason": reason_text(errors[i] or "", files[i])})
            continue
        facts.append({"group": groups[i], "path": name, "channels": channels[i], "sample_rate": rates[i],
                      "duration": durations[i],
                      "format": f"{containers[i]}/{codecs[i]}" if codecs[i] else str(containers[i])})
    report = summarise(facts, sources=_sources(ix.meta), duration=duration, index=ix.path, notes=notes)
    if durations_out is not None:
        durations_out.extend(f["duration"] for f in facts if f.get("reason") is None)
    if has_quality(ix.meta):
        report["quality"] = quality_section(ix.table, names, readable, worst=worst)
    if not ix.has_profile:
        report["notes"].append("the index holds no loudness profiles (it was built with --no-loudness): no window "
                               "shares, no loudness.")
        return report
    cutoff = DEFAULT_WINDOW_CUTOFF if lufs_cutoff is None else float(lufs_cutoff)
    blocks = window_blocks(duration)
    first = window_blocks(loudness_seconds)
    per_file, silent, measured, unprofiled = [], [], [], 0
    for i, name in enumerate(names):
        if not readable[i]:
            continue
        profile = ix.profile(i)
        if profile is None:  # more than 5 channels in a --stereo index: BS.1770 weighs at most 5
            unprofiled += 1
            continue
        if loudness and profile.size:
            head = profile[:first]
            measured.append((name, float(window_loudness(head, head.size)[0])))
        # A file shorter than the excerpt has no full window: it is padded when read, listed as short.
        lufs = window_loudness(profile, blocks) if durations[i] >= duration else np.zeros(0)
        above = int(np.count_nonzero(lufs > cutoff))
        best = float(lufs.max()) if lufs.size else -math.inf
        per_file.append({"path": name, "windows": int(lufs.size),
                         "share_above": round(above / lufs.size, 4) if lufs.size else None,
                         "max_window_lufs": round(best, 2) if math.isfinite(best) else None})
        if lufs.size and not above:
            silent.append(name)
    if unprofiled:
        report["notes"].append(f"{unprofiled} readable file(s) have no loudness profile (more than 5 channels, "
                               "indexed with --stereo).")
    report["windows"] = {"window_seconds": round(blocks * BLOCK_SEC, 3), "lufs_cutoff": cutoff, "files": per_file,
                         "no_window_above": silent}
    if loudness:
        report["loudness"] = loudness_section(measured, max_seconds=loudness_seconds, mono=ix.mono,
                                              lufs_cutoff=lufs_cutoff)
    return report
