"""The window-LUFS cache on disk: per-window loudness of a list of files.

``<out_dir>/window_lufs.npz``, written atomically (temp file, fsync, rename) and
loaded with ``allow_pickle=False``. Entries: ``header`` (0-d unicode JSON: the
:mod:`audiotree.formats.header` header plus ``lufs_window_sec``, ``sample_rate``,
``mono``, ``num_files``, ``has_durations``), ``filepaths`` (``<U``),
``durations`` (float64), ``file_sizes`` and ``file_mtimes_ns`` (int64) with
``stat_present`` (bool: the file existed when the cache was made), and the
ragged loudness as ``offsets`` (int64, ``num_files + 1``) into ``values``
(float32). A cache is *stale* when a file's size or modification time differs
from what was recorded; using a stale cache raises ``ValueError`` with the
command to rebuild it.

The cache is built by :func:`audiotree.sources.build_window_lufs_cache` and
read by :func:`load_window_lufs`; :class:`WindowLufsCache` is the loaded form.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from audiotree import limits
from audiotree.fs import atomic_file, npz_problem
from audiotree.formats import header as _format
from audiotree.validation import check_positive, check_sample_rate, is_int, is_real

__all__ = [
    "CACHE_FILE",
    "WindowLufsCache",
    "find_key",
    "file_stat",
    "save_window_lufs",
    "write_cache",
    "load_window_lufs",
]

CACHE_FILE = "window_lufs.npz"
_CACHE_KEYS = frozenset(
    ("header", "filepaths", "durations", "file_sizes", "file_mtimes_ns", "stat_present", "offsets", "values")
)
_HEADER_KEYS = (*_format.HEADER_KEYS, "lufs_window_sec", "sample_rate", "mono", "num_files", "has_durations")


def find_key(mapping: Mapping[str, Any], path: Any) -> str | None:
    """The key of ``mapping`` naming ``path`` (exactly, or as the same absolute path)."""
    path = os.fspath(path)
    if path in mapping:
        return path
    target = os.path.normpath(os.path.abspath(path))
    for key in mapping:
        if os.path.normpath(os.path.abspath(key)) == target:
            return key
    return None


def file_stat(path: str) -> tuple[int, int] | None:
    """``(size, mtime_ns)`` of ``path``, or ``None`` when it cannot be stat-ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return int(st.st_size), int(st.st_mtime_ns)


@dataclasses.dataclass(frozen=True)
class WindowLufsCache:
    """Per-window loudness of a list of files, as loaded by :func:`load_window_lufs`.

    ``lufs[path]`` is a float32 array of cell loudness (LUFS); ``durations``
    maps path to seconds (or is ``None``); ``file_sizes``/``file_mtimes`` (ns)
    record each file when the cache was made (``None`` for a missing file).
    """

    lufs: dict
    durations: dict | None
    lufs_window_sec: float
    sample_rate: int | None
    mono: bool
    file_sizes: dict | None = None
    file_mtimes: dict | None = None
    path: str | None = None

    def stale_files(self, filepaths: Sequence[str] | None = None) -> list[str]:
        """Files (of ``filepaths``, default all) whose size or mtime changed since the cache was made."""
        if self.file_sizes is None:
            return []
        stale = []
        for path in (self.lufs if filepaths is None else filepaths):
            key = find_key(self.file_sizes, path)
            if key is None:
                continue
            recorded = (self.file_sizes[key], (self.file_mtimes or {}).get(key))
            try:
                st = os.stat(path)
                now = (int(st.st_size), int(st.st_mtime_ns))
            except OSError:
                now = (None, None)
            if recorded[0] != now[0] or (recorded[1] is not None and recorded[1] != now[1]):
                stale.append(os.fspath(path))
        return stale

    def check_fresh(self, filepaths: Sequence[str] | None = None) -> None:
        """Raises ``ValueError`` naming up to 3 stale files and how to rebuild the cache."""
        stale = self.stale_files(filepaths)
        if stale:
            shown = ", ".join(repr(p) for p in stale[:3])
            more = f" and {len(stale) - 3} more" if len(stale) > 3 else ""
            raise ValueError(
                f"The window-LUFS cache {self.path or ''} is stale: {shown}{more} changed (size or modification time) "
                "since it was built. Rebuild it with build_window_lufs_cache(filepaths, lufs_window_sec, out_dir) "
                "(or audiotree.sources.build_window_lufs_cache), or pass lufs_cache=None."
            )


