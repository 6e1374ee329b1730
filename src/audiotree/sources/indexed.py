"""Datasets from a corpus index: the rows a builder reads, and the loaders that read them.

A builder given ``index=`` (or a group given as ``"speech.parquet"``) reads the
index and nothing else at start-up: no folder walk, no header read. Its items
are *row numbers*; the loader maps a row to its file, checks the file is
unchanged (one ``stat``, under the ``on_stale`` policy), reads the excerpt with
the usual loader, and attaches the requested label columns as ``extras``
(``(1,)`` arrays: category ids as int32, numbers as stored, so they batch,
cross Grain and PyTorch workers and enter ``jit`` like any array; a text label
as a one-string list, so a batch holds a list of strings).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Mapping, Sequence

import grain
import numpy as np

from audiotree.io.storage import call_with_storage_options
from audiotree.validation import is_real

__all__ = ["IndexRows", "IndexedLoader", "is_index_path", "rows_from_index", "rows_by_group"]


def is_index_path(value: Any) -> bool:
    """True for a path to a ``.parquet`` corpus index (a group given as an index).

    A glob or brace pattern, and a Parquet file without the index's metadata
    (audio inside, Hugging Face style), are sources of audio instead.
    """
    if not (isinstance(value, (str, os.PathLike)) and os.fspath(value).lower().endswith(".parquet")):
        return False
    from audiotree.io.parquet_audio import has_metadata_key
    from audiotree.index.schema import METADATA_KEY

    return has_metadata_key(os.fspath(value), METADATA_KEY)


@dataclasses.dataclass(frozen=True, eq=False)
class IndexRows:
    """The selected rows of one index, as arrays (picklable, shared by every item).

    ``paths[i]`` is row ``i``'s file; ``sizes``/``mtimes`` what the index
    recorded; ``durations`` seconds; ``channels``; ``groups`` the group column
    (``None`` when null); ``labels`` ``{name: (n,) array}`` (a
    :class:`~audiotree.index.text.TextColumn` for a text label). Paths and groups
    are object arrays, so selecting rows is one fancy index. ``plan`` is the
    ``loudest`` plan of the rows (:class:`~audiotree.excerpt_search.LoudestPlan`)
    when the dataset picks loud excerpts from the index's profiles, else ``None``.
    ``windows`` is ``None`` for an index of whole files, else ``(n, 2)`` float64
    ``(start, end)`` seconds of each row's segment within its file (NaN for a
    whole-file row): the read window of :meth:`window`.
    """

    index_path: str
    refresh: str
    paths: np.ndarray
    sizes: np.ndarray
    mtimes: np.ndarray
    durations: np.ndarray
    channels: np.ndarray
    groups: np.ndarray
    labels: Mapping[str, np.ndarray]
    plan: Any = None
    windows: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.paths)

    def take(self, rows: np.ndarray) -> "IndexRows":
        rows = np.asarray(rows, dtype=np.int64)
        return dataclasses.replace(
            self, paths=self.paths[rows], sizes=self.sizes[rows], mtimes=self.mtimes[rows],
            durations=self.durations[rows], channels=self.channels[rows], groups=self.groups[rows],
            labels={k: v[rows] for k, v in self.labels.items()},
            plan=None if self.plan is None else self.plan.take(rows),
            windows=None if self.windows is None else self.windows[rows],
        )

    def window(self, i: int) -> tuple[float, float] | None:
        """Row ``i``'s read window: its segment's ``(start, end)`` seconds, or ``None`` (the whole file)."""
        if self.windows is None:
            return None
        start, end = self.windows[i]
        return None if start != start else (float(start), float(end))  # NaN: a whole-file row

    def stale_reason(self, i: int) -> str | None:
        from audiotree.index.freshness import stale_reason

        return stale_reason(self.paths[i], int(self.sizes[i]), int(self.mtimes[i]))

    def check(self, i: int, on_stale: str) -> bool:
        """False when row ``i``'s file changed and ``on_stale='skip'``; raises for ``'error'``."""
        reason = None if on_stale == "trust" else self.stale_reason(i)
        if reason is None or on_stale == "reprobe":
            return True
        if on_stale == "skip":
            return False
        from audiotree.index.reader import StaleFileError, stale_message

        raise StaleFileError(stale_message(self.paths[i], reason, self.index_path, self.refresh), self.paths[i])

    def decorate(self, tree: Any, i: int, *, stamp_group: bool) -> Any:
        """``tree`` with row ``i``'s labels in ``extras`` (and its group as ``source``)."""
        if tree is None:
            return None
        if self.labels:
            tree = tree.replace_extras(**{name: _label_leaf(values, i) for name, values in self.labels.items()})
        if stamp_group:
            from audiotree.provenance import encode_strings

            metadata = dict(tree._metadata)
            metadata["source"] = encode_strings([self.groups[i] or ""])
            tree = tree.replace(_metadata=metadata)
        return tree


