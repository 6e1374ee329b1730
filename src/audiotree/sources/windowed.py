"""Windowed sampling: draw excerpts by *window* of long files instead of by file.

Slot arithmetic
---------------
Each file of ``dur`` seconds, for excerpts of ``duration`` s placed every
``hop`` s (default ``duration``), gets

* ``usable = max(0, dur - duration)`` seconds of possible start offsets,
* ``natural = max(1, floor(usable / hop) + 1)`` windows at that hop,
* ``m = max(1, round(natural ** alpha))`` *slots*, at nominal offsets
  ``j * usable / m`` for ``j < m`` (``stride = usable / m``).

``alpha`` sets the length bias: ``1`` gives every window a slot (a file's share
grows with its length), ``0`` one slot per file (file-balanced), ``0.5`` in
between. E.g. 4 s and 40 s files with ``duration = hop = 1`` get 1+1, 2+6 and
4+40 slots for alpha 0, 0.5 and 1. A file shorter than ``duration`` gets one
slot at 0 and is padded. With ``jitter`` each read starts at the slot's
offset plus ``uniform(0, stride)`` (clamped to ``usable``), so every start
offset can be drawn; without it slots are read at their nominal offsets.

One epoch visits every slot exactly once (``len(ds) == n_slots * num_epochs``).
Slots are shuffled globally (a new permutation per epoch) and each global index
has its own RNG, exactly like :func:`~audiotree.sources.create_audio_dataset`.
Items are read by seeking (:func:`audiotree.excerpt.read_excerpt`); whole files
are never decoded. Durations come from file headers (:func:`scan_durations`).

Loudness filtering
------------------
With per-file window loudness (``lufs_per_file`` or a cache from
:func:`build_window_lufs_cache`), a slot is kept only if the cell of
``lufs_window_sec`` seconds holding its *centre* measures at least
``lufs_cutoff`` LUFS. Cells hold the gated BS.1770 loudness of consecutive,
non-overlapping windows (a trailing partial window is dropped; a file shorter
than one window has no cells and keeps all its slots).

LUFS cache format
-----------------
``<out_dir>/window_lufs.npz``, written atomically (temp file, fsync, rename) and
loaded with ``allow_pickle=False``. Entries: ``header`` (0-d unicode JSON: the
:mod:`audiotree._format` header plus ``lufs_window_sec``, ``sample_rate``,
``mono``, ``num_files``, ``has_durations``), ``filepaths`` (``<U``),
``durations`` (float64), ``file_sizes`` and ``file_mtimes_ns`` (int64) with
``stat_present`` (bool: the file existed when the cache was made), and the
ragged loudness as ``offsets`` (int64, ``num_files + 1``) into ``values``
(float32). A cache is *stale* when a file's size or modification time differs
from what was recorded; using a stale cache raises ``ValueError`` with the
command to rebuild it.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import numbers
import os
import zipfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import grain
import numpy as np

from audiotree import _format, _limits
from audiotree._fs import atomic_file, npz_problem

__all__ = [
    "WindowConfig",
    "WindowLufsCache",
    "create_windowed_audio_dataset",
    "windowed_group_dataset",
    "scan_durations",
    "precompute_window_lufs",
    "save_window_lufs",
    "load_window_lufs",
    "build_window_lufs_cache",
]

CACHE_FILE = "window_lufs.npz"
_CACHE_KEYS = frozenset(
    ("header", "filepaths", "durations", "file_sizes", "file_mtimes_ns", "stat_present", "offsets", "values")
)
_HEADER_KEYS = (*_format.HEADER_KEYS, "lufs_window_sec", "sample_rate", "mono", "num_files", "has_durations")
_SCAN_PROGRESS_MIN = 100
_BUILD_PROGRESS_MIN = 8
_CHUNK_SECONDS = 30.0


def _positive(value: Any, name: str, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}.")
    return float(value)


def _check_alpha(alpha: Any) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"alpha must be in [0, 1] (0: one slot per file, 1: one per window), got {alpha!r}.")
    return float(alpha)


# ------------------------------------------------------------------ configs
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
            key = _find_key(self.file_sizes, path)
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


@dataclasses.dataclass(frozen=True)
class WindowConfig:
    """Windowed sampling knobs for ``create_balanced_audio_dataset(window=...)``.

    See :func:`create_windowed_audio_dataset` for the meaning of each field.
    Group weights and ``alpha`` compose: a group's share is its weight, and
    within the group files are weighted by length according to ``alpha``.
    """

    duration: float = 1.0
    hop: float | None = None
    alpha: float = 1.0
    jitter: bool = True
    lufs_cache: Any = None
    lufs_cutoff: float = -40.0
    lufs_window_sec: float | None = None

    def __post_init__(self) -> None:
        _positive(self.duration, "WindowConfig.duration")
        _positive(self.hop, "WindowConfig.hop", allow_none=True)
        _check_alpha(self.alpha)
        if isinstance(self.lufs_cutoff, bool) or not isinstance(self.lufs_cutoff, numbers.Real):
            raise ValueError(f"WindowConfig.lufs_cutoff must be a number (LUFS), got {self.lufs_cutoff!r}.")
        _positive(self.lufs_window_sec, "WindowConfig.lufs_window_sec", allow_none=True)


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


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return int(st.st_size), int(st.st_mtime_ns)


def _file_window_lufs(path: str, window_sec: float, mono: bool) -> np.ndarray:
    """Gated loudness of each full ``window_sec`` window of one file, streamed in chunks."""
    from scipy.signal import sosfilt

    from audiotree.dsp.loudness import CHANNEL_WEIGHTS, integrated_from_power, k_weighting_sos
    from audiotree.io import AudioFile

    with AudioFile(path) as f:
        info = f.info
        rate = info.sample_rate
        window = int(round(window_sec * rate))
        if window <= 0:
            raise ValueError(f"lufs_window_sec={window_sec} is shorter than one sample of '{path}'.")
        n_windows = info.frames // window
        channels = 1 if mono else info.channels
        if channels > len(CHANNEL_WEIGHTS):
            raise ValueError(
                f"'{path}' has {channels} channels, but BS.1770 loudness is defined for at most {len(CHANNEL_WEIGHTS)}; "
                "build the cache with mono=True."
            )
        out = np.empty(n_windows, dtype=np.float32)
        if n_windows == 0:
            return out
        sos = np.array(k_weighting_sos(rate))
        weights = np.asarray(CHANNEL_WEIGHTS[:channels], dtype=np.float64)
        state = np.zeros((sos.shape[0], 2, channels))  # zero initial state (sections, 2, channels)
        per_chunk = max(1, int(_CHUNK_SECONDS // window_sec))
        for first in range(0, n_windows, per_chunk):
            count = min(per_chunk, n_windows - first)
            frames = f.read(first * window, count * window).astype(np.float64)
            if frames.shape[0] != count * window:
                raise ValueError(f"'{path}' ended early at window {first}; the file is truncated or its header is wrong.")
            if mono and frames.shape[1] > 1:
                frames = frames.mean(axis=1, keepdims=True)
            filtered, state = sosfilt(sos, frames, axis=0, zi=state)
            power = (filtered * filtered) @ weights
            out[first : first + count] = integrated_from_power(power.reshape(count, window), rate)
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
    window_sec = _positive(lufs_window_sec, "lufs_window_sec")
    if sample_rate is not None:
        _positive(sample_rate, "sample_rate")
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


# -------------------------------------------------------------------- cache
def _cache_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path / CACHE_FILE if path.suffix != ".npz" else path


def _save(
    out_dir: str | os.PathLike,
    lufs_per_file: Mapping[str, Any],
    *,
    lufs_window_sec: float,
    durations: Mapping[str, float] | None,
    sample_rate: int | None,
    mono: bool,
    stats: Mapping[str, tuple[int, int] | None] | None = None,
) -> Path:
    window_sec = _positive(lufs_window_sec, "lufs_window_sec")
    if sample_rate is not None:
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, numbers.Integral) or sample_rate <= 0:
            raise ValueError(f"sample_rate must be a positive int or None, got {sample_rate!r}.")
        _limits.check_sample_rate(sample_rate, "save_window_lufs")
    problem = _limits.float_problem("lufs_window_sec", window_sec, 0, _limits.MAX_SECONDS, " s")
    if problem:
        raise ValueError(f"save_window_lufs: {problem}")
    files = [os.fspath(p) for p in lufs_per_file]
    arrays = [np.asarray(lufs_per_file[p], dtype=np.float32).reshape(-1) for p in lufs_per_file]
    if durations is not None:
        missing = [p for p in files if _find_key(durations, p) is None]
        if missing:
            raise ValueError(f"durations lacks {len(missing)} file(s) of lufs_per_file, e.g. {missing[0]!r}.")
        duration_values = np.array([float(durations[_find_key(durations, p)]) for p in files], dtype=np.float64)
        for file, seconds in zip(files, duration_values):
            problem = _limits.float_problem(f"the duration of {file!r}", seconds, 0, _limits.MAX_SECONDS, " s")
            if problem:
                raise ValueError(f"save_window_lufs: {problem}")
    else:
        duration_values = np.zeros(len(files), dtype=np.float64)
    if stats is None:
        stats = {p: _stat(p) for p in files}
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
    return _save(
        out_dir, lufs_per_file, lufs_window_sec=lufs_window_sec, durations=durations, sample_rate=sample_rate, mono=mono
    )


def _corrupt(path: Path, message: str) -> ValueError:
    return ValueError(
        f"Invalid window-LUFS cache {path}: {message} Rebuild it with build_window_lufs_cache(...)."
    )


def load_window_lufs(cache_dir: str | os.PathLike, *, lufs_window_sec: float | None = None) -> WindowLufsCache:
    """Loads and validates a cache written by :func:`save_window_lufs` (a folder or its ``.npz``).

    A corpus index (a ``.parquet`` file from :func:`audiotree.index.build_index`)
    is read as a cache too: its loudness profiles give the cells of
    ``lufs_window_sec`` seconds (required then; a multiple of 0.1 s).
    """
    from audiotree.sources.indexed import is_index_path

    if is_index_path(cache_dir):
        from audiotree.sources.indexed import window_lufs_view

        return WindowLufsCache(**window_lufs_view(cache_dir, lufs_window_sec))
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
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise _corrupt(path, f"num_files must be a non-negative int, got {n!r}.")
    window_sec = header.get("lufs_window_sec")
    if isinstance(window_sec, bool) or not isinstance(window_sec, (int, float)) or not window_sec > 0:
        raise _corrupt(path, f"lufs_window_sec must be a positive number, got {window_sec!r}.")
    rate = header.get("sample_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0):
        raise _corrupt(path, f"sample_rate must be a positive int or null, got {rate!r}.")
    problem = (
        _limits.int_problem("num_files", n, 0, _limits.MAX_ITEMS)
        or _limits.float_problem("lufs_window_sec", window_sec, 0, _limits.MAX_SECONDS, " s")
        or (None if rate is None else _limits.int_problem("sample_rate", rate, 1, _limits.MAX_SAMPLE_RATE, " Hz"))
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
    problem = _limits.column_problem("durations", data["durations"], 0, _limits.MAX_SECONDS, " s")
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
    from audiotree.sources.indexed import is_index_path

    if is_index_path(out_dir):
        from audiotree.index import build_index

        build_index([os.fspath(p) for p in filepaths], out_dir, mono=mono, executor="serial" if executor is None else executor,
                    show_progress=bool(show_progress))
        return Path(out_dir)
    files = [os.fspath(p) for p in filepaths]
    stats = {p: _stat(p) for p in files}
    with open_executor(executor) as runner:
        lufs = precompute_window_lufs(files, lufs_window_sec, sample_rate=sample_rate, mono=mono,
                                      show_progress=show_progress, executor=runner)
        if durations is None:
            durations = scan_durations(files, show_progress=show_progress, executor=runner)
    return _save(
        out_dir, lufs, lufs_window_sec=lufs_window_sec, durations=durations, sample_rate=sample_rate, mono=mono,
        stats=stats,
    )


# ---------------------------------------------------------------- slot index
def _find_key(mapping: Mapping[str, Any], path: Any) -> str | None:
    """The key of ``mapping`` naming ``path`` (exactly, or as the same absolute path)."""
    path = os.fspath(path)
    if path in mapping:
        return path
    target = os.path.normpath(os.path.abspath(path))
    for key in mapping:
        if os.path.normpath(os.path.abspath(key)) == target:
            return key
    return None


class _Lookup:
    """Fast path -> value lookup that also matches equivalent absolute paths."""

    def __init__(self, mapping: Mapping[str, Any]):
        self.mapping = mapping
        self.normalized = {os.path.normpath(os.path.abspath(k)): k for k in mapping}

    def get(self, path: str) -> Any:
        if path in self.mapping:
            return self.mapping[path]
        key = self.normalized.get(os.path.normpath(os.path.abspath(path)))
        return None if key is None else self.mapping[key]


@dataclasses.dataclass(frozen=True)
class SlotIndex:
    """Parallel arrays, one entry per slot."""

    file_idx: np.ndarray  # int64
    offset: np.ndarray  # float64 seconds
    stride: np.ndarray  # float64 seconds
    max_offset: np.ndarray  # float64 seconds (the file's usable span)

    def __len__(self) -> int:
        return int(self.file_idx.shape[0])


def slot_count(file_duration: float, duration: float, hop: float, alpha: float) -> int:
    """Number of slots of one file (see the module docstring)."""
    usable = max(0.0, float(file_duration) - duration)
    natural = max(1, math.floor(usable / hop + 1e-9) + 1)
    return max(1, int(round(natural**alpha)))


def build_slot_index(
    files: Sequence[str],
    durations: Mapping[str, float],
    *,
    duration: float,
    hop: float,
    alpha: float,
    lufs_per_file: Mapping[str, Any] | None = None,
    lufs_window_sec: float | None = None,
    lufs_cutoff: float = -40.0,
    durations_hint: str = "add it to durations= or pass durations=None to read the file headers.",
) -> SlotIndex:
    """The slots of every file; see the module docstring."""
    durations_lookup = _Lookup(durations)
    lufs_lookup = _Lookup(lufs_per_file) if lufs_per_file is not None else None
    file_idx, offsets, strides, max_offsets = [], [], [], []
    for i, path in enumerate(files):
        dur = durations_lookup.get(path)
        if dur is None:
            raise ValueError(f"No duration for '{path}'; {durations_hint}")
        usable = max(0.0, float(dur) - duration)
        m = slot_count(float(dur), duration, hop, alpha)
        stride = usable / m
        nominal = np.arange(m, dtype=np.float64) * stride
        if lufs_lookup is not None:
            cells = lufs_lookup.get(path)
            if cells is None:
                raise ValueError(f"No window loudness for '{path}'; rebuild the LUFS cache including this file.")
            cells = np.asarray(cells, dtype=np.float32).reshape(-1)
            if cells.size:
                centre = np.clip(((nominal + duration / 2) / lufs_window_sec).astype(np.int64), 0, cells.size - 1)
                nominal = nominal[cells[centre] >= lufs_cutoff]
        if nominal.size == 0:
            continue
        file_idx.append(np.full(nominal.size, i, dtype=np.int64))
        offsets.append(nominal)
        strides.append(np.full(nominal.size, stride))
        max_offsets.append(np.full(nominal.size, usable))
    if not file_idx:
        raise RuntimeError(
            f"No windows left to sample from {len(files)} file(s)"
            + (f" after dropping those quieter than lufs_cutoff={lufs_cutoff} LUFS; lower the cutoff." if lufs_lookup else ".")
        )
    return SlotIndex(
        file_idx=np.concatenate(file_idx), offset=np.concatenate(offsets), stride=np.concatenate(strides),
        max_offset=np.concatenate(max_offsets),
    )


# ------------------------------------------------------------------ loading
@dataclasses.dataclass(frozen=True, eq=False)
class WindowLoader(grain.transforms.RandomMap):
    """Reads the excerpt of one slot (by seeking) with the item's own ``rng``."""

    files: tuple
    slots: SlotIndex
    duration: float
    jitter: bool
    sample_rate: int
    mono: bool
    pad_mode: str | None
    source: str | None

    def random_map(self, element: Any, rng: np.random.Generator):
        return self.read_slot(int(element), rng)

    def read_slot(self, slot: int, rng: np.random.Generator, *, reprobe: bool = False):
        """The excerpt of ``slot``; ``reprobe`` re-reads the file's length (it changed since it was indexed)."""
        from audiotree.core import AudioTree

        offset = float(self.slots.offset[slot])
        stride = float(self.slots.stride[slot])
        if self.jitter and stride > 0:
            offset += float(rng.uniform(0.0, stride))
        offset = min(offset, float(self.slots.max_offset[slot]))
        path = self.files[int(self.slots.file_idx[slot])]
        if reprobe:
            from audiotree.io import probe

            offset = min(offset, max(0.0, probe(path).duration - self.duration))
        return AudioTree.from_file(
            path, sample_rate=self.sample_rate, offset=offset, duration=self.duration, mono=self.mono,
            pad_mode=self.pad_mode, source=self.source,
        )


