"""Datasets from a corpus index: the rows a builder reads, and the loaders that read them.

A builder given ``index=`` (or a group given as ``"speech.parquet"``) reads the
index's metadata and opens its column store (:mod:`audiotree.index.columns`) at
start-up: no folder walk, no header read, no Python object per row. Its items
are *row numbers*; the loader maps a row to its file, checks the file is
unchanged under the ``on_stale`` policy (one ``stat`` per item for a local file,
one lookup per remote file per process, none under ``"trust"``), reads the excerpt with
the usual loader, and attaches the requested label columns as ``extras``
(``(1,)`` arrays: category ids as int32, numbers as stored, so they batch,
cross Grain and PyTorch workers and enter ``jit`` like any array; a text label
as a one-string list, so a batch holds a list of strings).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any

import grain
import numpy as np

from audiotree.sources.read_ahead_map import PlannedReads, is_planning
from audiotree.validation import is_real

__all__ = ["IndexRows", "IndexedLoader", "is_index_path", "rows_from_index", "rows_by_group", "load_index"]


def is_index_path(value: Any) -> bool:
    """True for a path to a ``.parquet`` corpus index (a group given as an index).

    A glob or brace pattern, and a Parquet file without the index's metadata
    (audio inside, Hugging Face style), are sources of audio instead.
    """
    if not (isinstance(value, (str, os.PathLike)) and os.fspath(value).lower().endswith(".parquet")):
        return False
    from audiotree.io.parquet_audio import has_metadata_key
    from audiotree.index.table_schema import METADATA_KEY

    return has_metadata_key(os.fspath(value), METADATA_KEY)


@dataclasses.dataclass(frozen=True, eq=False)
class IndexRows:
    """The selected rows of one index, over its column store.

    Nothing here holds a Python object per row: the columns live in the
    index's :class:`~audiotree.index.columns.ColumnStore` (files on disk, read
    one row at a time, shared through the page cache), and the rows a dataset reads are one saved
    selection of it (``selection``, ``None`` for every row). Pickled into a
    worker, rows cost the same whatever their number.

    Position ``i`` (``0 <= i < len(rows)``) is store row :meth:`row` ``(i)``.
    Per-item readers (:meth:`path`, :meth:`window`, :meth:`check`,
    :meth:`decorate`, :meth:`loudest_row`) look up one row; the vectorised
    views (``sizes``, ``durations``, ``channels``, ...) gather every selected
    row and are for the process that builds a dataset. ``labels`` names the
    label columns an item carries. ``loudest`` is ``(duration, cutoff,
    keep_profiles)`` (then ``max_silence_share, max_clip_share`` when either
    is set) when items pick loud excerpts from the profiles, else
    ``None``: a row's plan is computed when an item reads it, from its profile
    alone (a few hundred 100 ms blocks for a 20 s file).
    """

    index_path: str
    refresh: str
    store: Any
    selection: str | None = None
    #: The labels items carry and how (:class:`~audiotree.sources.item_labels.LabelPlan`); ``None``: the key only.
    labels: Any = None
    loudest: tuple | None = None
    #: The ``mono`` setting the index's loudness profiles were measured with; ``None`` without profiles.
    profile_mono: bool | None = None
    #: Whether the index's MP3 and Ogg Vorbis seek tables hold under this process's decoder
    #: (:mod:`audiotree.io.decoder_identity`); without, those files read as without a table.
    lossy_seek_tables: bool = True

    # ------------------------------------------------------------ rows
    def __len__(self) -> int:
        return len(self.store) if self.selection is None else self.store.selection_length(self.selection)

    def row(self, i: int) -> int:
        """The store row at position ``i`` (a selection naming a row outside the store is refused)."""
        return int(i) if self.selection is None else self.store.selection_row(self.selection, i)

    def rows(self) -> np.ndarray:
        """Every selected store row (int64), in order (read into memory: for the building process)."""
        if self.selection is None:
            return np.arange(len(self.store), dtype=np.int64)
        return self.store.selection_rows(self.selection)

    def take(self, positions: np.ndarray) -> "IndexRows":
        """The rows at ``positions`` (saved once in the store, so workers read them there too)."""
        positions = np.asarray(positions, dtype=np.int64)
        rows = positions if self.selection is None else self.rows()[positions]
        if rows.size == len(self.store) and np.array_equal(rows, np.arange(rows.size)):
            return dataclasses.replace(self, selection=None)
        return dataclasses.replace(self, selection=self.store.save_selection(rows))

    def _gather(self, name: str) -> np.ndarray:
        values = self.store.column(name)
        return values if self.selection is None else values[self.rows()]

    # ``(n,)`` columns of the selected rows, read from the store on each access.
    sizes = property(lambda self: self._gather("size"), doc="``(n,)`` file sizes in bytes.")
    mtimes = property(lambda self: self._gather("mtime_ns"), doc="``(n,)`` modification times in ns.")
    durations = property(lambda self: self._gather("duration"), doc="``(n,)`` durations in seconds.")
    channels = property(lambda self: self._gather("channels"), doc="``(n,)`` channel counts.")

    @property
    def windows(self) -> np.ndarray | None:
        """``(n, 2)`` ``(start, end)`` seconds of each row's segment (NaN: whole file), or ``None``."""
        return self._gather("window") if self.store.has("window") else None

    @property
    def paths(self) -> "PathColumn":
        return PathColumn(self)

    def path(self, i: int) -> str:
        """Row ``i``'s file as a usable path (joined to the index's root)."""
        return self._path_of(self.row(i))

    def group(self, i: int) -> str | None:
        return self._group_of(self.row(i))

    def window(self, i: int) -> tuple[float, float] | None:
        """Row ``i``'s read window: its segment's ``(start, end)`` seconds (and ``channels`` when it is on some of
        the file's channels), or ``None`` (the whole file)."""
        return self._window_of(self.row(i))

    # Per store row ``r``: what an item looks up once it has resolved its position (IndexedLoader).
    def _path_of(self, r: int) -> str:
        stored = self.store.string("path", r)
        root = self.store.root
        return stored if root is None else os.path.join(root, stored)

    def _group_of(self, r: int) -> str | None:
        code = int(self.store.value("group.codes", r))
        return None if code < 0 else self.store.manifest["groups"][code]

    def _window_of(self, r: int) -> tuple | None:
        if not self.store.has("window"):
            return None
        start, end = self.store.value("window", r)
        if start != start:  # NaN: a whole-file row
            return None
        mask = int(self.store.value("audio_channels", r)) if self.store.has("audio_channels") else 0
        if mask:  # a segment on some of the file's channels (one speaker of a stereo call)
            return float(start), float(end), tuple(k for k in range(mask.bit_length()) if mask >> k & 1)
        return float(start), float(end)

    def _seek_hint(self, r: int, path: str):
        """A :func:`~audiotree.io.flac_indexed.seek_hint` context for row ``r``'s FLAC, MP3 or Ogg Vorbis seek table,
        or ``None``.

        Only where it saves requests (:func:`~audiotree.io.flac_indexed.uses_seek_points`): remote files.
        """
        from audiotree.io.flac_indexed import seek_hint

        if not self._uses_table(path):
            return None
        from audiotree.index.seek_column import seek_table

        points = seek_table(self.store, r)
        if points is None:
            return None
        from audiotree.io.members import is_member, recorded_span

        # The item's own byte count: a tar member's row holds it, a Parquet cell's row its file's (the URL the cell's).
        span = recorded_span(path) if is_member(path) else None
        size = int(self.store.value("size", r)) if span is None else span[2]
        return seek_hint(path, points, size, int(self.store.value("mtime_ns", r)))

    def _uses_table(self, path: str) -> bool:
        """Whether ``path`` is read by its row's seek table (when it has one)."""
        from audiotree.io.flac_indexed import uses_seek_points

        if not uses_seek_points(path):
            return False
        if self.lossy_seek_tables:
            return True
        from audiotree.index.seek_build import is_flac

        return is_flac(path)

    # ------------------------------------------------------------ loudest
    def planned_reads(self, r: int, path: str, rng: np.random.Generator, loader: Any, *,
                      trust_size: bool) -> list:
        """What reading row ``r`` with ``loader`` and ``rng`` will fetch, for the read-ahead
        (:func:`audiotree.sources.read_plans.row_reads`, from the row's size, duration, segment and seek points)."""
        from audiotree.index.seek_column import seek_table
        from audiotree.sources.read_plans import UNCOMPRESSED, RowFacts, row_reads

        used = self._uses_table(path)
        # (a WAV or AIFF file's table places its samples for the plan only: libsndfile reads it as usual)
        points = seek_table(self.store, r) if used or path.lower().endswith(UNCOMPRESSED) else None
        facts = RowFacts(path=path, size=int(self.store.value("size", r)), duration=self.store.value("duration", r),
                         window=self._window_of(r), seek_bytes=None if points is None or not used else points[:, 1],
                         seek_points=points)
        return row_reads(facts, rng, loader, trust_size=trust_size)

    def loudest_row(self, i: int):
        """Row ``i``'s ``loudest`` plan (a :class:`~audiotree.excerpts.plan.ProfileRowPlan`), or ``None``.

        ``None`` without ``loudest`` or when the row has no profile (then
        ``loudest`` searches the file). Computed from the row's profile alone:
        the same plan a whole-corpus plan would hold for it.
        """
        return self._plan_of(self.row(i))

    def _plan_of(self, r: int):
        if self.loudest is None:
            return None
        profile = self.store.profile(r)
        if profile is None or profile.size == 0:
            return None
        from audiotree.excerpts.plan import ProfileRowPlan

        duration, cutoff, keep, *shares = self.loudest
        silence, clip = shares or (None, None)
        return ProfileRowPlan(profile, duration=duration, cutoff=cutoff, keep_profiles=keep,
                              max_silence_share=silence, max_clip_share=clip,
                              clip_shares=None if clip is None else _clip_shares(self.store, r, self.index_path))

    def qualifying(self) -> np.ndarray:
        """Positions with a window above the cutoff by the profile, or with no profile (not known silent)."""
        duration, cutoff, _, *shares = self.loudest
        flags = _qualifying_flags(self.store, duration, cutoff, *shares, index_path=self.index_path)
        return np.flatnonzero(flags if self.selection is None else flags[self.rows()])

    # ---------------------------------------------------------- staleness
    def stale_reason(self, i: int) -> str | None:
        r = self.row(i)
        return self._stale_of(r, self._path_of(r))

    def check(self, i: int, on_stale: str) -> bool:
        """False when row ``i``'s file changed and ``on_stale='skip'``; raises for ``'raise'``."""
        r = self.row(i)
        return self._verdict(r, self._path_of(r), on_stale)[0]

    def _stale_of(self, r: int, path: str) -> str | None:
        from audiotree.index.freshness import stale_reason

        return stale_reason(path, int(self.store.value("size", r)), int(self.store.value("mtime_ns", r)))

    def _verdict(self, r: int, path: str, on_stale: str) -> tuple[bool, str | None]:
        """(read the item?, why its file changed or ``None``) under ``on_stale``; raises for ``'raise'``."""
        reason = None if on_stale == "trust" else self._stale_of(r, path)
        if reason is None or on_stale == "reprobe":
            return True, reason
        if on_stale == "skip":
            return False, reason
        from audiotree.index.reader import StaleFileError, stale_message

        raise StaleFileError(stale_message(path, reason, self.index_path, self.refresh), path)

    def decorate(self, tree: Any, i: int, *, stamp_group: bool) -> Any:
        """``tree`` with row ``i``'s labels in ``extras`` (and its group as ``source``)."""
        return self._decorate_row(tree, self.row(i), stamp_group=stamp_group)

    def _decorate_row(self, tree: Any, r: int, *, stamp_group: bool) -> Any:
        if tree is None:
            return None
        from audiotree.sources.item_labels import LabelPlan

        plan = self.labels if self.labels is not None else LabelPlan()
        tree = tree.replace_extras(**plan.leaves(self.store, r, self._path_of(r)))
        if stamp_group:
            from audiotree.provenance import encode_strings

            metadata = tree.provenance
            metadata["source"] = encode_strings([self._group_of(r) or ""])
            tree = tree.replace(_metadata=metadata)
        return tree


