"""The layout ``audiotree render`` leaves on disk: a record and its parts.

Layout of a render folder ``OUT``::

    render.json        what was asked (sources, pipeline, format) and the finished parts
    part-00000/        items [0, part_size) of the dataset: a complete TreeWriter
    part-00001/        (or AudioWriter, or ArrayRecordWriter) dataset each
    ...

``render.json`` holds ``{"version": 1, "config": {...}, "parts": [{"dir",
"start", "stop", "count"}, ...], "complete": bool, "total": int | null}``; an
``arrayrecord`` part's entry also lists its shards (``"shards"``, see
:func:`audiotree.formats.arrayrecord_codec.check_render_shards`). Parts
split the dataset's items at multiples of ``part_size``; a part is listed only
after its writer closed it, and the record is replaced atomically, so a listed
part is always complete. Read a render with :func:`audiotree.sources.open_render`.

>>> import tempfile
>>> from pathlib import Path
>>> out = Path(tempfile.mkdtemp())
>>> write_record(out, new_record({"format": "tree"}))
>>> read_record(out)["parts"]
[]
"""

from __future__ import annotations

import json
from pathlib import Path

from audiotree import limits
from audiotree.fs import atomic_file

__all__ = ["RECORD", "RECORD_VERSION", "PART", "new_record", "write_record", "read_record", "parse_record", "parts_problem"]

RECORD = "render.json"
RECORD_VERSION = 1
#: Largest render record read (bytes).
MAX_RECORD_BYTES = 256 * 1024 * 1024
#: The folder name of part ``k``.
PART = "part-{:05d}"


def new_record(config: dict) -> dict:
    """An empty record for a render of ``config`` (no finished part yet)."""
    return {"version": RECORD_VERSION, "config": config, "parts": [], "complete": False, "total": None}


def write_record(out: Path, record: dict) -> None:
    """Replaces ``out/render.json`` atomically."""
    # Not write_json_atomic: the record keeps its JSON spelling (ASCII escapes,
    # and a non-finite --lufs-cutoff is written, not refused).
    with atomic_file(Path(out) / RECORD) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def read_record(out: Path) -> dict | None:
    """The record in ``out``, ``None`` if there is none; ``ValueError`` naming the file if it is not one."""
    path = Path(out) / RECORD
    if not path.exists():
        return None
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path} is not readable ({exc}); use --overwrite to start again.") from None
    return parse_record(raw, str(path))


def parse_record(raw: bytes, path: str) -> dict:
    """The record in ``raw`` (the bytes of ``path``, a file or URL); ``ValueError`` naming it if it is not one."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path} is not readable JSON ({exc}); use --overwrite to start again.") from None
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION or not isinstance(record.get("parts"), list):
        raise ValueError(f"{path} is not an audiotree render record; use --overwrite to start again.")
    problem = parts_problem(record["parts"])
    if problem:
        raise ValueError(f"{path} is damaged: {problem}; use --overwrite to start again.")
    return record


def parts_problem(parts: list) -> str | None:
    """Why the recorded parts are not what render writes (part-00000, ... covering [0, stop) in order)."""
    stop = 0
    for k, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("dir") != PART.format(k):
            return f"part {k} must be an object with dir {PART.format(k)!r}"
        for field in ("start", "stop", "count"):
            problem = limits.int_problem(f"part {k} {field}", part.get(field), 0, limits.MAX_ITEMS)
            if problem:
                return problem.rstrip(".")
        if part["start"] != stop or part["stop"] < part["start"] or part["count"] > part["stop"] - part["start"]:
            return (f"part {k} covers items [{part['start']}, {part['stop']}) with {part['count']} written, "
                    f"but it must start at {stop} and hold at most its span")
        stop = part["stop"]
    return None
