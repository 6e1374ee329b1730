"""``audiotree scan``: a health report of a corpus, before any training run reads it.

The reports are built by :mod:`audiotree.scan`; this module parses the
options, refuses those that do not apply, and draws the tables.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import os
import re
import sys
from pathlib import Path
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

from audiotree.scan.summary import SCHEMA_VERSION

__all__ = ["scan", "scan_report", "print_report", "is_index_argument", "SCHEMA_VERSION", "LINES_SHOWN"]

#: Per-file lines printed per list without ``--all``.
LINES_SHOWN = 20
_BAR_WIDTH = 30


def _seconds_label(seconds: float) -> str:
    if math.isinf(seconds):
        return "inf"
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _progress(console):
    """An :data:`audiotree.scan.folder.Progress` factory drawing a rich bar on ``console``."""

    @contextlib.contextmanager
    def progress(description: str, total: int):
        with progress_bar(console) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n: bar.advance(task, n)

    return progress


def scan_report(sources, *, duration: float, loudness: bool, loudness_seconds: float, lufs_cutoff: float | None,
                jobs: int, console, durations_out: list | None = None, executor=None) -> dict:
    """The scan of parsed SOURCES as a JSON-serialisable dict (the ``--json`` output).

    The CLI's twin of :func:`audiotree.scan.scan_report`: ``executor`` (an
    :mod:`audiotree.parallel` runner) probes and measures the files, default
    ``jobs`` threads; the report is the same either way. A progress bar is drawn
    on ``console``.
    """
    from audiotree.parallel.executors import FuturesRunner
    from audiotree.scan import scan_report as library_scan

    spec = sources.groups if sources.balanced else sources.pool
    kwargs = dict(duration=duration, loudness=loudness, loudness_seconds=loudness_seconds, lufs_cutoff=lufs_cutoff,
                  progress=_progress(console), durations_out=durations_out)
    if executor is not None:
        return library_scan(spec, executor=executor, **kwargs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return library_scan(spec, executor=FuturesRunner(pool, workers=jobs, name="threads"), **kwargs)


# --------------------------------------------------------------------- the tables
def _bar(count: int, largest: int) -> str:
    if not count:
        return ""
    return "█" * max(1, round(count / max(largest, 1) * _BAR_WIDTH))


def _print_lines(console, lines: list[str], limit: int | None) -> None:
    """``lines`` (one per file), at most ``limit`` of them, then how many were left out."""
    shown = lines if limit is None else lines[:limit]
    for line in shown:
        console.print(line, soft_wrap=True)
    if len(lines) > len(shown):
        console.print(f"  ... and {len(lines) - len(shown)} more (--all lists every file, --json too)")


def _reason_text(reason: str) -> str:
    # The library's generic advice ("The file may be corrupt ...") is kept for --json only.
    return reason.split(" The file may be ")[0]


def _print_by_reason(report: dict, console) -> None:
    """The unreadable files counted by the short reason of their error: one cause that refuses a whole
    corpus (say every MP3 of one encoder) is one line, however many files it lists above."""
    counts = report.get("unreadable_by_reason") or {}
    if not counts:
        return
    console.print("Unreadable by reason:")
    width = max(len(reason) for reason in counts)
    for reason, count in counts.items():
        console.print(f"  {reason + ':':<{width + 1}} {count} file{'s' if count != 1 else ''}", soft_wrap=True)


def print_report(report: dict, console, *, limit: int | None = LINES_SHOWN) -> None:
    """The report as tables; each list of files shows at most ``limit`` lines (``None``: every line)."""
    from rich.columns import Columns
    from rich.table import Table

    unit, one = _units(report)
    hours = report["total_hours"]
    minutes = report["total_seconds"] / 60
    unreadable = [f"  {e['path']}: {_reason_text(e['reason'])}" for e in report["unreadable"]]
    where = f"{report['index']}: " if report.get("index") else ""
    console.print(
        f"{where}{report['files']} {unit} in {len(report['groups'])} group(s): "
        f"{report['readable']} readable, {hours:.2f} h ({minutes:.1f} min); {len(unreadable)} unreadable",
        soft_wrap=bool(where),
    )
    if not report["readable"]:
        _print_lines(console, unreadable, limit)
        _print_by_reason(report, console)
        _print_notes(console, report["notes"], unit)
        return
    groups = Table(title="Groups", title_justify="left")
    for col in ("group", unit, "unreadable", "hours"):
        groups.add_column(col, justify="left" if col == "group" else "right")
    for name, stats in report["groups"].items():
        groups.add_row(name, str(stats["files"]), str(stats["files"] - stats["readable"]), f"{stats['seconds'] / 3600:.3f}")

    def counts_table(title: str, key_name: str, counts: dict) -> Table:
        table = Table(title=title, title_justify="left")
        table.add_column(key_name)
        table.add_column(unit, justify="right")
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
        hist.add_column(unit, justify="right")
        hist.add_column("")
        for b in report["duration_histogram"]:
            high = math.inf if b["max_seconds"] is None else b["max_seconds"]
            label = f">= {_seconds_label(b['min_seconds'])}" if math.isinf(high) else \
                f"{_seconds_label(b['min_seconds'])} - {_seconds_label(high)}"
            hist.add_row(label, str(b["count"]), _bar(b["count"], largest))
        console.print(hist)

    short = report["short"]
    if short["files"]:
        console.print(f"{len(short['files'])} {one}(s) shorter than --duration {short['min_seconds']:g} s "
                      "(padded when read):")
        _print_lines(console, [f"  {e['seconds']:7.3f} s  {e['path']}" for e in short["files"]], limit)
    if unreadable:
        console.print(f"{len(unreadable)} unreadable {one}(s):")
        _print_lines(console, unreadable, limit)
        _print_by_reason(report, console)
    _print_notes(console, report["notes"], unit)
    if report["loudness"]:
        _print_loudness(report["loudness"], console, from_index=bool(report.get("index")), one=one)
    if report.get("windows"):
        _print_windows(report["windows"], console, limit, one=one)
    if report.get("quality"):
        from audiotree.cli.quality_report import print_quality

        print_quality(report["quality"], console, limit, _units(report)[0])


def _units(report: dict) -> tuple[str, str]:
    """What a report's rows are, plural and singular: segments in a segment index's report, else files."""
    from audiotree.scan.index import SEGMENT_NOTE

    return ("segments", "segment") if SEGMENT_NOTE in report["notes"] else ("files", "file")


def _print_notes(console, notes: list, unit: str) -> None:
    from audiotree.scan.index import SEGMENT_NOTE

    for note in notes:
        if note == SEGMENT_NOTE and unit == "segments":
            continue  # every line already says segments
        console.print(f"note: {note}", soft_wrap=True)


_SEGMENT_NAME = re.compile(r"^(?P<path>.*) \[(?P<start>[0-9.]+), (?P<end>[0-9.]+)\) s$", re.S)


def _name_key(name: str) -> tuple:
    """Sorts a segment's name (``PATH [START, END) s``) by its path, then its times as numbers, not as text."""
    found = _SEGMENT_NAME.match(name)
    if found is None:
        return (name, -1.0, -1.0)
    return (found["path"], float(found["start"]), float(found["end"]))


