"""The ``audiotree-manifest`` format: ``AudioWriter``'s column table in one ``.npz``.

Layout
------
One ``manifest.npz`` (zip of ``.npy`` arrays, compressed by default) holding:

* header entries ``__audiotree_<key>``: 0-d unicode arrays of JSON text for
  ``format``, ``format_version``, ``min_reader_version``, ``producer`` and
  ``num_entries``;
* one array per column with ``num_entries`` rows. Scalar columns are 1-D; a
  column of array cells is ``(num_entries, *cell_shape)``. Strings are
  fixed-width ``<U``, bytes ``|S``;
* for a column with missing cells, a bool mask ``__mask_<column>`` (True =
  present). The content of a masked-out cell is filler; no value (``-1``,
  NaN, ``""``) is ever a sentinel.

No pickling anywhere: object arrays cannot be written, and the reader loads
with ``allow_pickle=False`` (a pickled manifest is refused).

The column set is closed: bookkeeping columns (:data:`BOOKKEEPING`), the
AudioTree label fields, and the ``extras_*`` and ``tags_*`` prefixes. Any other
column is refused at read time (unless the file is from a newer minor
version, see :mod:`audiotree.formats.header`). The manifest is always written to a
temporary file and atomically renamed over the old one.
"""

from __future__ import annotations

import dataclasses
import io
import json
import numbers
import os
import zipfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from audiotree import limits
from audiotree.formats import header as _format
from audiotree.fs import atomic_file, npz_problem
from audiotree.tree_fields import LABEL_FIELDS
from audiotree.validation import is_int

__all__ = [
    "MANIFEST_FILE",
    "HEADER_PREFIX",
    "MASK_PREFIX",
    "TAG_PREFIX",
    "EXTRAS_PREFIX",
    "BOOKKEEPING",
    "ManifestColumns",
    "cell_kind",
    "encode_column",
    "encode",
    "write",
    "read_columns",
    "read_entries",
]

MANIFEST_FILE = "manifest.npz"
HEADER_PREFIX = "__audiotree_"
MASK_PREFIX = "__mask_"
TAG_PREFIX = "tags_"
EXTRAS_PREFIX = "extras_"
BOOKKEEPING = (
    "index", "filename", "sample_rate", "channels", "samples", "duration_seconds", "files_written",
    "subtype", "timestamp", "filepath", "source", "offset",
)
_HEADER_KEYS = ("format", "format_version", "min_reader_version", "producer", "num_entries")
_ALLOWED_KINDS = frozenset("biufcUS")


def known_column(name: str) -> bool:
    return name in BOOKKEEPING or name in LABEL_FIELDS or name.startswith((EXTRAS_PREFIX, TAG_PREFIX))


# ------------------------------------------------------------------- encode
def cell_kind(value: Any) -> tuple:
    """The logical kind of one cell, used to pin a column's kind.

    ``("bool",)``, ``("int",)``, ``("uint",)``, ``("float",)``, ``("complex",)``,
    ``("str",)``, ``("bytes",)``, or ``("array", dtype kind, shape)``. Raises
    ``ValueError`` for values that cannot be stored without pickling.
    """
    if isinstance(value, (bool, np.bool_)):
        return ("bool",)
    if isinstance(value, str):
        if value.endswith("\x00"):
            raise ValueError(f"String {value[:40]!r} ends with a NUL character, which fixed-width storage would drop.")
        return ("str",)
    if isinstance(value, bytes):
        if value.endswith(b"\x00"):
            raise ValueError(f"Bytes {value[:40]!r} end with a NUL byte, which fixed-width storage would drop.")
        return ("bytes",)
    if isinstance(value, np.unsignedinteger):
        return ("uint",)
    if isinstance(value, (numbers.Integral, np.integer)):
        return ("int",)
    if isinstance(value, (float, np.floating)):
        return ("float",)
    if isinstance(value, (complex, np.complexfloating)):
        return ("complex",)
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return cell_kind(value[()])
        if value.dtype.kind not in _ALLOWED_KINDS:
            raise ValueError(f"Arrays of dtype {value.dtype} cannot be stored without pickling.")
        if value.dtype.kind in "US":
            for item in value.reshape(-1).tolist():
                cell_kind(item)
        return ("array", value.dtype.kind, tuple(value.shape))
    raise ValueError(f"A value of type {type(value).__name__} cannot be stored in the manifest.")


