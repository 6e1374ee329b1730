"""``audiotree scan``: a health report of a corpus, before any training run reads it."""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import json
import math
import os
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

import click

from audiotree.cli._common import (
    CliError,
    executor_options,
    open_executor,
    progress_bar,
    resolve_sources,
    sources_argument,
    stderr_console,
    stdout_console,
)

SCHEMA_VERSION = 1
# Duration histogram bins (seconds); the last one is open-ended.
_DURATION_EDGES = (0.0, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0, math.inf)
_BAR_WIDTH = 30
_LUFS_BIN = 5.0


def _seconds_label(seconds: float) -> str:
    if math.isinf(seconds):
        return "inf"
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _reason(exc: BaseException, path: str) -> str:
    text = " ".join(str(exc).split())
    for prefix in (f"Failed to read audio file '{path}': ", f"Failed to read audio file '{path}'"):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    return text or type(exc).__name__


def _discover(sources) -> tuple[list[tuple[str | None, str]], list[str]]:
    """(group, file) for every audio file, de-duplicated; plus discovery warnings."""
    from audiotree.sources import find_audio_files

    seen: set[str] = set()
    files: list[tuple[str | None, str]] = []
    notes: list[str] = []
    for group, entry in sources.labelled():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = find_audio_files(entry)
        notes.extend(" ".join(str(w.message).split()) for w in caught)
        if not found and not caught:
            notes.append(f"'{entry}' holds no audio files.")
        for path in found:
            key = os.path.realpath(path)
            if key not in seen:
                seen.add(key)
                files.append((group, path))
    return files, notes


#: Frames decoded at the end of each file, to find files cut short after their header.
_TAIL_FRAMES = 1024


