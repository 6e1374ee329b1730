"""The ``audiotree-arrayrecord`` layout: items as ArrayRecord records, in shards.

ArrayRecord is Grain's own random-access record format (installed with Grain).
A dataset is a folder holding::

    arrayrecord.json          the index (below)
    items-00000.array_record  records 0 .. n0-1
    items-00001.array_record  the next n1 records
    ...

``arrayrecord.json`` carries the version header (:mod:`audiotree.formats.header`,
format ``audiotree-arrayrecord``) plus ``record_codec`` (``"audiotree-item"``),
``record_codec_version`` (``1``), ``num_records``, ``complete`` (always true:
the index is written once, after every shard was closed), ``shards`` (a list
of ``{"file": name, "num_records": n}`` in item order) and the user's
``metadata``. A folder without the index holds no finished dataset. There is
no timestamp: the same items give a byte-identical folder, index included.

In a render (``audiotree render --format arrayrecord``) each part is such a
dataset, and the part's entry in ``render.json`` repeats its shards with
their sizes and SHA-256: ``"shards": [{"file", "num_records", "bytes",
"sha256"}]`` (:func:`check_render_shards`), so a remote reader stages a
shard by one GET and checks what arrived. Records written before carry no
``shards``; their readers read the part's index instead.

Record codec ``audiotree-item`` v1 (one record = one item, a batch of 1)::

    b"ATRI"                 4 bytes, magic
    version                 uint16 little-endian (1)
    header_length           uint32 little-endian
    header                  UTF-8 JSON: {"structure": node, "leaves": [...]}
    payload                 every leaf's bytes, in the order of "leaves"

``structure`` is the node tree of :mod:`audiotree.formats.tree` (AudioTrees,
dicts, array and string leaves). Each entry of ``leaves`` is
``[name, "array", dtype, shape, nbytes]`` (``dtype`` spelled with its byte
order, e.g. ``"<f4"``; ``shape`` per item, without the batch axis; C order) or
``[name, "string", nbytes]`` (UTF-8). No pickle anywhere: a record is decoded
by validating lengths, dtypes and shapes, then viewing the payload. The JSON is
written with sorted keys and no spaces, so equal items give equal bytes.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any, Sequence

import numpy as np

from audiotree.formats.tree import Leaf, build, dtype_allowed, flatten
from audiotree.validation import is_int

__all__ = [
    "INDEX_NAME",
    "SHARD_PATTERN",
    "RECORD_CODEC",
    "RECORD_CODEC_VERSION",
    "WRITER_OPTIONS",
    "encode_items",
    "decode_item",
    "check_render_shards",
]

INDEX_NAME = "arrayrecord.json"
SHARD_PATTERN = "items-{:05d}.array_record"
RECORD_CODEC = "audiotree-item"
RECORD_CODEC_VERSION = 1
#: One record per chunk (O(1) random access) and no compression (audio samples barely compress;
#: reading stays a copy). Fixed options also keep the files byte-identical run to run.
WRITER_OPTIONS = "group_size:1,uncompressed"
MAX_INDEX_BYTES = 64 * 1024 * 1024

_MAGIC = b"ATRI"
_PREFIX = struct.Struct("<4sHI")
_MAX_DEPTH = 64


def _leaf_entry(leaf: Leaf, row: int) -> tuple[list, bytes]:
    if leaf.kind == "string":
        data = leaf.value[row].encode("utf-8")
        return [leaf.name, "string", len(data)], data
    value = np.ascontiguousarray(leaf.value[row:row + 1])  # (1, ...): keeps 0-d rows an array
    data = value.tobytes()
    return [leaf.name, "array", value.dtype.str, list(value.shape[1:]), len(data)], data


def encode_items(batch: Any, *, tree_class: type) -> list[bytes]:
    """One record per item of a batched pytree (an ``AudioTree``, a dict of them, ...).

    ``tree_class`` is the container class (``audiotree.AudioTree``; see :func:`audiotree.formats.tree.flatten`).

    >>> import numpy as np
    >>> from audiotree import AudioTree
    >>> tree = AudioTree.create(np.zeros((2, 1, 4), np.float32), 16_000, filepath=["a.wav", "b.wav"])
    >>> records = encode_items(tree, tree_class=AudioTree)
    >>> len(records), decode_item(records[1], tree_class=AudioTree).filepath
    (2, ['b.wav'])
    """
    structure, leaves = flatten(batch, tree_class=tree_class)
    sizes = {leaf.batch for leaf in leaves}
    if len(sizes) > 1:
        raise ValueError(f"The leaves of the batch have different batch sizes {sorted(sizes)}; cannot split it into items.")
    records = []
    for row in range(sizes.pop() if sizes else 0):
        entries, payloads = zip(*(_leaf_entry(leaf, row) for leaf in leaves)) if leaves else ((), ())
        header = json.dumps({"structure": structure, "leaves": list(entries)}, sort_keys=True,
                            separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        records.append(b"".join((_PREFIX.pack(_MAGIC, RECORD_CODEC_VERSION, len(header)), header, *payloads)))
    return records


def _damaged(where: str, problem: str) -> ValueError:
    return ValueError(f"{where}: {problem}; the record is damaged or not an audiotree item. Re-render the dataset.")


def _check_structure(node: Any, names: set, where: str, depth: int = 0) -> None:
    if depth > _MAX_DEPTH or not isinstance(node, dict):
        raise _damaged(where, "its structure is not a tree of nodes")
    kind = node.get("type")
    if kind in ("array", "string"):
        if node.get("leaf") not in names:
            raise _damaged(where, f"its structure names a leaf {node.get('leaf')!r} the record does not hold")
        return
    if kind not in ("dict", "AudioTree") or not isinstance(node.get("children"), dict):
        raise _damaged(where, f"its structure has a node of unknown type {kind!r}")
    if kind == "AudioTree":
        rate = node.get("sample_rate")
        if not is_int(rate) or rate <= 0:
            raise _damaged(where, f"its AudioTree has sample_rate {rate!r}")
    for child in node["children"].values():
        _check_structure(child, names, where, depth + 1)


def _shape(value: Any, where: str, name: str) -> tuple[int, ...]:
    if not isinstance(value, list) or any(not is_int(v) or v < 0 for v in value):
        raise _damaged(where, f"leaf {name!r} has shape {value!r}")
    return tuple(value)


def decode_item(record: bytes, where: str = "record", *, tree_class: type) -> Any:
    """The item (a batch of 1, e.g. an ``AudioTree`` with waveform ``(1, C, T)``) a record holds.

    Arrays are fresh, writable copies. Raises ``ValueError`` naming ``where``
    for anything that is not a well-formed v1 record (see the module docstring).
    """
    view = memoryview(record)
    if view.nbytes < _PREFIX.size:
        raise _damaged(where, f"it is {view.nbytes} bytes long, shorter than the {_PREFIX.size}-byte prefix")
    magic, version, header_length = _PREFIX.unpack_from(view, 0)
    if magic != _MAGIC:
        raise _damaged(where, f"it starts with {bytes(magic)!r}, not {_MAGIC!r}")
    if version != RECORD_CODEC_VERSION:
        raise ValueError(f"{where}: record codec version {version} is not {RECORD_CODEC_VERSION}; "
                         + ("upgrade audiotree to read it." if version > RECORD_CODEC_VERSION else "re-render it."))
    start = _PREFIX.size + header_length
    if start > view.nbytes:
        raise _damaged(where, f"its header claims {header_length} bytes but the record has {view.nbytes}")
    try:
        header = json.loads(bytes(view[_PREFIX.size:start]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _damaged(where, f"its header is not UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict) or not isinstance(header.get("leaves"), list) or "structure" not in header:
        raise _damaged(where, "its header lacks 'structure' or 'leaves'")
    values: dict[str, Any] = {}
    offset = start
    for entry in header["leaves"]:
        if not isinstance(entry, list) or len(entry) < 3 or not isinstance(entry[0], str) or entry[0] in values:
            raise _damaged(where, f"it has a malformed leaf entry {entry!r}")
        name, kind, nbytes = entry[0], entry[1], entry[-1]
        if not is_int(nbytes) or not 0 <= nbytes <= view.nbytes - offset:
            raise _damaged(where, f"leaf {name!r} claims {nbytes!r} bytes past the end of the record")
        data = view[offset:offset + nbytes]
        offset += nbytes
        if kind == "string" and len(entry) == 3:
            try:
                values[name] = bytes(data).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _damaged(where, f"string leaf {name!r} is not UTF-8 ({exc})") from None
        elif kind == "array" and len(entry) == 5:
            try:
                dtype = np.dtype(entry[2]) if isinstance(entry[2], str) else None
            except TypeError:
                dtype = None
            if dtype is None or not dtype_allowed(dtype):
                raise _damaged(where, f"leaf {name!r} has dtype {entry[2]!r}")
            shape = _shape(entry[3], where, name)
            if math.prod(shape) * dtype.itemsize != nbytes:
                raise _damaged(where, f"leaf {name!r} of shape {list(shape)} and dtype {dtype.str} needs "
                                      f"{math.prod(shape) * dtype.itemsize} bytes, not {nbytes}")
            native = dtype.newbyteorder("=")
            values[name] = np.frombuffer(data, dtype=dtype).astype(native, copy=True).reshape((1, *shape))
        else:
            raise _damaged(where, f"leaf {name!r} has kind {kind!r}")
    if offset != view.nbytes:
        raise _damaged(where, f"{view.nbytes - offset} bytes follow the last leaf")
    _check_structure(header["structure"], set(values), where)
    return build(header["structure"], values, tree_class=tree_class)


def check_index(obj: Any, where: str) -> tuple[list[tuple[str, int]], dict]:
    """``([(shard file, records)], metadata)`` of a parsed ``arrayrecord.json``; ``ValueError`` naming ``where``."""
    from audiotree.formats import header as _format

    info = _format.check(obj, _format.ARRAY_RECORD, where)
    known = (*_format.HEADER_KEYS, "record_codec", "record_codec_version", "num_records", "complete", "shards",
             "metadata")
    _format.check_known_keys(obj, known, info, where, "the index")
    if obj.get("record_codec") != RECORD_CODEC:
        raise ValueError(f"{where}: record_codec is {obj.get('record_codec')!r}, not {RECORD_CODEC!r}.")
    if obj.get("record_codec_version") != RECORD_CODEC_VERSION:
        raise ValueError(f"{where}: record_codec_version {obj.get('record_codec_version')!r} is not "
                         f"{RECORD_CODEC_VERSION}; use the audiotree version that wrote it.")
    shards = obj.get("shards")
    if not isinstance(shards, list):
        raise ValueError(f"{where}: 'shards' must be a list; the index is damaged. Re-render the dataset.")
    out: list[tuple[str, int]] = []
    for entry in shards:
        name = entry.get("file") if isinstance(entry, dict) else None
        count = entry.get("num_records") if isinstance(entry, dict) else None
        if (not isinstance(name, str) or "/" in name or "\\" in name or name.startswith(".")
                or not is_int(count) or count < 0):
            raise ValueError(f"{where}: shard entry {entry!r} is not {{'file': name, 'num_records': n}} "
                             "with a plain file name; the index is damaged. Re-render the dataset.")
        out.append((name, count))
    total = obj.get("num_records")
    if total != sum(count for _, count in out):
        raise ValueError(f"{where}: num_records {total!r} is not the sum of the shards' "
                         f"({sum(count for _, count in out)}); the index is damaged. Re-render the dataset.")
    metadata = obj.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ValueError(f"{where}: 'metadata' must be an object.")
    return out, metadata


def index_document(shards: Sequence[tuple[str, int]], metadata: dict) -> dict:
    """The ``arrayrecord.json`` content for finished ``shards``."""
    from audiotree.formats import header as _format

    return {
        **_format.header(_format.ARRAY_RECORD),
        "record_codec": RECORD_CODEC,
        "record_codec_version": RECORD_CODEC_VERSION,
        "num_records": int(sum(n for _, n in shards)),
        "complete": True,
        "shards": [{"file": name, "num_records": int(n)} for name, n in shards],
        "metadata": metadata,
    }


def check_render_shards(entries: Any, count: int, where: str) -> list[tuple[str, int, int, str]]:
    """``[(file, records, bytes, sha256)]`` of a render part entry's ``shards``; ``ValueError`` naming ``where``.

    The records must add up to the part's ``count``.

    >>> check_render_shards([{"file": "items-00000.array_record", "num_records": 2, "bytes": 9, "sha256": "ab" * 32}],
    ...                     2, "render.json part part-00000")[0][:3]
    ('items-00000.array_record', 2, 9)
    """
    if not isinstance(entries, list):
        raise ValueError(f"{where}: 'shards' must be a list; the record is damaged. Re-render (--overwrite).")
    out = []
    for entry in entries:
        fields = [entry.get(key) if isinstance(entry, dict) else None
                  for key in ("file", "num_records", "bytes", "sha256")]
        name, records, size, digest = fields
        if (not isinstance(name, str) or "/" in name or "\\" in name or name.startswith(".")
                or any(not is_int(v) or v < 0 for v in (records, size))
                or not isinstance(digest, str) or len(digest) != 64
                or any(c not in "0123456789abcdef" for c in digest)):
            raise ValueError(f"{where}: shard entry {entry!r} is not {{'file', 'num_records', 'bytes', 'sha256'}} "
                             "with a plain file name; the record is damaged. Re-render (--overwrite).")
        out.append((name, records, size, digest))
    if sum(records for _, records, _, _ in out) != count:
        raise ValueError(f"{where}: its shards hold {sum(r for _, r, _, _ in out)} records, but the part counts "
                         f"{count}; the record is damaged. Re-render (--overwrite).")
    return out