def _resolve_cache(lufs_cache: Any, lufs_window_sec: float | None = None) -> WindowLufsCache | None:
    if lufs_cache is None or isinstance(lufs_cache, WindowLufsCache):
        return lufs_cache
    if isinstance(lufs_cache, (str, os.PathLike)):
        return load_window_lufs(lufs_cache, lufs_window_sec=lufs_window_sec)
    raise TypeError(f"lufs_cache must be a path, a WindowLufsCache or None, got {type(lufs_cache).__name__}.")


def _windowed_dataset(
    files: list[str],
    *,
    duration: float,
    hop: float | None,
    alpha: float,
    jitter: bool,
    durations: Mapping[str, float] | None,
    lufs_cache: Any,
    lufs_per_file: Mapping[str, Any] | None,
    lufs_window_sec: float | None,
    lufs_cutoff: float,
    shuffle: bool,
    num_epochs: int | None,
    shuffle_seed: int,
    excerpt_seed: int | None,
    sample_rate: int,
    mono: bool,
    pad_mode: str | None,
    source: str | None,
    rows: Any = None,
    on_stale: str = "error",
) -> grain.MapDataset:
    from audiotree.excerpt import _check_pad_mode
    from audiotree.sources.datasets import derive_streams

    duration = _positive(duration, "duration")
    hop = duration if hop is None else _positive(hop, "hop")
    alpha = _check_alpha(alpha)
    _check_pad_mode(pad_mode)
    if isinstance(lufs_cutoff, bool) or not isinstance(lufs_cutoff, numbers.Real):
        raise ValueError(f"lufs_cutoff must be a number (LUFS), got {lufs_cutoff!r}.")

    durations_hint = "add it to durations= or pass durations=None to read the file headers."
    if rows is not None:  # from a corpus index: durations (and loudness) without reading a header
        files = list(rows.paths)
        if durations is None:
            durations = dict(zip(files, rows.durations.tolist()))
        if lufs_cache is None and lufs_per_file is None and lufs_window_sec is not None:
            lufs_cache = rows.index_path
    cache = _resolve_cache(lufs_cache, lufs_window_sec)
    if cache is not None:
        if cache.sample_rate is not None and cache.sample_rate != sample_rate:
            raise ValueError(
                f"The window-LUFS cache {cache.path or ''} was built for {cache.sample_rate} Hz, but this dataset reads "
                f"at {sample_rate} Hz; rebuild it with sample_rate={sample_rate}."
            )
        if cache.mono != mono:
            raise ValueError(
                f"The window-LUFS cache {cache.path or ''} was built with mono={cache.mono}, but this dataset uses "
                f"mono={mono}; rebuild it with mono={mono}."
            )
        if rows is None:  # indexed files are checked one by one when read (on_stale)
            cache.check_fresh(files)
        if lufs_per_file is None:
            lufs_per_file = cache.lufs
        if lufs_window_sec is None:
            lufs_window_sec = cache.lufs_window_sec
        if durations is None and cache.durations is not None:
            durations = cache.durations
            durations_hint = (
                f"the window-LUFS cache {cache.path or ''} does not list it; rebuild the cache with this file list "
                "(build_window_lufs_cache) or pass durations=."
            )
    if lufs_per_file is not None:
        if lufs_window_sec is None:
            raise ValueError("lufs_per_file needs lufs_window_sec= (the length of each loudness cell in seconds).")
        lufs_window_sec = _positive(lufs_window_sec, "lufs_window_sec")
    if durations is None:
        durations = scan_durations(files)
    slots = build_slot_index(
        files, durations, duration=duration, hop=hop, alpha=alpha, lufs_per_file=lufs_per_file,
        lufs_window_sec=lufs_window_sec, lufs_cutoff=float(lufs_cutoff), durations_hint=durations_hint,
    )
    shuffle_stream, excerpt_stream = derive_streams(shuffle_seed, excerpt_seed)
    ds = grain.MapDataset.range(len(slots))
    if shuffle:
        ds = ds.shuffle(seed=shuffle_stream)
    ds = ds.repeat(num_epochs)
    loader = WindowLoader(
        files=tuple(files), slots=slots, duration=duration, jitter=bool(jitter), sample_rate=int(sample_rate),
        mono=bool(mono), pad_mode=pad_mode, source=source,
    )
    if rows is not None:
        from audiotree.sources.indexed import IndexedLoader

        loader = IndexedLoader(rows=rows, loader=loader, on_stale=on_stale, stamp_group=source is None, by_slot=True)
    return ds.random_map(loader, seed=excerpt_stream)


