"""The parts of a scan report that do not depend on where the facts came from (folders or an index).

Pure functions of plain values (no audio is read here), so the folder scan
and the index scan build the same keys the same way.
"""

from __future__ import annotations

import collections
import math
import statistics
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["SCHEMA_VERSION", "REPORT_KEYS", "LOUDNESS_KEYS", "WINDOWS_KEYS", "summarise", "drop_unreadable", "reason_text",
           "loudness_section", "duration_histogram", "lufs_histogram"]

SCHEMA_VERSION = 1
#: The top-level keys of every scan report, of a folder or of an index.
REPORT_KEYS = frozenset({
    "version", "index", "sources", "files", "readable", "total_seconds", "total_hours", "groups", "formats",
    "sample_rates", "channels", "duration_histogram", "unreadable", "unreadable_by_reason", "short", "notes",
    "loudness", "windows", "quality",
})
#: The keys of ``report["loudness"]`` when loudness was measured.
LOUDNESS_KEYS = frozenset({
    "max_seconds", "mono", "measured", "silent", "min_lufs", "median_lufs", "max_lufs", "lufs_cutoff",
    "below_cutoff", "histogram", "files",
})
#: The keys of ``report["windows"]`` (index scans with profiles).
WINDOWS_KEYS = frozenset({"window_seconds", "lufs_cutoff", "files", "no_window_above"})

# Duration histogram bins (seconds); the last one is open-ended.
_DURATION_EDGES = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0, math.inf)
_LUFS_BIN = 5.0


def reason_text(error: Any, path: str) -> str:
    """A decoder's error as a report's ``reason``: one line, without the "Failed to read audio file" preamble.

    >>> reason_text("Failed to read audio file 'a.wav': LibsndfileError: no data", "a.wav")
    'LibsndfileError: no data'
    """
    text = " ".join(str(error).split())
    for prefix in (f"Failed to read audio file '{path}': ", f"Failed to read audio file '{path}'"):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    return text or (type(error).__name__ if isinstance(error, BaseException) else "unreadable")


def reason_category(fact: Mapping[str, Any]) -> str:
    """The short category of an unreadable file's fact: its ``category`` (the error's
    :attr:`~audiotree.errors.AudioReadError.category`), else one derived from its ``reason`` text.

    >>> reason_category({"reason": "the file is truncated: its header declares 4000 bytes"})
    'truncated'
    """
    from audiotree.errors import read_error_category

    return str(fact.get("category") or read_error_category(str(fact.get("reason") or "")))


def by_reason(categories: Iterable[str]) -> dict[str, int]:
    """``{category: files}``, most files first (ties by name): the report's ``unreadable_by_reason``.

    >>> by_reason(["truncated", "empty file", "truncated"])
    {'truncated': 2, 'empty file': 1}
    """
    counts = collections.Counter(categories)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def duration_histogram(durations: Iterable[float]) -> list[dict]:
    """File counts per duration bin, from the first non-empty bin to the last.

    >>> duration_histogram([0.5, 3.0, 4.0])
    [{'min_seconds': 0.0, 'max_seconds': 1.0, 'count': 1}, {'min_seconds': 1.0, 'max_seconds': 2.0, 'count': 0}, \
{'min_seconds': 2.0, 'max_seconds': 5.0, 'count': 2}]
    """
    counts = [0] * (len(_DURATION_EDGES) - 1)
    for d in durations:
        for i in range(len(counts)):
            if _DURATION_EDGES[i] <= d < _DURATION_EDGES[i + 1]:
                counts[i] += 1
                break
    nonzero = [i for i, c in enumerate(counts) if c]
    if not nonzero:
        return []
    return [{"min_seconds": _DURATION_EDGES[i],
             "max_seconds": None if math.isinf(_DURATION_EDGES[i + 1]) else _DURATION_EDGES[i + 1],
             "count": counts[i]} for i in range(nonzero[0], nonzero[-1] + 1)]


def lufs_histogram(values: Iterable[float]) -> list[dict]:
    """File counts per 5 LU bin of the finite values (silence, ``-inf``, is counted apart).

    >>> lufs_histogram([-23.0, -21.0, -12.0, float("-inf")])
    [{'min_lufs': -25.0, 'max_lufs': -20.0, 'count': 2}, {'min_lufs': -20.0, 'max_lufs': -15.0, 'count': 0}, \
{'min_lufs': -15.0, 'max_lufs': -10.0, 'count': 1}]
    """
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return []
    low = math.floor(min(finite) / _LUFS_BIN) * _LUFS_BIN
    high = math.floor(max(finite) / _LUFS_BIN) * _LUFS_BIN + _LUFS_BIN
    edges = [low + i * _LUFS_BIN for i in range(int(round((high - low) / _LUFS_BIN)) + 1)]
    return [{"min_lufs": lo, "max_lufs": hi, "count": sum(1 for v in finite if lo <= v < hi)}
            for lo, hi in zip(edges[:-1], edges[1:])]