def _label_leaf(values: Any, i: int) -> Any:
    """Row ``i``'s label as an item leaf: ``[text]`` for a text column, else a ``(1,)`` array."""
    if isinstance(values, np.ndarray):
        # A copy, not a view: an item must not pin (or ship to the main process) the whole column.
        return values[i:i + 1].copy()
    return [values.text(i)]


@dataclasses.dataclass(frozen=True, eq=False)
class IndexedLoader(grain.transforms.RandomMap):
    """Row number -> excerpt: staleness check, the wrapped loader, then the labels.

    ``loader`` is an ``ExcerptLoader`` (it receives the row's path) or a
    ``WindowLoader`` (it receives the slot, whose file index is the row).
    """

    rows: IndexRows
    loader: Any
    on_stale: str = "error"
    stamp_group: bool = False
    by_slot: bool = False

    def random_map(self, element: Any, rng: np.random.Generator):
        # The staleness check reaches the storage too, with the wrapped loader's options.
        return call_with_storage_options(getattr(self.loader, "storage_options", None), self._read, element, rng)

    def _read(self, element: Any, rng: np.random.Generator):
        if self.by_slot:
            slot = int(element)
            i = int(self.loader.slots.file_idx[slot])
            if not self.rows.check(i, self.on_stale):
                return None
            reprobe = self.on_stale == "reprobe" and self.rows.stale_reason(i) is not None
            tree = self.loader.read_slot(slot, rng, reprobe=reprobe)
        else:
            i = int(element)
            if not self.rows.check(i, self.on_stale):
                return None
            plan = None if self.rows.plan is None else self.rows.plan.row(i)
            window = self.rows.window(i)
            if window is None:
                tree = self.loader.read(self.rows.paths[i], rng, plan)
            else:
                tree = self.loader.read(self.rows.paths[i], rng, plan, window=window)
        return self.rows.decorate(tree, i, stamp_group=self.stamp_group)


def _check_filters(min_duration: Any, max_duration: Any) -> None:
    for name, value in (("min_duration", min_duration), ("max_duration", max_duration)):
        if value is not None and (not is_real(value) or not value >= 0):
            raise ValueError(f"{name} must be a number of seconds >= 0 or None, got {value!r}.")
    if min_duration is not None and max_duration is not None and min_duration > max_duration:
        raise ValueError(f"min_duration ({min_duration}) is above max_duration ({max_duration}).")


def _label_names(labels: Any) -> list[str]:
    if labels is None:
        return []
    if isinstance(labels, str):
        return [labels]
    names = list(labels)
    if not all(isinstance(n, str) and n for n in names):
        raise TypeError(f"labels must be a list of column names, got {labels!r}.")
    return names


