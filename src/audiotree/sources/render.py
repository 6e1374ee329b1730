"""Reading what ``audiotree render`` wrote: one Grain dataset over the finished parts.

The on-disk layout is :mod:`audiotree.formats.render`.
"""

from __future__ import annotations

import os
from pathlib import Path

import grain

from audiotree.formats.render import RECORD, read_record
from audiotree.io import storage
from audiotree.sources.arrayrecord import open_arrayrecord
from audiotree.sources.audio import AudioDataSource
from audiotree.sources.memory import wrap_stored
from audiotree.sources.tree import TreeDataSource
from audiotree.writers.remote import fetch_folder

__all__ = ["open_render"]


def open_render(out: str | os.PathLike):
    """The finished parts of a render in ``out`` as one dataset, in item order.

    Returns an :class:`~audiotree.sources.memory.AudioMapDataset` (a
    ``grain.MapDataset``) over the parts; ArrayRecord renders are read with
    :func:`~audiotree.sources.open_arrayrecord`. A URL ``out`` (``s3://...``)
    is read through a local copy in ``$AUDIOTREE_CACHE`` (default
    ``~/.cache/audiotree``): the readers memory-map, so the render is
    downloaded once and refreshed only where an object changed.

    Raises ``FileNotFoundError`` when ``out`` holds no render record,
    ``ValueError`` when the record is unreadable, and ``RuntimeError`` when no
    part has finished yet.
    """
    if storage.is_url(os.fspath(out)):  # the readers memory-map: read a local copy (refreshed when changed)
        out = fetch_folder(os.fspath(out))
    out = Path(out)
    record = read_record(out)
    if record is None:
        raise FileNotFoundError(f"{out} holds no {RECORD}; it is not an audiotree render.")
    if not any(part["count"] for part in record["parts"]):
        raise RuntimeError(f"The render in {out} has no finished part yet.")
    if record["config"]["format"] == "arrayrecord":
        return open_arrayrecord(out)
    source = AudioDataSource if record["config"]["format"] == "audio" else TreeDataSource
    parts = [grain.MapDataset.source(source(out / part["dir"])) for part in record["parts"] if part["count"]]
    return wrap_stored(parts[0] if len(parts) == 1 else grain.MapDataset.concatenate(parts))