def summarise(facts: Sequence[Mapping[str, Any]], *, sources: Mapping[str, list], duration: float,
              index: str | None = None, notes: Sequence[str] = ()) -> dict[str, Any]:
    """The report of ``facts``, ``loudness`` and ``windows`` still ``None``.

    ``facts`` holds one dict per file, in report order: ``group``, ``path``,
    and either ``reason`` (why it is unreadable) or its header facts
    ``format`` (``"FORMAT/SUBTYPE"``), ``sample_rate``, ``channels`` and
    ``duration`` (seconds).

    ``duration`` (seconds, > 0) is the excerpt length: readable files shorter
    than it are listed under ``short``. Deterministic: the same facts give the
    same report.

    >>> r = summarise([{"group": None, "path": "a.wav", "format": "WAV", "sample_rate": 8000, "channels": 1,
    ...                 "duration": 0.5}, {"group": None, "path": "b.wav", "reason": "not audio"}],
    ...               sources={"(all)": ["."]}, duration=1.0)
    >>> r["files"], r["readable"], r["short"]["files"], r["unreadable"][0]["reason"]
    (2, 1, [{'path': 'a.wav', 'seconds': 0.5}], 'not audio')
    """
    groups: dict[str, dict] = {}
    formats: collections.Counter = collections.Counter()
    rates: collections.Counter = collections.Counter()
    channels: collections.Counter = collections.Counter()
    durations: list[float] = []
    unreadable: list[dict] = []
    categories: list[str] = []
    short: list[dict] = []
    for f in facts:
        stats = groups.setdefault(f.get("group") or "(all)", {"files": 0, "readable": 0, "seconds": 0.0})
        stats["files"] += 1
        if f.get("reason") is not None:
            unreadable.append({"path": f["path"], "reason": f["reason"]})
            categories.append(reason_category(f))
            continue
        seconds = float(f["duration"])
        stats["readable"] += 1
        stats["seconds"] += seconds
        durations.append(seconds)
        formats[str(f["format"])] += 1
        rates[int(f["sample_rate"])] += 1
        channels[int(f["channels"])] += 1
        if seconds < duration:
            short.append({"path": f["path"], "seconds": round(seconds, 3)})
    total = math.fsum(durations)
    return {
        "version": SCHEMA_VERSION,
        "index": index,
        "sources": {name: list(entries) for name, entries in sources.items()},
        "files": len(facts),
        "readable": len(durations),
        "total_seconds": round(total, 3),
        "total_hours": round(total / 3600, 4),
        "groups": {k: {**v, "seconds": round(v["seconds"], 3)} for k, v in groups.items()},
        "formats": dict(sorted(formats.items())),
        "sample_rates": {str(k): v for k, v in sorted(rates.items())},
        "channels": {str(k): v for k, v in sorted(channels.items())},
        "duration_histogram": duration_histogram(durations),
        "unreadable": unreadable,
        "unreadable_by_reason": by_reason(categories),
        "short": {"min_seconds": duration, "files": short},
        "notes": list(notes),
        "loudness": None,
        "windows": None,
        "quality": None,
    }


def drop_unreadable(report: dict, path: str, group: str | None, seconds: float, reason: str,
                    category: str | None = None) -> None:
    """Moves a readable file to ``unreadable`` (its header read, its audio did not), fixing every total.

    >>> r = summarise([{"group": None, "path": "a.wav", "format": "WAV", "sample_rate": 8000, "channels": 1,
    ...                 "duration": 2.0}], sources={}, duration=1.0)
    >>> drop_unreadable(r, "a.wav", None, 2.0, "cut short")
    >>> r["readable"], r["total_seconds"], r["groups"]["(all)"], r["unreadable"]
    (0, 0.0, {'files': 1, 'readable': 0, 'seconds': 0.0}, [{'path': 'a.wav', 'reason': 'cut short'}])
    >>> r["unreadable_by_reason"]
    {'undecodable': 1}
    """
    report["unreadable"].append({"path": path, "reason": reason})
    counts = collections.Counter(report["unreadable_by_reason"])
    counts[reason_category({"reason": reason, "category": category})] += 1
    report["unreadable_by_reason"] = by_reason(counts.elements())
    stats = report["groups"][group or "(all)"]
    stats["readable"] -= 1
    stats["seconds"] = round(stats["seconds"] - seconds, 3)
    report["readable"] -= 1
    report["total_seconds"] = round(report["total_seconds"] - seconds, 3)
    report["total_hours"] = round(report["total_seconds"] / 3600, 4)


def loudness_section(measured: Sequence[tuple[str, float]], *, max_seconds: float, mono: bool,
                     lufs_cutoff: float | None) -> dict[str, Any]:
    """``report["loudness"]`` from ``(path, integrated LUFS)`` pairs (``-inf``: silent).

    >>> s = loudness_section([("a", -20.0), ("b", float("-inf"))], max_seconds=30.0, mono=False, lufs_cutoff=-40)
    >>> s["measured"], s["silent"], s["median_lufs"], s["below_cutoff"], s["files"][1]
    (2, 1, -20.0, 1, {'path': 'b', 'lufs': None})
    """
    values = [v for _, v in measured]
    finite = sorted(v for v in values if math.isfinite(v))
    return {
        "max_seconds": max_seconds,
        "mono": bool(mono),
        "measured": len(values),
        "silent": sum(1 for v in values if not math.isfinite(v)),
        "min_lufs": round(finite[0], 2) if finite else None,
        "median_lufs": round(statistics.median(finite), 2) if finite else None,
        "max_lufs": round(finite[-1], 2) if finite else None,
        "lufs_cutoff": lufs_cutoff,
        "below_cutoff": None if lufs_cutoff is None else sum(1 for v in values if not v > lufs_cutoff),
        "histogram": lufs_histogram(values),
        "files": [{"path": p, "lufs": round(v, 2) if math.isfinite(v) else None} for p, v in measured],
    }
