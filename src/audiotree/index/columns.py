"""An index's rows as flat column files: built once per index, read in place by every worker.

A dataset over ten million rows must not hold ten million Python objects in
every worker, nor unpickle hundreds of megabytes into each one. The first
dataset built over an index therefore writes its columns, once, as flat NumPy
files in a *column store* (:func:`open_columns`); every later start-up, in the
trainer and in each worker, maps those files read-only. The operating system
shares the mapped pages between processes, and a worker touches only the
pages of the rows it reads. A :class:`ColumnStore` pickles as its folder's
name, so a Grain or PyTorch worker (fork or spawn) starts in constant time
and memory whatever the row count.

Layout (``format`` 2), one raw little-endian ``NAME.bin`` file per array, its
dtype and shape in the manifest (written as it streams):

- ``path.offsets``/``path.data``: the stored paths, UTF-8 (Arrow's string
  layout, read per row by :class:`~audiotree.index.text.TextColumn`);
- ``size``, ``mtime_ns`` (int64), ``duration``, ``channels`` (float64, NaN when
  null), ``readable`` (bool), ``window`` (``(n, 2)`` float64 segment bounds, in
  a segment index only);
- ``quality-NAME`` (float64, NaN when null): the quality columns and
  ``sample_rate`` (:mod:`audiotree.index.quality`; since store format 2);
- ``group.codes`` (int32, ``-1`` for none) with the group names in the manifest;
- ``label-K.*``: label ``K`` (by position in the manifest): category ids
  (int32) and their vocabulary, numbers as stored, or a text column's
  offsets and bytes with its dictionary codes (for grouping by it);
- ``profile.offsets``/``profile.data``: the loudness profiles as the index
  stores them (decoded per row by :func:`audiotree.index.profile.decode_profile`);
- ``seek.offsets``/``seek.data``: FLAC seek tables (:mod:`audiotree.index.seek_column`);
- ``sel-DIGEST.npy``: row selections (filters, groups, host shares), named by a
  hash of their content, and derived per-row arrays (``qualifying-*.npy``), as
  ``.npy`` files that describe themselves.

``manifest.json`` records the index it was built from (its size and
modification time), the row count and every array's dtype and shape. A store
whose index changed is rebuilt; one whose files do not match the manifest
(truncated, edited) is refused with an error naming it. Where the store lives:
beside a local index in a writable folder (``corpus.parquet.columns/``), else
under ``$AUDIOTREE_CACHE_DIR`` (default ``~/.cache/audiotree``), keyed by the
index's path or URL.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any, Sequence

import numpy as np

__all__ = ["ColumnStore", "open_columns", "store_folder", "STORE_FORMAT"]

#: Version of the store's layout; a store of another version is rebuilt.
STORE_FORMAT = 2
_MANIFEST = "manifest.json"
# Rows read from the index per step while building (bounds the builder's memory).
_BATCH_ROWS = 65_536


def _cache_root() -> str:
    return os.environ.get("AUDIOTREE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "audiotree")


def store_folder(index_path: str) -> str:
    """Where the column store of ``index_path`` lives (see the module docstring).

    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> store_folder(os.path.join(d, "corpus.parquet")) == os.path.join(d, "corpus.parquet.columns")
    True
    """
    from audiotree.io import storage

    if not storage.is_url(index_path):
        folder = os.path.dirname(os.path.abspath(index_path))
        if os.access(folder, os.W_OK):
            return os.path.abspath(index_path) + ".columns"
        key = os.path.abspath(index_path)
    else:
        key = index_path
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]
    return os.path.join(_cache_root(), "columns", f"{os.path.basename(key.rstrip('/'))}-{digest}")


def _identity(index_path: str) -> dict:
    """What says an index file is the one a store was built from: its size and modification time."""
    from audiotree.io import storage

    if storage.is_url(index_path):
        from audiotree.io.members import member_stat

        size, mtime = member_stat(index_path)
    else:
        st = os.stat(index_path)
        size, mtime = st.st_size, st.st_mtime_ns
    return {"path": index_path, "size": int(size), "mtime_ns": int(mtime)}


class ColumnStore:
    """The columns of one index, on disk (see the module docstring).

    Per-row look-ups (:meth:`value`, :meth:`string`, :meth:`profile`,
    :meth:`selection_row`) are positioned reads (``os.pread``) of just that
    row's bytes: they leave nothing resident in the process, whatever the
    number of rows or of items read (a memory map would keep every page it
    touched, whole large folios at a time). The page cache is shared by
    every process on the host. Whole-column reads (:meth:`column`) are for
    the process that builds a dataset. Files open lazily, once per process;
    pickling keeps only the folder and the manifest.
    """

    def __init__(self, directory: str, manifest: dict):
        self.directory = directory
        self.manifest = manifest
        self._files: dict[str, tuple[int, int]] = {}  # name -> (fd, data offset): this process's open files

    def __reduce__(self):
        return (ColumnStore, (self.directory, self.manifest))

    def close(self) -> None:
        """Closes the files this process opened (later reads open them again)."""
        files, self._files = getattr(self, "_files", {}), {}
        for handle in files.values():
            try:
                os.close(handle[0])
            except OSError:
                pass

    def __del__(self):
        self.close()

    def __len__(self) -> int:
        return int(self.manifest["rows"])

    def __repr__(self) -> str:
        return f"ColumnStore({self.directory!r}, rows={len(self)})"

    @property
    def root(self) -> str | None:
        return self.manifest["root"]

    def has(self, name: str) -> bool:
        return name in self.manifest["arrays"]

    def _spec(self, name: str) -> tuple[np.dtype, tuple]:
        spec = self.manifest["arrays"].get(name)
        if spec is None:
            raise KeyError(f"{self.directory}: the column store has no array {name!r}.")
        return np.dtype(spec["dtype"]), tuple(spec["shape"])

    def _open(self, file: str, header: bool = False) -> tuple:
        """``(fd, data offset, dtype, shape)`` of ``file``, opened once per process (dtype/shape: ``.npy`` only)."""
        handle = self._files.get(file)
        if handle is None:
            path = os.path.join(self.directory, file)
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError as exc:
                raise _damaged(self.directory, f"{file} cannot be opened ({exc})") from None
            start, dtype, shape = 0, None, None
            if header:  # a .npy file: its data starts after the header
                with open(path, "rb") as f:
                    try:
                        version = np.lib.format.read_magic(f)
                        shape, fortran, dtype = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                                 else np.lib.format.read_array_header_2_0)(f)
                    except ValueError as exc:
                        os.close(fd)
                        raise _damaged(self.directory, f"{file} has no valid header ({exc})") from None
                    start = f.tell()
                payload = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if fortran or dtype.hasobject or os.fstat(fd).st_size != start + payload:
                    os.close(fd)
                    raise _damaged(self.directory, f"{file} does not hold the {dtype}{list(shape)} its header says")
            handle = self._files[file] = (fd, start, dtype, shape)
        return handle

    def _pread(self, file: str, dtype: np.dtype, first: int, count: int, *, header: bool = False) -> np.ndarray:
        fd, start = self._open(file, header)[:2]
        want = count * dtype.itemsize
        data = os.pread(fd, want, start + first * dtype.itemsize) if want else b""
        if len(data) != want:
            raise _damaged(self.directory, f"{file} ends before element {first + count}")
        return np.frombuffer(data, dtype=dtype)

    def npy_shape(self, file: str) -> tuple:
        """The shape of a kept ``.npy`` file of the store (``sel-*``, derived arrays), from its header."""
        return self._open(file, header=True)[3]

    def npy_value(self, file: str, i: int):
        """Element ``i`` of a kept 1-d ``.npy`` file, by one positioned read."""
        _, _, dtype, shape = self._open(file, header=True)
        if len(shape) != 1 or not 0 <= int(i) < shape[0]:
            raise _damaged(self.directory, f"{file} has no element {i} (shape {list(shape)})")
        return self._pread(file, dtype, int(i), 1, header=True)[0]

    def read(self, name: str, lo: int, hi: int) -> np.ndarray:
        """Rows ``[lo, hi)`` of array ``name`` (a positioned read of those bytes alone)."""
        dtype, shape = self._spec(name)
        if not 0 <= lo <= hi <= shape[0]:
            raise IndexError(f"{self.directory}: rows [{lo}, {hi}) of {name} (of {shape[0]}).")
        width = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
        return self._pread(name + ".bin", dtype, lo * width, (hi - lo) * width).reshape((hi - lo, *shape[1:]))

    def value(self, name: str, row: int):
        """Row ``row`` of array ``name`` (a NumPy scalar, or a row of a 2-d array)."""
        return self.read(name, int(row), int(row) + 1)[0]

    def column(self, name: str) -> np.ndarray:
        """The whole array ``name``, read into memory (for the process that builds a dataset)."""
        dtype, shape = self._spec(name)
        return self.read(name, 0, shape[0]) if shape[0] else np.zeros(shape, dtype)

    def string(self, name: str, row: int) -> str:
        """Row ``row`` of the string column ``name`` (``name.offsets`` + ``name.data``)."""
        start, end = (int(v) for v in self.read(name + ".offsets", int(row), int(row) + 2))
        if not 0 <= start <= end:
            raise _damaged(self.directory, f"{name}.offsets are not ascending at row {row}")
        return bytes(self.read(name + ".data", start, end)).decode("utf-8")

    def strings(self, name: str) -> list[str]:
        """Every row of a (small) string column, e.g. a vocabulary."""
        from audiotree.index.text import TextColumn

        return TextColumn(self.column(name + ".offsets"), self.column(name + ".data")).to_list()

    def profile(self, row: int) -> np.ndarray | None:
        """Row ``row``'s loudness profile (float32 block mean squares), or ``None`` without one."""
        from audiotree.index.profile import decode_profile

        if not self.has("profile.offsets") or not self.value("profile.valid", row):
            return None
        lo, hi = (int(v) for v in self.read("profile.offsets", int(row), int(row) + 2))
        return decode_profile(self.read("profile.data", lo, hi))

    # ------------------------------------------------------------ labels
    def label_key(self, name: str) -> str:
        labels = self.manifest["labels"]
        if name not in labels:
            from audiotree.index.quality import is_quality, store_key

            if is_quality(name) and self.has(store_key(name)):  # a quality column, carried as a numeric label
                return store_key(name)
            raise KeyError(f"{self.directory}: no label column {name!r}; its labels are {list(labels)}.")
        return f"label-{labels[name]['position']}"

    def label_kind(self, name: str) -> str:
        self.label_key(name)
        return self.manifest["labels"][name]["kind"] if name in self.manifest["labels"] else "numeric"

    def label_leaf(self, name: str, row: int) -> Any:
        """Row ``row``'s label as an item leaf: ``[text]`` for a text label, else a ``(1,)`` array."""
        key = self.label_key(name)
        if self.label_kind(name) == "text":
            return [self.string(key, row)]
        return self.read(key, int(row), int(row) + 1).copy()

    def codes(self, column: str) -> tuple[np.ndarray, list[str]]:
        """``(codes, names)`` to group rows by ``column`` (``"group"`` or a label): int32 per row, ``-1`` for none."""
        if column == "group":
            return self.column("group.codes"), list(self.manifest["groups"])
        key, kind = self.label_key(column), self.label_kind(column)
        if kind == "text":
            return self.column(key + ".codes"), self.strings(key + ".names")
        if kind == "category":
            return self.column(key), self.strings(key + ".names")
        values = self.column(key)
        finite = np.isfinite(values) if values.dtype.kind == "f" else np.ones(values.shape, bool)
        names, inverse = np.unique(values[finite], return_inverse=True)
        codes = np.full(values.shape, -1, np.int32)
        codes[finite] = inverse
        return codes, [str(v) for v in names.tolist()]

    # --------------------------------------------------------- selections
    def save_selection(self, rows: np.ndarray) -> str:
        """Writes ``rows`` (int64 store rows) once, named by their content; returns the name."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        name = "sel-" + hashlib.blake2b(rows.tobytes(), digest_size=12).hexdigest()
        path = os.path.join(self.directory, name + ".npy")
        if not os.path.exists(path):
            _save_atomic(path, rows)
        return name

    def _selection_file(self, name: str) -> str:
        if not name.startswith("sel-") or os.sep in name:
            raise ValueError(f"{name!r} is not a selection of {self.directory}.")
        return name + ".npy"

    def selection_length(self, name: str) -> int:
        shape = self.npy_shape(self._selection_file(name))
        if len(shape) != 1:
            raise _damaged(self.directory, f"selection {name}.npy is not 1-d")
        return int(shape[0])

    def selection_row(self, name: str, i: int) -> int:
        """Position ``i`` of selection ``name``: a store row (bounds-checked: a damaged file is refused)."""
        file = self._selection_file(name)
        row = int(self.npy_value(file, i))
        if not 0 <= row < len(self):
            raise _damaged(self.directory, f"selection {file} names row {row} of {len(self)}")
        return row

    def selection_rows(self, name: str) -> np.ndarray:
        """Every row of selection ``name`` (read into memory, checked)."""
        file = self._selection_file(name)
        rows = self._pread(file, np.dtype("<i8"), 0, self.selection_length(name), header=True)
        if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
            raise _damaged(self.directory, f"selection {file} names rows outside the index")
        return rows

    # ------------------------------------------------- derived, kept arrays
    def has_extra(self, name: str) -> bool:
        """True when a derived array ``name`` (see :meth:`save_extra`) was kept in the store."""
        return os.path.exists(os.path.join(self.directory, name + ".npy"))

    def extra(self, name: str) -> np.ndarray:
        """A kept derived array (one value per row), read into memory."""
        out = self._derived(name)
        if out.shape[:1] != (len(self),):
            raise _damaged(self.directory, f"{name}.npy has {out.shape[:1]} rows, the index {len(self)}")
        return out

    def save_extra(self, name: str, array: np.ndarray) -> np.ndarray:
        """Keeps ``array`` (one value per row, derived from the columns) for later processes; returns it."""
        array = np.ascontiguousarray(array)
        _save_atomic(os.path.join(self.directory, name + ".npy"), array)
        return array

    def has_ragged(self, name: str) -> bool:
        """True when ragged per-row values ``name`` (see :meth:`save_ragged`) were kept in the store."""
        return all(os.path.exists(os.path.join(self.directory, f"{name}.{part}.npy")) for part in ("offsets", "values"))

    def ragged(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, values)`` kept by :meth:`save_ragged`, read whole.

        Row ``r`` owns ``values[offsets[r]:offsets[r + 1]]``.
        """
        offsets = self._derived(name + ".offsets", np.int64)
        values = self._derived(name + ".values")
        if offsets.shape != (len(self) + 1,) or (offsets.size and int(offsets[-1]) != values.shape[0]):
            raise _damaged(self.directory, f"{name}.offsets.npy does not bound {name}.values.npy for {len(self)} rows")
        return offsets, values

    def save_ragged(self, name: str, offsets: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Keeps a variable number of values per row (int64 ``offsets``, ``len + 1``) for later processes."""
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if offsets.shape != (len(self) + 1,) or int(offsets[-1]) != len(values):
            raise ValueError(f"ragged values need {len(self) + 1} offsets ending at {len(values)}.")
        # The values first: a reader that finds the offsets finds the values they bound.
        values = np.ascontiguousarray(values)
        _save_atomic(os.path.join(self.directory, name + ".values.npy"), values)
        _save_atomic(os.path.join(self.directory, name + ".offsets.npy"), offsets)
        return offsets, values

    def save_derived(self, prefix: str, arrays: dict[str, np.ndarray]) -> str:
        """Keeps ``arrays`` (any lengths: a slot plan) once, named by ``prefix`` and their content; returns the name.

        Read them back with :meth:`derived` (``name``, ``part``), or one element
        with :meth:`derived_value` (what a worker does per item), so a dataset
        that holds the name pickles in constant size.
        """
        digest = hashlib.blake2b(digest_size=12)
        for part in sorted(arrays):
            array = np.ascontiguousarray(arrays[part])
            digest.update(f"{part}:{array.dtype.str}:{array.shape};".encode())
            digest.update(array.tobytes())
        name = f"{prefix}-{digest.hexdigest()}"
        for part, array in arrays.items():
            path = os.path.join(self.directory, f"{name}.{part}.npy")
            if not os.path.exists(path):
                _save_atomic(path, np.ascontiguousarray(array))
        return name

    def derived(self, name: str, part: str) -> np.ndarray:
        """Part ``part`` of the arrays :meth:`save_derived` kept as ``name``, read whole (the building process)."""
        return self._derived(f"{name}.{part}")

    def derived_value(self, name: str, part: str, i: int):
        """Element ``i`` of a kept derived array, by one positioned read (what a worker does per item)."""
        return self.npy_value(f"{name}.{part}.npy", i)

    def derived_length(self, name: str, part: str) -> int:
        return int(self.npy_shape(f"{name}.{part}.npy")[0])

    def _derived(self, name: str, dtype: Any = None) -> np.ndarray:
        try:
            out = np.load(os.path.join(self.directory, name + ".npy"), allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise _damaged(self.directory, f"{name}.npy cannot be read ({exc})") from None
        if dtype is not None and out.dtype != dtype:
            raise _damaged(self.directory, f"{name}.npy holds {out.dtype}, not {np.dtype(dtype)}")
        return out


def _damaged(directory: str, what: str) -> ValueError:
    return ValueError(f"{directory}: the index's column store is damaged ({what}). Delete that folder; the next "
                      "dataset built over the index writes it again.")


def _save_atomic(path: str, array: np.ndarray) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".npy")
    with os.fdopen(fd, "wb") as f:
        np.save(f, array, allow_pickle=False)
    os.replace(tmp, path)


def _read_manifest(directory: str) -> dict | None:
    try:
        with open(os.path.join(directory, _MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise _damaged(directory, f"{_MANIFEST} cannot be read ({exc})") from None
    if not isinstance(manifest, dict) or not {"format", "index", "rows", "arrays", "labels", "groups", "root"} <= set(manifest):
        raise _damaged(directory, f"{_MANIFEST} lacks its fields")
    return manifest


def _check_files(directory: str, manifest: dict) -> None:
    """Each array file has the size its manifest says (a truncated or extended file is refused): one ``stat`` each."""
    for name, spec in manifest["arrays"].items():
        path = os.path.join(directory, name + ".bin")
        try:
            size = os.path.getsize(path)
        except OSError:
            raise _damaged(directory, f"{name}.bin is missing") from None
        payload = int(np.prod(spec["shape"])) * np.dtype(spec["dtype"]).itemsize
        if size != payload:
            raise _damaged(directory, f"{name}.bin holds {size} bytes, its manifest says {payload}")


def open_columns(index: Any) -> ColumnStore:
    """The column store of ``index`` (a :class:`~audiotree.index.CorpusIndex` or a path), built on first use.

    Later calls (any process) map the existing store: the cost does not grow
    with the row count. A store built from an older version of the index
    file is rebuilt. ``index`` must have been opened with ``open_index`` (its
    validation is what the store copies).

    >>> from audiotree.index import open_index  # doctest: +SKIP
    >>> len(open_columns(open_index("corpus.parquet")))  # doctest: +SKIP
    """
    from audiotree.index.reader import CorpusIndex, open_index

    ix = index if isinstance(index, CorpusIndex) else open_index(index, columns=["path"])
    directory = store_folder(ix.path)
    identity = _identity(ix.path)
    manifest = _read_manifest(directory)
    if manifest is not None and manifest["format"] == STORE_FORMAT and manifest["index"] == identity \
            and manifest["root"] == ix.root:
        _check_files(directory, manifest)
        return ColumnStore(directory, manifest)
    return _build(ix, directory, identity)


def _build(ix: Any, directory: str, identity: dict) -> ColumnStore:
    """Writes the store of ``ix`` into a fresh folder, then swaps it in (readers never see half a store)."""
    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(dir=parent, prefix=".building-")
    try:
        manifest = _write(ix, staging, identity)
        with open(os.path.join(staging, _MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f)
        os.chmod(staging, 0o755)  # readable by whoever can read the index (mkdtemp makes it private)
        old = None
        if os.path.exists(directory):
            old = tempfile.mkdtemp(dir=parent, prefix=".retired-")
            os.replace(directory, os.path.join(old, "store"))
        try:
            os.replace(staging, directory)
        except OSError:  # another process swapped its own (identical) store in first
            shutil.rmtree(staging, ignore_errors=True)
            manifest = _read_manifest(directory) or manifest
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if os.path.isdir(staging):
            shutil.rmtree(staging, ignore_errors=True)
    return ColumnStore(directory, manifest)


def _write(ix: Any, folder: str, identity: dict) -> dict:
    import pyarrow as pa

    from audiotree.index.quality import STORE_COLUMNS, quality_arrays
    from audiotree.index.reader import open_index
    from audiotree.index.text import TextColumn

    arrays: dict[str, dict] = {}

    def put(name: str, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        array.tofile(os.path.join(folder, name + ".bin"))
        arrays[name] = {"dtype": array.dtype.str, "shape": list(array.shape)}

    def put_text(name: str, column: Any) -> None:
        offsets, data = column if isinstance(column, tuple) else (column.offsets, column.data)
        put(name + ".offsets", np.asarray(offsets, np.int64))
        put(name + ".data", np.asarray(data, np.uint8))

    names = list(ix.meta["labels"])
    full = open_index(ix.path, columns=["path", "group", "size", "mtime_ns", "channels", "duration", "readable",
                                        *STORE_COLUMNS], labels=names, root=ix.root)
    table = full.table
    n = len(full)
    put_text("path", _string_buffers(table.column("path")))
    put("size", np.nan_to_num(np.asarray(full.column("size"), dtype=np.float64), nan=-1).astype(np.int64)
        if table.column("size").null_count else full.column("size").astype(np.int64))
    put("mtime_ns", np.asarray([-1 if v is None else v for v in table.column("mtime_ns").to_pylist()], np.int64)
        if table.column("mtime_ns").null_count else full.column("mtime_ns").astype(np.int64))
    put("duration", np.asarray(full.column("duration"), dtype=np.float64))
    put("channels", np.asarray(full.column("channels"), dtype=np.float64))
    put("readable", full.column("readable").astype(bool))
    groups = _dictionary(table.column("group"))
    put("group.codes", groups[0])
    labels: dict[str, dict] = {}
    for position, name in enumerate(names):
        kind = ix.meta["labels"][name]["kind"]
        key = f"label-{position}"
        labels[name] = {"position": position, "kind": kind}
        if kind == "text":
            put_text(key, _string_buffers(table.column(name)))
            codes, values = _dictionary(table.column(name))
            put(key + ".codes", codes)
            put_text(key + ".names", TextColumn.from_strings(values))
        elif kind == "category":
            put(key, full.label_values(name))
            put_text(key + ".names", TextColumn.from_strings(["" if v is None else str(v)
                                                              for v in full.vocabulary(name)]))
        else:
            put(key, np.asarray(full.label_values(name)))
    for key, array in quality_arrays(table).items():  # (NaN for an index without quality columns)
        put(key, array)
    if "start" in table.column_names:
        put("window", np.stack([np.asarray(full.column("start"), dtype=np.float64),
                                np.asarray(full.column("end"), dtype=np.float64)], axis=1))
    del full, table
    pa.default_memory_pool().release_unused()
    if ix.has_profile:
        _write_profiles(ix, folder, put, arrays)
    if ix.has_seek_points:
        from audiotree.index.seek_column import write_seek_tables

        write_seek_tables(ix, folder, put, arrays)
    return {"format": STORE_FORMAT, "index": identity, "rows": n, "root": ix.root, "groups": groups[1],
            "labels": labels, "arrays": arrays}


def _string_buffers(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, utf8)`` of a string column, as Arrow holds them (nulls read as ``""``).

    Without nulls (every path column) the buffers are taken as they are: no
    per-byte gather, whose index arrays would take 16 bytes per byte of text.
    """
    import pyarrow as pa

    from audiotree.index.text import TextColumn

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if column.null_count:
        text = TextColumn.from_arrow(column)
        return text.offsets, text.data
    width = np.int64 if pa.types.is_large_string(column.type) else np.int32
    _, offsets_buf, data_buf = column.buffers()
    n = len(column)
    raw = np.frombuffer(offsets_buf, dtype=width)[column.offset:column.offset + n + 1].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8)[int(raw[0]):int(raw[-1])] if data_buf is not None and n \
        else np.zeros(0, np.uint8)
    return raw - raw[0], data