class PathColumn:
    """The selected rows' paths as a read-only sequence (a ``str`` made per access)."""

    __slots__ = ("_rows",)

    def __init__(self, rows: IndexRows):
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> str:
        if not isinstance(i, (int, np.integer)):
            raise TypeError("paths are read one row at a time: rows.paths[i].")
        i = int(i) + (len(self) if i < 0 else 0)
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self._rows.path(i)

    def __iter__(self):
        return (self._rows.path(i) for i in range(len(self)))


def _clip_shares(store: Any, r: int, index_path: str) -> np.ndarray:
    """Store row ``r``'s clipped share per profile block; an error naming the rebuild when the index has none."""
    shares = store.clip_shares(r)
    if shares is None:
        from audiotree.index.quality import require_clip_blocks

        raise require_clip_blocks(index_path, "ExcerptConfig(max_clip_share=...)")
    return shares


def _qualifying_flags(store: Any, duration: float, cutoff: float, max_silence: float | None = None,
                      max_clip: float | None = None, *, index_path: str = "") -> np.ndarray:
    """Per store row: a window of ``duration`` above ``cutoff`` (+ the margin), at most ``max_silence`` silent and
    at most ``max_clip`` clipped, or no profile. Computed once, kept."""
    from audiotree.excerpts.plan import PROFILE_MARGIN_LU, ProfileRowPlan

    name = f"qualifying-{duration:.6g}s-{cutoff:.6g}LUFS-{PROFILE_MARGIN_LU:g}"
    if max_silence is not None:
        name += f"-silence{max_silence:.6g}"
    if max_clip is not None:
        name += f"-clip{max_clip:.6g}"
    if store.has_extra(name):
        return store.extra(name)
    flags = np.ones(len(store), dtype=bool)
    for r in range(len(store)):
        profile = store.profile(r)
        if profile is not None and profile.size:
            flags[r] = ProfileRowPlan(profile, duration=duration, cutoff=cutoff, max_silence_share=max_silence,
                                      max_clip_share=max_clip,
                                      clip_shares=None if max_clip is None else _clip_shares(store, r, index_path)
                                      ).qualifies
    return store.save_extra(name, flags)


