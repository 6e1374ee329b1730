"""The index's quality columns: measured in the build's decode pass, read as numbers per row.

The measures and their exact definitions are in :mod:`audiotree.dsp.quality`;
this module names the columns, their Arrow types, when an index has them, and
how the column store and the datasets read them. A build with loudness
profiles (the default) measures every file's quality as it decodes it for the
profile; a header-only build (``--no-loudness``) and an unreadable row have
null quality. An index written before format 1.3 has none of the columns:
they read as null, and a feature that needs them raises :func:`require_quality`'s
error, saying how to get them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from audiotree.dsp.quality import QUALITY_COLUMNS, QualityMeter

__all__ = ["QUALITY_COLUMNS", "QUALITY_TYPES", "QUALITY_SINCE", "quality_meter", "has_quality", "require_quality",
           "is_quality", "store_key", "quality_arrays", "STORE_COLUMNS", "CLIP_BLOCKS", "encode_clip_blocks",
           "decode_clip_blocks", "require_clip_blocks"]

#: The per-block clipping column: each 100 ms profile block's clipped-sample share, uint8 in 1/255 steps rounded up.
CLIP_BLOCKS = "clip_blocks"

#: Arrow type of each quality column (all nullable).
QUALITY_TYPES: dict[str, str] = {name: ("int64" if name == "clip_longest" else "float64") for name in QUALITY_COLUMNS}
#: The index format that added the quality columns.
QUALITY_SINCE = (1, 3)


def quality_meter(info: Any) -> QualityMeter:
    """A meter for a file with ``info`` (an ``AudioFile.info``: its rate and channel count)."""
    return QualityMeter(int(info.sample_rate), channels=int(info.channels))


def encode_clip_blocks(counts, step: int, channels: int) -> np.ndarray:
    """Clipped samples per block (:meth:`QualityMeter.clip_blocks`) as the index stores them: uint8 shares of the
    block's ``step * channels`` samples in 1/255 steps, rounded up (a block with any clipped sample is >= 1).

    >>> encode_clip_blocks([0, 1, 800, 1600], 800, 2).tolist()
    [0, 1, 128, 255]
    """
    share = np.asarray(counts, dtype=np.float64) / float(max(1, int(step) * int(channels)))
    return np.minimum(np.ceil(255.0 * share), 255).astype(np.uint8)


def decode_clip_blocks(values) -> np.ndarray:
    """Stored ``clip_blocks`` as float64 shares per block (at most 1/255 above the exact share).

    >>> decode_clip_blocks(np.array([0, 255], np.uint8)).tolist()
    [0.0, 1.0]
    """
    return np.asarray(values, dtype=np.float64) / 255.0


def require_clip_blocks(path: str, feature: str) -> ValueError:
    """The error for ``feature`` over an index whose profiled rows lack ``clip_blocks`` (built before it existed)."""
    return ValueError(f"{feature} needs the index's per-block clipping ({CLIP_BLOCKS}), but {path} was built before "
                      f"that column existed. Rebuild it: delete it and run `audiotree index SOURCES --out {path}` "
                      "again.")


def is_quality(name: str) -> bool:
    """True when ``name`` is a quality column.

    >>> is_quality("snr_db"), is_quality("speaker")
    (True, False)
    """
    return name in QUALITY_COLUMNS


def has_quality(meta: dict) -> bool:
    """True when an index with metadata ``meta`` measured its rows' quality (format 1.3 on, with profiles)."""
    version = tuple(meta.get("format_version") or (1, 0))
    return version >= QUALITY_SINCE and bool((meta.get("loudness") or {}).get("enabled"))


def require_quality(path: str, meta: dict, feature: str) -> None:
    """Raises ``ValueError`` naming the index and ``feature`` when the index has no quality columns."""
    if has_quality(meta):
        return
    if not (meta.get("loudness") or {}).get("enabled"):
        why = "was built without loudness profiles (--no-loudness), so it never decoded its files"
    else:
        why = "was written before the quality columns existed (index format 1.3)"
    raise ValueError(f"{feature} needs the index's quality columns ({', '.join(QUALITY_COLUMNS)}), but {path} {why}. "
                     f"Rebuild it with loudness: delete it and run `audiotree index SOURCES --out {path}` again.")


#: The index columns the column store keeps for quality selection: the quality columns and ``sample_rate``.
STORE_COLUMNS = (*QUALITY_COLUMNS, "sample_rate")


def store_key(name: str) -> str:
    """The column-store array of ``name`` (one of :data:`STORE_COLUMNS`; float64 per row, NaN for null)."""
    return f"quality-{name}"


def quality_arrays(table) -> dict[str, np.ndarray]:
    """``{store key: float64 per row}`` of the :data:`STORE_COLUMNS` of ``table`` (null as NaN)."""
    out = {}
    for name in STORE_COLUMNS:
        column = table.column(name)
        values = column.to_numpy(zero_copy_only=False) if column.null_count == 0 else \
            np.array([np.nan if v is None else v for v in column.to_pylist()], dtype=np.float64)
        out[store_key(name)] = np.asarray(values, dtype=np.float64)
    return out

