"""The ``audiotree-tree`` layout shared by ``TreeWriter`` and ``TreeDataSource``.

A dataset is a folder holding ``manifest.json`` plus one file per array leaf
and two files per string leaf. Leaves are named by their dot-joined path in
the pytree (``dry.waveform``, ``extras.mel``, ``metadata.filepath``); a bare
array or string written on its own is the leaf ``root``.

Array leaf ``<name>.bin``
    A raw C-order array ``(capacity, *shape_per_sample)`` of the dtype in the
    manifest (the manifest spells the byte order, e.g. ``"<f4"``), readable with
    ``np.memmap``. Only the first ``num_samples`` rows are meaningful.

String leaf ``<name>.offsets`` + ``<name>.utf8``
    ``.utf8`` is the UTF-8 bytes of every string, concatenated. ``.offsets`` is
    a little-endian ``uint64`` array whose entry ``i`` is the *end* byte offset
    of string ``i`` in ``.utf8`` (string ``i`` starts at entry ``i - 1``, or 0).
    Both are memmapped. This is used instead of an external record format
    (such as Bagz, unavailable here) because it needs nothing but NumPy, works
    on every platform, gives O(1) random access, and fits the commit protocol:
    a reader that trusts ``num_samples`` reads only offsets that were written,
    fsynced and committed, and can check every offset against the file sizes.

``manifest.json``
    The version header (:mod:`audiotree.formats.header`), ``num_samples`` (the
    committed count), ``complete`` (the writer closed cleanly, so files are
    truncated to exactly their content), ``expected_samples`` (the writer's
    hint, verbatim), ``created_at``, ``structure``, ``leaves``,
    ``string_leaves`` and the user's ``metadata``; from version 1.1, a closed
    writer's ``inline`` copy of its small leaf files
    (:mod:`audiotree.formats.tree_inline`), so that a remote reader needs no
    request for them.

``structure`` is a tree of nodes, each a JSON object with a ``type``:

* ``{"type": "array", "leaf": name}`` and ``{"type": "string", "leaf": name}``;
* ``{"type": "dict", "children": {key: node}}``;
* ``{"type": "AudioTree", "sample_rate": int, "children": {field: node}}``,
  whose children are AudioTree fields. ``extras`` is a dict node and the
  private provenance is spelled ``metadata``: a dict node whose ``filepath``
  and ``source`` are string leaves (stored as text, not as the in-memory
  ``(B, 1024)`` code-point rows, which would cost 4 KiB per item) and whose
  ``offset`` is a float64 array leaf.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from audiotree import limits
from audiotree.formats.header import FormatInfo, check_known_keys
from audiotree.fs import safe_join
from audiotree.validation import is_int

__all__ = [
    "MANIFEST_NAME",
    "TREE_VERSION",
    "ROOT_LEAF",
    "INDEX_DTYPE",
    "Leaf",
    "flatten",
    "array_file",
    "string_files",
    "dtype_allowed",
    "ArraySpec",
    "StringSpec",
    "TreeManifest",
    "parse_manifest",
    "check_file_sizes",
    "build",
    "prune",
]

MANIFEST_NAME = "manifest.json"
#: The layout version of ``audiotree-tree`` this code writes and reads (1.1 added ``inline``).
TREE_VERSION = (1, 1)
ROOT_LEAF = "root"
ARRAY_SUFFIX = ".bin"
INDEX_SUFFIX = ".offsets"
TEXT_SUFFIX = ".utf8"
INDEX_DTYPE = np.dtype("<u8")
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64
MAX_NDIM = 32
MAX_FILENAME_BYTES = 200

_ALLOWED = (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128,
)
ALLOWED_DTYPES = frozenset(
    s for t in _ALLOWED for s in {np.dtype(t).newbyteorder("<").str, np.dtype(t).newbyteorder(">").str}
)
# "lengths" (padded batches of whole utterances) is stored like any per-item array.
_ARRAY_FIELDS = ("waveform", "lufs", "lufs_windows", "pitch", "velocity", "note_duration", "codes", "latents", "lengths")
_METADATA_STRINGS = ("filepath", "source")

TOP_LEVEL_KEYS = (
    "format", "format_version", "min_reader_version", "producer",
    "num_samples", "complete", "expected_samples", "created_at",
    "structure", "leaves", "string_leaves", "metadata", "inline",
)


def dtype_allowed(dtype: np.dtype) -> bool:
    return np.dtype(dtype).str in ALLOWED_DTYPES


def array_file(name: str) -> str:
    return name + ARRAY_SUFFIX


def string_files(name: str) -> tuple[str, str]:
    return name + INDEX_SUFFIX, name + TEXT_SUFFIX


# ----------------------------------------------------------------- writing
@dataclasses.dataclass
class Leaf:
    """One leaf of a pytree being written: an array ``(B, ...)`` or ``B`` strings."""

    name: str
    kind: str  # "array" | "string"
    value: Any  # np.ndarray (ndim >= 1) or list[str]

    @property
    def batch(self) -> int:
        return int(self.value.shape[0]) if self.kind == "array" else len(self.value)


def _is_string_leaf(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    )


def _check_key(key: Any, path: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"Dict keys must be strings to name leaf files; {path or 'the root'} has key {key!r}.")
    if not key or key.startswith(".") or any(c in key for c in "/\\\x00") or key in (".", ".."):
        raise ValueError(
            f"Key {key!r} under {path or 'the root'} cannot name a leaf file: keys must be non-empty and "
            "contain no '/', '\\' or NUL, and must not start with '.'."
        )
    return key


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _as_array(value: Any, name: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == object:
        raise ValueError(f"Leaf {name!r} has dtype object; only numeric and bool arrays (or strings) can be written.")
    if array.ndim == 0:
        raise ValueError(
            f"Leaf {name!r} is 0-d (a scalar); every leaf needs a leading batch axis, e.g. np.asarray([value])."
        )
    if not dtype_allowed(array.dtype):
        raise ValueError(
            f"Leaf {name!r} has dtype {array.dtype}, which this format does not store; use one of bool, "
            "int8-64, uint8-64, float16/32/64 or complex64/128 (cast with .astype)."
        )
    return array


def flatten(tree: Any, *, tree_class: type) -> tuple[dict, list[Leaf]]:
    """``(structure node, leaves)`` of a pytree, in a deterministic order.

    Accepts an ``AudioTree``, a dict (keys sorted), nested combinations, an
    array, a ``str`` (a batch of one) or a list of ``str``. ``tree_class`` is
    the container class (``audiotree.AudioTree``): the layout knows its fields,
    the caller names the class, so this module imports no container.
    """
    leaves: list[Leaf] = []
    node = _flatten(tree, "", leaves, 0, tree_class)
    return node, leaves


def _flatten(value: Any, path: str, leaves: list[Leaf], depth: int, tree_class: type) -> dict:
    if depth > MAX_DEPTH:
        raise ValueError(f"The pytree is nested more than {MAX_DEPTH} levels deep at {path!r}.")
    name = path or ROOT_LEAF
    if isinstance(value, tree_class):
        return _flatten_audio_tree(value, path, leaves, depth, tree_class)
    if isinstance(value, Mapping):
        children = {}
        for key in sorted(value, key=lambda k: (not isinstance(k, str), str(k))):
            key = _check_key(key, path)
            children[key] = _flatten(value[key], _join(path, key), leaves, depth + 1, tree_class)
        return {"type": "dict", "children": children}
    if _is_string_leaf(value):
        strings = [value] if isinstance(value, str) else list(value)
        leaves.append(Leaf(name, "string", strings))
        return {"type": "string", "leaf": name}
    if isinstance(value, (list, tuple)):
        raise TypeError(
            f"{name!r} is a {type(value).__name__} of non-strings; only lists of strings are leaves. "
            "Stack arrays with np.stack or use a dict."
        )
    if isinstance(value, (bool, numbers.Number, np.generic)):
        raise ValueError(
            f"Leaf {name!r} is 0-d (a scalar); every leaf needs a leading batch axis, e.g. np.asarray([value])."
        )
    if value is None or isinstance(value, bytes):
        raise TypeError(
            f"{name!r} is a {type(value).__name__}; leaves must be arrays with a leading batch axis or strings."
        )
    if not hasattr(value, "__array__") and not isinstance(value, (np.ndarray, np.generic)):
        raise TypeError(f"{name!r} has unsupported type {type(value).__name__}; use dicts, AudioTrees, arrays and strings.")
    leaves.append(Leaf(name, "array", _as_array(value, name)))
    return {"type": "array", "leaf": name}


def _flatten_audio_tree(tree: Any, path: str, leaves: list[Leaf], depth: int, tree_class: type) -> dict:
    from audiotree.provenance import decode_strings

    children: dict[str, Any] = {}
    for field in _ARRAY_FIELDS:
        value = getattr(tree, field)
        if value is None:
            continue
        name = _join(path, field)
        leaves.append(Leaf(name, "array", _as_array(value, name)))
        children[field] = {"type": "array", "leaf": name}
    if tree.extras:
        if not isinstance(tree.extras, Mapping):
            raise TypeError(f"{_join(path, 'extras')!r} must be a dict, got {type(tree.extras).__name__}.")
        from audiotree.provenance import stored_extras

        children["extras"] = _flatten(stored_extras(tree.extras), _join(path, "extras"), leaves, depth + 1, tree_class)
    metadata = tree.provenance
    if metadata:
        unknown = sorted(set(metadata) - {"filepath", "source", "offset"})
        if unknown:
            raise ValueError(f"AudioTree provenance has unknown keys {unknown}; only filepath, source and offset exist.")
        meta_path = _join(path, "metadata")
        meta_children: dict[str, Any] = {}
        for key in ("filepath", "offset", "source"):
            if key not in metadata or metadata[key] is None:
                continue
            name = _join(meta_path, key)
            if key == "offset":
                offset = np.asarray(metadata[key], dtype=np.float64)
                if offset.ndim != 1:
                    raise ValueError(
                        f"{name!r} has shape {offset.shape}; a rank 4 (mini-batched) tree must be flattened with "
                        "flatten_mini_batches() before writing."
                    )
                leaves.append(Leaf(name, "array", offset))
                meta_children[key] = {"type": "array", "leaf": name}
            else:
                rows = np.asarray(metadata[key])
                if rows.ndim != 2:
                    raise ValueError(
                        f"{name!r} has shape {rows.shape}; expected (batch, 1024) code-point rows. Flatten a "
                        "mini-batched tree with flatten_mini_batches() before writing."
                    )
                leaves.append(Leaf(name, "string", decode_strings(rows)))
                meta_children[key] = {"type": "string", "leaf": name}
        children["metadata"] = {"type": "dict", "children": meta_children}
    rate = limits.sane_sample_rate(tree.sample_rate, f"TreeWriter: the AudioTree at {path or 'the root'}")
    return {"type": "AudioTree", "sample_rate": rate, "children": children}


# ----------------------------------------------------------------- reading
@dataclasses.dataclass(frozen=True)
class ArraySpec:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    file: Path

    @property
    def row_bytes(self) -> int:
        return int(self.dtype.itemsize) * math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class StringSpec:
    name: str
    index_file: Path
    data_file: Path


@dataclasses.dataclass(frozen=True)
class TreeManifest:
    num_samples: int
    complete: bool
    expected_samples: int | None
    structure: dict
    arrays: dict[str, ArraySpec]
    strings: dict[str, StringSpec]
    metadata: dict
    info: FormatInfo


def _invalid(where: str, message: str) -> ValueError:
    return ValueError(f"Invalid manifest {where}: {message} Re-render the dataset (or restore it from a backup).")


def _plain_file(directory: Path, value: Any, where: str, leaf: str) -> Path:
    if not isinstance(value, str):
        raise _invalid(where, f"the file of leaf {leaf!r} must be a string, got {type(value).__name__}.")
    try:
        path = safe_join(directory, value, where=f"Invalid manifest {where} (leaf {leaf!r})")
    except ValueError as exc:
        raise ValueError(f"{exc} Re-render the dataset.") from None
    if "/" in value or "\\" in value:
        raise _invalid(where, f"the file {value!r} of leaf {leaf!r} is not a plain file name in the dataset folder.")
    return path


def parse_manifest(obj: Any, directory: Path, where: str, info: FormatInfo) -> TreeManifest:
    """Validates a parsed ``manifest.json`` (types, names, structure); no file I/O but path checks."""
    if not isinstance(obj, dict):
        raise _invalid(where, "the top level must be a JSON object.")
    check_known_keys(obj, TOP_LEVEL_KEYS, info, f"Invalid manifest {where}", "the manifest")
    for key in ("num_samples", "structure", "leaves"):
        if key not in obj:
            raise _invalid(where, f"the required key {key!r} is missing.")
    num_samples = obj["num_samples"]
    if not is_int(num_samples) or num_samples < 0:
        raise _invalid(where, f"num_samples must be a non-negative int, got {num_samples!r}.")
    _in_range(where, "num_samples", num_samples, 0, limits.MAX_ITEMS)
    complete = obj.get("complete", False)
    if not isinstance(complete, bool):
        raise _invalid(where, f"complete must be true or false, got {complete!r}.")
    expected = obj.get("expected_samples")
    if expected is not None and (not is_int(expected) or expected < 0):
        raise _invalid(where, f"expected_samples must be a non-negative int or null, got {expected!r}.")
    if expected is not None:
        _in_range(where, "expected_samples", expected, 0, limits.MAX_ITEMS)
    metadata = obj.get("metadata", {})
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise _invalid(where, f"metadata must be a JSON object, got {type(metadata).__name__}.")

    leaves = obj["leaves"]
    string_leaves = obj.get("string_leaves", {})
    if not isinstance(leaves, dict):
        raise _invalid(where, f"leaves must be a JSON object, got {type(leaves).__name__}.")
    if not isinstance(string_leaves, dict):
        raise _invalid(where, f"string_leaves must be a JSON object, got {type(string_leaves).__name__}.")
    both = sorted(set(leaves) & set(string_leaves))
    if both:
        raise _invalid(where, f"leaves {both} are declared both as arrays and as strings.")

    files_seen: dict[str, str] = {}

    def claim(path: Path, leaf: str) -> None:
        key = os.path.normcase(str(path)).lower()
        if key in files_seen:
            raise _invalid(where, f"leaves {files_seen[key]!r} and {leaf!r} share the file {path.name!r}.")
        files_seen[key] = leaf

    def checked_entry(entry: Any, what: str, known: tuple[str, ...], required: tuple[str, ...]) -> dict:
        if not isinstance(entry, dict):
            raise _invalid(where, f"{what} must be a JSON object, got {type(entry).__name__}.")
        check_known_keys(entry, known, info, f"Invalid manifest {where}", what)
        for key in required:
            if key not in entry:
                raise _invalid(where, f"{what} lacks {key!r}.")
        return entry

    arrays: dict[str, ArraySpec] = {}
    for name, entry in leaves.items():
        fields = ("dtype", "shape_per_sample", "file")
        entry = checked_entry(entry, f"leaf {name!r}", fields, fields)
        dtype_str = entry["dtype"]
        if not isinstance(dtype_str, str) or dtype_str not in ALLOWED_DTYPES:
            raise _invalid(
                where,
                f"leaf {name!r} has dtype {dtype_str!r}; allowed are explicit-byte-order bool, int, uint, float and "
                "complex dtypes such as '<f4'.",
            )
        shape = entry["shape_per_sample"]
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_NDIM
            or not all(is_int(d) and d >= 0 for d in shape)
        ):
            raise _invalid(where, f"leaf {name!r} has shape_per_sample {shape!r}; it must be a list of non-negative ints.")
        for axis, size in enumerate(shape):
            _in_range(where, f"leaf {name!r} shape_per_sample[{axis}]", size, 0, limits.MAX_DIM)
        path = _plain_file(directory, entry["file"], where, name)
        claim(path, name)
        spec = ArraySpec(name, np.dtype(dtype_str), tuple(int(d) for d in shape), path)
        _in_range(where, f"leaf {name!r} bytes per sample", spec.row_bytes, 0, limits.MAX_SAMPLE_BYTES)
        arrays[name] = spec

    strings: dict[str, StringSpec] = {}
    for name, entry in string_leaves.items():
        entry = checked_entry(entry, f"string leaf {name!r}", ("index_file", "data_file", "encoding"),
                              ("index_file", "data_file"))
        encoding = entry.get("encoding", "utf-8")
        if encoding != "utf-8":
            raise _invalid(where, f"string leaf {name!r} has encoding {encoding!r}; only 'utf-8' is defined.")
        index_path = _plain_file(directory, entry["index_file"], where, name)
        data_path = _plain_file(directory, entry["data_file"], where, name)
        claim(index_path, name)
        claim(data_path, name)
        strings[name] = StringSpec(name, index_path, data_path)

    referenced: list[str] = []
    structure = obj["structure"]
    _check_node(structure, where, referenced, arrays, strings, depth=0, path="")
    duplicates = sorted({n for n in referenced if referenced.count(n) > 1})
    if duplicates:
        raise _invalid(where, f"leaves {duplicates} are referenced more than once in the structure.")
    unreferenced = sorted((set(arrays) | set(strings)) - set(referenced))
    if unreferenced:
        raise _invalid(where, f"leaves {unreferenced} are declared but not part of the structure.")
    if not referenced:
        raise _invalid(where, "the structure has no leaves.")
    return TreeManifest(
        num_samples=int(num_samples), complete=complete, expected_samples=expected, structure=structure,
        arrays=arrays, strings=strings, metadata=metadata, info=info,
    )


def _in_range(where: str, field: str, value: Any, low: int, high: int, unit: str = "") -> None:
    problem = limits.int_problem(field, value, low, high, unit)
    if problem:
        raise _invalid(where, problem)


def _check_node(node: Any, where: str, referenced: list, arrays: dict, strings: dict, *, depth: int, path: str) -> str:
    """Validates one structure node; returns its type."""
    at = path or "the root"
    if depth > MAX_DEPTH:
        raise _invalid(where, f"the structure is nested more than {MAX_DEPTH} levels deep.")
    if not isinstance(node, dict) or not isinstance(node.get("type"), str):
        raise _invalid(where, f"the structure node at {at} must be an object with a string 'type'.")
    kind = node["type"]
    if kind in ("array", "string"):
        leaf = node.get("leaf")
        if not isinstance(leaf, str):
            raise _invalid(where, f"the {kind} node at {at} needs a string 'leaf'.")
        table = arrays if kind == "array" else strings
        if leaf not in table:
            raise _invalid(where, f"the structure references {kind} leaf {leaf!r}, which is not declared.")
        referenced.append(leaf)
        return kind
    if kind not in ("dict", "AudioTree"):
        raise _invalid(where, f"the structure node at {at} has unknown type {kind!r}.")
    children = node.get("children")
    if not isinstance(children, dict):
        raise _invalid(where, f"the {kind} node at {at} needs a 'children' object.")
    if kind == "dict":
        for key, child in children.items():
            _check_node(child, where, referenced, arrays, strings, depth=depth + 1, path=_join(path, key))
        return kind
    rate = node.get("sample_rate")
    if not is_int(rate) or rate <= 0:
        raise _invalid(where, f"the AudioTree node at {at} needs a positive int sample_rate, got {rate!r}.")
    _in_range(where, f"the sample_rate of the AudioTree node at {at}", rate, 1, limits.MAX_SAMPLE_RATE, " Hz")
    allowed = set(_ARRAY_FIELDS) | {"extras", "metadata"}
    unknown = sorted(set(children) - allowed)
    if unknown:
        raise _invalid(where, f"the AudioTree node at {at} has children {unknown} that are not AudioTree fields.")
    for key, child in children.items():
        child_path = _join(path, key)
        got = _check_node(child, where, referenced, arrays, strings, depth=depth + 1, path=child_path)
        if key in _ARRAY_FIELDS and got != "array":
            raise _invalid(where, f"the AudioTree field {child_path!r} must be an array node, got {got!r}.")
        if key == "waveform" and len(arrays[child["leaf"]].shape) >= 2:
            # (..., C, T) per sample; T is bounded like every dimension (MAX_DIM == MAX_FRAMES).
            channels = arrays[child["leaf"]].shape[-2]
            _in_range(where, f"the channels of {child_path!r}", channels, 0, limits.MAX_CHANNELS)
        if key == "extras" and got != "dict":
            raise _invalid(where, f"the AudioTree field {child_path!r} must be a dict node, got {got!r}.")
        if key == "metadata":
            if got != "dict":
                raise _invalid(where, f"{child_path!r} must be a dict node, got {got!r}.")
            meta = child["children"]
            bad = sorted(set(meta) - {"filepath", "source", "offset"})
            if bad:
                raise _invalid(where, f"{child_path!r} may hold only filepath, source and offset, not {bad}.")
            for name in _METADATA_STRINGS:
                if name in meta and meta[name].get("type") != "string":
                    raise _invalid(where, f"{_join(child_path, name)!r} must be a string leaf.")
            if "offset" in meta:
                if meta["offset"].get("type") != "array":
                    raise _invalid(where, f"{_join(child_path, 'offset')!r} must be an array leaf.")
                spec = arrays[meta["offset"]["leaf"]]
                if spec.dtype.kind != "f" or spec.dtype.itemsize != 8 or spec.shape != ():
                    raise _invalid(where, f"{_join(child_path, 'offset')!r} must be float64 with shape_per_sample [].")
    return kind


def _size(path: Path, where: str, leaf: str) -> int:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ValueError(
            f"Invalid manifest {where}: the file {path.name!r} of leaf {leaf!r} is missing. Re-render the dataset."
        ) from None
    import stat as _stat

    if not _stat.S_ISREG(st.st_mode):
        raise _invalid(where, f"the file {path.name!r} of leaf {leaf!r} is not a regular file.")
    return int(st.st_size)


def check_file_sizes(manifest: TreeManifest, where: str, *, check_offsets: bool = True) -> dict[str, int]:
    """Checks every leaf file against the manifest; returns each string leaf's data length.

    An array file must hold ``num_samples`` rows (exactly, once the writer has
    closed). A string index must hold ``num_samples`` end offsets that never
    decrease and stay within the data file. Sizes use Python ints, so absurd
    shapes cannot overflow.
    """
    n = manifest.num_samples
    for spec in manifest.arrays.values():
        need = n * spec.row_bytes
        size = _size(spec.file, where, spec.name)
        if size < need or (manifest.complete and size != need):
            raise _invalid(
                where,
                f"leaf {spec.name!r} file {spec.file.name!r} is {size} bytes, but {n} samples of shape "
                f"{list(spec.shape)} and dtype {spec.dtype.str} need {'exactly ' if manifest.complete else 'at least '}"
                f"{need} bytes; the file is truncated, replaced or damaged.",
            )
    text_lengths: dict[str, int] = {}
    for spec in manifest.strings.values():
        need = n * INDEX_DTYPE.itemsize
        size = _size(spec.index_file, where, spec.name)
        data_size = _size(spec.data_file, where, spec.name)
        if size < need or (manifest.complete and size != need):
            raise _invalid(
                where,
                f"string leaf {spec.name!r} index {spec.index_file.name!r} is {size} bytes, but {n} samples need "
                f"{'exactly ' if manifest.complete else 'at least '}{need} bytes; the file is truncated or damaged.",
            )
        end = 0
        if n:
            ends = np.fromfile(spec.index_file, dtype=INDEX_DTYPE, count=n) if check_offsets else None
            if ends is not None:
                if ends.shape[0] != n or (n > 1 and np.any(ends[1:] < ends[:-1])):
                    raise _invalid(where, f"string leaf {spec.name!r} has offsets that decrease; the index is damaged.")
                end = int(ends[-1])
            else:
                with open(spec.index_file, "rb") as f:
                    f.seek((n - 1) * INDEX_DTYPE.itemsize)
                    end = int(np.frombuffer(f.read(INDEX_DTYPE.itemsize), dtype=INDEX_DTYPE)[0])
        if data_size < end or (manifest.complete and data_size != end):
            raise _invalid(
                where,
                f"string leaf {spec.name!r} data {spec.data_file.name!r} is {data_size} bytes, but its index says "
                f"{'exactly ' if manifest.complete else 'at least '}{end}; the file is truncated or damaged.",
            )
        text_lengths[spec.name] = end
    return text_lengths


def _excluded(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def prune(node: dict, prefixes: tuple[str, ...], path: str = "") -> dict | None:
    """A copy of ``node`` without the subtrees whose dotted path is excluded; ``None`` if all is gone."""
    if path and _excluded(path, prefixes):
        return None
    if node["type"] in ("array", "string"):
        return None if _excluded(node["leaf"], prefixes) else node
    children = {}
    for key, child in node["children"].items():
        kept = prune(child, prefixes, _join(path, key))
        if kept is not None:
            children[key] = kept
    return {**node, "children": children}


def build(node: dict, values: Mapping[str, Any], *, tree_class: type) -> Any:
    """Rebuilds one item from its leaf values (arrays ``(1, ...)``, strings ``str``).

    An ``AudioTree`` node becomes an instance of ``tree_class`` (the caller's ``audiotree.AudioTree``).
    """
    kind = node["type"]
    if kind in ("array", "string"):
        return values[node["leaf"]]
    if kind == "dict":
        return {key: build(child, values, tree_class=tree_class) for key, child in node["children"].items()}
    from audiotree.provenance import KEY_EXTRA, encode_strings, restored_key

    children = node["children"]
    fields = {key: build(children[key], values, tree_class=tree_class) for key in _ARRAY_FIELDS if key in children}
    extras = build(children["extras"], values, tree_class=tree_class) if "extras" in children else {}
    if KEY_EXTRA in extras:  # stored as text, carried as code-point rows
        extras[KEY_EXTRA] = restored_key(extras[KEY_EXTRA])
    metadata: dict[str, Any] = {}
    if "metadata" in children:
        for key, value in build(children["metadata"], values, tree_class=tree_class).items():
            metadata[key] = encode_strings([value]) if key in _METADATA_STRINGS else value
    return tree_class(
        waveform=fields.pop("waveform", None), sample_rate=int(node["sample_rate"]), extras=extras,
        _metadata=metadata, **fields,
    )