def _load(index: Any, labels: Sequence[str], extra_columns: Sequence[str] = ()):
    """The index opened once, with the columns a dataset needs and the ``labels`` asked for."""
    from audiotree.index.reader import CorpusIndex, open_index

    if isinstance(index, CorpusIndex):
        return index
    if not isinstance(index, (str, os.PathLike)):
        raise TypeError(f"index must be a path to a corpus index or a CorpusIndex, got {type(index).__name__}.")
    columns = ["path", "group", "size", "mtime_ns", "channels", "duration", "readable", *extra_columns]
    return open_index(index, columns=list(dict.fromkeys(columns)), labels=labels)


def _release_arrow_memory() -> None:
    # Parquet decoding leaves freed buffers in pyarrow's pool; give them back, the
    # dataset keeps only NumPy arrays.
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


@dataclasses.dataclass(frozen=True)
class LoudestSpec:
    """What a ``loudest`` dataset needs from an index: its excerpt settings."""

    excerpt: Any
    duration: float
    mono: bool = True


def loudest_spec(excerpt: Any, duration: float, *, has_index: bool, mono: bool = True) -> LoudestSpec | None:
    """The spec when ``excerpt`` is ``loudest`` (``None`` otherwise); refuses ``skip_silent`` without an index."""
    if excerpt.strategy != "loudest":
        return None
    if excerpt.skip_silent and not has_index:
        raise ValueError("ExcerptConfig(skip_silent=True) needs index= (a corpus index with loudness profiles): "
                         "without one, silent files are not known before they are read.")
    return LoudestSpec(excerpt, float(duration), bool(mono))


def _attach_plan(rows: IndexRows, ix: Any, selected: np.ndarray, spec: LoudestSpec) -> IndexRows:
    """``rows`` (the ``selected`` rows of ``ix``) with their ``loudest`` plan from the profiles."""
    from audiotree.excerpt_search import build_plan
    from audiotree.index.reader import open_index

    if not ix.has_profile:
        if spec.excerpt.skip_silent:
            raise ValueError(f"{ix.path} was built without loudness profiles, so skip_silent=True cannot know which "
                             "files are silent; rebuild it without --no-loudness.")
        return rows  # loudest then searches each file
    table = (ix.table if "profile" in ix.table.column_names
             else open_index(ix.path, columns=["path", "profile"], root=ix.root).table)
    from audiotree.index.profile import decode_profile

    column = table.column("profile")
    profiles = []
    for r in selected:
        value = column[int(r)]
        profiles.append(decode_profile(value.values.to_numpy()) if value.is_valid else None)
    # Items take lufs from the profile when it describes what they meter (the same mono/stereo mix).
    plan = build_plan(profiles, duration=spec.duration, cutoff=float(spec.excerpt.lufs_cutoff),
                      keep_profiles=ix.mono == spec.mono)
    return dataclasses.replace(rows, plan=plan)


def without_silent(rows: IndexRows, spec: LoudestSpec | None, what: str) -> IndexRows:
    """``rows`` less those known to have no window above the cutoff, under ``skip_silent``."""
    if spec is None or not spec.excerpt.skip_silent or rows.plan is None:
        return rows
    keep = rows.plan.qualifying()
    if keep.size == 0:
        raise RuntimeError(
            f"No file of {rows.index_path} ({what}) has a {spec.duration:g} s window above lufs_cutoff="
            f"{spec.excerpt.lufs_cutoff} LUFS by its loudness profile, so skip_silent=True leaves nothing to "
            "sample; lower the cutoff or use skip_silent=False."
        )
    return rows if keep.size == len(rows) else rows.take(keep)


