"""What an index's own metadata may not be trusted with: where its paths start, and its profiles.

An index is a file anyone can edit. Two of its facts decide what a dataset
reads and reports, so :func:`~audiotree.index.reader.open_index` checks both,
vectorised over the columns (no Python work per row):

* :func:`resolve_root`: the metadata's ``root`` must stay inside the index's
  own folder (symlinks followed). A forged ``root="../../.."`` with relative
  paths would otherwise read any file on the machine. A caller who keeps the
  corpus elsewhere says so explicitly (``open_index(path, root=...)``).
* :func:`check_profiles`: a readable row's loudness profile has exactly
  ``frames // profile_step`` blocks at the step of its sample rate, and (in a
  format 1.0 index, whose profiles are float32 mean squares) finite,
  non-negative values; otherwise ``loudest`` would report a loudness its audio
  does not have. Every int16 value is a valid centi-decibel level
  (:func:`audiotree.index.profile.encode_profile`).
"""

from __future__ import annotations

import os

import numpy as np

from audiotree.io import storage

__all__ = ["resolve_root", "check_profiles"]


def _inside(child: str, folder: str) -> bool:
    return child == folder or child.startswith(folder.rstrip(os.sep) + os.sep)


def resolve_root(index_path: str, stored_root: str | None, explicit_root: str | None) -> str | None:
    """The folder (or URL prefix) the index's relative paths start from.

    ``explicit_root`` (the caller's ``root=``) wins. Otherwise the metadata's
    root is resolved against the index's folder and must stay inside it; a
    remote URL root is kept as it is (it reaches no local file).

    >>> resolve_root("/data/ix/corpus.parquet", ".", None)
    '/data/ix'
    >>> resolve_root("/data/ix/corpus.parquet", "../../etc", None)
    Traceback (most recent call last):
    ValueError: /data/ix/corpus.parquet: the index's root '../../etc' resolves to /etc, outside the index's folder, ...
    >>> resolve_root("/data/ix/corpus.parquet", "../../etc", "/srv/corpus")
    '/srv/corpus'
    """
    if explicit_root is not None:
        if storage.is_url(explicit_root):
            return explicit_root.rstrip("/")
        return os.path.abspath(os.path.expanduser(explicit_root))
    if stored_root is None:
        return None
    if storage.is_url(stored_root) and not stored_root.lower().startswith("file:"):
        return stored_root
    if storage.is_url(index_path):
        folder = index_path.rsplit("/", 1)[0]
        joined = storage.join(folder, stored_root)
        scheme, rest = joined.split("://", 1)
        normal = scheme + "://" + os.path.normpath("/" + rest).lstrip("/") if rest else joined
        if ".." in stored_root.replace("\\", "/").split("/") and not (normal + "/").startswith(folder + "/"):
            raise _root_escape(index_path, stored_root, normal)
        return joined
    if stored_root.lower().startswith("file:"):
        stored_root = "/" + stored_root.split(":", 1)[1].lstrip("/")
    folder = os.path.dirname(os.path.abspath(index_path))
    resolved = os.path.normpath(os.path.join(folder, stored_root))
    if not _inside(os.path.realpath(resolved), os.path.realpath(folder)):
        raise _root_escape(index_path, stored_root, resolved)
    return resolved


def _root_escape(index_path: str, stored_root: str, resolved: str) -> ValueError:
    return ValueError(
        f"{index_path}: the index's root {stored_root!r} resolves to {resolved}, outside the index's folder, so its "
        "paths could name any file of the machine; it is not trusted. If the corpus really lives there, pass the "
        "root yourself: open_index(path, root=...) (and index=open_index(...) to a dataset). Otherwise the index "
        "was edited or damaged; rebuild it."
    )


def _numpy(array) -> np.ndarray:
    return np.asarray(array.to_numpy(zero_copy_only=False))


def check_profiles(path: str, profiles, frames, sample_rate, profile_step, readable) -> None:
    """Refuses profiles that do not describe their row's file (vectorised over the columns).

    A readable row's profile holds ``frames // profile_step`` blocks with
    ``profile_step == round(0.1 * sample_rate)``; float32 profiles (format
    1.0) hold finite non-negative mean squares. A ``ValueError`` names the
    index, the first bad row and how many rows are bad. Rows without a profile
    (not measured) pass.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    def flat(column):
        return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column

    profiles = flat(profiles)
    n = len(profiles)
    if n == 0:
        return
    valid = _numpy(profiles.is_valid()).astype(bool)
    ok_rows = _numpy(pc.fill_null(flat(readable), False)).astype(bool) & valid
    lengths = _numpy(pc.fill_null(pc.list_value_length(profiles), 0)).astype(np.int64)
    frames_ = _numpy(pc.fill_null(flat(frames), -1)).astype(np.int64)
    rate = _numpy(pc.fill_null(flat(sample_rate), 0)).astype(np.int64)
    step = _numpy(pc.fill_null(flat(profile_step), 0)).astype(np.int64)
    expected_step = np.round(0.1 * rate).astype(np.int64)
    bad_step = ok_rows & ((step <= 0) | (step != expected_step) | (frames_ < 0))
    expected = np.where(step > 0, frames_ // np.maximum(step, 1), -1)
    bad_length = ok_rows & ~bad_step & (lengths != expected)
    offsets = _numpy(profiles.offsets).astype(np.int64)
    bad_rows = np.zeros(n, dtype=bool)
    if pa.types.is_integer(profiles.type.value_type):  # int16 centi-dB: every value is a level
        bad_value = np.zeros(0, dtype=bool)
    else:
        data = _numpy(profiles.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))).astype(np.float64)
        bad_value = ~(np.isfinite(data) & (data >= 0))
    if bad_value.any():
        hits = np.flatnonzero(bad_value) + int(offsets[0])
        bad_rows[np.searchsorted(offsets, hits, side="right") - 1] = True
        bad_rows &= valid
    problems = []
    for mask, text in ((bad_step, lambda i: f"its profile_step {int(step[i])} does not match its sample rate "
                                            f"{int(rate[i])} Hz (or its frames are missing)"),
                       (bad_length, lambda i: f"its profile holds {int(lengths[i])} blocks, but {int(frames_[i])} "
                                              f"frames make {int(expected[i])}"),
                       (bad_rows, lambda i: "its profile holds values that are not finite, non-negative mean "
                                            "squares (NaN, infinite or negative)")):
        if mask.any():
            first = int(np.flatnonzero(mask)[0])
            problems.append((first, int(mask.sum()), text(first)))
    if problems:
        first, count, text = min(problems)
        raise ValueError(
            f"{path}: row {first} has a loudness profile that does not describe its file: {text} ({count} such "
            f"row(s)). The index was edited or damaged; rebuild it with `audiotree index SOURCES --out {path}`."
        )
