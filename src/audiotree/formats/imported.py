"""What an importer of another toolkit's corpus description returns: recordings and a segment list.

>>> ImportedSegments({"r1": "/data/r1.wav"}, {"path": ["/data/r1.wav"], "start": [0.0], "end": [1.0]}, "segments", [1]).lines
[1]
"""

from __future__ import annotations

import dataclasses

__all__ = ["ImportedSegments"]


@dataclasses.dataclass(frozen=True)
class ImportedSegments:
    """A parsed corpus description (a Kaldi data directory, lhotse manifests).

    Attributes:
      recordings: ``{recording id: absolute path}``, in the order listed.
      columns: the segment list, ``{column: values}``: ``path``, ``start``,
        ``end`` (``None``: to the end of the file), ``id``, ``recording`` and the
        label columns (see :mod:`audiotree.index.segments`).
      where: the file the segments came from, for messages.
      lines: the line of each segment in ``where``.
      text_columns: the label columns that are free text (``None``: the
        segment list's default, ``text`` when present).
    """

    recordings: dict
    columns: dict
    where: str
    lines: list
    text_columns: tuple | None = None
