"""The corpus index on disk: one Apache Parquet file, one row per audio file.

Columns (Arrow types; every one is readable by pyarrow, pandas, polars, DuckDB,
Ray Data and HF datasets without audiotree installed):

=============== ================ =================================================
column          type             meaning
=============== ================ =================================================
``path``        string           the file, relative to the index's ``root`` when
                                 it has one, else absolute
``group``       string (null)    the group the file was listed under
                                 (``speech=DIR``); null for a plain pool
``size``        int64            bytes, when the row was made
``mtime_ns``    int64            modification time (ns), when the row was made
``container``   string (null)    container format (``WAV``, ``FLAC``, ``MP3``...)
``codec``       string (null)    sample encoding / codec (``PCM_16``, ``VORBIS``...)
``sample_rate`` int32 (null)     native rate, Hz
``channels``    int32 (null)     channels
``frames``      int64 (null)     length in frames (samples per channel)
``duration``    float64 (null)   ``frames / sample_rate``, seconds
``readable``    bool             the header and (with loudness) every sample decoded
``error``       string (null)    why not, naming the file
``error_kind``  string (null)    ``"transient"`` (the storage kept failing: the
                                 next build reads the file again) or
                                 ``"permanent"`` (the file is bad); null when
                                 readable
``profile_step``int32 (null)     samples per profile block, ``round(0.1 * rate)``
``profile``     list<int16>      the loudness profile (below); null without one
``seek_points`` list<int64>      a FLAC, MP3 or Ogg Vorbis file's seek table,
                                 a WAV or AIFF file's sample data (below);
                                 null for other formats and files without one
*quality*       float64 / int64  ``bandwidth_hz``, ``clip_share``, ``clip_longest``
                                 (int64), ``dc_offset``, ``channel_corr``,
                                 ``silence_share``, ``snr_db`` (below); null
                                 without a profile
``clip_blocks`` list<uint8>      per profile block, its clipped-sample share
                                 (``clip_share``'s rule) in 1/255 steps rounded
                                 up; null without a profile
*labels*        string / number  the joined label columns, under their own names
*label*``#id``  int32 (null)     a category label's ids (below)
=============== ================ =================================================

Segment indexes
---------------
An index built with segments (``audiotree index ... --segments``, or an
``audiotree import``) has one row per *segment* of a recording, and four more
columns after the base ones:

=============== ================ =================================================
``id``          string (null)    the segment's id (Kaldi utterance id, lhotse
                                 supervision id), unique in the index
``recording``   string (null)    the recording's id (Kaldi/lhotse recording id)
``start``       float64          seconds into the file where the segment starts
``end``         float64          seconds into the file where it ends (exclusive)
=============== ================ =================================================

A segment row's file columns (``path``, ``size``, ``mtime_ns``, ``container``,
``codec``, ``sample_rate``, ``channels``) describe its recording; ``frames``
and ``duration`` describe the segment: ``frames = round(end * rate) -
round(start * rate)``, ``duration = frames / rate``. Its ``profile`` is the
segment's own, on a 100 ms grid from the segment's first frame. Its labels are
the segment's.

The loudness profile
--------------------
``profile[j]`` is the K-weighted, channel-weighted mean square (BS.1770-4, the
quantity its gating blocks average) of the samples ``[j * step, (j + 1) * step)``
of the file at its native rate, ``step = round(0.1 * rate)``: the 100 ms grid on
which BS.1770's 400 ms gating blocks start. The filter runs once over the whole
file, so its state carries across blocks. A trailing partial block is dropped.
With ``mono=True`` (the default, matching the datasets' ``mono=True``) the
channels are averaged before filtering; otherwise the BS.1770 channel weights
apply (at most 5 channels; a file with more gets no profile). From the profile,
:func:`audiotree.index.window_loudness` computes the gated loudness of any
window that starts on a block boundary, as BS.1770 does.

Each block is stored as int16 centi-decibels of its mean square ``ms``:
``v = round(1000 * log10(ms))``, clamped to ``[-32767, 32767]``; ``-32768``
stands for a zero mean square (or one below -327.67 dB, far under any gate).
So ``ms = 10 ** (v / 1000)``, and ``0`` where ``v == -32768``
(:func:`audiotree.index.profile.decode_profile`). The rounding moves a block by
at most 0.005 dB, twenty times inside the profile's 0.1 LU bound against the
meter. That is 2 bytes per 100 ms (20 bytes per second of audio, 72 kB for an
hour) before Parquet's dictionary encoding (ids of at most 16 bits: the
dictionary never outgrows int16's 65,536 values) and compression, which bring
it to 1.5 to 1.8 bytes per block on speech and music. Indexes of format 1.0 store
``list<float32>`` mean squares instead; they are read as before (and an
update rewrites them as int16).

FLAC seek points
----------------
``seek_points`` holds ``K`` pairs flattened, ``[s0, b0, s1, b1, ...]``: the
first sample and the byte offset (from the file's start; a tar member's from
the member's start) of frames about one second apart, ``s0 = 0`` and ``b0`` the
end of the header (:func:`audiotree.io.flac_seek_points.seek_points`). A dataset
reading a remote FLAC file or a member of a remote shard then fetches the header
once per worker and each excerpt with one ranged read
(:mod:`audiotree.io.flac_indexed`). A build with loudness reads every byte of
the file anyway, so it scans the frame headers (for a remote file the object
comes in one request, and the profile is decoded from those bytes). A headers-only
build (``--no-loudness``) reads no audio: it stores the points of the file's
SEEKTABLE block when the encoder wrote one (the ``flac`` tool does, every 10 s
by default; libsndfile does not), from one ranged read of the header's first
64 KiB, and scans nothing. A segment index stores none yet. Rows of an index
written before 1.2 have none; an update reuses them as they are (delete the
index to rebuild it with the tables).

MP3 seek points
---------------
An MP3's ``seek_points`` (same column, same pairs) are ``[first output sample,
byte offset]`` of layer III frames about half a second apart
(:func:`audiotree.io.mpeg_seek_points.seek_points`): ``s0`` is minus the
samples the decoder drops at the start (encoder delay plus mpg123's 529;
measured, not read from the tag), ``b0`` the first audio frame; the last pair
is the file's length in samples and the byte after its last frame. A dataset
reading a remote MP3 or a member of a remote shard reads each excerpt with one
ranged read (:class:`audiotree.io.flac_indexed.MpegSeekFile`), to the samples a
local read returns. Only a build with loudness writes them (it reads the whole
file anyway), and only after excerpts read by the table equal the file's own
reads (MPEG-2/2.5 too); CRC-protected MPEG-1 or damaged streams get none and
are read as before, as are MP3 rows of an index built
before these tables (null).

Ogg Vorbis seek points
----------------------
An Ogg Vorbis file's ``seek_points`` (same column, same pairs) are
``[granule, byte offset]`` of pages about half a second apart
(:func:`audiotree.io.ogg_seek_points.seek_points`): the granule is the first
sample the page completes (the previous page's granule position), ``s0`` the
stream's first sample (0 for a file encoded from its start) with ``b0`` the
first audio page (after the header pages); the last pair is the final granule
position and the file's size. A dataset reading a remote Ogg file or a member
of a remote shard reads each excerpt with one ranged read, decoded in memory by
libsndfile to the samples a local read returns
(:class:`audiotree.io.flac_indexed.VorbisSeekFile`). Only a build with loudness
writes them (it reads the whole file anyway), and only when excerpts read by the
table equal the file's own reads at its start, middle and end; chained or
multiplexed files, Opus, damaged files and streams whose granule positions
disagree with their packets (cut by copying packets) get none and are read as
before, as are Ogg rows of an index built before these tables (null).

WAV and AIFF sample data
------------------------
A WAV or AIFF file's ``seek_points`` (same column, same pairs) are two:
``[0, first sample byte, frames, end of the samples]``, from its ``data`` (or
``SSND``) chunk, kept only when those bytes are exactly ``frames`` times the
frame's size (:func:`audiotree.io.pcm_layout.data_table`). Any build writes it
(a header-only one from the file's first 64 KiB and, past them, its chunk
headers). It only places an excerpt's bytes for the read-ahead: the file is
read by libsndfile as before. Rows without it (an index built before, tar
members, Parquet cells, RF64, W64, CAF, AU, compressed subtypes) are planned
by the mean byte rate as before.

Parquet cells' formats
----------------------
A Parquet row whose audio cell is stored verbatim has its cell's byte range in
its ``path`` (``parquet://COLUMN?row_group=G&row=R&offset=O&size=N::FILE``,
:mod:`audiotree.io.members`) and, as a build now writes it, the cell's format
sniffed from its first bytes (no change to the columns):
``...&size=N&format=EXT::FILE`` with ``EXT`` one of ``flac``, ``mp3``, ``ogg``
(Vorbis), ``opus``, ``wav``, ``aiff``. A FLAC, MP3 or Ogg Vorbis cell then gets
its ``seek_points`` like a file of that name (byte offsets from the cell's
start; the row's ``size`` stays the Parquet file's, whose version decides
freshness) and a remote one is read and planned by them like a tar member's.
Rows written before (no ``format=``) read as before; an update reads their
profiled FLAC, MP3 and Ogg cells again to give them their tables (a
headers-only row keeps its form).

Quality columns
---------------
A build with loudness measures each file's (each segment's) quality in the
same decode pass as its profile (:mod:`audiotree.dsp.quality` defines each
measure; docs/index.md, "Quality", gives their measured error). The file's
Nyquist frequency, to compare ``bandwidth_hz`` with, is ``sample_rate / 2``.
A value that is not defined is null: every quality column of a row without a
profile (header-only builds, unreadable files), ``channel_corr`` of a file
that does not have exactly two channels (or has a constant one), ``snr_db``
of digital silence. The column store and the datasets read null as NaN.

File metadata
-------------
The Parquet key-value metadata holds, under the key ``audiotree``, a JSON
object: the :mod:`audiotree.formats.header` header (``format`` =
``"audiotree-index"``, ``format_version`` :data:`FORMAT_VERSION`,
``min_reader_version`` :data:`MIN_READER_VERSION`, ``producer``), then ``root`` (``null``, an absolute folder, or a folder
relative to the index file's own folder), ``sources`` (how the build was
called, for the refresh command), ``loudness`` (``{"enabled", "mono",
"block_sec"}``), and ``labels``: for each label column ``{"kind":
"numeric"}``, ``{"kind": "text"}`` (free text, read as strings), or
``{"kind": "category", "ids": "<name>#id", "size": N}``: a string column whose
values have int32 ids ``0 <= id < N`` stored in the data column ``<name>#id``
(``-1`` for none), so a large vocabulary never weighs on the footer. The
vocabulary is the data: ``vocabulary[id]`` is the string of any row with that
id. (Indexes written before ids were stored keep ``"vocabulary": [...]`` in
the metadata instead, where an id is a value's position; both are read.)
Since 1.4, ``decoders`` (``{"libsndfile": "1.2.2", "soundfile": "0.14.0"}``):
the decoder the build checked its MP3 and Ogg Vorbis seek tables with; a
reader under another one does not use those tables
(:mod:`audiotree.io.decoder_identity`).

Versions
--------
* 1.4: a Parquet cell's URL may carry its format (``&format=flac``, see
  "Parquet cells' formats"). A reader before 1.4 refuses such a URL, so an
  index holding one says ``min_reader_version`` 1.4
  (:data:`TYPED_CELLS_MIN_READER`); any other index stays readable by 1.1.
  The metadata's ``decoders`` names the decoder its MP3 and Ogg Vorbis seek
  tables were checked with (:mod:`audiotree.io.decoder_identity`).
* 1.3: the quality columns. A 1.1 reader reads the index (it never asks for
  them), so ``min_reader_version`` stays 1.1. An index of an older version
  reads them as null; an update with loudness re-reads its files to measure them.
* 1.2: the ``seek_points`` column. A 1.1 reader reads the index (it never
  asks for that column), so ``min_reader_version`` stays 1.1.
* 1.1: ``profile`` is ``list<int16>`` centi-decibels. A 1.0 reader cannot read
  it, so ``min_reader_version`` is 1.1.
* 1.0: ``profile`` is ``list<float32>`` mean squares. Still read.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from audiotree.formats import header as _format
from audiotree.index.quality import QUALITY_TYPES
from audiotree.validation import is_int

__all__ = [
    "FORMAT_VERSION",
    "MIN_READER_VERSION",
    "TYPED_CELLS_MIN_READER",
    "METADATA_KEY",
    "BASE_COLUMNS",
    "RESERVED_COLUMNS",
    "SEGMENT_COLUMNS",
    "SEGMENT_NAMES",
    "OPTIONAL_COLUMNS",
    "META_KEYS",
    "arrow_schema",
    "accepted_types",
    "encode_metadata",
    "decode_metadata",
    "ids_column",
    "require_pyarrow",
]

#: The index layout this code writes (see "Versions").
FORMAT_VERSION: tuple[int, int] = (1, 4)
#: Readers older than this cannot read what this code writes: 1.0 readers expect float32 profiles.
MIN_READER_VERSION: tuple[int, int] = (1, 1)
#: Readers older than this cannot read an index whose Parquet cell URLs name their format.
TYPED_CELLS_MIN_READER: tuple[int, int] = (1, 4)
METADATA_KEY = b"audiotree"
BLOCK_SEC = 0.1

# (name, arrow type name, nullable); the order is the file's column order.
BASE_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("path", "string", False),
    ("group", "string", True),
    ("size", "int64", False),
    ("mtime_ns", "int64", False),
    ("container", "string", True),
    ("codec", "string", True),
    ("sample_rate", "int32", True),
    ("channels", "int32", True),
    ("frames", "int64", True),
    ("duration", "float64", True),
    ("readable", "bool", False),
    ("error", "string", True),
    ("error_kind", "string", True),
    ("profile_step", "int32", True),
    ("profile", "list<int16>", True),
    ("seek_points", "list<int64>", True),
    *((name, kind, True) for name, kind in QUALITY_TYPES.items()),
    ("clip_blocks", "list<uint8>", True),
)
RESERVED_COLUMNS = frozenset(name for name, _, _ in BASE_COLUMNS)
#: The columns of a segment index (after the base columns; see "Segment indexes").
SEGMENT_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("id", "string", True),
    ("recording", "string", True),
    ("start", "float64", False),
    ("end", "float64", False),
)
SEGMENT_NAMES = tuple(name for name, _, _ in SEGMENT_COLUMNS)
#: Base columns an index written by an older minor version may lack (read as all null).
OPTIONAL_COLUMNS = frozenset({"error_kind", "seek_points", *QUALITY_TYPES, "clip_blocks"})
# Base column types an index of an older minor version holds instead (still read): 1.0's float32 profiles.
_LEGACY_TYPES = {"profile": ("list<float32>",)}
META_KEYS = (*_format.HEADER_KEYS, "root", "sources", "loudness", "labels", "decoders")


def ids_column(label: str) -> str:
    """The data column holding category label ``label``'s int32 ids."""
    return f"{label}#id"