@dataclasses.dataclass(frozen=True, eq=False)
class IndexedLoader(grain.transforms.RandomMap):
    """Row number -> excerpt: staleness check, the wrapped loader, then the labels.

    ``loader`` is an ``ExcerptLoader`` (it receives the row's path) or a
    ``WindowLoader`` (it receives the slot, whose file index is the row).
    """

    rows: IndexRows
    loader: Any
    on_stale: str = "raise"
    stamp_group: bool = False
    by_slot: bool = False

    def random_map(self, element: Any, rng: np.random.Generator):
        # The staleness check reaches the storage with the options in effect (see loading.StorageScope).
        rows = self.rows
        slot = int(element)
        i = self.loader.slots.at(slot)[0] if self.by_slot else slot
        # One item, one row: resolved, and its path read, once.
        r = rows.row(i)
        path = rows._path_of(r)
        if is_planning():  # the read-ahead asks what this item will read (audiotree.sources.read_ahead_map)
            raise PlannedReads([] if self.by_slot else rows.planned_reads(r, path, rng, self.loader,
                                                                          trust_size=self.on_stale == "trust"))
        keep, reason = rows._verdict(r, path, self.on_stale)
        if not keep:
            return None
        if reason is None:  # (a changed file, re-probed, is read without its stale table)
            hint = rows._seek_hint(r, path)
            if hint is not None:
                with hint:
                    return self._read_row(r, path, slot, rng, reason)
        else:  # nor at the byte range the index recorded for a member of the old file
            from audiotree.io.members import unrecorded

            path = unrecorded(path)
        return self._read_row(r, path, slot, rng, reason)

    def _read_row(self, r: int, path: str, slot: int, rng: np.random.Generator, reason: str | None):
        rows = self.rows
        if self.by_slot:
            tree = self.loader.read_slot(slot, rng, reprobe=reason is not None)
        else:
            plan, window = rows._plan_of(r), rows._window_of(r)
            if window is None:
                tree = self.loader.read(path, rng, plan)
            else:
                tree = self.loader.read(path, rng, plan, window=window)
        return rows._decorate_row(tree, r, stamp_group=self.stamp_group)