def _dictionary(column: Any) -> tuple[np.ndarray, list[str]]:
    """``(codes, names)`` of a string column: int32 codes (``-1`` for null or empty), names in first-seen order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    encoded = pc.dictionary_encode(column)
    names = encoded.dictionary.to_pylist()
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
    if "" in names:  # an empty name is no group, like a null
        empty = names.index("")
        codes = np.where(codes == empty, -1, np.where(codes > empty, codes - 1, codes)).astype(np.int32)
        names.pop(empty)
    return codes, [str(v) for v in names]


def _write_profiles(ix: Any, folder: str, put, arrays: dict) -> None:
    """The profile column, streamed in batches of rows and checked as ``open_index`` checks it."""
    import pyarrow.parquet as pq

    from audiotree.index.trust import check_profiles
    from audiotree.io import storage
    from audiotree.io.remote_file import open_input

    source = open_input(ix.path) if storage.is_url(ix.path) else ix.path
    offsets, valid = [np.zeros(1, np.int64)], []
    dtype = None
    total = 0
    try:
        pf = pq.ParquetFile(source)
        with open(os.path.join(folder, "profile.data.bin"), "wb") as raw:
            for batch in pf.iter_batches(batch_size=_BATCH_ROWS, columns=[
                    "profile", "readable", "frames", "sample_rate", "profile_step"]):
                column = batch.column("profile")
                check_profiles(ix.path, column, batch.column("frames"), batch.column("sample_rate"),
                               batch.column("profile_step"), batch.column("readable"))
                starts = column.offsets.to_numpy().astype(np.int64)
                values = column.values.slice(int(starts[0]), int(starts[-1] - starts[0])).to_numpy(zero_copy_only=False)
                dtype = values.dtype if dtype is None else dtype
                np.ascontiguousarray(values, dtype=dtype).tofile(raw)
                offsets.append(starts[1:] - starts[0] + total)
                total += int(starts[-1] - starts[0])
                valid.append(column.is_valid().to_numpy(zero_copy_only=False).astype(bool))
    finally:
        if source is not ix.path:
            source.close()
    put("profile.offsets", np.concatenate(offsets))
    put("profile.valid", np.concatenate(valid) if valid else np.zeros(0, bool))
    arrays["profile.data"] = {"dtype": np.dtype(dtype or np.float32).str, "shape": [total]}
