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

Layout (``format`` 3), one raw little-endian ``NAME.bin`` file per array, its
dtype and shape in the manifest (written as it streams):

- ``path.offsets``/``path.data``: the stored paths, UTF-8 (Arrow's string
  layout, read per row by :class:`~audiotree.index.text.TextColumn`); in a
  segment index, ``id.offsets``/``id.data`` likewise (the items' keys);
- ``size``, ``mtime_ns`` (int64), ``duration``, ``channels`` (float64, NaN when
  null), ``readable`` (bool), ``window`` (``(n, 2)`` float64 segment bounds, in
  a segment index only);
- ``quality-NAME`` (float64, NaN when null): the quality columns and
  ``sample_rate`` (:mod:`audiotree.index.quality`; since store format 3);
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

Each file has a sidecar ``NAME.crc`` (a CRC-32 per 4 KiB chunk) and every
read is checked against it (:mod:`audiotree.index.store_check`): a store file
that was edited or corrupted is refused with a
:class:`~audiotree.errors.ColumnStoreError` naming the file and the command
that deletes the store (a cache: the next dataset writes it again), never
read as other rows, labels or spans.

**Generations.** ``manifest.json`` (with its own checksum) records the index
the store was built from: its path, size, modification time and content
digest (:func:`~audiotree.index.store_check.index_digest`), the row count and
every array's dtype and shape. A store lives in a folder named by its
generation, ``g3-DIGEST`` (the index's content digest and root), under the
store folder of the index: beside a local index in a writable folder
(``corpus.parquet.columns/``), else under ``$AUDIOTREE_CACHE_DIR`` (default
``~/.cache/audiotree``), keyed by the index's path or URL. A generation folder
never changes once written (only the selections and derived arrays named by
their content are added), and a dataset pickles its generation's folder: a
worker started after the index was rebuilt (a new PyTorch worker each epoch,
a new Grain iterator) reads exactly the rows the dataset was planned on. A
new generation removes all but the :data:`KEEP_GENERATIONS` most recently
opened ones; a worker whose generation was removed is refused with a clear
error, never served the new rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from typing import Any, Sequence

import numpy as np

from audiotree.index.store_build import STORE_FORMAT
from audiotree.process_local import ProcessLocal
from audiotree.index.store_check import CHUNK, CheckedFile, damaged, save_checked_npy

__all__ = ["ColumnStore", "open_columns", "store_folder", "generation_name", "STORE_FORMAT", "KEEP_GENERATIONS"]

_MANIFEST = "manifest.json"
#: Generations of a store kept on disk (the most recently opened), so jobs started on an older one keep reading it.
KEEP_GENERATIONS = 3


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


class ColumnStore(ProcessLocal):
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

    process_local = {"_files": dict}  # the files this process opened

    def __init__(self, directory: str, manifest: dict):
        self.directory = directory
        self.manifest = manifest
        # name -> (checked file, data offset, dtype, shape): this process's open files
        self._files: dict[str, tuple] = {}

    def close(self) -> None:
        """Closes the files this process opened (later reads open them again)."""
        files, self._files = getattr(self, "_files", {}), {}
        for handle in files.values():
            handle[0].close()

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
        """``(checked file, data offset, dtype, shape)`` of ``file``, opened once per process.

        dtype and shape: a ``.npy`` file's header, else the manifest's (a ``.bin``
        array); the file must hold exactly that many bytes.
        """
        handle = self._files.get(file)
        if handle is None:
            path = os.path.join(self.directory, file)
            checked = CheckedFile(path)
            try:
                start, dtype, shape, fortran = _layout(self.manifest, checked, file, header)
            except BaseException:
                checked.close()
                raise
            payload = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if fortran or dtype.hasobject or checked.size != start + payload:
                checked.close()
                raise damaged(path, f"it holds {checked.size} bytes, not the {dtype}{list(shape)} "
                                    f"{'its header' if header else 'the manifest'} says")
            handle = self._files[file] = (checked, start, dtype, shape)
        return handle

    def _pread(self, file: str, dtype: np.dtype, first: int, count: int, *, header: bool = False) -> np.ndarray:
        checked, start = self._open(file, header)[:2]
        data = checked.read(start + first * dtype.itemsize, count * dtype.itemsize)
        return np.frombuffer(data, dtype=dtype)

    def npy_shape(self, file: str) -> tuple:
        """The shape of a kept ``.npy`` file of the store (``sel-*``, derived arrays), from its header."""
        return self._open(file, header=True)[3]

    def npy_value(self, file: str, i: int):
        """Element ``i`` of a kept 1-d ``.npy`` file, by one positioned read."""
        _, _, dtype, shape = self._open(file, header=True)
        if len(shape) != 1 or not 0 <= int(i) < shape[0]:
            raise damaged(self._path(file), f"it has no element {i} (shape {list(shape)})")
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
            raise damaged(self._path(name + ".offsets.bin"), f"its offsets are not ascending at row {row}")
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

    def clip_shares(self, row: int) -> np.ndarray | None:
        """Row ``row``'s clipped-sample share per profile block (float64), or ``None`` without one (no profile, or
        an index built before ``clip_blocks``)."""
        from audiotree.index.quality import decode_clip_blocks

        if not self.has("clip.offsets") or not self.value("clip.valid", row):
            return None
        lo, hi = (int(v) for v in self.read("clip.offsets", int(row), int(row) + 2))
        return decode_clip_blocks(self.read("clip.data", lo, hi))

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
            save_checked_npy(path, rows)
        return name

    def _selection_file(self, name: str) -> str:
        if not name.startswith("sel-") or os.sep in name:
            raise ValueError(f"{name!r} is not a selection of {self.directory}.")
        return name + ".npy"

    def selection_length(self, name: str) -> int:
        shape = self.npy_shape(self._selection_file(name))
        if len(shape) != 1:
            raise damaged(self._path(name + ".npy"), "the selection is not 1-d")
        return int(shape[0])

    def selection_row(self, name: str, i: int) -> int:
        """Position ``i`` of selection ``name``: a store row (bounds-checked: a damaged file is refused)."""
        file = self._selection_file(name)
        row = int(self.npy_value(file, i))
        if not 0 <= row < len(self):
            raise damaged(self._path(file), f"the selection names row {row} of {len(self)}")
        return row

    def selection_rows(self, name: str) -> np.ndarray:
        """Every row of selection ``name`` (read into memory, checked)."""
        file = self._selection_file(name)
        rows = self._pread(file, np.dtype("<i8"), 0, self.selection_length(name), header=True)
        if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
            raise damaged(self._path(file), "the selection names rows outside the index")
        return rows

    # ------------------------------------------------- derived, kept arrays
    def has_extra(self, name: str) -> bool:
        """True when a derived array ``name`` (see :meth:`save_extra`) was kept in the store."""
        return os.path.exists(os.path.join(self.directory, name + ".npy"))

    def extra(self, name: str) -> np.ndarray:
        """A kept derived array (one value per row), read into memory."""
        out = self._derived(name)
        if out.shape[:1] != (len(self),):
            raise damaged(self._path(name + ".npy"), f"it has {out.shape[:1]} rows, the index {len(self)}")
        return out

    def save_extra(self, name: str, array: np.ndarray) -> np.ndarray:
        """Keeps ``array`` (one value per row, derived from the columns) for later processes; returns it."""
        array = np.ascontiguousarray(array)
        save_checked_npy(os.path.join(self.directory, name + ".npy"), array)
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
            raise damaged(self._path(name + ".offsets.npy"), f"it does not bound {name}.values.npy for {len(self)} rows")
        return offsets, values

    def save_ragged(self, name: str, offsets: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Keeps a variable number of values per row (int64 ``offsets``, ``len + 1``) for later processes."""
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if offsets.shape != (len(self) + 1,) or int(offsets[-1]) != len(values):
            raise ValueError(f"ragged values need {len(self) + 1} offsets ending at {len(values)}.")
        # The values first: a reader that finds the offsets finds the values they bound.
        values = np.ascontiguousarray(values)
        save_checked_npy(os.path.join(self.directory, name + ".values.npy"), values)
        save_checked_npy(os.path.join(self.directory, name + ".offsets.npy"), offsets)
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
                save_checked_npy(path, np.ascontiguousarray(array))
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
        checked, start, stored, shape = self._open(name + ".npy", header=True)
        if dtype is not None and stored != dtype:
            raise damaged(self._path(name + ".npy"), f"it holds {stored}, not {np.dtype(dtype)}")
        data = bytearray(checked.read(start, checked.size - start))  # (writable, as np.load gave)
        return np.frombuffer(data, dtype=stored).reshape(shape)

    def _path(self, file: str) -> str:
        return os.path.join(self.directory, file)


def _layout(manifest: dict, checked: CheckedFile, file: str, header: bool) -> tuple:
    """``(data offset, dtype, shape, fortran)`` of a store file: a ``.npy`` file's header (checked), else the manifest's."""
    if not header:
        spec = manifest["arrays"][file[:-len(".bin")]]
        return 0, np.dtype(spec["dtype"]), tuple(spec["shape"]), False
    import io

    head = io.BytesIO(checked.read(0, min(checked.size, 4 * CHUNK)))
    try:
        version = np.lib.format.read_magic(head)
        shape, fortran, dtype = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                 else np.lib.format.read_array_header_2_0)(head)
    except Exception as exc:  # noqa: BLE001  (numpy's header parser raises several kinds)
        raise damaged(checked.path, f"it has no valid .npy header ({type(exc).__name__}: {exc})") from None
    return head.tell(), dtype, tuple(shape), fortran


def _manifest_digest(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return hashlib.blake2b(json.dumps(body, sort_keys=True).encode("utf-8"), digest_size=16).hexdigest()


def _read_manifest(directory: str) -> dict | None:
    """The manifest of the generation in ``directory`` (``None`` when there is none), its checksum verified."""
    path = os.path.join(directory, _MANIFEST)
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise damaged(path, f"it cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(manifest, dict) or manifest.get("checksum") != _manifest_digest(manifest):
        raise damaged(path, "it does not match its checksum: it was edited or corrupted")
    if manifest.get("format") != STORE_FORMAT \
            or not {"index", "rows", "arrays", "labels", "groups", "root"} <= set(manifest):
        raise damaged(path, f"it is not a format {STORE_FORMAT} store manifest")
    return manifest


def _check_files(directory: str, manifest: dict) -> None:
    """Each array file has the size its manifest says (a truncated or extended file is refused): one ``stat`` each."""
    for name, spec in manifest["arrays"].items():
        path = os.path.join(directory, name + ".bin")
        try:
            size = os.path.getsize(path)
        except OSError:
            raise damaged(path, "it is missing") from None
        payload = int(np.prod(spec["shape"])) * np.dtype(spec["dtype"]).itemsize
        if size != payload:
            raise damaged(path, f"it holds {size} bytes, its manifest says {payload}")


def generation_name(digest: str, root: str | None) -> str:
    """The folder of the store generation of an index with content ``digest`` and paths under ``root``."""
    key = hashlib.blake2b(json.dumps([STORE_FORMAT, digest, root]).encode("utf-8"), digest_size=10).hexdigest()
    return f"g{STORE_FORMAT}-{key}"


def open_columns(index: Any) -> ColumnStore:
    """The column store of ``index`` (a :class:`~audiotree.index.CorpusIndex` or a path), built on first use.

    Later calls (any process) open the existing store: the cost does not grow
    with the row count. The store is the generation of the index's exact
    content (see the module docstring): an index rebuilt, or swapped for
    another with the same size and time, gets its own. ``index`` must have
    been opened with ``open_index`` (its validation is what the store copies).

    >>> from audiotree.index import open_index  # doctest: +SKIP
    >>> len(open_columns(open_index("corpus.parquet")))  # doctest: +SKIP
    """
    from audiotree.index.reader import CorpusIndex, open_index
    from audiotree.index.store_check import index_digest

    ix = index if isinstance(index, CorpusIndex) else open_index(index, columns=["path"])
    root = store_folder(ix.path)
    size, mtime, digest = index_digest(ix.path, root)
    directory = os.path.join(root, generation_name(digest, ix.root))
    manifest = _read_manifest(directory)
    if manifest is None:
        identity = {"path": ix.path, "size": int(size), "mtime_ns": int(mtime), "digest": digest}
        return _build(ix, root, directory, identity)
    if manifest["index"].get("digest") != digest or manifest["root"] != ix.root:
        raise damaged(os.path.join(directory, _MANIFEST), "it names another index than its folder's name says")
    _check_files(directory, manifest)
    try:
        os.utime(directory)  # (most recently opened: kept by the next build's clean-up)
    except OSError:
        pass
    return ColumnStore(directory, manifest)


def _build(ix: Any, root: str, directory: str, identity: dict) -> ColumnStore:
    """Writes the generation of ``ix`` into a fresh folder, then moves it in (readers never see half a store)."""
    from audiotree.index.store_build import write_store
    from audiotree.index.store_check import write_checksums

    os.makedirs(root, exist_ok=True)
    staging = tempfile.mkdtemp(dir=root, prefix=".building-")
    try:
        manifest = write_store(ix, staging, identity)
        for name in manifest["arrays"]:
            write_checksums(os.path.join(staging, name + ".bin"))
        manifest["checksum"] = _manifest_digest(manifest)
        with open(os.path.join(staging, _MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f)
        os.chmod(staging, 0o755)  # readable by whoever can read the index (mkdtemp makes it private)
        try:
            os.rename(staging, directory)
        except OSError:  # another process moved the same generation in first
            if _read_manifest(directory) is None:
                raise
    finally:
        if os.path.isdir(staging):
            shutil.rmtree(staging, ignore_errors=True)
    _prune(root, keep=directory)
    return ColumnStore(directory, manifest)


def _prune(root: str, keep: str) -> None:
    """Removes all but the :data:`KEEP_GENERATIONS` most recently opened generations, and a format-1 store."""
    for name in os.listdir(root):  # a format-1 store's files sat in the folder itself
        if name == _MANIFEST or name.endswith((".bin", ".npy")):
            try:
                os.unlink(os.path.join(root, name))
            except OSError:
                pass
    others = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name.startswith("g") and "-" in name and path != keep and os.path.isdir(path):
            try:
                others.append((os.stat(path).st_mtime_ns, path))
            except OSError:
                pass
    for _, path in sorted(others, reverse=True)[KEEP_GENERATIONS - 1:]:
        shutil.rmtree(path, ignore_errors=True)
