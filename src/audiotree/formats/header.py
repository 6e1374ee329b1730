"""The version header shared by every on-disk artifact audiotree writes.

Every artifact (a ``TreeWriter`` dataset, an ``AudioWriter`` manifest, a
windowed-LUFS cache, a corpus index, an ArrayRecord index) carries four fields:

* ``format``: which artifact this is (:data:`TREE`, :data:`MANIFEST`,
  :data:`LUFS_WINDOWS_CACHE`, :data:`INDEX`, :data:`ARRAY_RECORD`);
* ``format_version``: ``[major, minor]`` of the layout that wrote it;
* ``min_reader_version``: ``[major, minor]``, the oldest reader that can read it;
* ``producer``: ``"audiotree <version>"``, informational only.

Compatibility rules enforced by :func:`check`:

* a different **major** version is refused (layouts are incompatible);
* a ``min_reader_version`` newer than this reader is refused;
* a newer **minor** version is accepted: minors only *add* optional fields, so
  readers ignore fields they do not know. For an artifact at this reader's
  minor version or older, an unknown field is an error (:attr:`FormatInfo.strict`),
  because nothing this version writes can contain one. A minor that changes how
  a field is stored (the index's 1.1 profiles) raises ``min_reader_version``.

A format whose layout moved on alone passes its own version to :func:`header`
and :func:`check` (the corpus index: :data:`audiotree.index.table_schema.FORMAT_VERSION`);
the others use :data:`CURRENT_VERSION`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterable, Mapping

from audiotree.validation import is_int
from audiotree.version import __version__

__all__ = [
    "TREE",
    "MANIFEST",
    "LUFS_WINDOWS_CACHE",
    "INDEX",
    "ARRAY_RECORD",
    "CURRENT_VERSION",
    "HEADER_KEYS",
    "FormatInfo",
    "header",
    "check",
    "check_known_keys",
]

TREE = "audiotree-tree"
MANIFEST = "audiotree-manifest"
LUFS_WINDOWS_CACHE = "audiotree-lufs-windows"
INDEX = "audiotree-index"
ARRAY_RECORD = "audiotree-arrayrecord"
_FORMATS = (TREE, MANIFEST, LUFS_WINDOWS_CACHE, INDEX, ARRAY_RECORD)

#: The layout version this code writes and reads.
CURRENT_VERSION: tuple[int, int] = (1, 0)
#: Readers older than this cannot read what this code writes.
MIN_READER_VERSION: tuple[int, int] = (1, 0)
HEADER_KEYS = ("format", "format_version", "min_reader_version", "producer")


@dataclasses.dataclass(frozen=True)
class FormatInfo:
    """What :func:`check` learned about an artifact's header."""

    format: str
    version: tuple[int, int]
    min_reader_version: tuple[int, int]
    producer: str | None
    #: The version of this format that this code reads and writes.
    reader_version: tuple[int, int] = CURRENT_VERSION

    @property
    def strict(self) -> bool:
        """True when unknown fields are errors (the artifact is not from a newer minor)."""
        return self.version <= self.reader_version


def _producer() -> str:
    return f"audiotree {__version__}"


def header(fmt: str, *, version: tuple[int, int] = CURRENT_VERSION,
           min_reader: tuple[int, int] = MIN_READER_VERSION) -> dict[str, Any]:
    """The header fields for a new artifact of format ``fmt`` (JSON-ready), at ``version``."""
    if fmt not in _FORMATS:
        raise ValueError(f"Unknown artifact format {fmt!r}; expected one of {_FORMATS}.")
    return {
        "format": fmt,
        "format_version": list(version),
        "min_reader_version": list(min_reader),
        "producer": _producer(),
    }


def _version_pair(value: Any, key: str, where: str) -> tuple[int, int]:
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or any(not is_int(v) or v < 0 for v in value)
    ):
        raise ValueError(f"{where}: {key} must be a pair of non-negative ints [major, minor], got {value!r}.")
    return int(value[0]), int(value[1])


def check(hdr: Mapping[str, Any], fmt: str, source: str | os.PathLike, *,
          reader_version: tuple[int, int] = CURRENT_VERSION) -> FormatInfo:
    """Validates the header ``hdr`` of an artifact that should be ``fmt``.

    ``reader_version`` is the version of ``fmt`` this code reads. Raises
    ``ValueError`` prefixed with ``source`` (the artifact's path) for a
    missing header, another format, a different major version, a
    ``min_reader_version`` newer than this reader, or malformed fields.
    """
    current = tuple(reader_version)
    where = os.fspath(source)
    if not isinstance(hdr, Mapping):
        raise ValueError(f"{where}: not an audiotree {fmt} artifact (its top level is not a mapping).")
    if "format" not in hdr:
        raise ValueError(
            f"{where}: no 'format' field, so this is not an audiotree {fmt!r} artifact (or it predates "
            "versioned formats). Re-render it with this version of audiotree."
        )
    found = hdr["format"]
    if found != fmt:
        raise ValueError(f"{where}: format is {found!r}, but a {fmt!r} artifact was expected.")
    for key in ("format_version", "min_reader_version"):
        if key not in hdr:
            raise ValueError(f"{where}: the header lacks {key!r}; the artifact is damaged. Re-render it.")
    version = _version_pair(hdr["format_version"], "format_version", where)
    min_reader = _version_pair(hdr["min_reader_version"], "min_reader_version", where)
    if version[0] != current[0]:
        raise ValueError(
            f"{where}: format version {version[0]}.{version[1]} has a different major version than this "
            f"reader ({current[0]}.{current[1]}); "
            + ("upgrade audiotree to read it." if version[0] > current[0] else "re-render it with this version.")
        )
    if min_reader > current:
        raise ValueError(
            f"{where}: needs a reader of version >= {min_reader[0]}.{min_reader[1]}, but this reader is "
            f"{current[0]}.{current[1]}; upgrade audiotree to read it."
        )
    producer = hdr.get("producer")
    if producer is not None and not isinstance(producer, str):
        raise ValueError(f"{where}: producer must be a string, got {type(producer).__name__}.")
    return FormatInfo(format=fmt, version=version, min_reader_version=min_reader, producer=producer,
                      reader_version=current)


def check_known_keys(
    mapping: Mapping[str, Any], known: Iterable[str], info: FormatInfo, where: str, what: str
) -> None:
    """Refuses keys outside ``known`` unless the artifact is from a newer minor version."""
    if not info.strict:
        return
    unknown = sorted(str(k) for k in set(mapping) - set(known))
    if unknown:
        raise ValueError(
            f"{where}: unknown field(s) {unknown} in {what}. A version {info.version[0]}.{info.version[1]} "
            "artifact cannot contain them, so it was edited or damaged; re-render it."
        )
