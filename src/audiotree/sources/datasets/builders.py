"""The three dataset builders: a folder of files, named groups mixed by weight, windows weighted by length.

Every builder returns a Grain ``MapDataset`` of batch-of-1 ``AudioTree`` items.
Each takes its own few arguments and the option objects of
:mod:`audiotree.sources.datasets.options` (:class:`Output`, :class:`Order`,
:class:`Corpus`), in which every word means the same thing in all three.
``sample_rate``, ``shuffle``, ``shuffle_seed`` and ``excerpt_seed`` may also be
passed loose (the seed page's calls keep working).

Determinism: the file list is sorted; ``shuffle_seed`` fixes the file order
(a new permutation every epoch, see :mod:`audiotree.sources.epoch_order`) and
``excerpt_seed`` (default: derived from ``shuffle_seed``) fixes the excerpts.
Grain's ``random_map`` gives every *global* index its own generator, so
``ds[i]`` is reproducible, a file revisited in a later epoch gets a new
excerpt, and the stream does not depend on how many workers or threads read it.
"""

from __future__ import annotations

from typing import Any, Mapping

import grain

from audiotree.excerpts.config import ExcerptConfig
from audiotree.sources.datasets.by_file import build_balanced_dataset, build_file_dataset
from audiotree.discovery.files import SourceSpec
from audiotree.sources.datasets.options import BuildRequest, Corpus, Order, Output, WindowConfig
from audiotree.sources.datasets.windowed import build_windowed_dataset

__all__ = ["create_audio_dataset", "create_balanced_audio_dataset", "create_windowed_audio_dataset"]


def create_audio_dataset(
    sources: SourceSpec | None = None,
    filepaths: Any = None,
    *,
    duration: float | None = 1.0,
    num_epochs: int | None = 1,
    excerpt: ExcerptConfig = ExcerptConfig(),
    output: Output | None = None,
    order: Order | None = None,
    corpus: Corpus | None = None,
    **shorthands: Any,
) -> grain.MapDataset:
    """One excerpt per file per epoch, as a Grain ``MapDataset``.

    Args:
      sources: folders, files or globs (see :func:`find_audio_files`), tar
        shards or Parquet files with audio; or
      filepaths: an explicit list of files (order kept). Exactly one is
        required, unless ``corpus=Corpus(index=...)`` names an index.
      duration: excerpt length in seconds; items are ``(1, C,
        round(duration * sample_rate))``. ``None`` reads whole files
        (``ExcerptConfig(strategy="full")``): items differ in length and carry
        ``lengths``; see :func:`batch_by_duration`.
      num_epochs: passes over the files; ``None`` repeats forever
        (``len(ds) == sys.maxsize``).
      excerpt: how the offset is chosen (:class:`ExcerptConfig`).
      output: what every item is (:class:`Output`: rate, channels, padding,
        loudness, source name).
      order: shuffle, seeds and this host's share (:class:`Order`).
      corpus: an index and its filters, the file policies and storage
        (:class:`Corpus`).
      **shorthands: ``sample_rate`` (of ``output``), ``shuffle``,
        ``shuffle_seed``, ``excerpt_seed`` (of ``order``).

    Raises:
      FileNotFoundError: a source folder does not exist.
      RuntimeError: a source holds no audio files.
      ValueError / TypeError: an invalid argument (named in the message), or
        a loose option of an earlier release (the message names its new
        spelling, e.g. ``output=Output(mono=...)``).

    >>> import os, tempfile, numpy as np, soundfile
    >>> folder = tempfile.mkdtemp()
    >>> soundfile.write(os.path.join(folder, "a.wav"), np.zeros(8000), 8000)
    >>> ds = create_audio_dataset(folder, duration=0.5, sample_rate=8000, output=Output(mono=False))
    >>> ds[0].waveform.shape
    (1, 1, 4000)
    """
    request = BuildRequest.resolve("create_audio_dataset", output=output, order=order, corpus=corpus,
                                   shorthands=shorthands, num_epochs=num_epochs, duration=duration, excerpt=excerpt,
                                   has_index=isinstance(corpus, Corpus) and corpus.index is not None)
    return build_file_dataset(sources, filepaths, request=request)