def rows_from_index(
    index: Any, *, labels: Any = None, min_duration: float | None = None, max_duration: float | None = None,
    what: str = "the index", loudest: LoudestSpec | None = None, filter_silent: bool = True,
) -> IndexRows:
    """The readable rows of ``index`` within the duration filters, with ``labels``.

    With ``loudest``, the rows carry a ``loudest`` plan from the profiles (and,
    under ``skip_silent`` and ``filter_silent``, lose the silent files).
    """
    _check_filters(min_duration, max_duration)
    names = _label_names(labels)
    ix = _load(index, names, ["profile"] if loudest is not None else ())
    selected = ix.select(readable=True, min_duration=min_duration, max_duration=max_duration)
    if selected.size == 0:
        raise RuntimeError(
            f"No rows of {ix.path} to read ({what}): of {len(ix)} rows, none is readable"
            + (f" within min_duration={min_duration}, max_duration={max_duration}" if min_duration is not None
               or max_duration is not None else "")
            + ". Check the filters, or rebuild the index."
        )
    unreadable = len(ix) - int(ix.column("readable").astype(bool).sum())
    if unreadable:
        warnings.warn(f"{ix.path}: {unreadable} unreadable row(s) left out (see their 'error' column).",
                      UserWarning, stacklevel=3)
    paths = ix.paths()
    rows = IndexRows(
        index_path=ix.path, refresh=ix.refresh_command(), paths=_objects(paths),
        sizes=ix.column("size").astype(np.int64), mtimes=ix.column("mtime_ns").astype(np.int64),
        durations=np.asarray(ix.column("duration"), dtype=np.float64),
        channels=np.asarray(ix.column("channels"), dtype=np.float64),
        groups=_objects(_interned(ix.table.column("group").to_pylist())),
        labels={n: ix.label_values(n) for n in names}, windows=segment_windows(ix),
    )
    rows = rows if selected.size == len(ix) else rows.take(selected)
    if loudest is not None:
        rows = _attach_plan(rows, ix, selected, loudest)
        if filter_silent:
            rows = without_silent(rows, loudest, what)
    return rows


def rows_by_group(index: Any, group_by: str, **kwargs: Any) -> dict[str, IndexRows]:
    """``{group: rows}`` from one index, grouping by column ``group_by`` (``"group"`` or a label)."""
    if not isinstance(group_by, str) or not group_by:
        raise ValueError(f"group_by must be a column name, got {group_by!r}.")
    names = _label_names(kwargs.get("labels"))
    extra = [] if group_by == "group" or group_by in names else [group_by]
    loudest = kwargs.get("loudest")
    if loudest is not None:
        extra.append("profile")
    ix = _load(index, names, extra)
    if group_by not in ix.table.column_names:
        raise ValueError(f"{ix.path} has no column {group_by!r} to group by; use 'group' or one of its labels "
                         f"{ix.label_names}.")
    rows = rows_from_index(ix, filter_silent=False, **kwargs)
    selected = ix.select(readable=True, min_duration=kwargs.get("min_duration"), max_duration=kwargs.get("max_duration"))
    keys = rows.groups if group_by == "group" else _objects(_interned(ix.table.column(group_by).to_pylist()))[selected]
    empty = np.flatnonzero(keys == None)  # noqa: E711 - elementwise on an object array
    if empty.size:
        raise ValueError(f"{ix.path}: column {group_by!r} is empty for {empty.size} row(s) (e.g. "
                         f"'{rows.paths[empty[0]]}'); every row needs a group. Fill it in, or build the index with "
                         "GROUP=FOLDER sources.")
    del ix
    names, inverse = np.unique(keys.astype(str), return_inverse=True)
    groups = {str(name): without_silent(rows.take(np.flatnonzero(inverse == j)), loudest, f"group {name!r}")
              for j, name in enumerate(names)}
    _release_arrow_memory()
    return groups


def segment_windows(ix: Any) -> np.ndarray | None:
    """``(n, 2)`` ``(start, end)`` seconds of a segment index's rows (NaN: whole file), or ``None``."""
    names = ix.table.column_names
    if "start" not in names or "end" not in names:
        return None
    return np.stack([np.asarray(ix.column("start"), dtype=np.float64),
                     np.asarray(ix.column("end"), dtype=np.float64)], axis=1)


def _interned(values: list) -> list:
    """``values`` with equal entries sharing one object (a group column repeats a few names)."""
    seen: dict = {}
    return [seen.setdefault(v, v) for v in values]


