"""An index's rows as memory-mapped columns: built once per index, shared by every worker.

A dataset over ten million rows must not hold ten million Python objects in
every worker, nor unpickle hundreds of megabytes into each one. The first
dataset built over an index therefore writes its columns, once, as flat NumPy
files in a *column store* (:func:`open_columns`); every later start-up, in the
trainer and in each worker, maps those files read-only. The operating system
shares the mapped pages between processes, and a worker touches only the
pages of the rows it reads. A :class:`ColumnStore` pickles as its folder's
name, so a Grain or PyTorch worker (fork or spawn) starts in constant time
and memory whatever the row count.

Layout (``format`` 1), one ``.npy`` file per array:

- ``path.offsets``/``path.data``: the stored paths, UTF-8 (Arrow's string
  layout, read per row by :class:`~audiotree.index.text.TextColumn`);
- ``size``, ``mtime_ns`` (int64), ``duration``, ``channels`` (float64, NaN when
  null), ``readable`` (bool), ``window`` (``(n, 2)`` float64 segment bounds, in
  a segment index only);
- ``group.codes`` (int32, ``-1`` for none) with the group names in the manifest;
- ``label-K.*``: label ``K`` (by position in the manifest): category ids
  (int32) and their vocabulary, numbers as stored, or a text column's
  offsets and bytes with its dictionary codes (for grouping by it);
- ``profile.offsets``/``profile.data``: the loudness profiles as the index
  stores them (decoded per row by :func:`audiotree.index.profile.decode_profile`);
- ``sel-DIGEST``: row selections (filters, groups, host shares), named by a
  hash of their content.

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
STORE_FORMAT = 1
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
    """The memory-mapped columns of one index (see the module docstring).

    Arrays open lazily, once per process, read-only. Pickling keeps only the
    folder (and the manifest), so a worker re-maps the files itself.
    """

    def __init__(self, directory: str, manifest: dict):
        self.directory = directory
        self.manifest = manifest
        self._arrays: dict[str, np.ndarray] = {}

    def __reduce__(self):
        return (ColumnStore, (self.directory, self.manifest))

    def __len__(self) -> int:
        return int(self.manifest["rows"])

    def __repr__(self) -> str:
        return f"ColumnStore({self.directory!r}, rows={len(self)})"

    @property
    def root(self) -> str | None:
        return self.manifest["root"]

    def has(self, name: str) -> bool:
        return name in self.manifest["arrays"]

    def array(self, name: str) -> np.ndarray:
        """Array ``name``, memory-mapped read-only (a refusal names the store when it is damaged)."""
        out = self._arrays.get(name)
        if out is None:
            out = self._arrays[name] = self._load(name, self.manifest["arrays"].get(name))
        return out

    def _load(self, name: str, spec: dict | None) -> np.ndarray:
        path = os.path.join(self.directory, name + ".npy")
        if spec is None:
            raise KeyError(f"{self.directory}: the column store has no array {name!r}.")
        try:
            if int(np.prod(spec["shape"])) == 0:  # an empty file cannot be mapped
                out = np.load(path, allow_pickle=False)
            else:
                out = np.load(path, mmap_mode="r", allow_pickle=False).view(np.ndarray)
        except (OSError, ValueError) as exc:
            raise _damaged(self.directory, f"{name}.npy cannot be read ({exc})") from None
        if str(out.dtype) != spec["dtype"] or list(out.shape) != list(spec["shape"]):
            raise _damaged(self.directory, f"{name}.npy is {out.dtype}{list(out.shape)}, its manifest says "
                                           f"{spec['dtype']}{spec['shape']}")
        return out

    def text(self, name: str):
        """A string column ``name`` (``name.offsets`` + ``name.data``) as a mapped TextColumn."""
        from audiotree.index.text import TextColumn

        return TextColumn(self.array(name + ".offsets"), self.array(name + ".data"))

    def profile(self, row: int) -> np.ndarray | None:
        """Row ``row``'s loudness profile (float32 block mean squares), or ``None`` without one."""
        from audiotree.index.profile import decode_profile

        if not self.has("profile.offsets"):
            return None
        offsets = self.array("profile.offsets")
        lo, hi = int(offsets[row]), int(offsets[row + 1])
        if not self.array("profile.valid")[row]:
            return None
        return decode_profile(np.asarray(self.array("profile.data")[lo:hi]))

    # ------------------------------------------------------------ labels
    def label_key(self, name: str) -> str:
        labels = self.manifest["labels"]
        if name not in labels:
            raise KeyError(f"{self.directory}: no label column {name!r}; its labels are {list(labels)}.")
        return f"label-{labels[name]['position']}"

    def label_kind(self, name: str) -> str:
        self.label_key(name)
        return self.manifest["labels"][name]["kind"]

    def label(self, name: str) -> Any:
        """Label ``name`` per row: an array (ids or numbers), or a TextColumn for a text label."""
        key = self.label_key(name)
        return self.text(key) if self.label_kind(name) == "text" else self.array(key)

    def codes(self, column: str) -> tuple[np.ndarray, list[str]]:
        """``(codes, names)`` to group rows by ``column`` (``"group"`` or a label): int32 per row, ``-1`` for none."""
        if column == "group":
            return self.array("group.codes"), list(self.manifest["groups"])
        key, kind = self.label_key(column), self.label_kind(column)
        if kind == "text":
            return self.array(key + ".codes"), self.text(key + ".names").to_list()
        if kind == "category":
            return self.array(key), self.text(key + ".names").to_list()
        values = np.asarray(self.array(key))
        finite = np.isfinite(values) if values.dtype.kind == "f" else np.ones(values.shape, bool)
        names, inverse = np.unique(values[finite], return_inverse=True)
        codes = np.full(values.shape, -1, np.int32)
        codes[finite] = inverse
        return codes, [str(v.item()) if hasattr(v, "item") else str(v) for v in names]

    # --------------------------------------------------------- selections
    def save_selection(self, rows: np.ndarray) -> str:
        """Writes ``rows`` (int64 store rows) once, named by their content; returns the name."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        name = "sel-" + hashlib.blake2b(rows.tobytes(), digest_size=12).hexdigest()
        path = os.path.join(self.directory, name + ".npy")
        if not os.path.exists(path):
            _save_atomic(path, rows)
        self._arrays.pop(name, None)
        return name

    def selection(self, name: str) -> np.ndarray:
        """A saved selection, mapped (its content is checked against its name on first use in a process)."""
        out = self._arrays.get(name)
        if out is None:
            path = os.path.join(self.directory, name + ".npy")
            try:
                out = _load_npy(path)
            except (OSError, ValueError) as exc:
                raise _damaged(self.directory, f"selection {name}.npy cannot be read ({exc})") from None
            if out.dtype != np.int64 or out.ndim != 1 or (out.size and (out.min() < 0 or out.max() >= len(self))):
                raise _damaged(self.directory, f"selection {name}.npy holds rows outside the index")
            self._arrays[name] = out
        return out


    # ------------------------------------------------- derived, kept arrays
    def has_extra(self, name: str) -> bool:
        """True when a derived array ``name`` (see :meth:`save_extra`) was kept in the store."""
        return os.path.exists(os.path.join(self.directory, name + ".npy"))

    def extra(self, name: str) -> np.ndarray:
        out = self._arrays.get(name)
        if out is None:
            try:
                out = self._arrays[name] = _load_npy(os.path.join(self.directory, name + ".npy"))
            except (OSError, ValueError) as exc:
                raise _damaged(self.directory, f"{name}.npy cannot be read ({exc})") from None
            if out.shape[:1] != (len(self),):
                raise _damaged(self.directory, f"{name}.npy has {out.shape[:1]} rows, the index {len(self)}")
        return out

    def save_extra(self, name: str, array: np.ndarray) -> np.ndarray:
        """Keeps ``array`` (one value per row, derived from the columns) for later processes; returns it mapped."""
        _save_atomic(os.path.join(self.directory, name + ".npy"), np.ascontiguousarray(array))
        self._arrays.pop(name, None)
        return self.extra(name)

    def has_ragged(self, name: str) -> bool:
        """True when ragged per-row values ``name`` (see :meth:`save_ragged`) were kept in the store."""
        return all(os.path.exists(os.path.join(self.directory, f"{name}.{part}.npy")) for part in ("offsets", "values"))

    def ragged(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(offsets, values)`` kept by :meth:`save_ragged`, mapped.

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
        _save_atomic(os.path.join(self.directory, name + ".values.npy"), np.ascontiguousarray(values))
        _save_atomic(os.path.join(self.directory, name + ".offsets.npy"), offsets)
        for part in (".offsets", ".values"):
            self._arrays.pop(name + part, None)
        return self.ragged(name)

    def save_derived(self, prefix: str, arrays: dict[str, np.ndarray]) -> str:
        """Keeps ``arrays`` (any lengths: a slot plan) once, named by ``prefix`` and their content; returns the name.

        Read them back with :meth:`derived` (``name``, ``part``): a worker maps
        them, so a dataset that holds the name pickles in constant size.
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
        """Part ``part`` of the arrays :meth:`save_derived` kept as ``name``, mapped read-only."""
        return self._derived(f"{name}.{part}")

    def _derived(self, name: str, dtype: Any = None) -> np.ndarray:
        out = self._arrays.get(name)
        if out is None:
            try:
                out = _load_npy(os.path.join(self.directory, name + ".npy"))
            except (OSError, ValueError) as exc:
                raise _damaged(self.directory, f"{name}.npy cannot be read ({exc})") from None
            if dtype is not None and out.dtype != dtype:
                raise _damaged(self.directory, f"{name}.npy holds {out.dtype}, not {np.dtype(dtype)}")
            self._arrays[name] = out
        return out


