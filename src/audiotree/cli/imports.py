"""``audiotree import kaldi|lhotse|nemo`` and ``audiotree export lhotse``: the twins of
``audiotree.index.import_kaldi``, ``import_lhotse``, ``import_nemo`` and ``export_lhotse``."""

from __future__ import annotations

import functools

import click

from audiotree.cli._common import warnings_as_lines

__all__ = ["import_group", "export_group"]

_OUT = click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
                    help="The segment index to write (.parquet).")
_AUDIO_ROOT = click.option("--audio-root", type=click.Path(file_okay=False), default=None,
                           help="Folder relative audio paths start from (default: the current directory).")
_LOUDNESS = click.option("--loudness/--no-loudness", default=True, show_default=True,
                         help="Compute each segment's loudness profile (decodes every segment once).")
_EXECUTOR = click.option("--executor", type=click.Choice(["process", "serial", "ray"]), default="process",
                         show_default=True, help="How recordings are read (as for `audiotree index`).")
_JOBS = click.option("--jobs", type=click.IntRange(min=1), default=None, help="Worker processes (default: one per core).")


def _import_options(command, *, audio_root: bool = True):
    """The options every importer takes, in the order ``--help`` lists them."""
    for option in (_JOBS, _EXECUTOR, _LOUDNESS, *((_AUDIO_ROOT,) if audio_root else ()), _OUT):
        command = option(command)
    return command


def _report(report) -> None:
    click.echo(f"{report.path}: {report.rows} segments from {report.read} recordings; "
               f"{report.unreadable} unreadable")


@click.group(name="import", short_help="Build a segment index from a Kaldi data dir, lhotse or NeMo manifests.")
def import_group() -> None:
    """Build a segment index from another toolkit's corpus description."""


@import_group.command(name="kaldi")
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False))
@_import_options
def import_kaldi_command(data_dir: str, out: str, audio_root: str | None, loudness: bool, executor: str,
                         jobs: int | None) -> None:
    """Index the utterances of the Kaldi data directory DATA_DIR (wav.scp, segments, text, utt2spk, spk2gender)."""
    from audiotree.index import import_kaldi

    with warnings_as_lines():
        report = import_kaldi(data_dir, out, audio_root=audio_root, loudness=loudness, executor=executor,
                              max_workers=jobs)
    _report(report)


@import_group.command(name="lhotse")
@click.argument("manifests", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@_import_options
def import_lhotse_command(manifests: tuple, out: str, audio_root: str | None, loudness: bool, executor: str,
                          jobs: int | None) -> None:
    """Index lhotse manifests: RECORDINGS.jsonl.gz SUPERVISIONS.jsonl.gz, or one CUTS.jsonl.gz."""
    from audiotree.index import import_lhotse

    if len(manifests) not in (1, 2):
        raise click.UsageError("give RECORDINGS SUPERVISIONS, or one CUTS manifest.")
    with warnings_as_lines():
        if len(manifests) == 2:
            report = import_lhotse(manifests[0], manifests[1], out, audio_root=audio_root, loudness=loudness,
                                   executor=executor, max_workers=jobs)
        else:
            report = import_lhotse(out=out, cuts=manifests[0], audio_root=audio_root, loudness=loudness,
                                   executor=executor, max_workers=jobs)
    _report(report)


@import_group.command(name="nemo")
@click.argument("manifests", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@functools.partial(_import_options, audio_root=False)
def import_nemo_command(manifests: tuple, out: str, loudness: bool, executor: str, jobs: int | None) -> None:
    """Index NeMo manifests MANIFEST... (JSON lines: audio_filepath, duration, offset, text, other fields as labels).

    Relative audio paths start from each manifest's folder.
    """
    from audiotree.index import import_nemo

    with warnings_as_lines():
        report = import_nemo(list(manifests), out, loudness=loudness, executor=executor, max_workers=jobs)
    _report(report)


@click.group(name="export", short_help="Write a corpus index as another toolkit's manifests.")
def export_group() -> None:
    """Write a corpus index in another toolkit's format."""


@export_group.command(name="lhotse")
@click.argument("index", type=click.Path(exists=True, dir_okay=False))
@click.argument("out_dir", type=click.Path(file_okay=False))
def export_lhotse_command(index: str, out_dir: str) -> None:
    """Write INDEX as OUT_DIR/recordings.jsonl.gz and OUT_DIR/supervisions.jsonl.gz (lhotse manifests)."""
    from audiotree.index import export_lhotse

    for path in export_lhotse(index, out_dir):
        click.echo(path)
