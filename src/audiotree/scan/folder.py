"""The scan of folders: every file's header is probed (and its end decoded), optionally its loudness measured."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import warnings
from typing import Any, Callable, ContextManager

from audiotree.scan.summary import drop_unreadable, loudness_section, reason_text, summarise

__all__ = ["scan_report", "Progress"]

#: ``progress(description, total)``: a context manager yielding ``advance(n)``, called as files finish.
Progress = Callable[[str, int], ContextManager[Callable[[int], Any]]]

#: Frames decoded at the end of each file, to find files cut short after their header.
_TAIL_FRAMES = 1024


def _labelled(sources: Any) -> tuple[list[tuple[str | None, str]], dict[str, list[str]]]:
    """(group or None, entry) pairs of ``sources``, and the report's ``sources`` entry."""
    from audiotree.discovery.files import source_pairs

    pairs = source_pairs(sources)
    described: dict[str, list[str]] = {}
    for group, entry in pairs:
        described.setdefault(group or "(all)", []).append(entry)
    return pairs, described


def _discover(pairs) -> tuple[list[tuple[str | None, str]], list[str]]:
    """(group, file) for every audio file, de-duplicated; plus discovery warnings."""
    from audiotree.discovery.files import discover

    seen: set[str] = set()
    files: list[tuple[str | None, str]] = []
    notes: list[str] = []
    for group, entry in pairs:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # A shard's listing fault (a corrupt header, a shard cut between members) is a note naming it.
            found, _ = discover(entry, None, strict=False, on_read_error="warn")
        notes.extend(" ".join(str(w.message).split()) for w in caught)
        if not found and not caught:
            notes.append(f"'{entry}' holds no audio files.")
        for path in found:
            key = os.path.realpath(path)
            if key not in seen:
                seen.add(key)
                files.append((group, path))
    return files, notes


def probe(path: str) -> dict[str, Any]:
    """The header facts of ``path`` (see :func:`audiotree.scan.summary.summarise`), or ``{"reason": ...}``.

    A header states the length the file was written with; a copy cut short (a
    truncated download) keeps it. Decoding the last frames (one seek) finds
    those files, so their claimed seconds never reach the totals.
    """
    from audiotree.errors import AudioReadError
    from audiotree.io import AudioFile

    try:
        with AudioFile(path) as f:
            info = f.info
            tail = min(int(info.frames), _TAIL_FRAMES)
            if tail > 0:
                got = f.read(int(info.frames) - tail, tail).shape[0]
                if got < tail:
                    return {"category": "truncated",
                            "reason": f"truncated: the header claims {int(info.frames)} frames but the audio ends "
                                      f"{tail - got} frame(s) early"}
        return {"format": f"{info.format}/{info.subtype}" if info.subtype else str(info.format),
                "sample_rate": int(info.sample_rate), "channels": int(info.channels), "duration": info.duration}
    except AudioReadError as exc:
        return {"reason": reason_text(exc, path), "category": exc.category}
    except OSError as exc:  # vanished or unreadable by permissions
        return {"reason": " ".join(str(exc).split()), "category": "file not found" if isinstance(
            exc, FileNotFoundError) else "permission denied" if isinstance(exc, PermissionError) else "undecodable"}


def measure_loudness(path: str, max_seconds: float) -> tuple[float | None, str | None, str | None]:
    """Integrated LUFS of the first ``max_seconds`` (``-inf``: silent; BS.1770's weighted channels, at most
    5), or ``(None, reason, its category)``."""
    import numpy as np

    from audiotree.dsp.loudness import integrated_loudness
    from audiotree.errors import AudioReadError
    from audiotree.io import AudioFile

    try:
        with AudioFile(path) as f:
            rate = f.info.sample_rate
            frames = f.read(0, max(1, int(round(max_seconds * rate))))
    except AudioReadError as exc:
        return None, reason_text(exc, path), exc.category
    if frames.shape[0] == 0:
        return -math.inf, None, None
    x = np.ascontiguousarray(frames[:, :5].T)  # BS.1770 weights at most 5 channels (no LFE)
    return float(integrated_loudness(x, rate)), None, None


@contextlib.contextmanager
def _no_progress(description: str, total: int):
    yield lambda n: None


def _map(func, items: list, executor, progress: Progress, description: str) -> list:
    from audiotree.parallel import map_items

    # A thread pool gets one file per task (a finer bar); other executors get chunks sized for them.
    chunk_size = 1 if getattr(executor, "name", None) == "threads" else None
    with progress(description, len(items)) as advance:
        return map_items(func, items, executor=executor, chunk_size=chunk_size, progress=advance)


def scan_report(sources: Any, *, duration: float = 1.0, loudness: bool = False, loudness_seconds: float = 30.0,
                lufs_cutoff: float | None = None, executor: Any = None, progress: Progress | None = None,
                durations_out: list | None = None) -> dict[str, Any]:
    """The health report of the audio files under ``sources`` (see :mod:`audiotree.scan` for its keys).

    Args:
      sources: folders, files or globs, or ``{group: sources}``.
      duration: the excerpt length (seconds, > 0); shorter files are ``short``.
      loudness: also measure each file's integrated loudness (decodes at most
        ``loudness_seconds`` from its start); a file whose audio does not
        decode then counts as unreadable.
      lufs_cutoff: with ``loudness``, count the files at or below it (LUFS).
      executor: where files are probed and measured: ``None`` (serial),
        ``"process"``, ``"ray"`` or an :mod:`audiotree.parallel` runner. The
        report is the same for all.
      progress: a :data:`Progress` factory (the CLI draws a bar with it).
      durations_out: when given, receives the duration of every readable file.

    >>> import os, tempfile, soundfile, numpy as np
    >>> folder = tempfile.mkdtemp()
    >>> soundfile.write(os.path.join(folder, "a.wav"), np.zeros(4000, np.float32), 8000)
    >>> report = scan_report(folder, duration=1.0)
    >>> report["files"], report["short"]["files"][0]["seconds"], report["index"]
    (1, 0.5, None)
    """
    if not (isinstance(duration, (int, float)) and math.isfinite(duration) and duration > 0):
        raise ValueError(f"duration must be a positive number of seconds, got {duration!r}.")
    progress = progress or _no_progress
    pairs, described = _labelled(sources)
    files, notes = _discover(pairs)
    probes = _map(probe, [path for _, path in files], executor, progress, "Probing")
    facts = [{"group": group, "path": path, **found} for (group, path), found in zip(files, probes)]
    report = summarise(facts, sources=described, duration=duration, notes=notes)
    readable = [f for f in facts if f.get("reason") is None]
    if durations_out is not None:
        durations_out.extend(f["duration"] for f in readable)
    if loudness and readable:
        results = _map(functools.partial(measure_loudness, max_seconds=loudness_seconds),
                       [f["path"] for f in readable], executor, progress, "Measuring loudness")
        measured = []
        for f, (lufs, reason, category) in zip(readable, results):
            if reason is not None:  # its header read, its audio does not: unreadable everywhere in the report
                drop_unreadable(report, f["path"], f["group"], f["duration"], reason, category)
                continue
            measured.append((f["path"], lufs))
        report["loudness"] = loudness_section(measured, max_seconds=loudness_seconds, mono=False,
                                              lufs_cutoff=lufs_cutoff)
    return report