def _check_filters(min_duration: Any, max_duration: Any) -> None:
    for name, value in (("min_duration", min_duration), ("max_duration", max_duration)):
        if value is not None and (not is_real(value) or not value >= 0):
            raise ValueError(f"{name} must be a number of seconds >= 0 or None, got {value!r}.")
    if min_duration is not None and max_duration is not None and min_duration > max_duration:
        raise ValueError(f"min_duration ({min_duration}) is above max_duration ({max_duration}).")


def load_index(index: Any):
    """The index's validated metadata (no rows read) and its column store (built on first use)."""
    from audiotree.index.columns import open_columns
    from audiotree.index.reader import CorpusIndex, open_index

    if not isinstance(index, CorpusIndex):
        if not isinstance(index, (str, os.PathLike)):
            raise TypeError(f"index must be a path to a corpus index or a CorpusIndex, got {type(index).__name__}.")
        index = open_index(index, columns=())
    return index, open_columns(index)


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
    for knob, what in (("max_silence_share", "silent"), ("max_clip_share", "clipped")):
        if getattr(excerpt, knob) is not None and not has_index:
            raise ValueError(f"ExcerptConfig({knob}=...) needs Corpus(index=...) (a corpus index with loudness "
                             f"profiles): without one, which windows are {what} is not known before they are read.")
    if excerpt.skip_silent and not has_index:
        raise ValueError("ExcerptConfig(skip_silent=True) needs Corpus(index=...) (a corpus index with loudness profiles): "
                         "without one, silent files are not known before they are read.")
    return LoudestSpec(excerpt, float(duration), bool(mono))