def _print_loudness(loud: dict, console, *, from_index: bool, one: str = "file") -> None:
    from rich.table import Table

    def lufs(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    source = "; from the profiles" if from_index else ""
    console.print(
        f"Loudness (first {loud['max_seconds']:g} s per {one}{source}): {loud['measured']} {one}s, median "
        f"{lufs(loud['median_lufs'])} LUFS, range {lufs(loud['min_lufs'])} .. {lufs(loud['max_lufs'])}, "
        f"{loud['silent']} silent"
    )
    if loud["lufs_cutoff"] is not None:
        console.print(f"  {loud['below_cutoff']} {one}(s) at or below the cutoff {loud['lufs_cutoff']:g} LUFS")
    rows = [(f"{b['min_lufs']:g} .. {b['max_lufs']:g}", b["count"]) for b in loud["histogram"]]
    if loud["silent"]:
        rows.insert(0, ("silent", loud["silent"]))
    largest = max((c for _, c in rows), default=0)
    hist = Table(show_edge=False, box=None, padding=(0, 1))
    hist.add_column("LUFS")
    hist.add_column(f"{one}s", justify="right")
    hist.add_column("")
    for label, count in rows:
        hist.add_row(label, str(count), _bar(count, largest))
    console.print(hist)


def _print_windows(windows: dict, console, limit: int | None, *, one: str = "file") -> None:
    counted = [f for f in windows["files"] if f["windows"]]
    no_window = len(windows["files"]) - len(counted)
    console.print(f"Share of {windows['window_seconds']:g} s windows above {windows['lufs_cutoff']:g} LUFS, per {one} "
                  "(lowest first):", soft_wrap=True)
    if no_window:
        console.print(f"  {no_window} {one}(s) shorter than a {windows['window_seconds']:g} s window have no window "
                      "(padded when read)", soft_wrap=True)
    lines = []
    for entry in sorted(counted, key=lambda f: (f["share_above"], _name_key(f["path"]))):
        best = "-" if entry["max_window_lufs"] is None else f"{entry['max_window_lufs']:.1f}"
        lines.append(f"  {entry['share_above'] * 100:6.1f} %  (loudest {best} LUFS)  {entry['path']}")
    _print_lines(console, lines, limit)
    console.print(f"{len(windows['no_window_above'])} {one}(s) with no window above the cutoff:")
    _print_lines(console, [f"  {path}" for path in windows["no_window_above"]], limit)


def _plot(path: Path, report: dict, durations: list[float], described: str) -> None:
    from audiotree.plots import plot_scan

    if not durations:
        raise CliError("--plot: no readable file to plot.")
    loud = report["loudness"]
    lufs = None if loud is None else [-math.inf if f["lufs"] is None else f["lufs"] for f in loud["files"]]
    caption = f"corpus: {described}; {report['readable']} readable, {report['total_hours']:.2f} h"
    if loud:
        caption += f"\nloudness: integrated LUFS of the first {loud['max_seconds']:g} s of each file"
        caption += " (from the index's profiles)" if report["index"] else ""
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    plot_scan(path, durations=durations, lufs=lufs, min_duration=report["short"]["min_seconds"],
              lufs_cutoff=None if loud is None else loud["lufs_cutoff"], title="audiotree scan", caption=caption)


# --------------------------------------------------------------------- the command
def is_index_argument(values) -> bool:
    """``scan`` reads an index when its one SOURCE is a ``.parquet`` file."""
    return len(values) == 1 and str(values[0]).lower().endswith(".parquet") and os.path.isfile(values[0])


def _given(name: str) -> bool:
    """Whether option ``name`` was given (on the command line or from the environment), not defaulted."""
    from click.core import ParameterSource

    source = click.get_current_context().get_parameter_source(name)
    return source not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def _check_index_options(path: str, *, loudness: bool, lufs_cutoff: float | None, plot: Path | None,
                         executor: str | None, ray_address: str | None) -> bool:
    """Refuses the options that do not apply to the scan of the index at ``path``; whether it has profiles."""
    from audiotree.scan import index_has_profiles

    for option, given in (("--jobs", _given("jobs")), ("--executor", executor is not None),
                          ("--ray-address", ray_address is not None)):
        if given:
            raise click.UsageError(f"{option} does not apply to the scan of an index: no file is probed, the report "
                                   "comes from the index's rows and profiles.")
    profiles = index_has_profiles(path)
    if not profiles:
        for option, given in (("--loudness", loudness), ("--lufs-cutoff", lufs_cutoff is not None)):
            if given:
                raise click.UsageError(
                    f"{option} does not apply to {path}: it has no loudness profiles (it was built with "
                    "--no-loudness). Rebuild it without --no-loudness, or scan the folders with --loudness.")
    if _given("loudness_seconds") and not (loudness or plot is not None):
        raise click.UsageError("--loudness-seconds needs --loudness (or --plot): no loudness is measured without it.")
    return profiles


@click.command(short_help="Corpus health: formats, rates, hours, bad files, loudness.")
@sources_argument
@click.option("--duration", type=float, default=1.0, show_default=True,
              help="Report files shorter than this many seconds (the excerpt length you will train with).")
@click.option("--loudness", is_flag=True,
              help="Also measure integrated loudness (LUFS) per file (of an index: from its profiles).")
@click.option("--loudness-seconds", type=click.FloatRange(min=0.4), default=30.0, show_default=True,
              help="With --loudness: measure at most this many seconds from the start of each file.")
@click.option("--lufs-cutoff", type=float, default=None,
              help="With --loudness: count the files at or below this LUFS. Of an index with profiles: the cutoff of "
                   "the window shares (default -40).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (stable keys, every file) instead "
                                                      "of tables.")
@click.option("--all", "show_all", is_flag=True,
              help=f"List every file in the tables (default: at most {LINES_SHOWN} lines per list, and a count of "
                   "the rest).")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="PNG",
              help="Also draw histograms of durations and loudness, the files below --duration and "
                   "--lufs-cutoff marked (needs matplotlib; measures loudness as --loudness does).")
