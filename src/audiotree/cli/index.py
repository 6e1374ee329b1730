"""``audiotree index``: build or refresh a corpus index (the twin of ``audiotree.index.build_index``).

The scan of an index (``audiotree scan INDEX``) is :func:`audiotree.scan.index_scan_report`; the names
below are kept for callers of this module.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from audiotree.cli._common import sources_argument, stdout_console

__all__ = ["index", "index_scan_report", "print_index_scan"]


@click.command(short_help="Index a corpus once: headers, labels, loudness profiles, in one Parquet file.")
@sources_argument
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="The index file (.parquet).")
@click.option("--labels", "labels", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Per-file labels (CSV, TSV, JSONL or Parquet) to join.")
@click.option("--labels-key", default="path", show_default=True, help="The labels column naming each file.")
@click.option("--labels-match", type=click.Choice(["path", "relative", "stem"]), default="path", show_default=True,
              help="How keys name files: a path (relative to the labels file's folder), a path relative to the "
                   "source folder, or the file name without extension.")
@click.option("--labels-root", type=click.Path(file_okay=False), default=None,
              help="Folder relative 'path' keys start from (default: the labels file's folder).")
@click.option("--labels-missing", type=click.Choice(["raise", "null"]), default="raise", show_default=True,
              help="An indexed file with no label row: an error, or empty labels.")
@click.option("--text-columns", "text_columns", multiple=True, metavar="COLUMN",
              help="A label column of free text (transcripts): items carry it as strings. Repeat for more. String "
                   "columns of many distinct values are detected as text anyway.")
@click.option("--numeric-columns", "numeric_columns", multiple=True, metavar="COLUMN",
              help="A label column read as numbers even where values look like identifiers (\"007\"). Repeat for "
                   "more.")
@click.option("--root", type=click.Path(file_okay=False), default=None,
              help="Store paths relative to this folder (kept relative to the index when given relative).")
@click.option("--segments", "segments", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Segments of the recordings (CSV, TSV, JSONL or Parquet: path,start,end seconds, optional id "
                   "and recording, plus label columns): one index row per segment.")
@click.option("--loudness/--no-loudness", default=True, show_default=True,
              help="Compute each file's loudness profile (decodes every file once; FLAC files also get seek "
                   "points from their frames, where --no-loudness keeps only a SEEKTABLE's).")
@click.option("--mono/--stereo", default=True, show_default=True,
              help="Profile the channel average (as mono datasets meter) or BS.1770's weighted channels.")
@click.option("--executor", type=click.Choice(["process", "serial", "ray"]), default="process", show_default=True,
              help="Read files in a process pool, one by one in this process, or as Ray tasks "
                   "(pip install 'audiotree[ray]'); the index is the same.")
@click.option("--ray-address", default=None, metavar="ADDRESS",
              help="With --executor ray: the cluster to join; default: RAY_ADDRESS, else a local one.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Worker processes (default: one per core).")
@click.option("--chunk-size", type=click.IntRange(min=1), default=None,
              help="Files per task and per committed part (resume granularity).")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
@click.option("--audio-column", default=None, metavar="COLUMN",
              help="The audio column of Parquet sources with embedded audio (default: audio).")
def index(sources, out: str, labels: str | None, labels_key: str, labels_match: str, labels_root: str | None,
          labels_missing: str, text_columns: tuple[str, ...], numeric_columns: tuple[str, ...], root: str | None,
          segments: str | None, loudness: bool, mono: bool, executor: str, ray_address: str | None, jobs: int | None,
          chunk_size: int | None, progress: bool, audio_column: str | None = None) -> None:
    """Index SOURCES into one Parquet file, or refresh an existing index.

    SOURCES are folders, files or globs; GROUP=FOLDER names groups. Re-running
    the same command re-reads only new or changed files and drops deleted ones;
    an interrupted build resumes where it stopped. Tar shards (brace patterns
    such as "s3://b/train-{000000..000099}.tar") and Parquet files with
    embedded audio are indexed in place: one row per member or row, sidecars
    and other columns as labels.
    """
    from audiotree.cli._common import resolve_sources, warnings_as_lines
    from audiotree.index import build_index

    if ray_address is not None and executor != "ray":
        raise click.UsageError("--ray-address needs --executor ray.")
    if labels is None and (text_columns or numeric_columns):
        raise click.UsageError("--text-columns and --numeric-columns need --labels.")
    parsed = resolve_sources(sources)
    spec: Any = parsed.groups if parsed.balanced else parsed.pool
    label_options: dict[str, Any] = {}
    if labels is not None:
        label_options = dict(labels_key=labels_key, labels_match=labels_match, labels_root=labels_root,
                             labels_missing=labels_missing, text_columns=text_columns, numeric_columns=numeric_columns)
    with warnings_as_lines():
        report = build_index(
            spec, out, labels=labels, **label_options, loudness=loudness, executor=executor, show_progress=progress,
            mono=mono, root=root, chunk_size=chunk_size, max_workers=jobs, ray_address=ray_address,
            audio_column=audio_column, segments=segments,
        )
    skipped = "".join(f"; skipped {n} {ext} member(s)" for ext, n in sorted(report.skipped_members.items()))
    click.echo(
        f"{report.path}: {report.rows} rows ({report.read} read, {report.reused} unchanged, {report.resumed} resumed, "
        f"{report.dropped} dropped); {report.unreadable} unreadable{skipped}"
    )


# --------------------------------------------------------------------- scan
def index_scan_report(path: str, *, duration: float, lufs_cutoff: float | None, **options: Any) -> dict:
    """``audiotree scan INDEX``'s report: :func:`audiotree.scan.index_scan_report` (kept here for older callers)."""
    from audiotree.scan import index_scan_report as library_report

    return library_report(path, duration=duration, lufs_cutoff=lufs_cutoff, **options)


def print_index_scan(report: dict, *, limit: int | None = 20) -> None:
    """The report of an index as ``audiotree scan`` prints it (at most ``limit`` lines per list of files)."""
    from audiotree.cli.scan import print_report

    print_report(report, stdout_console(), limit=limit)


def is_index_argument(values) -> bool:
    """``scan`` reads an index when its one SOURCE is a ``.parquet`` file."""
    from audiotree.cli.scan import is_index_argument as is_index

    return is_index(values)


def run_index_scan(path: str, *, duration: float, lufs_cutoff: float | None, as_json: bool) -> None:
    import json

    report = index_scan_report(path, duration=duration, lufs_cutoff=lufs_cutoff)
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        print_index_scan(report)