def create_balanced_audio_dataset(
    sources: Mapping[str, Any] | None = None,
    weights: Mapping[str, float] | Any = None,
    *,
    duration: float | None = 1.0,
    num_epochs: int | None = None,
    excerpt: ExcerptConfig = ExcerptConfig(),
    window: WindowConfig | None = None,
    output: Output | None = None,
    order: Order | None = None,
    corpus: Corpus | None = None,
    **shorthands: Any,
) -> grain.MapDataset:
    """A weighted mix of named groups, balanced in every batch.

    Args:
      sources: ``{group: source}``. A source is folders/globs (each group
        becomes a dataset of its files, see :func:`create_audio_dataset`), a
        corpus index path (``{"speech": "speech.parquet"}``), or a ready
        ``grain.MapDataset`` of items (already ``.repeat()``-ed if the mix
        should be endless; split by item under ``Order(shard_options=...)``).
        Items are stamped with their group's name. With
        ``corpus=Corpus(index=..., group_by=...)`` the groups come from one
        index's column instead.
      weights: ``{group: weight}``; groups left out weigh 1. Weights are relative.
        Or a :class:`~audiotree.sources.WeightSchedule` (or a picklable
        callable ``item -> {group: weight}``) naming every group: weights that
        change along the global stream (see :mod:`audiotree.sources.weight_schedule`).
      duration: excerpt length in seconds (1 s by default); ``None`` reads
        whole files (as ``excerpt=ExcerptConfig(strategy="full")`` does).
      num_epochs: ``None`` (default) makes every file group endless. A finite
        group ends the mix when it runs out relative to its weight.
      excerpt: how the offset is chosen (:class:`ExcerptConfig`).
      window: a :class:`WindowConfig` to sample file groups by window instead
        of by file. Its ``duration`` is the excerpt length: leave ``duration``
        at its default (or equal to the window's), and ``excerpt`` too.
      output, order, corpus, **shorthands: as in :func:`create_audio_dataset`.
        ``Order(shard_options=...)`` deals this host its share of *every*
        group's containers, so every host mixes every group by ``weights``
        and the balance holds per host; a group with fewer containers than
        hosts is an error naming it. ``Output.source`` does not apply (items
        are named by group).

    Groups get seeds derived from their *names*, so adding, removing or
    reordering groups leaves every other group's stream unchanged. The mix keeps
    exact proportions and is shuffled in blocks (see
    :mod:`audiotree.sources.mixing`), so every batch, built before or after
    ``mp_prefetch`` with any number of workers, holds a random draw of groups.
    ``item.source`` names each item's group.

    >>> import os, tempfile, numpy as np, soundfile
    >>> root = tempfile.mkdtemp()
    >>> for group in ("speech", "music"):
    ...     os.makedirs(os.path.join(root, group))
    ...     soundfile.write(os.path.join(root, group, "a.wav"), np.zeros(8000), 8000)
    >>> ds = create_balanced_audio_dataset({g: os.path.join(root, g) for g in ("speech", "music")},
    ...                                    weights={"speech": 3, "music": 1}, duration=0.25, sample_rate=8000)
    >>> ds[0].waveform.shape
    (1, 1, 2000)
    """
    groups, datasets = {}, {}
    for name, spec in (sources or {}).items():
        (datasets if isinstance(spec, grain.MapDataset) else groups)[name] = spec
    given = corpus if isinstance(corpus, Corpus) else Corpus()
    has_index = given.index is not None or _any_index(groups, given)
    request = BuildRequest.resolve("create_balanced_audio_dataset", output=output, order=order, corpus=corpus,
                                   shorthands=shorthands, num_epochs=num_epochs, duration=duration, excerpt=excerpt,
                                   window=window, has_index=has_index)
    return build_balanced_dataset(groups if sources is not None and (groups or not datasets) else None, weights,
                                  datasets or None, request=request)