def _with_loudest(rows: IndexRows, ix: Any, spec: LoudestSpec) -> IndexRows:
    """``rows`` planning ``loudest`` excerpts from their profiles (per item), when the index has them."""
    if not ix.has_profile:
        if spec.excerpt.skip_silent or spec.excerpt.max_silence_share is not None \
                or spec.excerpt.max_clip_share is not None:
            option = "skip_silent=True" if spec.excerpt.skip_silent else \
                "max_silence_share" if spec.excerpt.max_silence_share is not None else "max_clip_share"
            what = "windows clip" if option == "max_clip_share" else "files are silent"
            raise ValueError(f"{ix.path} was built without loudness profiles, so {option} cannot know which "
                             f"{what}; rebuild it without --no-loudness.")
        return rows  # loudest then searches each file
    silence, clip = spec.excerpt.max_silence_share, spec.excerpt.max_clip_share
    if clip is not None and not rows.store.has("clip.offsets"):
        from audiotree.index.quality import require_clip_blocks

        raise require_clip_blocks(ix.path, "ExcerptConfig(max_clip_share=...)")
    # Items take lufs from the profile when it describes what they meter (the same mono/stereo mix).
    shares = () if silence is None and clip is None else \
        (None if silence is None else float(silence), None if clip is None else float(clip))
    return dataclasses.replace(rows, loudest=(spec.duration, float(spec.excerpt.lufs_cutoff), ix.mono == spec.mono)
                               + shares)


def without_silent(rows: IndexRows, spec: LoudestSpec | None, what: str) -> IndexRows:
    """``rows`` less those known to have no window above the cutoff, under ``skip_silent``."""
    if spec is None or not spec.excerpt.skip_silent or rows.loudest is None:
        return rows
    keep = rows.qualifying()
    if keep.size == 0:
        raise RuntimeError(
            f"No file of {rows.index_path} ({what}) has a {spec.duration:g} s window above lufs_cutoff="
            f"{spec.excerpt.lufs_cutoff} LUFS by its loudness profile, so skip_silent=True leaves nothing to "
            "sample; lower the cutoff or use skip_silent=False."
        )
    return rows if keep.size == len(rows) else rows.take(keep)