def windowed_group_dataset(
    files: Sequence[str],
    window: WindowConfig,
    *,
    name: str,
    shuffle: bool,
    num_epochs: int | None,
    shuffle_seed: int,
    excerpt_seed: int | None,
    sample_rate: int,
    mono: bool,
    pad_mode: str | None,
    rows: Any = None,
    on_stale: str = "error",
) -> grain.MapDataset:
    """One group of ``create_balanced_audio_dataset(window=...)``: a raw MapDataset labelled ``name``.

    ``rows`` (:class:`~audiotree.sources.indexed.IndexRows`) gives the files from a corpus index.
    """
    if not isinstance(window, WindowConfig):
        raise TypeError(f"window must be a WindowConfig, got {type(window).__name__}.")
    return _windowed_dataset(
        [os.fspath(f) for f in files], duration=window.duration, hop=window.hop, alpha=window.alpha,
        jitter=window.jitter, durations=None, lufs_cache=window.lufs_cache, lufs_per_file=None,
        lufs_window_sec=window.lufs_window_sec, lufs_cutoff=window.lufs_cutoff, shuffle=shuffle,
        num_epochs=num_epochs, shuffle_seed=shuffle_seed, excerpt_seed=excerpt_seed, sample_rate=sample_rate,
        mono=mono, pad_mode=pad_mode, source=name, rows=rows, on_stale=on_stale,
    )


