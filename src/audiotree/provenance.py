"""Provenance strings as fixed-width integer rows.

File paths and group names travel with every item. Storing them as int32
code-point rows of a fixed width keeps them ordinary array leaves: they batch by
concatenation, cross process boundaries through shared memory, and survive
``jax.jit``/``jax.vmap`` like any other leaf. Decoding drops the zero padding.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

#: Maximum characters in one provenance string. Longer strings raise instead of
#: being truncated, because a truncated path silently points at another file.
STR_MAX_LENGTH = 1024


def encode_strings(values: Sequence[str]) -> np.ndarray:
    """Encodes ``B`` strings as an int32 array ``(B, STR_MAX_LENGTH)``."""
    out = np.zeros((len(values), STR_MAX_LENGTH), dtype=np.int32)
    for row, value in enumerate(values):
        text = str(value)
        if len(text) > STR_MAX_LENGTH:
            raise ValueError(
                f"String of {len(text)} characters exceeds the provenance encoding limit of "
                f"{STR_MAX_LENGTH}: {text[:80]!r}..."
            )
        if text:
            # ord(), not an encoder: file names that are not valid UTF-8 reach us
            # from os.fsdecode with surrogate escapes, which no codec accepts.
            out[row, : len(text)] = np.fromiter(map(ord, text), dtype=np.int32, count=len(text))
    return out


def decode_strings(rows: Any) -> list:
    """Decodes code-point rows back to strings.

    ``(B, L)`` gives a list of ``B`` strings; higher ranks give nested lists, one
    level per leading axis. A 1-D row has no batch axis and is refused.
    """
    array = np.asarray(rows)
    if array.ndim < 2:
        raise ValueError(
            f"A provenance string array must have a leading batch axis; got shape {array.shape}."
        )
    if array.ndim > 2:
        return [decode_strings(sub) for sub in array]
    result = []
    for row in array:
        # Rows are zero-padded at the end only, so the first zero ends the text.
        nz = np.flatnonzero(row == 0)
        end = int(nz[0]) if nz.size else row.shape[0]
        result.append("".join(map(chr, row[:end].tolist())))
    return result


def encode_provenance(batch: int | None, *, filepath: Any = None, source: Any = None, offset: Any = None) -> dict:
    """The provenance dict of a batch of ``batch`` items (``None``: no batch axis yet).

    ``filepath``/``source`` take one string or path (repeated for every item) or
    a list of exactly ``batch``; ``offset`` (seconds) a scalar or a ``(batch,)``
    array. Absent arguments leave their key out.

    >>> sorted(encode_provenance(2, filepath="a.wav", offset=0.5))
    ['filepath', 'offset']
    """
    metadata: dict = {}
    for name, value in (("filepath", filepath), ("source", source)):
        if value is None:
            continue
        if isinstance(value, (str, os.PathLike)):
            values = [os.fspath(value)] * (batch or 1)
        else:
            values = [os.fspath(v) for v in value]
            if batch is not None and len(values) != batch:
                raise ValueError(f"{len(values)} {name} for a batch of {batch}.")
        metadata[name] = encode_strings(values)
    if offset is not None:
        off = np.asarray(offset, dtype=np.float64)
        if off.ndim == 0:
            off = np.full((batch or 1,), float(off))
        elif off.ndim != 1 or (batch is not None and off.shape[0] != batch):
            raise ValueError(f"offset must be a scalar or shaped ({batch},), got {off.shape}.")
        metadata["offset"] = off
    return metadata


#: The ``extras`` entry of item keys (see :mod:`audiotree.sources.item_labels`): code-point rows like
#: ``filepath``, so batches stay array pytrees; writers store them as text and readers restore the rows.
KEY_EXTRA = "key"


def _is_key_rows(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.ndim == 2 and value.dtype == np.int32 and value.shape[1] == STR_MAX_LENGTH


def stored_extras(extras: Any) -> dict:
    """``extras`` as writers store them: the item key's code-point rows as a list of strings.

    >>> stored_extras({"key": encode_strings(["u1"]), "n": 1})
    {'key': ['u1'], 'n': 1}
    """
    out = dict(extras or {})
    value = out.get(KEY_EXTRA)
    if value is not None and _is_key_rows(np.asarray(value)):
        out[KEY_EXTRA] = decode_strings(np.asarray(value))
    return out


def restored_key(value: Any) -> Any:
    """A stored item key (one string per item, or a list of them) as code-point rows again."""
    if isinstance(value, str):
        return encode_strings([value])
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return encode_strings(list(value))
    return value
