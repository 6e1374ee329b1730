"""What every dataset builder resolves while planning: files, channels, storage options, text-label checks.

Shared by :mod:`audiotree.sources.datasets.by_file` and :mod:`audiotree.sources.datasets.windowed`
(which is why it is a module of its own: neither builder imports the other's
internals).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Sequence, TypeVar

from audiotree.errors import AudioReadError
from audiotree.io.decode import probe
from audiotree.io.storage import use_storage_options
from audiotree.discovery.files import SourceSpec, discover
from audiotree.discovery.sharding import check_shard_options
from audiotree.sources.audio_datasets import AudioMapDataset
from audiotree.sources.global_stream import HostShare

__all__ = ["own_host_stream", "resolve_files", "probe_channels", "building_with_storage_options", "refuse_text_crops",
           "refuse_text_windows"]

Builder = TypeVar("Builder", bound=Callable[..., Any])


def building_with_storage_options(builder: Builder) -> Builder:
    """Runs a dataset builder with its request's ``Corpus.storage_options`` in effect (see :mod:`audiotree.io.storage`).

    Discovery and header probes made while building then reach the storage
    with those options; the dataset's one ``StorageScope`` step applies them
    again around every item (in whatever worker process reads it).
    """
    @functools.wraps(builder)
    def build(*args: Any, request: Any, **kwargs: Any) -> Any:
        with use_storage_options(request.corpus.storage_options):
            ds = builder(*args, request=request, **kwargs)
        return with_read_ahead(ds, request.corpus)

    return build  # type: ignore[return-value]


def with_read_ahead(ds: Any, corpus: Any) -> Any:
    """``ds`` with its reads planned ahead (:mod:`audiotree.sources.read_ahead_map`) when it reads an index
    (only index rows carry what a plan needs: sizes, durations, codecs) and ``corpus.read_ahead`` is on."""
    options = corpus.read_ahead
    if corpus.index is None or options is None or not options.enabled or not isinstance(ds, AudioMapDataset):
        return ds
    from audiotree.sources.read_ahead_map import ReadAheadMapDataset

    ahead = AudioMapDataset(ReadAheadMapDataset(ds, options), item_bytes=ds.item_bytes, plan=ds.plan)
    if "host_share" in vars(ds):
        ahead.host_share = ds.host_share
    return ahead


def probe_channels(path: str) -> int | None:
    """The channel count in the header of ``path``; ``None`` if it cannot be read (reading reports it later)."""
    try:
        return probe(path).channels
    except AudioReadError:
        return None


def resolve_files(sources: SourceSpec | None, filepaths: Sequence[Any] | None, extensions: Any, *,
                  on_read_error: str = "raise", audio_column: str | None = None) -> list[str]:
    """The files of ``sources`` (discovered, sorted) or ``filepaths`` (as given); exactly one is required.

    Tar shards and Parquet files among the sources give their items as member
    URLs (see :func:`~audiotree.discovery.files.discover`); a fault met listing a
    shard goes through ``on_read_error``.
    """
    if (sources is None) == (filepaths is None):
        raise ValueError("Pass exactly one of sources= (folders or globs) or filepaths= (a list of files).")
    if filepaths is not None:
        files = [os.fspath(p) for p in filepaths]
        if not files:
            raise ValueError("filepaths= is empty; pass at least one audio file.")
        return files
    files, _ = discover(sources, extensions, strict=True, on_read_error=on_read_error, audio_column=audio_column)
    return files


def resolve_labelled_files(sources: SourceSpec | None, filepaths: Sequence[Any] | None, corpus: Any) -> tuple:
    """``(files, labels)``: :func:`resolve_files` of ``sources`` with the ``Corpus.labels`` their tar sidecars and
    Parquet columns hold (:func:`audiotree.sources.item_labels.stream_labels`), for a dataset without an index."""
    from audiotree.discovery.containers import ContainerItems
    from audiotree.sources.item_labels import stream_labels
    from audiotree.io.read_errors import handle_read_error

    if sources is None:
        raise ValueError("Corpus(labels=...) without an index reads the sidecars of tar shards and the columns of "
                         "Parquet files found in sources=; filepaths= carry no labels. Build an index with "
                         "`audiotree index ... --labels FILE` and pass Corpus(index=...).")
    box = ContainerItems()
    files, _ = discover(sources, corpus.extensions, strict=True, audio_column=corpus.audio_column, containers=box)
    for problem in box.problems:
        handle_read_error(problem, corpus.on_read_error)
    return files, stream_labels(files, box.labels, corpus.labels, f"sources={sources!r}")


def refuse_text_crops(rows: Any, duration: float | None, excerpt: Any, what: str = "") -> None:
    """Refuses fixed-length excerpts that would carry a whole utterance's text label, unless allowed.

    A ``duration=`` excerpt is a crop of the file (or segment); a transcript
    label is the whole utterance's, so every crop would be paired with words it
    does not hold (every CTC target wrong). Whole items (``duration=None``),
    rows no longer than ``duration`` (read whole, padded) and
    ``ExcerptConfig(allow_text_crops=True)`` pass.
    """
    if rows is None or duration is None or excerpt.strategy == "full" or excerpt.allow_text_crops:
        return
    _refuse_crops(rows, float(duration), what, f"duration={duration!r} reads a {duration} s crop of each item",
                  "duration=None", "ExcerptConfig(allow_text_crops=True) if the crops are meant to carry the full text.")


def refuse_text_windows(rows: Any, window: Any, what: str = "") -> None:
    """:func:`refuse_text_crops` for windowed sampling: every window of a file carries the file's whole text.

    Rows no longer than ``window.duration`` (one window, read whole and
    padded) and ``WindowConfig(allow_text_crops=True)`` pass.
    """
    if rows is None or window.allow_text_crops:
        return
    seconds = float(window.duration)
    _refuse_crops(rows, seconds, what, f"window=WindowConfig(duration={window.duration!r}) reads {seconds} s "
                  "windows of each item", "no window= and duration=None (create_audio_dataset or "
                  "create_balanced_audio_dataset)", "WindowConfig(allow_text_crops=True) if the windows are meant to "
                  "carry the full text.")


def _refuse_crops(rows: Any, seconds: float, what: str, reads: str, whole: str, override: str) -> None:
    """The ValueError of a text-labelled ``rows`` some of whose items are longer than ``seconds`` (``reads``
    says what is read of them, ``whole`` how to read whole items instead, ``override`` how to accept it)."""
    from audiotree.sources.indexed import text_labels

    texts = text_labels(rows)
    if not texts:
        return
    import numpy as np

    longer = int(np.count_nonzero(np.asarray(rows.durations, dtype=np.float64) > seconds + 1e-9))
    if longer:  # items no longer than the excerpt are read whole (padded): their text is right
        raise ValueError(
            f"labels {texts} of {rows.index_path}{what} are text (transcripts of the whole file or segment), but "
            f"{reads}, so {longer} of {len(rows)} items longer than that would carry words they do not hold. Pass "
            f"{whole} to read whole items (cap them with ExcerptConfig(strategy='full', crop_to=...), pad "
            f"batches with Output(pad_mode=...) / batch_by_duration), or {override}")


def own_host_stream(ds: Any, shard_options: Any) -> Any:
    """``ds`` marked as host ``i`` of ``n``'s own stream when the builder sharded its files by host, so that
    its checkpoints are refused on another host count instead of resuming the wrong items."""
    if shard_options is not None:
        ds.host_share = HostShare(None, *check_shard_options(shard_options))
    return ds