@click.option("--jobs", type=click.IntRange(min=1), default=min(8, (os.cpu_count() or 1) * 2), show_default="2 x cores, <= 8",
              help="Files probed and measured in parallel (threads; without --executor).")
@executor_options
def scan(sources, duration: float, loudness: bool, loudness_seconds: float, lufs_cutoff: float | None, as_json: bool,
         show_all: bool, plot: Path | None, jobs: int, executor: str | None, ray_address: str | None) -> None:
    """Report a corpus' health: formats, rates, channels, hours, durations,
    unreadable and too-short files, and optionally loudness.

    SOURCES are folders, files or globs; GROUP=FOLDER reports per group. A
    single corpus index (.parquet) is reported from its rows and loudness
    profiles, with the same report (no file is opened), plus each file's share
    of --duration windows above --lufs-cutoff (default -40) and the files with
    no window above it. Tables list at most 20 files per list unless --all.
    """
    if not (math.isfinite(duration) and duration > 0):
        raise click.BadParameter(f"must be a positive number, got {duration}.", param_hint="'--duration'")
    if show_all and as_json:
        raise click.UsageError("--all applies to the tables; --json always lists every file.")
    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise CliError("--plot needs matplotlib, a dependency of audiotree that cannot be imported here: reinstall it (pip install audiotree).") from None
    durations: list[float] = []
    if is_index_argument(sources):  # an index: rows and loudness profiles, no file is opened
        from audiotree.scan import index_scan_report

        profiles = _check_index_options(sources[0], loudness=loudness, lufs_cutoff=lufs_cutoff, plot=plot,
                                        executor=executor, ray_address=ray_address)
        if plot is not None and profiles:
            loudness = True  # the plot's second histogram
        report = index_scan_report(sources[0], duration=duration, lufs_cutoff=lufs_cutoff, loudness=loudness,
                                   loudness_seconds=loudness_seconds, durations_out=durations,
                                   worst=None if (show_all or as_json) else LINES_SHOWN)
        described = f"index {report['index']} ({report['files']} {_units(report)[0]})"
    else:
        if _given("loudness_seconds") and not (loudness or plot is not None):
            raise click.UsageError("--loudness-seconds needs --loudness (or --plot): no loudness is measured "
                                   "without it.")
        if lufs_cutoff is not None and not (loudness or plot is not None):
            raise click.UsageError("--lufs-cutoff needs --loudness (or --plot): no loudness is measured without it.")
        loudness = loudness or plot is not None  # the plot's second histogram
        parsed = resolve_sources(sources)
        options = dict(duration=duration, loudness=loudness, loudness_seconds=loudness_seconds,
                       lufs_cutoff=lufs_cutoff, jobs=jobs, console=stderr_console(), durations_out=durations)
        if executor is None and ray_address is None:
            report = scan_report(parsed, **options)
        else:
            with open_executor(executor, ray_address) as runner:
                report = scan_report(parsed, executor=runner, **options)
        from audiotree.cli._common import describe_sources

        described = describe_sources(parsed, files=report["files"])
    quality_plot = None
    if plot is not None:
        _plot(plot, report, durations, described)
        if report.get("quality"):
            from audiotree.cli.quality_report import plot_quality_section

            quality_plot = plot_quality_section(plot, report, described)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        print_report(report, stdout_console(), limit=None if show_all else LINES_SHOWN)
        if plot is not None:
            stdout_console().print(f"Plot: {plot}", soft_wrap=True)
        if quality_plot is not None:
            stdout_console().print(f"Quality plot: {quality_plot}", soft_wrap=True)