def _selected_rows(store: Any, min_duration: float | None, max_duration: float | None, where: str | None = None,
                   ix: Any = None) -> np.ndarray:
    keep = store.column("readable").astype(bool)
    if where is not None:
        from audiotree.index.where import where_mask

        keep = keep & where_mask(where, store, ix.path, ix.meta)
    if min_duration is not None or max_duration is not None:
        duration = store.column("duration")
        if min_duration is not None:
            keep = keep & (duration >= float(min_duration))
        if max_duration is not None:
            keep = keep & (duration <= float(max_duration))
    return np.flatnonzero(keep)


def rows_from_index(
    index: Any, *, labels: Any = None, min_duration: float | None = None, max_duration: float | None = None,
    what: str = "the index", loudest: LoudestSpec | None = None, filter_silent: bool = True, where: str | None = None,
    weight_by: Any = None,
) -> IndexRows:
    """The readable rows of ``index`` within the duration filters and ``where`` (:mod:`audiotree.index.where`), with
    ``labels``.

    With ``loudest``, the rows plan loud excerpts from the profiles (and,
    under ``skip_silent`` and ``filter_silent``, lose the silent files).
    Start-up reads the index's metadata and opens its column store; its cost
    does not grow with the rows beyond the filters' one vectorised pass.
    """
    from audiotree.index.quality import is_quality, require_quality
    from audiotree.io.decoder_identity import tables_hold
    from audiotree.sources.item_labels import label_request, plan_labels

    _check_filters(min_duration, max_duration)
    request = label_request(labels)
    ix, store = load_index(index)
    quality = [name for name, _ in request if is_quality(name)]
    if quality:
        require_quality(ix.path, ix.meta, f"Corpus(labels={quality})")
    selected = _selected_rows(store, min_duration, max_duration, where, ix)
    if selected.size == 0:
        raise RuntimeError(
            f"No rows of {ix.path} to read ({what}): of {len(store)} rows, none is readable"
            + (f" within min_duration={min_duration}, max_duration={max_duration}" if min_duration is not None
               or max_duration is not None else "")
            + (f" where {where}" if where is not None else "")
            + ". Check the filters, or rebuild the index."
        )
    unreadable = len(store) - int(np.count_nonzero(store.column("readable")))
    if unreadable:
        warnings.warn(f"{ix.path}: {unreadable} unreadable row(s) left out (see their 'error' column).",
                      UserWarning, stacklevel=3)
    rows = IndexRows(index_path=ix.path, refresh=ix.refresh_command(), store=store,
                     labels=plan_labels(store, request, ix.path),
                     profile_mono=ix.mono if ix.has_profile else None,
                     lossy_seek_tables=tables_hold(ix.meta.get("decoders"), ix.path, ix.refresh_command()))
    if selected.size != len(store):
        rows = rows.take(selected)
    if loudest is not None:
        rows = _with_loudest(rows, ix, loudest)
        if filter_silent:
            rows = without_silent(rows, loudest, what)
    return weighted(rows, weight_by, ix)


def weighted(rows: IndexRows, weight_by: Any, ix: Any) -> IndexRows:
    """``rows`` resampled by ``weight_by`` (:mod:`audiotree.index.weights`); as they are without one."""
    if weight_by is None:
        return rows
    from audiotree.index.weights import resample_positions, row_weights

    store_rows = rows.rows()
    weights = row_weights(weight_by, rows.store, ix.path, ix.meta, store_rows)
    return rows.take(resample_positions(weights, f"weight_by of {ix.path}"))


