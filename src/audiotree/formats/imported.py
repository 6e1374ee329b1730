"""What an importer of another toolkit's corpus description returns: recordings and a segment list.

>>> ImportedSegments({"r1": "/data/r1.wav"}, {"path": ["/data/r1.wav"], "start": [0.0], "end": [1.0]}, "segments", [1]).lines
[1]
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterator

__all__ = ["ImportedSegments", "json_lines"]


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


def json_lines(path: str, kind: str) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` of each non-blank line of a JSON-lines manifest (``.gz`` read through gzip).

    ``kind`` names the manifest in errors (``"NeMo"``, ``"lhotse"``): a missing
    file is a ``FileNotFoundError``; a line that is not a JSON object, or a
    file that is not (gzipped) UTF-8 text, a ``ValueError`` naming the file
    and line.
    """
    import gzip
    import json

    if not os.path.isfile(path):
        raise FileNotFoundError(f"{kind} manifest not found: {path}.")
    try:
        with (gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")) as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{kind} manifest {path} line {number}: is not JSON ({exc.msg}); the manifest "
                                     "holds one JSON object per line.") from None
                if not isinstance(record, dict):
                    raise ValueError(f"{kind} manifest {path} line {number}: is not a JSON object.")
                yield number, record
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise ValueError(f"{kind} manifest {path}: cannot be read ({exc}); is it a (gzipped) JSON-lines file of "
                         "UTF-8 text?") from None
