"""Small leaves carried inside a closed tree manifest: the ``inline`` field of ``audiotree-tree`` 1.1.

Why: a dataset on object storage is read by ranged requests, one per object.
Without this, the first item of a remote part cost a request for the
manifest, one for its waveform row, and one for every small leaf file
(string offsets and text, per-item scalars such as ``metadata.offset``). A
closed writer therefore copies those small files into its manifest, so a
remote reader has them with the manifest's one request.

``inline`` maps a leaf file name to its whole content, base64 (RFC 4648, with
padding). It is written only with ``complete: true`` (the files are then
exactly their content), for array leaves of at most :data:`SMALL_ROW` bytes a
row and for string leaves (offsets and text together), in the manifest's leaf
order, while the total stays within :data:`INLINE_LIMIT` bytes; larger leaves
stay files only. The files are still written: local readers memory-map them
and ignore ``inline``. A 1.0 reader ignores the field too (a newer minor only
adds fields, see :mod:`audiotree.formats.header`).

>>> import numpy as np, tempfile
>>> from pathlib import Path
>>> folder = Path(tempfile.mkdtemp())
>>> (folder / "offset.bin").write_bytes(np.arange(3, dtype="<f8").tobytes())
24
>>> inline = encode_inline([[("offset.bin", folder / "offset.bin")]])
>>> sorted(inline), len(decode_value(inline["offset.bin"], "offset.bin", "doc"))
(['offset.bin'], 24)
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any, Iterable, Sequence

__all__ = ["INLINE_KEY", "INLINE_LIMIT", "SMALL_ROW", "encode_inline", "decode_value", "inline_bytes"]

INLINE_KEY = "inline"
#: Most bytes (before base64) a manifest carries inline. The leaves it holds are
#: ones a remote reader fetches whole on first use anyway, so this bounds only
#: how large the manifest grows (base64 adds a third), not what is read.
INLINE_LIMIT = 1 << 20
#: Array leaves of at most this many bytes a row (scalars per item) are inlined.
SMALL_ROW = 256


def encode_inline(groups: Iterable[Sequence[tuple[str, Path]]], *, limit: int = INLINE_LIMIT) -> dict[str, str]:
    """``{file name: base64}`` of whole groups of files (a string leaf's two files go together), in order.

    A group that would take the total past ``limit`` bytes is skipped (and so
    stays a file only); later, smaller groups may still fit.
    """
    out: dict[str, str] = {}
    total = 0
    for group in groups:
        blobs = [(name, Path(path).read_bytes()) for name, path in group]
        size = sum(len(blob) for _, blob in blobs)
        if total + size > limit:
            continue
        total += size
        for name, blob in blobs:
            out[name] = base64.b64encode(blob).decode("ascii")
    return out


def decode_value(value: Any, name: str, where: str) -> bytes:
    """The bytes of one ``inline`` entry; ``ValueError`` naming the manifest and the file if it is not base64."""
    if not isinstance(value, str):
        raise ValueError(f"Invalid manifest {where}: inline[{name!r}] must be a base64 string, got "
                         f"{type(value).__name__}. Re-render the dataset.")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError(f"Invalid manifest {where}: inline[{name!r}] is not valid base64. Re-render the "
                         "dataset.") from None


def inline_bytes(obj: dict, sizes: dict[str, int | None], *, complete: bool, where: str) -> dict[str, bytes]:
    """The inlined files of a parsed manifest ``obj``, each checked against ``sizes`` (file name -> bytes).

    ``sizes`` names every leaf file of the manifest with its exact length when
    the manifest implies one (``None``: a string leaf's text, checked by the
    reader against its offsets). An entry for another file, an entry in a
    manifest that is not ``complete``, or one of the wrong length is a
    ``ValueError`` naming the manifest.
    """
    entries = obj.get(INLINE_KEY)
    if entries is None:
        return {}
    if not isinstance(entries, dict):
        raise ValueError(f"Invalid manifest {where}: inline must be a JSON object, got {type(entries).__name__}. "
                         "Re-render the dataset.")
    if entries and not complete:
        raise ValueError(f"Invalid manifest {where}: it inlines leaf files but is not complete; only a closed "
                         "writer inlines them. Re-render the dataset.")
    out: dict[str, bytes] = {}
    for name, value in entries.items():
        if name not in sizes:
            raise ValueError(f"Invalid manifest {where}: inline names {name!r}, which is no leaf file of the "
                             "dataset. Re-render the dataset.")
        data = decode_value(value, name, where)
        need = sizes[name]
        if need is not None and len(data) != need:
            raise ValueError(f"Invalid manifest {where}: inline[{name!r}] holds {len(data)} bytes, but the "
                             f"manifest needs exactly {need}. Re-render the dataset.")
        out[name] = data
    return out