def _probe(path: str) -> tuple[Any, str | None]:
    """The header of ``path`` and a decode of its last frames, or why it is unreadable.

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
                    return None, (f"truncated: the header claims {int(info.frames)} frames but the audio ends "
                                  f"{tail - got} frame(s) early")
        return info, None
    except AudioReadError as exc:
        return None, _reason(exc, path)
    except OSError as exc:  # vanished or unreadable by permissions
        return None, " ".join(str(exc).split())


def _loudness(path: str, max_seconds: float) -> tuple[float | None, str | None]:
    """Integrated LUFS of the first ``max_seconds`` (``-inf``: silent); or an error reason."""
    import numpy as np

    from audiotree.dsp.loudness import integrated_loudness
    from audiotree.errors import AudioReadError
    from audiotree.io import AudioFile

    try:
        with AudioFile(path) as f:
            rate = f.info.sample_rate
            frames = f.read(0, max(1, int(round(max_seconds * rate))))
    except AudioReadError as exc:
        return None, _reason(exc, path)
    if frames.shape[0] == 0:
        return -math.inf, None
    x = np.ascontiguousarray(frames[:, :5].T)  # BS.1770 weights at most 5 channels (no LFE)
    return float(integrated_loudness(x, rate)), None


def _histogram(durations: list[float]) -> list[dict]:
    counts = [0] * (len(_DURATION_EDGES) - 1)
    for d in durations:
        for i in range(len(counts)):
            if _DURATION_EDGES[i] <= d < _DURATION_EDGES[i + 1]:
                counts[i] += 1
                break
    nonzero = [i for i, c in enumerate(counts) if c]
    if not nonzero:
        return []
    return [
        {"min_seconds": _DURATION_EDGES[i], "max_seconds": None if math.isinf(_DURATION_EDGES[i + 1]) else _DURATION_EDGES[i + 1],
         "count": counts[i]}
        for i in range(nonzero[0], nonzero[-1] + 1)
    ]


def _lufs_histogram(values: list[float]) -> list[dict]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return []
    low = math.floor(min(finite) / _LUFS_BIN) * _LUFS_BIN
    high = math.floor(max(finite) / _LUFS_BIN) * _LUFS_BIN + _LUFS_BIN
    edges = [low + i * _LUFS_BIN for i in range(int(round((high - low) / _LUFS_BIN)) + 1)]
    out = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        out.append({"min_lufs": lo, "max_lufs": hi, "count": sum(1 for v in finite if lo <= v < hi)})
    return out


def _run_parallel(func, items: list, runner, console, description: str) -> list:
    from audiotree.parallel import map_items

    # A thread pool gets one file per task (a finer bar); other executors get chunks sized for them.
    chunk_size = 1 if runner.name == "threads" else None
    with progress_bar(console) as progress:
        task = progress.add_task(description, total=len(items))
        return map_items(func, items, executor=runner, chunk_size=chunk_size,
                         progress=lambda n: progress.advance(task, n))


def scan_report(sources, *, duration: float, loudness: bool, loudness_seconds: float, lufs_cutoff: float | None,
                jobs: int, console, durations_out: list | None = None, executor=None) -> dict:
    """The scan as a JSON-serialisable dict (the ``--json`` output).

    ``executor`` (an :mod:`audiotree.parallel` runner) probes and measures the
    files; default ``jobs`` threads here. The report is the same either way.
    ``durations_out``, when given, receives the duration of every readable file
    (for ``--plot``; the report itself keeps only the histogram).
    """
    from audiotree.parallel.executors import FuturesRunner

    if executor is None:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            return scan_report(sources, duration=duration, loudness=loudness, loudness_seconds=loudness_seconds,
                               lufs_cutoff=lufs_cutoff, jobs=jobs, console=console, durations_out=durations_out,
                               executor=FuturesRunner(pool, workers=jobs, name="threads"))
    files, notes = _discover(sources)
    probes = _run_parallel(_probe, [path for _, path in files], executor, console, "Probing")

    groups: dict[str, dict] = collections.OrderedDict()
    formats: collections.Counter = collections.Counter()
    rates: collections.Counter = collections.Counter()
    channels: collections.Counter = collections.Counter()
    durations: list[float] = []
    unreadable: list[dict] = []
    short: list[dict] = []
    readable: list[str] = []
    probed: dict[str, tuple[str, float]] = {}  # readable path -> (group, seconds)
    total_seconds = 0.0
    for (group, path), (info, reason) in zip(files, probes):
        name = group or "(all)"
        stats = groups.setdefault(name, {"files": 0, "readable": 0, "seconds": 0.0})
        stats["files"] += 1
        if info is None:
            unreadable.append({"path": path, "reason": reason})
            continue
        stats["readable"] += 1
        stats["seconds"] += info.duration
        total_seconds += info.duration
        readable.append(path)
        probed[path] = (name, info.duration)
        formats[f"{info.format}/{info.subtype}" if info.subtype else str(info.format)] += 1
        rates[int(info.sample_rate)] += 1
        channels[int(info.channels)] += 1
        durations.append(info.duration)
        if durations_out is not None:
            durations_out.append(info.duration)
        if info.duration < duration:
            short.append({"path": path, "seconds": round(info.duration, 3)})

    report: dict[str, Any] = {
        "version": SCHEMA_VERSION,
        "sources": {name or "(all)": paths for name, paths in
                    (sources.groups.items() if sources.balanced else [(None, sources.pool)])},
        "files": len(files),
        "readable": len(readable),
        "total_seconds": round(total_seconds, 3),
        "total_hours": round(total_seconds / 3600, 4),
        "groups": {k: {**v, "seconds": round(v["seconds"], 3)} for k, v in groups.items()},
        "formats": dict(sorted(formats.items())),
        "sample_rates": {str(k): v for k, v in sorted(rates.items())},
        "channels": {str(k): v for k, v in sorted(channels.items())},
        "duration_histogram": _histogram(durations),
        "unreadable": unreadable,
        "short": {"min_seconds": duration, "files": short},
        "notes": notes,
        "loudness": None,
    }
    if loudness and readable:
        measured = _run_parallel(functools.partial(_loudness, max_seconds=loudness_seconds), readable, executor,
                                 console, "Measuring loudness")
        per_file = []
        values = []
        for path, (lufs, reason) in zip(readable, measured):
            if reason is not None:  # its header read, its audio does not: unreadable everywhere in the report
                unreadable.append({"path": path, "reason": reason})
                name, seconds = probed[path]
                group = report["groups"][name]
                group["readable"] -= 1
                group["seconds"] = round(group["seconds"] - seconds, 3)
                report["readable"] -= 1
                report["total_seconds"] = round(report["total_seconds"] - seconds, 3)
                report["total_hours"] = round(report["total_seconds"] / 3600, 4)
                continue
            per_file.append({"path": path, "lufs": round(lufs, 2) if math.isfinite(lufs) else None})
            values.append(lufs)
        finite = sorted(v for v in values if math.isfinite(v))
        report["loudness"] = {
            "max_seconds": loudness_seconds,
            "measured": len(values),
            "silent": sum(1 for v in values if not math.isfinite(v)),
            "min_lufs": round(finite[0], 2) if finite else None,
            "median_lufs": round(statistics.median(finite), 2) if finite else None,
            "max_lufs": round(finite[-1], 2) if finite else None,
            "lufs_cutoff": lufs_cutoff,
            "below_cutoff": None if lufs_cutoff is None else sum(1 for v in values if not v > lufs_cutoff),
            "histogram": _lufs_histogram(values),
            "files": per_file,
        }
    return report


def _bar(count: int, largest: int) -> str:
    if not count:
        return ""
    return "█" * max(1, round(count / max(largest, 1) * _BAR_WIDTH))


def _print_report(report: dict, console) -> None:
    from rich.columns import Columns
    from rich.table import Table

    hours = report["total_hours"]
    minutes = report["total_seconds"] / 60
    unreadable = len(report["unreadable"])
    console.print(
        f"{report['files']} files in {len(report['groups'])} group(s): "
        f"{report['readable']} readable, {hours:.2f} h ({minutes:.1f} min); {unreadable} unreadable"
    )
    if not report["readable"]:
        for entry in report["unreadable"]:
            console.print(f"  {entry['path']}: {entry['reason'].split(' The file may be ')[0]}", soft_wrap=True)
        for note in report["notes"]:
            console.print(f"note: {note}", soft_wrap=True)
        return
    groups = Table(title="Groups", title_justify="left")
    for col in ("group", "files", "unreadable", "hours"):
        groups.add_column(col, justify="left" if col == "group" else "right")
    for name, stats in report["groups"].items():
        groups.add_row(name, str(stats["files"]), str(stats["files"] - stats["readable"]), f"{stats['seconds'] / 3600:.3f}")

    def counts_table(title: str, key_name: str, counts: dict) -> Table:
        table = Table(title=title, title_justify="left")
        table.add_column(key_name)
        table.add_column("files", justify="right")
        for key, value in counts.items():
            table.add_row(key, str(value))
        return table

    console.print(Columns([
        groups,
        counts_table("Formats", "format", report["formats"]),
        counts_table("Sample rates", "Hz", report["sample_rates"]),
        counts_table("Channels", "ch", report["channels"]),
    ]))

    if report["duration_histogram"]:
        largest = max(b["count"] for b in report["duration_histogram"])
        hist = Table(title="Durations", title_justify="left", show_edge=False, box=None, padding=(0, 1))
        hist.add_column("seconds")
        hist.add_column("files", justify="right")
        hist.add_column("")
        for b in report["duration_histogram"]:
            high = math.inf if b["max_seconds"] is None else b["max_seconds"]
            label = f">= {_seconds_label(b['min_seconds'])}" if math.isinf(high) else \
                f"{_seconds_label(b['min_seconds'])} - {_seconds_label(high)}"
            hist.add_row(label, str(b["count"]), _bar(b["count"], largest))
        console.print(hist)

    short = report["short"]
    if short["files"]:
        console.print(f"{len(short['files'])} file(s) shorter than --duration {short['min_seconds']:g} s "
                      "(padded when read):")
        for entry in short["files"]:
            console.print(f"  {entry['seconds']:7.3f} s  {entry['path']}", soft_wrap=True)
    if report["unreadable"]:
        console.print(f"{len(report['unreadable'])} unreadable file(s):")
        for entry in report["unreadable"]:
            # The library's generic advice ("The file may be corrupt ...") is kept for --json only.
            reason = entry["reason"].split(" The file may be ")[0]
            console.print(f"  {entry['path']}: {reason}", soft_wrap=True)
    for note in report["notes"]:
        console.print(f"note: {note}", soft_wrap=True)

    loud = report["loudness"]
    if loud:
        def lufs(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}"

        console.print(
            f"Loudness (first {loud['max_seconds']:g} s per file): {loud['measured']} files, median "
            f"{lufs(loud['median_lufs'])} LUFS, range {lufs(loud['min_lufs'])} .. {lufs(loud['max_lufs'])}, "
            f"{loud['silent']} silent"
        )
        if loud["lufs_cutoff"] is not None:
            console.print(f"  {loud['below_cutoff']} file(s) at or below the cutoff {loud['lufs_cutoff']:g} LUFS")
        rows = [(f"{b['min_lufs']:g} .. {b['max_lufs']:g}", b["count"]) for b in loud["histogram"]]
        if loud["silent"]:
            rows.insert(0, ("silent", loud["silent"]))
        largest = max((c for _, c in rows), default=0)
        hist = Table(show_edge=False, box=None, padding=(0, 1))
        hist.add_column("LUFS")
        hist.add_column("files", justify="right")
        hist.add_column("")
        for label, count in rows:
            hist.add_row(label, str(count), _bar(count, largest))
        console.print(hist)


def _plot(path: Path, report: dict, durations: list[float], sources) -> None:
    from audiotree.cli._common import describe_sources
    from audiotree.plots import plot_scan

    if not durations:
        raise CliError("--plot: no readable file to plot.")
    loud = report["loudness"]
    lufs = None if loud is None else [-math.inf if f["lufs"] is None else f["lufs"] for f in loud["files"]]
    caption = (f"corpus: {describe_sources(sources, files=report['files'])}; {report['readable']} readable, "
               f"{report['total_hours']:.2f} h\nloudness: integrated LUFS of the first "
               f"{loud['max_seconds']:g} s of each file" if loud else "")
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    plot_scan(path, durations=durations, lufs=lufs, min_duration=report["short"]["min_seconds"],
              lufs_cutoff=None if loud is None else loud["lufs_cutoff"], title="audiotree scan", caption=caption)


@click.command(short_help="Corpus health: formats, rates, hours, bad files, loudness.")
@sources_argument
@click.option("--duration", type=float, default=1.0, show_default=True,
              help="Report files shorter than this many seconds (the excerpt length you will train with).")
@click.option("--loudness", is_flag=True, help="Also measure integrated loudness (LUFS) per file.")
@click.option("--loudness-seconds", type=click.FloatRange(min=0.4), default=30.0, show_default=True,
              help="Measure at most this many seconds from the start of each file.")
@click.option("--lufs-cutoff", type=float, default=None, help="With --loudness: count the files at or below this LUFS.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (stable keys) instead of tables.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="PNG",
              help="Also draw histograms of durations and loudness, the files below --duration and "
                   "--lufs-cutoff marked (needs matplotlib; measures loudness as --loudness does).")
@click.option("--jobs", type=click.IntRange(min=1), default=min(8, (os.cpu_count() or 1) * 2), show_default="2 x cores, <= 8",
              help="Files probed and measured in parallel (threads; without --executor).")
@executor_options
def scan(sources, duration: float, loudness: bool, loudness_seconds: float, lufs_cutoff: float | None, as_json: bool,
         plot: Path | None, jobs: int, executor: str | None, ray_address: str | None) -> None:
    """Report a corpus' health: formats, rates, channels, hours, durations,
    unreadable and too-short files, and optionally loudness.

    SOURCES are folders, files or globs; GROUP=FOLDER reports per group. A
    single corpus index (.parquet) is reported from its rows and loudness
    profiles: each file's share of --duration windows above --lufs-cutoff
    (default -40), and the files with no window above it.
    """
    if not (math.isfinite(duration) and duration > 0):
        raise click.BadParameter(f"must be a positive number, got {duration}.", param_hint="'--duration'")
    from audiotree.cli.index import is_index_argument, run_index_scan

    if is_index_argument(sources):  # an index: rows and loudness profiles, no file is opened
        return run_index_scan(sources[0], duration=duration, lufs_cutoff=lufs_cutoff, as_json=as_json)
    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CliError("--plot needs matplotlib, a dependency of audiotree that cannot be imported here: reinstall it (pip install audiotree).") from None
        loudness = True  # the plot's second histogram
    parsed = resolve_sources(sources)
    durations: list[float] = []
    if executor is None and ray_address is None:
        report = scan_report(parsed, duration=duration, loudness=loudness, loudness_seconds=loudness_seconds,
                             lufs_cutoff=lufs_cutoff, jobs=jobs, console=stderr_console(),
                             durations_out=durations)
    else:
        with open_executor(executor, ray_address) as runner:
            report = scan_report(parsed, duration=duration, loudness=loudness, loudness_seconds=loudness_seconds,
                                 lufs_cutoff=lufs_cutoff, jobs=jobs, console=stderr_console(), executor=runner,
                                 durations_out=durations)
    if plot is not None:
        _plot(plot, report, durations, parsed)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        _print_report(report, stdout_console())
        if plot is not None:
            stdout_console().print(f"Plot: {plot}", soft_wrap=True)