def require_pyarrow():
    """``pyarrow`` (the Parquet engine of the index), or an ImportError saying how to get it."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401 - registers the submodule
    except ImportError as exc:  # pragma: no cover - pyarrow is a base dependency
        raise ImportError(
            "The corpus index needs pyarrow (a base dependency of audiotree); install it with "
            "`pip install pyarrow` or reinstall audiotree."
        ) from exc
    return pyarrow


def _arrow_type(name: str):
    pa = require_pyarrow()
    if name == "list<float32>":
        return pa.list_(pa.float32())
    if name == "list<int16>":
        return pa.list_(pa.int16())
    if name == "list<int64>":
        return pa.list_(pa.int64())
    if name == "list<uint8>":
        return pa.list_(pa.uint8())
    return {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(), "float64": pa.float64(),
            "bool": pa.bool_()}[name]


def arrow_schema(label_types: Mapping[str, Any] = {}, *, segments: bool = False):
    """The Arrow schema of an index (with the segment columns when ``segments``) with label columns
    ``{name: arrow type}`` appended."""
    pa = require_pyarrow()
    columns = BASE_COLUMNS + (SEGMENT_COLUMNS if segments else ())
    fields = [pa.field(name, _arrow_type(kind), nullable=nullable) for name, kind, nullable in columns]
    fields += [pa.field(name, kind, nullable=True) for name, kind in label_types.items()]
    return pa.schema(fields)


def accepted_types(name: str) -> list:
    """The Arrow types a reader accepts for base column ``name``: this version's first, then older minors'."""
    kinds = [kind for column, kind, _ in BASE_COLUMNS if column == name]
    if not kinds:
        raise KeyError(f"{name!r} is not a base column of the index.")
    return [_arrow_type(kind) for kind in (kinds[0], *_LEGACY_TYPES.get(name, ()))]


def encode_metadata(*, root: str | None, sources: Any, loudness: Mapping[str, Any],
                    labels: Mapping[str, Any], min_reader: tuple[int, int] = MIN_READER_VERSION,
                    decoders: Mapping[str, str] | None = None) -> dict[bytes, bytes]:
    """The Parquet key-value metadata of a new index (deterministic JSON); ``min_reader``: the oldest reader that
    can read its rows (see "Versions"); ``decoders``: what its lossy seek tables were checked with."""
    meta = {
        **_format.header(_format.INDEX, version=FORMAT_VERSION, min_reader=min_reader),
        "root": root,
        "sources": sources,
        "loudness": dict(loudness),
        "labels": {name: dict(spec) for name, spec in labels.items()},
        **({} if decoders is None else {"decoders": dict(decoders)}),
    }
    return {METADATA_KEY: json.dumps(meta, sort_keys=True, ensure_ascii=False).encode("utf-8")}


def decode_metadata(raw: Mapping[bytes, bytes] | None, where: str | os.PathLike) -> tuple[dict, _format.FormatInfo]:
    """Parses and validates the ``audiotree`` metadata entry; ValueError naming ``where``."""
    where = os.fspath(where)
    if not raw or METADATA_KEY not in raw:
        raise ValueError(
            f"{where}: this Parquet file has no 'audiotree' metadata, so it is not an audiotree corpus index. "
            "Build one with `audiotree index SOURCES --out " + where + "`."
        )
    try:
        meta = json.loads(raw[METADATA_KEY].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: the index metadata is not valid JSON ({exc}); rebuild the index.") from None
    except RecursionError:
        raise ValueError(f"{where}: the index metadata is JSON nested too deeply to be an audiotree index; the "
                         "file was edited or damaged. Rebuild the index.") from None
    info = _format.check(meta, _format.INDEX, where, reader_version=FORMAT_VERSION)
    _format.check_known_keys(meta, META_KEYS, info, f"Invalid corpus index {where}", "its metadata")
    root = meta.get("root")
    if root is not None and not isinstance(root, str):
        raise ValueError(f"{where}: the index metadata's root must be a string or null, got {root!r}; rebuild the index.")
    loudness = meta.get("loudness")
    if not isinstance(loudness, dict) or not isinstance(loudness.get("enabled"), bool):
        raise ValueError(f"{where}: the index metadata's 'loudness' entry is missing or malformed; rebuild the index.")
    decoders = meta.get("decoders")
    if decoders is not None and (not isinstance(decoders, dict)
                                 or not all(isinstance(v, str) for v in decoders.values())):
        raise ValueError(f"{where}: the index metadata's 'decoders' entry is malformed; rebuild the index.")
    labels = meta.get("labels")
    if not isinstance(labels, dict):
        raise ValueError(f"{where}: the index metadata's 'labels' entry is missing or malformed; rebuild the index.")
    for name, spec in labels.items():
        kind = spec.get("kind") if isinstance(spec, dict) else None
        if kind == "category" and "ids" in spec:
            size = spec.get("size")
            if spec["ids"] != ids_column(name) or not is_int(size) or size < 0:
                raise ValueError(f"{where}: label column {name!r} has a malformed category entry {spec!r}; rebuild "
                                 "the index.")
        elif kind == "category":
            vocab = spec.get("vocabulary")
            if not isinstance(vocab, list) or not all(isinstance(v, str) for v in vocab) or len(set(vocab)) != len(vocab):
                raise ValueError(
                    f"{where}: label column {name!r} has a malformed vocabulary (it must be a list of distinct "
                    "strings); rebuild the index."
                )
        elif kind not in ("numeric", "text"):
            raise ValueError(f"{where}: label column {name!r} has unknown kind {kind!r}; rebuild the index.")
    return meta, info