def _objects(values: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def first_channels(rows: IndexRows) -> int | None:
    """The channel count of the first row (what ``mono=False`` checks against)."""
    value = rows.channels[0]
    return None if not np.isfinite(value) else int(value)


def checked_channels(rows: IndexRows, channels: int | None) -> int | None:
    """The one channel count of a ``mono=False`` dataset's rows (``channels``, else the first row's).

    Raises :class:`~audiotree.errors.ChannelMismatchError` naming the first row
    that differs and how many do, before anything is read: the index knows
    every file's count. Rows without a count (unreadable files) are left to
    the read.
    """
    from audiotree.errors import ChannelMismatchError

    expected = first_channels(rows) if channels is None else int(channels)
    if expected is None:
        return None
    counts = rows.channels
    differ = np.flatnonzero(np.isfinite(counts) & (counts != expected))
    if differ.size:
        first = int(differ[0])
        raise ChannelMismatchError(str(rows.paths[first]), int(counts[first]), expected, count=int(differ.size))
    return expected


def refuse_index_options(**options: Any) -> None:
    """``labels=``/``min_duration=``/``max_duration=`` come from an index; refuse them without one."""
    given = sorted(name for name, value in options.items() if value is not None)
    if given:
        raise ValueError(f"{', '.join(given)} need index= (a corpus index from `audiotree index`); folders carry no "
                         "labels or durations.")


def rows_for_builder(index: Any, sources: Any, filepaths: Any, *, on_stale: str, **kwargs: Any) -> IndexRows:
    """The rows of a builder's ``index=``, refusing ``sources=``/``filepaths=`` alongside it."""
    from audiotree.index.reader import check_on_stale

    if sources is not None or filepaths is not None:
        raise ValueError("Pass index= or sources=/filepaths=, not both: the index already lists the files.")
    check_on_stale(on_stale)
    return rows_from_index(index, **kwargs)


def window_lufs_view(index: Any, lufs_window_sec: float | None) -> dict:
    """The fields of a ``WindowLufsCache`` computed from an index's loudness profiles.

    Cell ``k`` of a file is the gated loudness of its window
    ``[k * lufs_window_sec, (k + 1) * lufs_window_sec)``, from
    :func:`audiotree.index.window_loudness` (a trailing partial window is dropped).
    """
    from audiotree.index.profile import BLOCK_SEC, decode_profile, window_blocks, window_loudness
    from audiotree.index.reader import open_index

    if lufs_window_sec is None:
        raise ValueError(f"Reading the corpus index {os.fspath(index)} as a window-LUFS cache needs lufs_window_sec= "
                         "(the cell length in seconds, a multiple of 0.1).")
    blocks = window_blocks(lufs_window_sec)
    if abs(blocks * BLOCK_SEC - float(lufs_window_sec)) > 1e-9:
        raise ValueError(f"lufs_window_sec={lufs_window_sec} is not a multiple of the index's 0.1 s blocks.")
    ix = open_index(index, columns=["path", "size", "mtime_ns", "duration", "readable", "profile"])
    if not ix.has_profile:
        raise ValueError(f"{ix.path} was built without loudness profiles; rebuild it without --no-loudness.")
    paths = ix.paths()
    readable = ix.column("readable").astype(bool)
    profiles = ix.table.column("profile").to_pylist()
    column_durations, column_sizes, column_mtimes = ix.column("duration"), ix.column("size"), ix.column("mtime_ns")
    lufs, durations, sizes, mtimes = {}, {}, {}, {}
    for i, path in enumerate(paths):
        if not readable[i] or profiles[i] is None:
            continue
        lufs[path] = window_loudness(decode_profile(profiles[i]), blocks,
                                     hop_blocks=blocks).astype(np.float32)
        durations[path] = float(column_durations[i])
        sizes[path] = int(column_sizes[i])
        mtimes[path] = int(column_mtimes[i])
    return dict(lufs=lufs, durations=durations, lufs_window_sec=float(lufs_window_sec), sample_rate=None,
                mono=ix.mono, file_sizes=sizes, file_mtimes=mtimes, path=ix.path)
