"""Windowed sampling: draw excerpts by *window* of long files instead of by file.

Each file gets a number of *slots* that grows with its length (``alpha`` sets
how fast; :mod:`audiotree.sources.slots` has the arithmetic), and one epoch
visits every slot once, shuffled globally with a new permutation per epoch.
Every global index has its own RNG, exactly like
:func:`~audiotree.sources.create_audio_dataset`, and items are read by seeking
(:func:`audiotree.io.excerpt.read_excerpt`); whole files are never decoded.

A window-LUFS cache (:mod:`audiotree.formats.window_lufs`, measured by the
streaming meter :mod:`audiotree.dsp.window_meter`) lets the builders drop
quiet slots. :class:`WindowConfig` holds the knobs, for
:func:`create_windowed_audio_dataset` and for the groups of
``create_balanced_audio_dataset(window=...)``.

Over a corpus index (``index=``), the plan is made from the index's columns as
arrays and kept in its column store, so a worker's dataset holds no per-file
Python object (:mod:`audiotree.sources.window_index`); the items are the ones
the same durations and loudness give by path.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import grain
import numpy as np

from audiotree.core import AudioTree
from audiotree.sources.item_labels import item_key
from audiotree.dsp.edits import downmix
from audiotree.dsp.loudness import MAX_CHANNELS
from audiotree.dsp.window_meter import WindowMeter
from audiotree.formats import window_lufs as cache_format
from audiotree.formats.window_lufs import WindowLufsCache, file_stat, save_window_lufs, write_cache
from audiotree.errors import AudioReadError
from audiotree.io.decode import AudioFile, probe
from audiotree.io.excerpt import OffsetPastEndError
from audiotree.seeds import derive_streams
from audiotree.sources.datasets.options import BuildRequest, Output, WindowConfig
from audiotree.sources.datasets.common import (building_with_storage_options, own_host_stream, refuse_text_windows,
                                              resolve_files)
from audiotree.sources.datasets.plan import DatasetPlan
from audiotree.discovery.sharding import host_items
from audiotree.sources.loading import MeasureLufs, in_storage_scope
from audiotree.sources.audio_datasets import AudioMapDataset, estimate_item_bytes
from audiotree.io.members import unrecorded
from audiotree.sources.indexed import IndexedLoader, is_index_path, rows_for_builder, window_lufs_view
from audiotree.sources.slots import build_slot_index, check_file_duration, lookup_files, plan_slots
from audiotree.sources.window_index import StoreSlots, check_cell_length, row_cells
from audiotree.validation import check_positive

__all__ = [
    "WindowConfig",
    "WindowLufsCache",
    "check_window_rows",
    "build_windowed_dataset",
    "windowed_group_dataset",
    "scan_durations",
    "precompute_window_lufs",
    "save_window_lufs",
    "load_window_lufs",
    "build_window_lufs_cache",
]

_SCAN_PROGRESS_MIN = 100
_BUILD_PROGRESS_MIN = 8
_CHUNK_SECONDS = 30.0


# ---------------------------------------------------------------- scanning
def _per_file(func, files: list[str], *, executor: Any, show: bool | None, threshold: int, desc: str) -> list:
    """``[func(f) for f in files]`` on ``executor`` (see :mod:`audiotree.parallel`), with a bar on the driver."""
    from tqdm.auto import tqdm

    from audiotree.parallel import map_items

    enabled = len(files) >= threshold if show is None else bool(show)
    with tqdm(total=len(files), desc=desc, unit="file", disable=not enabled) as bar:
        return map_items(func, files, executor=executor, progress=bar.update)


def _header_duration(path: str) -> float:
    from audiotree.io import probe

    return float(probe(path).duration)


def scan_durations(
    filepaths: Sequence[str | os.PathLike], *, show_progress: bool | None = None, executor: Any = None
) -> dict[str, float]:
    """Durations in seconds from file headers only (no decoding).

    Shows a progress bar for long lists (``show_progress=None``: 100 files or
    more). An unreadable file raises :class:`~audiotree.errors.AudioReadError`
    naming it. ``executor`` runs the probes elsewhere (``None``: here;
    ``"process"``, ``"ray"`` or any ``concurrent.futures.Executor``, see
    :func:`audiotree.parallel.open_executor`); the result is the same.
    """
    files = [os.fspath(p) for p in filepaths]
    durations = _per_file(_header_duration, files, executor=executor, show=show_progress,
                          threshold=_SCAN_PROGRESS_MIN, desc="Scanning durations")
    return dict(zip(files, durations))


def _file_window_lufs(path: str, window_sec: float, mono: bool) -> np.ndarray:
    """Gated loudness of each full ``window_sec`` window of one file, streamed in chunks."""
    with AudioFile(path) as f:
        info = f.info
        window = int(round(window_sec * info.sample_rate))
        if window <= 0:
            raise ValueError(f"lufs_window_sec={window_sec} is shorter than one sample of '{path}'.")
        n_windows = info.frames // window
        channels = 1 if mono else info.channels
        if channels > MAX_CHANNELS:
            raise ValueError(
                f"'{path}' has {channels} channels, but BS.1770 loudness is defined for at most {MAX_CHANNELS}; "
                "build the cache with mono=True."
            )
        out = np.empty(n_windows, dtype=np.float32)
        if n_windows == 0:
            return out
        meter = WindowMeter(info.sample_rate, channels=channels, window=window)
        per_chunk = max(1, int(_CHUNK_SECONDS // window_sec))
        for first in range(0, n_windows, per_chunk):
            count = min(per_chunk, n_windows - first)
            frames = f.read(first * window, count * window).astype(np.float64)
            if frames.shape[0] != count * window:
                raise ValueError(f"'{path}' ended early at window {first}; the file is truncated or its header is wrong.")
            out[first : first + count] = meter.push(downmix(frames, axis=1) if mono else frames)
    return out


def precompute_window_lufs(
    filepaths: Sequence[str | os.PathLike],
    lufs_window_sec: float,
    *,
    sample_rate: int | None = 44_100,
    mono: bool = True,
    show_progress: bool | None = None,
    executor: Any = None,
) -> dict[str, np.ndarray]:
    """Gated BS.1770 loudness (LUFS) of consecutive ``lufs_window_sec`` windows of each file.

    Files are streamed in chunks (memory stays bounded) and measured at their
    native rate, which BS.1770 defines for any rate; ``sample_rate`` is the rate
    the cache is meant for and is only recorded by :func:`save_window_lufs`.
    Returns ``{path: float32 array}``; a file shorter than one window gets an
    empty array. Shows a progress bar from 8 files (``show_progress``).
    ``executor`` measures the files elsewhere (see :func:`scan_durations`);
    the arrays are identical, bit for bit, whichever runs them.
    """
    window_sec = check_positive(lufs_window_sec, "lufs_window_sec")
    if sample_rate is not None:
        check_positive(sample_rate, "sample_rate")
    files = [os.fspath(p) for p in filepaths]
    measured = _per_file(_WindowLufs(window_sec, bool(mono)), files, executor=executor, show=show_progress,
                         threshold=_BUILD_PROGRESS_MIN, desc="Measuring window loudness")
    return dict(zip(files, measured))


@dataclasses.dataclass(frozen=True)
class _WindowLufs:
    """``_file_window_lufs`` with its settings bound: a picklable task for any executor."""

    window_sec: float
    mono: bool

    def __call__(self, path: str) -> np.ndarray:
        return _file_window_lufs(path, self.window_sec, self.mono)


def load_window_lufs(cache_dir: str | os.PathLike, *, lufs_window_sec: float | None = None) -> WindowLufsCache:
    """Loads and validates a cache written by :func:`save_window_lufs` (a folder or its ``.npz``).

    A corpus index (a ``.parquet`` file from :func:`audiotree.index.build_index`)
    is read as a cache too: its loudness profiles give the cells of
    ``lufs_window_sec`` seconds (required then; a multiple of 0.1 s). The file
    format itself is :mod:`audiotree.formats.window_lufs`.
    """
    if is_index_path(cache_dir):
        return WindowLufsCache(**window_lufs_view(cache_dir, lufs_window_sec))
    return cache_format.load_window_lufs(cache_dir)


def build_window_lufs_cache(
    filepaths: Sequence[str | os.PathLike],
    lufs_window_sec: float,
    out_dir: str | os.PathLike,
    *,
    sample_rate: int | None = 44_100,
    mono: bool = True,
    durations: Mapping[str, float] | None = None,
    show_progress: bool | None = None,
    executor: Any = None,
) -> Path:
    """Measures every file (:func:`precompute_window_lufs`), scans durations unless
    given, and saves the cache to ``out_dir``; returns ``out_dir``.

    File sizes and modification times are recorded *before* measuring, so a
    file that changes during the build makes the cache stale rather than wrong.
    An ``out_dir`` ending in ``.parquet`` builds a corpus index instead
    (:func:`audiotree.index.build_index`, whose profiles serve any window
    length); load it with ``load_window_lufs(path, lufs_window_sec=...)``.
    ``executor`` runs the measuring and the scan elsewhere (one pool or cluster
    for both; see :func:`scan_durations`); the cache holds the same values.
    """
    from audiotree.parallel import open_executor

    if is_index_path(out_dir):
        from audiotree.index import build_index

        build_index([os.fspath(p) for p in filepaths], out_dir, mono=mono, executor="serial" if executor is None else executor,
                    show_progress=bool(show_progress))
        return Path(out_dir)
    files = [os.fspath(p) for p in filepaths]
    stats = {p: file_stat(p) for p in files}
    with open_executor(executor) as runner:
        lufs = precompute_window_lufs(files, lufs_window_sec, sample_rate=sample_rate, mono=mono,
                                      show_progress=show_progress, executor=runner)
        if durations is None:
            durations = scan_durations(files, show_progress=show_progress, executor=runner)
    return write_cache(
        out_dir, lufs, lufs_window_sec=lufs_window_sec, durations=durations, sample_rate=sample_rate, mono=mono,
        stats=stats,
    )


# ---------------------------------------------------------------- slot index
# ------------------------------------------------------------------ loading
@dataclasses.dataclass(frozen=True, eq=False)
class WindowLoader(grain.transforms.RandomMap):
    """Reads the excerpt of one slot (by seeking) with the item's own ``rng``.

    ``files`` maps a slot's file index to its path: a tuple, or an index's
    mapped path column; ``slots`` is a :class:`~audiotree.sources.slots.SlotIndex` or, over an index,
    a :class:`~audiotree.sources.window_index.StoreSlots`.
    """

    files: Any
    slots: Any
    duration: float
    jitter: bool
    sample_rate: int
    mono: bool
    pad_mode: str | None
    source: str | None
    #: Where the durations the slots were planned from came from (named when a file is shorter).
    durations_source: str = "durations="

    def random_map(self, element: Any, rng: np.random.Generator):
        return self.read_slot(int(element), rng)

    def read_slot(self, slot: int, rng: np.random.Generator, *, reprobe: bool = False):
        """The excerpt of ``slot``; ``reprobe`` re-reads the file's length (it changed since it was indexed).
        Remote paths are read with the storage options in effect (see :class:`~audiotree.sources.loading.StorageScope`)."""
        file, offset, stride, max_offset = self.slots.at(slot)
        if self.jitter and stride > 0:
            offset += float(rng.uniform(0.0, stride))
        offset = min(offset, max_offset)
        path = self.files[file]
        if reprobe:  # read as the file is now: not at a member range the index recorded for the old one
            path = unrecorded(path)
            offset = min(offset, max(0.0, probe(path).duration - self.duration))
        try:
            tree = AudioTree.from_file(
                path, sample_rate=self.sample_rate, offset=offset, duration=self.duration, mono=self.mono,
                pad_mode=self.pad_mode, source=self.source,
            )
            return tree.replace_extras(key=[item_key(path)])
        except OffsetPastEndError as exc:
            # The planned length was wrong: a read problem of this file (on_read_error), not a bad argument.
            planned = max_offset + self.duration
            raise AudioReadError(
                f"Failed to read audio file '{path}': {exc.reason}. The windows were planned from {self.durations_source}, "
                f"which says it lasts {planned:.3f} s; refresh it (rebuild the index or cache, or fix durations=) "
                f"or use on_stale='reprobe' with an index.", path) from None


# The most seconds of audio one byte of a file can hold (FLAC's constant subframes of silence come close to 2).
_MAX_SECONDS_PER_BYTE = 8.0


def _check_index_durations(rows: Any, hop: float) -> None:
    """Every duration the windows are planned from: finite, >= 0, and plausible for the file's size (the
    index may be edited or damaged); a ValueError naming the index and the row."""
    durations = np.asarray(rows.durations, dtype=np.float64)
    sizes = np.asarray(rows.sizes, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(durations) | (durations < 0) | (durations > _MAX_SECONDS_PER_BYTE * np.maximum(sizes, 1))
    if not bad.any():
        return
    i = int(np.flatnonzero(bad)[0])
    where = f"{rows.index_path} (row of '{rows.paths[i]}', {int(bad.sum())} bad row(s) in all)"
    value = float(durations[i])
    if np.isfinite(value) and value >= 0:
        raise ValueError(f"The duration of '{rows.paths[i]}' in the corpus index {where} is implausible ({value:g} s "
                         f"for a file of {int(sizes[i])} bytes); the index was edited or damaged. Rebuild it.")
    try:
        check_file_duration(rows.paths[i], value, hop, f"the corpus index {where}")
    except ValueError as exc:
        raise ValueError(f"{exc} The index was edited or damaged; rebuild it.") from None


def _resolve_cache(lufs_cache: Any, lufs_window_sec: float | None = None) -> WindowLufsCache | None:
    if lufs_cache is None or isinstance(lufs_cache, WindowLufsCache):
        return lufs_cache
    if isinstance(lufs_cache, (str, os.PathLike)):
        return load_window_lufs(lufs_cache, lufs_window_sec=lufs_window_sec)
    raise TypeError(f"lufs_cache must be a path, a WindowLufsCache or None, got {type(lufs_cache).__name__}.")


def _checked_cache(where: str, cache_rate: int | None, cache_mono: bool, *, sample_rate: int, mono: bool) -> None:
    """Refuses a window-LUFS cache (at ``where``) measured for another rate or mono setting."""
    if cache_rate is not None and cache_rate != sample_rate:
        raise ValueError(
            f"The window-LUFS cache {where} was built for {cache_rate} Hz, but this dataset reads "
            f"at {sample_rate} Hz; rebuild it with sample_rate={sample_rate}."
        )
    if cache_mono != mono:
        raise ValueError(
            f"The window-LUFS cache {where} was built with mono={cache_mono}, but this dataset uses "
            f"mono={mono}; rebuild it with mono={mono}."
        )


def _checked_cell_length(lufs_per_file: Any, lufs_window_sec: float | None) -> float | None:
    if lufs_per_file is None:
        return lufs_window_sec
    if lufs_window_sec is None:
        raise ValueError("lufs_per_file needs lufs_window_sec= (the length of each loudness cell in seconds).")
    return check_positive(lufs_window_sec, "lufs_window_sec")


def _file_slots(files: list[str], window: WindowConfig, *, hop: float, sample_rate: int, mono: bool,
                durations: Mapping[str, float] | None, lufs_per_file: Mapping[str, Any] | None) -> tuple[Any, str]:
    """``(SlotIndex, durations_source)`` of explicit files: durations and loudness looked up by path."""
    lufs_window_sec = window.lufs_window_sec
    durations_hint = "add it to durations= or pass durations=None to read the file headers."
    durations_source = "durations="
    cache = _resolve_cache(window.lufs_cache, lufs_window_sec)
    if cache is not None:
        _checked_cache(cache.path or "", cache.sample_rate, cache.mono, sample_rate=sample_rate, mono=mono)
        cache.check_fresh(files)
        if lufs_per_file is None:
            lufs_per_file = cache.lufs
        if lufs_window_sec is None:
            lufs_window_sec = cache.lufs_window_sec
        if durations is None and cache.durations is not None:
            durations = cache.durations
            durations_source = f"the window-LUFS cache {cache.path or ''}"
            durations_hint = (
                f"the window-LUFS cache {cache.path or ''} does not list it; rebuild the cache with this file list "
                "(build_window_lufs_cache) or pass durations=."
            )
    lufs_window_sec = _checked_cell_length(lufs_per_file, lufs_window_sec)
    if durations is None:
        durations = scan_durations(files)
    slots = build_slot_index(
        files, durations, duration=float(window.duration), hop=hop, alpha=window.alpha, lufs_per_file=lufs_per_file,
        lufs_window_sec=lufs_window_sec, lufs_cutoff=float(window.lufs_cutoff), durations_hint=durations_hint,
        durations_source=durations_source,
    )
    return slots, durations_source


def _is_own_cache(rows: Any, lufs_cache: Any) -> bool:
    """True when ``lufs_cache`` names no cache but the index ``rows`` come from (its profiles are the cells)."""
    if lufs_cache is None:
        return True
    return isinstance(lufs_cache, (str, os.PathLike)) and os.fspath(lufs_cache) == rows.index_path


def check_window_rows(rows: Any, window: WindowConfig, what: str = "") -> None:
    """Refuses an index ``window=`` cannot sample (``what`` names its group): a segment index, or text labels
    (transcripts) on files longer than one window (:func:`~audiotree.sources.datasets.common.refuse_text_windows`)."""
    if rows.store.has("window"):
        raise ValueError(f"{rows.index_path}{what} is a segment index; window= samples windows of whole files. Read "
                         "its segments with create_audio_dataset(corpus=Corpus(index=...), duration=...) instead.")
    refuse_text_windows(rows, window, what)


def _index_slots(rows: Any, window: WindowConfig, *, hop: float, sample_rate: int, mono: bool,
                 durations: Mapping[str, float] | None, lufs_per_file: Mapping[str, Any] | None) -> tuple[Any, str]:
    """``(StoreSlots, durations_source)`` of an index's rows, planned from its columns as arrays.

    Durations come from the index (unless ``durations=`` overrides them by
    path); with ``lufs_window_sec`` and no other loudness, the cells come from
    the index's profiles (:func:`~audiotree.sources.window_index.index_cells`).
    The slots are kept in the index's column store, so workers map them.
    """
    check_window_rows(rows, window)
    lufs_cache, lufs_window_sec = window.lufs_cache, window.lufs_window_sec
    durations_source = "durations="
    seconds: Any = durations
    if durations is None:  # from the index: no header read
        _check_index_durations(rows, hop)
        seconds = np.asarray(rows.durations, dtype=np.float64)
        durations_source = f"the corpus index {rows.index_path}"
    cells = None
    if lufs_per_file is None and lufs_window_sec is not None and _is_own_cache(rows, lufs_cache):
        # The index is its own window-LUFS cache: cells from its profiles, as arrays kept in its store.
        blocks = check_cell_length(rows.index_path, lufs_window_sec)
        if rows.profile_mono is None:
            raise ValueError(f"{rows.index_path} was built without loudness profiles; rebuild it without "
                             "--no-loudness.")
        _checked_cache(rows.index_path, None, rows.profile_mono, sample_rate=sample_rate, mono=mono)
        cells = row_cells(rows, blocks)
        lufs_window_sec = float(lufs_window_sec)
    else:
        cache = _resolve_cache(lufs_cache, lufs_window_sec)
        if cache is not None:  # indexed files are checked one by one when read (on_stale), not here
            _checked_cache(cache.path or "", cache.sample_rate, cache.mono, sample_rate=sample_rate, mono=mono)
            if lufs_per_file is None:
                lufs_per_file = cache.lufs
            if lufs_window_sec is None:
                lufs_window_sec = cache.lufs_window_sec
        lufs_window_sec = _checked_cell_length(lufs_per_file, lufs_window_sec)
    if lufs_per_file is not None or not isinstance(seconds, np.ndarray):
        # Explicit mappings by path (durations=, lufs_per_file=, another cache): looked up row by row, here only.
        seconds, looked = lookup_files(rows.paths, seconds, hop=hop, lufs_per_file=lufs_per_file,
                                       durations_source=durations_source)
        cells = looked if cells is None else cells
    plan = plan_slots(seconds, duration=float(window.duration), hop=hop, alpha=window.alpha, cells=cells,
                      lufs_window_sec=lufs_window_sec, lufs_cutoff=float(window.lufs_cutoff))
    return StoreSlots.save(rows.store, plan), durations_source


def windowed_group_dataset(
    files: Sequence[str],
    window: WindowConfig,
    *,
    name: str | None,
    shuffle: bool,
    num_epochs: int | None,
    shuffle_seed: int,
    excerpt_seed: int | None,
    output: Output,
    durations: Mapping[str, float] | None = None,
    lufs_per_file: Mapping[str, Any] | None = None,
    rows: Any = None,
    on_stale: str = "raise",
    storage_options: Mapping[str, Any] | None = None,
) -> grain.MapDataset:
    """The windowed dataset of ``files`` (raw, its items labelled ``name``): one group of
    ``create_balanced_audio_dataset(window=...)``, or all of :func:`create_windowed_audio_dataset`.

    ``rows`` (:class:`~audiotree.sources.indexed.IndexRows`) gives the files from a corpus index
    (``files`` is then ignored): the dataset holds the index's column store and
    names in it, no per-file Python object (see :mod:`audiotree.sources.window_index`).
    ``output`` gives the rate, channels and padding (checked when it was made).
    """
    sample_rate, mono, pad_mode = output.sample_rate, output.mono, output.pad_mode
    duration = float(window.duration)
    hop = duration if window.hop is None else float(window.hop)
    if rows is not None:
        slots, durations_source = _index_slots(rows, window, hop=hop, sample_rate=sample_rate, mono=mono,
                                               durations=durations, lufs_per_file=lufs_per_file)
        paths: Any = rows.paths  # read per slot from the mapped path column
    else:
        paths = [os.fspath(f) for f in files]
        slots, durations_source = _file_slots(paths, window, hop=hop, sample_rate=sample_rate, mono=mono,
                                              durations=durations, lufs_per_file=lufs_per_file)
        paths = tuple(paths)
    shuffle_stream, excerpt_stream = derive_streams(shuffle_seed, excerpt_seed)
    ds = grain.MapDataset.range(len(slots))
    if shuffle:
        ds = ds.shuffle(seed=shuffle_stream)
    ds = ds.repeat(num_epochs)
    loader = WindowLoader(
        files=paths, slots=slots, duration=duration, jitter=bool(window.jitter), sample_rate=int(sample_rate),
        mono=bool(mono), pad_mode=pad_mode, source=name,
        durations_source=durations_source,
    )
    if rows is not None:
        loader = IndexedLoader(rows=rows, loader=loader, on_stale=on_stale, stamp_group=name is None, by_slot=True)
    return ds.random_map(in_storage_scope(loader, storage_options), seed=excerpt_stream)



@building_with_storage_options
def build_windowed_dataset(sources: Any, filepaths: Sequence[str | os.PathLike] | None, *, request: BuildRequest,
                           durations: Mapping[str, float] | None = None,
                           lufs_per_file: Mapping[str, Any] | None = None) -> AudioMapDataset:
    """:func:`~audiotree.sources.create_windowed_audio_dataset`: plan (files or rows, slots), then build.

    An unreadable file always raises here (``WindowLoader`` has no other policy).
    """
    output, order, corpus, window = request.output, request.order, request.corpus, request.window
    rows = None
    if corpus.index is not None:
        rows = rows_for_builder(corpus.index, sources, filepaths, labels=corpus.labels,
                                min_duration=corpus.min_duration, max_duration=corpus.max_duration, where=corpus.where)
        check_window_rows(rows, window)
        rows = host_items(rows, order.shard_options)
        files = rows.paths
    else:
        files = resolve_files(sources, filepaths, corpus.extensions, audio_column=corpus.audio_column)
        files = host_items(files, order.shard_options)
    ds = windowed_group_dataset(
        files, window, name=output.source, shuffle=order.shuffle, num_epochs=request.num_epochs,
        shuffle_seed=order.shuffle_seed, excerpt_seed=order.excerpt_seed, output=output, durations=durations,
        lufs_per_file=lufs_per_file, rows=rows, on_stale=corpus.on_stale, storage_options=corpus.storage_options,
    )
    if output.measure_lufs:
        ds = ds.map(MeasureLufs())
    item_bytes = estimate_item_bytes(channels=1 if output.mono else 2, sample_rate=output.sample_rate,
                                     duration=window.duration)
    return own_host_stream(AudioMapDataset(ds, item_bytes=item_bytes, plan=DatasetPlan(request, output.sample_rate)),
                           request.order.shard_options)