def _load_npy(path: str) -> np.ndarray:
    """A ``.npy`` file mapped read-only as a plain ndarray (read into memory when too small to map)."""
    if os.path.getsize(path) <= 256:
        return np.load(path, allow_pickle=False)
    return np.load(path, mmap_mode="r", allow_pickle=False).view(np.ndarray)


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
    """Each array file has the header and the size its manifest says (a truncated or edited file is refused).

    Reads each file's few-hundred-byte header only: the cost does not grow with the rows.
    """
    for name, spec in manifest["arrays"].items():
        path = os.path.join(directory, name + ".npy")
        try:
            with open(path, "rb") as f:
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read_header(f)
                start = f.tell()
            size = os.path.getsize(path)
        except FileNotFoundError:
            raise _damaged(directory, f"{name}.npy is missing") from None
        except (OSError, ValueError) as exc:
            raise _damaged(directory, f"{name}.npy has no valid header ({exc})") from None
        if str(dtype) != spec["dtype"] or list(shape) != list(spec["shape"]):
            raise _damaged(directory, f"{name}.npy is {dtype}{list(shape)}, its manifest says "
                                      f"{spec['dtype']}{spec['shape']}")
        payload = int(np.prod(spec["shape"])) * np.dtype(spec["dtype"]).itemsize
        if size != start + payload:
            raise _damaged(directory, f"{name}.npy holds {size - start} bytes of data, expected {payload}")


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

    from audiotree.index.reader import open_index
    from audiotree.index.text import TextColumn

    arrays: dict[str, dict] = {}

    def put(name: str, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        np.save(os.path.join(folder, name + ".npy"), array, allow_pickle=False)
        arrays[name] = {"dtype": str(array.dtype), "shape": list(array.shape)}

    def put_text(name: str, column: TextColumn) -> None:
        put(name + ".offsets", np.asarray(column.offsets, np.int64))
        put(name + ".data", np.asarray(column.data, np.uint8))

    names = list(ix.meta["labels"])
    full = open_index(ix.path, columns=["path", "group", "size", "mtime_ns", "channels", "duration", "readable"],
                      labels=names, root=ix.root)
    table = full.table
    n = len(full)
    put_text("path", TextColumn.from_arrow(table.column("path")))
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
            put_text(key, TextColumn.from_arrow(table.column(name)))
            codes, values = _dictionary(table.column(name))
            put(key + ".codes", codes)
            put_text(key + ".names", TextColumn.from_strings(values))
        elif kind == "category":
            put(key, full.label_values(name))
            put_text(key + ".names", TextColumn.from_strings(["" if v is None else str(v)
                                                              for v in full.vocabulary(name)]))
        else:
            put(key, np.asarray(full.label_values(name)))
    if "start" in table.column_names:
        put("window", np.stack([np.asarray(full.column("start"), dtype=np.float64),
                                np.asarray(full.column("end"), dtype=np.float64)], axis=1))
    del full, table
    pa.default_memory_pool().release_unused()
    if ix.has_profile:
        _write_profiles(ix, folder, put, arrays)
    return {"format": STORE_FORMAT, "index": identity, "rows": n, "root": ix.root, "groups": groups[1],
            "labels": labels, "arrays": arrays}


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
    data_path = os.path.join(folder, ".profile.data.raw")
    dtype = None
    total = 0
    try:
        pf = pq.ParquetFile(source)
        with open(data_path, "wb") as raw:
            for batch in pf.iter_batches(batch_size=_BATCH_ROWS, columns=[
                    "profile", "readable", "frames", "sample_rate", "profile_step"]):
                column = batch.column("profile")
                check_profiles(ix.path, column, batch.column("frames"), batch.column("sample_rate"),
                               batch.column("profile_step"), batch.column("readable"))
                starts = column.offsets.to_numpy().astype(np.int64)
                values = column.values.slice(int(starts[0]), int(starts[-1] - starts[0])).to_numpy(zero_copy_only=False)
                dtype = values.dtype if dtype is None else dtype
                raw.write(np.ascontiguousarray(values, dtype=dtype).tobytes())
                offsets.append(starts[1:] - starts[0] + total)
                total += int(starts[-1] - starts[0])
                valid.append(column.is_valid().to_numpy(zero_copy_only=False).astype(bool))
    finally:
        if source is not ix.path:
            source.close()
    put("profile.offsets", np.concatenate(offsets))
    put("profile.valid", np.concatenate(valid) if valid else np.zeros(0, bool))
    dtype = np.dtype(dtype or np.float32)
    # Copied into the .npy in steps: the profiles of a large corpus do not fit in memory at once.
    out = np.lib.format.open_memmap(os.path.join(folder, "profile.data.npy"), mode="w+", dtype=dtype, shape=(total,))
    if total:
        raw = np.memmap(data_path, dtype=dtype, mode="r", shape=(total,))
        step = 1 << 24
        for at in range(0, total, step):
            out[at:at + step] = raw[at:at + step]
        del raw
    out.flush()
    del out
    os.remove(data_path)
    arrays["profile.data"] = {"dtype": str(dtype), "shape": [total]}