def rows_by_group(index: Any, group_by: str, **kwargs: Any) -> dict[str, IndexRows]:
    """``{group: rows}`` from one index, grouping by column ``group_by`` (``"group"`` or a label, text included)."""
    if not isinstance(group_by, str) or not group_by:
        raise ValueError(f"group_by must be a column name, got {group_by!r}.")
    ix, store = load_index(index)
    if group_by != "group" and group_by not in ix.label_names:
        raise ValueError(f"{ix.path} has no column {group_by!r} to group by; use 'group' or one of its labels "
                         f"{ix.label_names}.")
    weight_by = kwargs.pop("weight_by", None)  # (within each group)
    rows = rows_from_index(ix, filter_silent=False, **kwargs)
    codes, names = store.codes(group_by)
    keys = codes[rows.rows()]
    empty = np.flatnonzero(keys < 0)
    if empty.size:
        raise ValueError(f"{ix.path}: column {group_by!r} is empty for {empty.size} row(s) (e.g. "
                         f"'{rows.path(int(empty[0]))}'); every row needs a group. Fill it in, or build the index "
                         "with GROUP=FOLDER sources.")
    order = np.argsort(keys, kind="stable")
    present, starts = np.unique(keys[order], return_index=True)
    bounds = np.r_[starts, keys.size]
    loudest = kwargs.get("loudest")
    by_name = sorted((names[int(code)], k) for k, code in enumerate(present))
    return {name: weighted(without_silent(rows.take(np.sort(order[bounds[k]:bounds[k + 1]])), loudest,
                                          f"group {name!r}"), weight_by, ix)
            for name, k in by_name}


def text_labels(rows: IndexRows) -> list[str]:
    """The labels ``rows`` carry that are free text (transcripts): the index records them as kind ``"text"``.

    The one place that decides what a text label is, for the check that a
    fixed-length crop does not carry a whole utterance's transcript.
    """
    plan = rows.labels
    if plan is None:
        return []
    # (an utterance id names the item; it holds no words a crop could lose)
    return [name for name, kind, columns in zip(plan.names, plan.kinds, plan.columns)
            if kind == "text" and columns != ("id",)]


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


def rows_for_builder(index: Any, sources: Any, filepaths: Any, **kwargs: Any) -> IndexRows:
    """The rows of a builder's ``index=``, refusing ``sources=``/``filepaths=`` alongside it."""
    if sources is not None or filepaths is not None:
        raise ValueError("Pass Corpus(index=...) or sources=/filepaths=, not both: the index already lists the files.")
    return rows_from_index(index, **kwargs)


def window_lufs_view(index: Any, lufs_window_sec: float | None) -> dict:
    """The fields of a ``WindowLufsCache`` computed from an index's loudness profiles.

    Cell ``k`` of a file is the gated loudness of its window
    ``[k * lufs_window_sec, (k + 1) * lufs_window_sec)``, from
    :func:`audiotree.index.window_loudness` (a trailing partial window is
    dropped). The cells come from the index's column store
    (:func:`audiotree.sources.window_index.index_cells`, computed once per cell
    length); the view itself is one dict entry per readable file, for
    ``load_window_lufs`` and folder datasets. A windowed dataset over the
    index reads the arrays instead.
    """
    from audiotree.sources.window_index import check_cell_length, index_cells

    blocks = check_cell_length(os.fspath(index), lufs_window_sec)
    ix, store = load_index(index)
    if not ix.has_profile:
        raise ValueError(f"{ix.path} was built without loudness profiles; rebuild it without --no-loudness.")
    offsets, values, known = index_cells(store, blocks)
    rows = IndexRows(index_path=ix.path, refresh=ix.refresh_command(), store=store)
    column_durations, column_sizes, column_mtimes = (store.column(n) for n in ("duration", "size", "mtime_ns"))
    lufs, durations, sizes, mtimes = {}, {}, {}, {}
    for r in np.flatnonzero(known).tolist():
        path = rows.path(r)
        lufs[path] = np.array(values[offsets[r]:offsets[r + 1]], dtype=np.float32)
        durations[path] = float(column_durations[r])
        sizes[path] = int(column_sizes[r])
        mtimes[path] = int(column_mtimes[r])
    return dict(lufs=lufs, durations=durations, lufs_window_sec=float(lufs_window_sec), sample_rate=None,
                mono=ix.mono, file_sizes=sizes, file_mtimes=mtimes, path=ix.path)