def _scalar_dtype(kind: str, values: list) -> np.dtype:
    if kind == "bool":
        return np.dtype(np.bool_)
    if kind == "str":
        return np.dtype(f"<U{max([len(v) for v in values] + [1])}")
    if kind == "bytes":
        return np.dtype(f"|S{max([len(v) for v in values] + [1])}")
    default = {"int": np.int64, "uint": np.uint64, "float": np.float64, "complex": np.complex128}[kind]
    dtypes = [v.dtype if isinstance(v, (np.generic, np.ndarray)) else np.dtype(default) for v in values]
    return np.result_type(*dtypes) if dtypes else np.dtype(default)


def encode_column(name: str, values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """``(data, mask or None)`` for one column; ``None`` cells are missing."""
    present = [v for v in values if v is not None]
    mask = None if len(present) == len(values) else np.array([v is not None for v in values], dtype=bool)
    if not present:
        return np.zeros(len(values), dtype="<U1"), mask
    try:
        kinds = [cell_kind(v) for v in present]
    except ValueError as exc:
        raise ValueError(f"Manifest column {name!r}: {exc}") from None
    first = kinds[0]
    if first[0] == "array":
        if any(k[0] != "array" or k[1] != first[1] or k[2] != first[2] for k in kinds):
            raise ValueError(
                f"Manifest column {name!r} mixes array cells of different dtype kinds or shapes "
                f"({sorted({str(k) for k in kinds})}); every row must share both."
            )
        arrays = [np.asarray(v) for v in present]
        if first[1] in "US":
            width = max(max((len(x) for x in a.reshape(-1).tolist()), default=1) for a in arrays)
            dtype = np.dtype(f"<U{max(width, 1)}" if first[1] == "U" else f"|S{max(width, 1)}")
        else:
            dtype = np.result_type(*[a.dtype for a in arrays])
        data = np.zeros((len(values), *first[2]), dtype=dtype)
        it = iter(arrays)
        for row, v in enumerate(values):
            if v is not None:
                data[row] = next(it)
        return data, mask
    if {k[0] for k in kinds} == {"int", "uint"}:
        raise ValueError(
            f"Manifest column {name!r} mixes signed and unsigned integers (e.g. int64 and uint64), which have no "
            "common type; cast them to one dtype."
        )
    if any(k != first for k in kinds):
        raise ValueError(
            f"Manifest column {name!r} mixes value kinds {sorted({k[0] for k in kinds})}; each column holds one kind."
        )
    dtype = _scalar_dtype(first[0], present)
    if first[0] in ("int", "uint") and dtype.kind not in "iu":
        raise ValueError(f"Manifest column {name!r} mixes int64 and uint64 values, which have no common type.")
    filler = {"str": "", "bytes": b"", "bool": False}.get(first[0], 0)
    data = np.array([filler if v is None else v for v in values], dtype=dtype)
    return data, mask


def encode(columns: Mapping[str, Sequence[Any]], num_entries: int) -> dict[str, np.ndarray]:
    """Every array of a manifest (header included), ready for ``np.savez``."""
    arrays: dict[str, np.ndarray] = {}
    hdr = {**_format.header(_format.MANIFEST), "num_entries": int(num_entries)}
    for key, value in hdr.items():
        arrays[HEADER_PREFIX + key] = np.array(json.dumps(value))
    for name, values in columns.items():
        if not isinstance(name, str) or name.startswith((MASK_PREFIX, HEADER_PREFIX)) or name == "tags":
            raise ValueError(f"{name!r} is a reserved manifest column name.")
        if len(values) != num_entries:
            raise ValueError(f"Manifest column {name!r} has {len(values)} rows, but there are {num_entries} entries.")
        data, mask = encode_column(name, values)
        arrays[name] = data
        if mask is not None:
            arrays[MASK_PREFIX + name] = mask
    return arrays


def write(path: str | os.PathLike, columns: Mapping[str, Sequence[Any]], num_entries: int, *, compress: bool = True) -> Path:
    """Encodes and atomically (re)writes the manifest at ``path``."""
    arrays = encode(columns, num_entries)
    buffer = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(buffer, **arrays)
    with atomic_file(path, suffix=".npz") as tmp:
        with open(tmp, "wb") as f:
            f.write(buffer.getvalue())
    return Path(path)


# -------------------------------------------------------------------- read
@dataclasses.dataclass(frozen=True)
class ManifestColumns:
    """A validated manifest: ``columns[name]`` has ``num_entries`` rows; ``masks`` for partial columns."""

    path: Path
    num_entries: int
    columns: dict[str, np.ndarray]
    masks: dict[str, np.ndarray]
    info: _format.FormatInfo


def _bad(path: Any, message: str) -> ValueError:
    return ValueError(f"Invalid manifest {os.fspath(path)}: {message} Re-render the dataset with AudioWriter.")


def read_columns(path: str | os.PathLike) -> ManifestColumns:
    """Loads and validates a manifest (header, column names, kinds, lengths and masks)."""
    path = Path(path)
    problem = npz_problem(path)
    if problem:
        raise _bad(path, problem + ".")
    try:
        npz = np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise _bad(path, f"it could not be loaded without pickling ({exc}); pickled manifests are refused.") from None
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise _bad(path, f"it is not a readable .npz archive ({exc}).") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise _bad(path, "it is a single .npy array, not an .npz archive.")
    arrays: dict[str, np.ndarray] = {}
    try:
        with npz:
            for key in npz.files:
                try:
                    arrays[key] = npz[key]
                except ValueError as exc:
                    raise _bad(path, f"entry {key!r} cannot be loaded without pickling ({exc}); pickled manifests are refused.") from None
                except (OSError, zipfile.BadZipFile, EOFError) as exc:
                    raise _bad(path, f"entry {key!r} is damaged ({exc}).") from None
    except (OSError, zipfile.BadZipFile) as exc:  # pragma: no cover - zip errors on close
        raise _bad(path, f"it is not a readable .npz archive ({exc}).") from None

    header: dict[str, Any] = {}
    for key in list(arrays):
        if key.startswith(HEADER_PREFIX):
            raw = arrays.pop(key)
            if raw.ndim != 0 or raw.dtype.kind != "U":
                raise _bad(path, f"header entry {key!r} must be a 0-d unicode array.")
            try:
                header[key[len(HEADER_PREFIX):]] = json.loads(str(raw[()]))
            except json.JSONDecodeError:
                raise _bad(path, f"header entry {key!r} is not JSON.") from None
    info = _format.check(header, _format.MANIFEST, path)
    _format.check_known_keys(header, _HEADER_KEYS, info, f"Invalid manifest {path}", "the header")
    n = header.get("num_entries")
    if not is_int(n) or n < 0:
        raise _bad(path, f"num_entries must be a non-negative int, got {n!r}.")
    problem = limits.int_problem("num_entries", n, 0, limits.MAX_ITEMS)
    if problem:
        raise _bad(path, problem)

    masks = {k[len(MASK_PREFIX):]: arrays.pop(k) for k in list(arrays) if k.startswith(MASK_PREFIX)}
    unknown = sorted(name for name in arrays if not known_column(name) or name == "tags")
    if unknown and info.strict:
        raise _bad(
            path,
            f"unknown column(s) {unknown}; only bookkeeping columns, label fields, extras_* and tags_* exist in "
            "this version.",
        )
    for name in unknown:
        arrays.pop(name)
    for name, data in arrays.items():
        if data.dtype.kind not in _ALLOWED_KINDS:
            raise _bad(path, f"column {name!r} has dtype {data.dtype}, which manifests never hold.")
        if data.ndim < 1 or data.shape[0] != n:
            raise _bad(path, f"column {name!r} has shape {data.shape}, but there are {n} entries.")
    for name, mask in masks.items():
        if name not in arrays:
            if info.strict:
                raise _bad(path, f"mask for unknown column {name!r}.")
            continue
        if mask.dtype != np.bool_ or mask.ndim != 1 or mask.shape[0] != n:
            raise _bad(path, f"the mask of column {name!r} must be bool with shape ({n},), got {mask.dtype} {mask.shape}.")
    masks = {k: v for k, v in masks.items() if k in arrays}
    return ManifestColumns(path=path, num_entries=n, columns=arrays, masks=masks, info=info)


def _cell(data: np.ndarray, row: int) -> Any:
    value = data[row]
    if data.ndim == 1:
        if data.dtype.kind == "U":
            return str(value)
        if data.dtype.kind == "S":
            return bytes(value)
        return value  # a NumPy scalar of the stored width
    return np.array(value)


def read_entries(path: str | os.PathLike | ManifestColumns) -> list[dict]:
    """One dict per row holding the row's present columns.

    ``tags_<k>`` columns are gathered into ``entry["tags"]`` (plain Python
    scalars), present only when the row has a tag.
    """
    table = path if isinstance(path, ManifestColumns) else read_columns(path)
    entries: list[dict] = []
    for row in range(table.num_entries):
        entry: dict[str, Any] = {}
        tags: dict[str, Any] = {}
        for name, data in table.columns.items():
            mask = table.masks.get(name)
            if mask is not None and not mask[row]:
                continue
            if name.startswith(TAG_PREFIX):
                if data.ndim != 1:
                    raise _bad(table.path, f"tag column {name!r} holds arrays; tags must be scalars.")
                value = _cell(data, row)
                tags[name[len(TAG_PREFIX):]] = value.item() if isinstance(value, np.generic) else value
            else:
                entry[name] = _cell(data, row)
        if tags:
            entry["tags"] = tags
        entries.append(entry)
    return entries