def _any_index(groups: Mapping[str, Any], corpus: Corpus) -> bool:
    """Whether a group is given as a corpus index path (its footer read with the corpus's storage options)."""
    from audiotree.io.storage import use_storage_options
    from audiotree.sources.indexed import is_index_path

    with use_storage_options(corpus.storage_options):
        return any(map(is_index_path, groups.values()))


def create_windowed_audio_dataset(
    sources: SourceSpec | None = None,
    filepaths: Any = None,
    *,
    window: WindowConfig = WindowConfig(),
    durations: Mapping[str, float] | None = None,
    lufs_per_file: Mapping[str, Any] | None = None,
    num_epochs: int | None = 1,
    output: Output | None = None,
    order: Order | None = None,
    corpus: Corpus | None = None,
    **shorthands: Any,
) -> grain.MapDataset:
    """Excerpts sampled by window of the files, weighted by length (see :mod:`audiotree.sources.datasets.windowed`).

    Args:
      sources / filepaths: folders or globs, or an explicit list (exactly one),
        unless ``corpus=Corpus(index=...)`` names an index.
      window: a :class:`WindowConfig`, the only way to set the windows (the
        same object ``create_balanced_audio_dataset(window=...)`` takes): its
        ``duration`` is the excerpt length (items are ``(1, C,
        round(duration * sample_rate))``), ``hop`` the spacing of the natural
        windows (default ``duration``), ``alpha`` the length bias in [0, 1] (0
        one slot per file, 1 one slot per window), ``jitter`` randomises the
        start within each slot's stride, ``lufs_cache`` (a cache folder or
        :class:`WindowLufsCache`) and ``lufs_cutoff`` drop slots whose centre
        cell is quieter, ``lufs_window_sec`` sizes explicit loudness cells.
        From an index, durations come from the index, and with
        ``lufs_window_sec`` (a multiple of 0.1 s) quiet slots are dropped using
        its loudness profiles. Every window carries its file's labels, so an
        index with a text label (a transcript) and files longer than one
        window is refused unless ``allow_text_crops=True`` says the windows
        are meant to carry the whole text.
      durations: ``{path: seconds}``; default from the cache, else file headers.
      lufs_per_file: explicit loudness cells of ``window.lufs_window_sec``
        seconds (override the cache).
      num_epochs: passes over the slots; ``None`` repeats forever.
      output, order, corpus, **shorthands: as in :func:`create_audio_dataset`.
        ``Order(shard_options=...)`` deals this host its files *before* the
        windows are planned, so a host probes and reads only its own files
        and its slots weight only them by length. ``Corpus.on_read_error``
        stays ``"raise"`` (windows are planned from every file). Under
        ``on_stale="trust"`` a window past the end of a file that shrank since
        it was indexed raises an ``AudioReadError`` naming it.

    Raises:
      ValueError: a bad argument, a cache built for another rate/mono setting, a
        stale cache, or a file missing from the durations or loudness.
      RuntimeError: no files found, or no slots left after loudness filtering.

    >>> import os, tempfile, numpy as np, soundfile
    >>> folder = tempfile.mkdtemp()
    >>> soundfile.write(os.path.join(folder, "a.wav"), np.zeros(16000), 8000)
    >>> ds = create_windowed_audio_dataset(folder, window=WindowConfig(duration=0.5), sample_rate=8000)
    >>> len(ds), ds[0].waveform.shape
    (4, (1, 1, 4000))
    """
    request = BuildRequest.resolve("create_windowed_audio_dataset", output=output, order=order, corpus=corpus,
                                   shorthands=shorthands, num_epochs=num_epochs, window=window,
                                   has_index=isinstance(corpus, Corpus) and corpus.index is not None)
    return build_windowed_dataset(sources, filepaths, request=request, durations=durations,
                                  lufs_per_file=lufs_per_file)