def create_windowed_audio_dataset(
    sources: Any = None,
    filepaths: Sequence[str | os.PathLike] | None = None,
    *,
    duration: float = 1.0,
    hop: float | None = None,
    alpha: float = 1.0,
    jitter: bool = True,
    durations: Mapping[str, float] | None = None,
    lufs_cache: Any = None,
    lufs_per_file: Mapping[str, Any] | None = None,
    lufs_window_sec: float | None = None,
    lufs_cutoff: float = -40.0,
    shuffle: bool = True,
    num_epochs: int | None = 1,
    shuffle_seed: int = 0,
    excerpt_seed: int | None = None,
    sample_rate: int = 44_100,
    mono: bool = True,
    pad_mode: str | None = "constant",
    extensions: Sequence[str] | None = None,
    source: str | None = None,
    index: Any = None,
    labels: Sequence[str] | None = None,
    min_duration: float | None = None,
    max_duration: float | None = None,
    on_stale: str = "error",
    measure_lufs: bool = False,
) -> grain.MapDataset:
    """Excerpts sampled by window of the files, weighted by length (see the module docstring).

    Args:
      sources / filepaths: folders or globs, or an explicit list (exactly one).
      duration: excerpt length in seconds; items are ``(1, C, round(duration * sample_rate))``.
      hop: spacing of the natural windows (default ``duration``).
      alpha: length bias in [0, 1]: 0 one slot per file, 1 one slot per window.
      jitter: randomise the start within each slot's stride.
      durations: ``{path: seconds}``; default from the cache, else file headers.
      lufs_cache: a cache folder or :class:`WindowLufsCache` to drop quiet slots.
      lufs_per_file / lufs_window_sec: explicit loudness cells (override the cache).
      lufs_cutoff: slots whose centre cell is quieter (LUFS) are dropped.
      shuffle, num_epochs, shuffle_seed, excerpt_seed, sample_rate, mono,
      pad_mode, extensions, source: as in :func:`create_audio_dataset`.
      index, labels, min_duration, max_duration, on_stale: read the files from a
        corpus index, as in :func:`create_audio_dataset`. Durations come from
        the index; with ``lufs_window_sec`` (a multiple of 0.1 s) quiet slots
        are dropped using the index's loudness profiles.
      pad_mode, extensions, source, measure_lufs: as in :func:`create_audio_dataset`
        (items carry ``lufs=None`` unless ``measure_lufs=True``).

    Raises:
      ValueError: a bad argument, a cache built for another rate/mono setting, a
        stale cache, or a file missing from the durations or loudness.
      RuntimeError: no files found, or no slots left after loudness filtering.
    """
    from audiotree.sources.datasets import _check_common, _resolve_files
    from audiotree.sources.loading import MeasureLufs, check_measure_lufs
    from audiotree.sources.memory import AudioMapDataset, estimate_item_bytes

    duration = _positive(duration, "duration")
    # An unreadable file always raises here (WindowLoader has no other policy).
    sample_rate, shuffle_seed, excerpt_seed = _check_common(
        num_epochs=num_epochs, on_read_error="raise", sample_rate=sample_rate,
        shuffle_seed=shuffle_seed, excerpt_seed=excerpt_seed,
    )
    rows = None
    if index is not None:
        from audiotree.sources.indexed import rows_for_builder

        rows = rows_for_builder(index, sources, filepaths, labels=labels, min_duration=min_duration,
                                max_duration=max_duration, on_stale=on_stale)
        files = list(rows.paths)
    else:
        from audiotree.sources.indexed import refuse_index_options

        refuse_index_options(labels=labels, min_duration=min_duration, max_duration=max_duration)
        files = _resolve_files(sources, filepaths, extensions)
    ds = _windowed_dataset(
        files, duration=duration, hop=hop, alpha=alpha, jitter=jitter, durations=durations, lufs_cache=lufs_cache,
        lufs_per_file=lufs_per_file, lufs_window_sec=lufs_window_sec, lufs_cutoff=lufs_cutoff, shuffle=shuffle,
        num_epochs=num_epochs, shuffle_seed=shuffle_seed, excerpt_seed=excerpt_seed, sample_rate=sample_rate,
        mono=mono, pad_mode=pad_mode, source=source, rows=rows, on_stale=on_stale,
    )
    if check_measure_lufs(measure_lufs):
        ds = ds.map(MeasureLufs())
    item_bytes = estimate_item_bytes(channels=1 if mono else 2, sample_rate=sample_rate, duration=duration)
    return AudioMapDataset(ds, item_bytes=item_bytes)
