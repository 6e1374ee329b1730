"""Reading what ``audiotree render`` wrote: one Grain dataset over the finished parts.

The on-disk layout is :mod:`audiotree.formats.render`.
"""

from __future__ import annotations

import os
from pathlib import Path

import grain

from audiotree.formats.render import RECORD, read_record

__all__ = ["open_render"]


def open_render(out: str | os.PathLike) -> grain.MapDataset:
    """The finished parts of a render in ``out`` as one ``grain.MapDataset``, in item order.

    Raises ``FileNotFoundError`` when ``out`` holds no render record,
    ``ValueError`` when the record is unreadable, and ``RuntimeError`` when no
    part has finished yet.
    """
    out = Path(out)
    record = read_record(out)
    if record is None:
        raise FileNotFoundError(f"{out} holds no {RECORD}; it is not an audiotree render.")
    if record["config"]["format"] == "audio":
        from audiotree.sources.audio import AudioDataSource as Source
    else:
        from audiotree.sources.tree import TreeDataSource as Source
    parts = [grain.MapDataset.source(Source(out / part["dir"])) for part in record["parts"] if part["count"]]
    if not parts:
        raise RuntimeError(f"The render in {out} has no finished part yet.")
    return parts[0] if len(parts) == 1 else grain.MapDataset.concatenate(parts)
