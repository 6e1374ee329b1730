"""Provenance strings as fixed-width integer rows.

File paths and group names travel with every item. Storing them as int32
code-point rows of a fixed width keeps them ordinary array leaves: they batch by
concatenation, cross process boundaries through shared memory, and survive
``jax.jit``/``jax.vmap`` like any other leaf. Decoding drops the zero padding.
"""

from __future__ import annotations

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