def _cache_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path / CACHE_FILE if path.suffix != ".npz" else path


def write_cache(
    out_dir: str | os.PathLike,
    lufs_per_file: Mapping[str, Any],
    *,
    lufs_window_sec: float,
    durations: Mapping[str, float] | None,
    sample_rate: int | None,
    mono: bool,
    stats: Mapping[str, tuple[int, int] | None] | None = None,
) -> Path:
    window_sec = check_positive(lufs_window_sec, "lufs_window_sec")
    sample_rate = check_sample_rate(sample_rate, optional=True)
    if sample_rate is not None:
        limits.sane_sample_rate(sample_rate, "save_window_lufs")
    problem = limits.float_problem("lufs_window_sec", window_sec, 0, limits.MAX_SECONDS, " s")
    if problem:
        raise ValueError(f"save_window_lufs: {problem}")
    files = [os.fspath(p) for p in lufs_per_file]
    arrays = [np.asarray(lufs_per_file[p], dtype=np.float32).reshape(-1) for p in lufs_per_file]
    if durations is not None:
        missing = [p for p in files if find_key(durations, p) is None]
        if missing:
            raise ValueError(f"durations lacks {len(missing)} file(s) of lufs_per_file, e.g. {missing[0]!r}.")
        duration_values = np.array([float(durations[find_key(durations, p)]) for p in files], dtype=np.float64)
        for file, seconds in zip(files, duration_values):
            problem = limits.float_problem(f"the duration of {file!r}", seconds, 0, limits.MAX_SECONDS, " s")
            if problem:
                raise ValueError(f"save_window_lufs: {problem}")
    else:
        duration_values = np.zeros(len(files), dtype=np.float64)
    if stats is None:
        stats = {p: file_stat(p) for p in files}
    present = np.array([stats.get(p) is not None for p in files], dtype=bool)
    sizes = np.array([(stats.get(p) or (0, 0))[0] for p in files], dtype=np.int64)
    mtimes = np.array([(stats.get(p) or (0, 0))[1] for p in files], dtype=np.int64)
    offsets = np.zeros(len(files) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([a.shape[0] for a in arrays])
    header = {
        **_format.header(_format.LUFS_WINDOWS_CACHE),
        "lufs_window_sec": window_sec,
        "sample_rate": None if sample_rate is None else int(sample_rate),
        "mono": bool(mono),
        "num_files": len(files),
        "has_durations": durations is not None,
    }
    payload = {
        "header": np.array(json.dumps(header)),
        "filepaths": np.array(files, dtype=f"<U{max([len(p) for p in files] + [1])}"),
        "durations": duration_values,
        "file_sizes": sizes,
        "file_mtimes_ns": mtimes,
        "stat_present": present,
        "offsets": offsets,
        "values": np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.float32),
    }
    target = _cache_file(out_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez(buffer, **payload)
    with atomic_file(target, suffix=".npz") as tmp:
        with open(tmp, "wb") as f:
            f.write(buffer.getvalue())
    return target.parent


def save_window_lufs(
    out_dir: str | os.PathLike,
    lufs_per_file: Mapping[str, Any],
    *,
    lufs_window_sec: float,
    durations: Mapping[str, float] | None = None,
    sample_rate: int | None = None,
    mono: bool = True,
) -> Path:
    """Writes a window-LUFS cache to ``out_dir`` (atomically); returns ``out_dir``.

    Each file's current size and modification time are recorded for staleness
    checks. ``durations``, when given, must cover every file.
    """
    return write_cache(
        out_dir, lufs_per_file, lufs_window_sec=lufs_window_sec, durations=durations, sample_rate=sample_rate, mono=mono
    )


def _corrupt(path: Path, message: str) -> ValueError:
    return ValueError(
        f"Invalid window-LUFS cache {path}: {message} Rebuild it with build_window_lufs_cache(...)."
    )


def load_window_lufs(cache_dir: str | os.PathLike) -> WindowLufsCache:
    """Loads and validates a cache written by :func:`save_window_lufs` (a folder or its ``.npz``)."""
    path = _cache_file(cache_dir)
    if not path.is_file():
        raise FileNotFoundError(f"Window-LUFS cache not found: {path}. Build it with build_window_lufs_cache(...).")
    problem = npz_problem(path)
    if problem:
        raise _corrupt(path, problem + ".")
    try:
        with np.load(path, allow_pickle=False) as npz:
            data = {key: npz[key] for key in npz.files}
    except ValueError as exc:
        raise _corrupt(path, f"it cannot be loaded without pickling ({exc}).") from None
    except (OSError, zipfile.BadZipFile, EOFError, AttributeError) as exc:
        raise _corrupt(path, f"it is not a readable .npz archive ({exc}).") from None
    if "header" not in data:
        raise _corrupt(path, "it has no header entry; it is not an audiotree window-LUFS cache.")
    raw = data["header"]
    if raw.ndim != 0 or raw.dtype.kind != "U":
        raise _corrupt(path, "its header must be a 0-d unicode array.")
    try:
        header = json.loads(str(raw[()]))
    except json.JSONDecodeError:
        raise _corrupt(path, "its header is not JSON.") from None
    info = _format.check(header, _format.LUFS_WINDOWS_CACHE, path)
    _format.check_known_keys(header, _HEADER_KEYS, info, f"Invalid window-LUFS cache {path}", "the header")
    _format.check_known_keys(data, _CACHE_KEYS, info, f"Invalid window-LUFS cache {path}", "the archive")
    missing = sorted(_CACHE_KEYS - set(data))
    if missing:
        raise _corrupt(path, f"entries {missing} are missing.")
    n = header.get("num_files")
    if not is_int(n) or n < 0:
        raise _corrupt(path, f"num_files must be a non-negative int, got {n!r}.")
    window_sec = header.get("lufs_window_sec")
    if not is_real(window_sec) or not window_sec > 0:
        raise _corrupt(path, f"lufs_window_sec must be a positive number, got {window_sec!r}.")
    rate = header.get("sample_rate")
    if rate is not None and (not is_int(rate) or rate <= 0):
        raise _corrupt(path, f"sample_rate must be a positive int or null, got {rate!r}.")
    problem = (
        limits.int_problem("num_files", n, 0, limits.MAX_ITEMS)
        or limits.float_problem("lufs_window_sec", window_sec, 0, limits.MAX_SECONDS, " s")
        or (None if rate is None else limits.int_problem("sample_rate", rate, 1, limits.MAX_SAMPLE_RATE, " Hz"))
    )
    if problem:
        raise _corrupt(path, problem)
    mono = header.get("mono")
    has_durations = header.get("has_durations")
    if not isinstance(mono, bool) or not isinstance(has_durations, bool):
        raise _corrupt(path, "mono and has_durations must be true or false.")
    expect = {
        "filepaths": ("U", (n,)), "durations": ("f", (n,)), "file_sizes": ("i", (n,)),
        "file_mtimes_ns": ("i", (n,)), "stat_present": ("b", (n,)), "offsets": ("i", (n + 1,)),
    }
    for key, (kind, shape) in expect.items():
        array = data[key]
        if array.dtype.kind != kind or array.shape != shape:
            raise _corrupt(path, f"{key!r} has dtype {array.dtype} and shape {array.shape}; expected kind {kind!r}, shape {shape}.")
    problem = limits.column_problem("durations", data["durations"], 0, limits.MAX_SECONDS, " s")
    if problem:
        raise _corrupt(path, problem)
    values = data["values"]
    if values.dtype.kind != "f" or values.ndim != 1:
        raise _corrupt(path, f"'values' must be a 1-D float array, got {values.dtype} {values.shape}.")
    offsets = data["offsets"]
    if offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != values.shape[0]:
        raise _corrupt(path, "'offsets' must start at 0, never decrease and end at the number of values.")
    files = [str(p) for p in data["filepaths"]]
    if len(set(files)) != len(files):
        raise _corrupt(path, "a file is listed twice.")
    values = values.astype(np.float32, copy=False)
    lufs = {p: values[offsets[i] : offsets[i + 1]].copy() for i, p in enumerate(files)}
    durations = {p: float(d) for p, d in zip(files, data["durations"])} if has_durations else None
    present = data["stat_present"]
    sizes = {p: (int(s) if ok else None) for p, s, ok in zip(files, data["file_sizes"], present)}
    mtimes = {p: (int(t) if ok else None) for p, t, ok in zip(files, data["file_mtimes_ns"], present)}
    return WindowLufsCache(
        lufs=lufs, durations=durations, lufs_window_sec=float(window_sec), sample_rate=rate, mono=mono,
        file_sizes=sizes, file_mtimes=mtimes, path=str(path),
    )
