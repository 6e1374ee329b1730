"""Reading an indexed FLAC, MP3 or Ogg Vorbis file by its seek points: one ranged read an excerpt.

A FLAC decoder that seeks in a remote file probes it (each probe a request).
The corpus index keeps each FLAC file's seek points (:mod:`audiotree.io.flac_seek_points`),
so a dataset reading a row of the index opens it as a :class:`FlacSeekFile`
instead: the file's header (marker and metadata blocks, the same for every
excerpt) is fetched once per process and file version and kept in a bounded
cache, and each :meth:`FlacSeekFile.read` fetches the bytes from the seek point
at or before the excerpt to the first one at or after its end (one ranged
GET, or one ``pread``) and decodes them with libsndfile, the decoder of a
local read, after a small synthesized header
(:func:`audiotree.io.flac_seek_points.substream_header`: the file's STREAMINFO
and a one-point SEEKTABLE naming the first frame read). The samples equal a
whole decode of the file (``soundfile.read``) sliced to the excerpt. Of the
header only the marker and STREAMINFO (42 bytes) are kept, not its tags or
cover art.

An MP3 is read the same way (:class:`MpegSeekFile`): its table
(:mod:`audiotree.io.mpeg_seek_points`) says where frames start, so an excerpt is
the bytes from the frame a local read starts decoding at to the frame after
its end, decoded with the same decoder (libsndfile's mpg123) to the same
samples; only the first audio frame's 4-byte header is kept per process (the
stream's rate and channels).

An Ogg Vorbis file too (:class:`VorbisSeekFile`): its table
(:mod:`audiotree.io.ogg_seek_points`) says where pages start and the first
sample each completes, so an excerpt is the pages from a long block before it
to the page that completes it, put after the file's header pages (kept per
process) and decoded in memory by the local read's decoder (libsndfile) to the
same samples.

Where it applies (:func:`uses_seek_points`): ``.flac``, ``.mp3`` and ``.ogg``
(``.oga``) URLs and members of remote tar shards, with the base install (no
PyAV). A local file or a member of a local shard is read with libsndfile as
before: its seek is a few local reads, not requests. :class:`FlacSeekFile`
reads local bytes too (the tests compare both).

How the dataset hands the table over: :class:`~audiotree.sources.indexed.IndexedLoader`
reads the row's table from the column store and calls the loader inside
:func:`seek_hint`; :func:`audiotree.io.segment.open_audio` (what every excerpt
strategy opens files with) then opens that one path as a :class:`FlacSeekFile`.

Never wrong audio: the table must start at the header's end, increase, and stay
inside the file; the bytes at the seek point read must be the frame header the
table names (sync code, CRC-8, first sample); and the decode must give exactly
the frames asked for. Anything else is an :class:`~audiotree.errors.AudioReadError`
naming the file and saying to rebuild the index (a file changed since it was
indexed is normally caught before, by the ``on_stale`` freshness check).
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
from typing import Any, Callable, Iterator

import numpy as np

from audiotree.errors import AudioReadError
from audiotree.io import ogg_seek_points, storage
from audiotree.io.byte_cache import BoundedCache
from audiotree.io.item_bytes import read_item_bytes
from audiotree.io.read_errors import SKIP_HINT, check_finite
from audiotree.io.flac_seek_points import decode_frames, header_length, stream_info, streaminfo
from audiotree.io.info import AudioInfo
from audiotree.io.integrity import flac_frame_header
from audiotree.io.members import format_name, is_member, recorded_span
from audiotree.io.mpeg_frames import concealed_span
from audiotree.io.mpeg_seek_points import MAX_DELAY, frame_format, read_excerpt

__all__ = ["FlacSeekFile", "MpegSeekFile", "VorbisSeekFile", "seek_hint", "hinted", "uses_seek_points",
           "header_cache_size", "clear_header_cache"]

#: The seek table handed to the next open of one path: ``(path, points, size, version)``.
_HINT: contextvars.ContextVar[tuple | None] = contextvars.ContextVar("audiotree_flac_seek_hint", default=None)

# Per process: the header bytes of recently read files, bounded in count and bytes (a header with cover art
# can be large).
_HEADERS = BoundedCache("flac_headers", max_entries=512, max_bytes=32 * 1024 * 1024)
_SUBTYPES = {8: "PCM_S8", 16: "PCM_16", 24: "PCM_24", 32: "PCM_32"}
_VORBIS = (".ogg", ".oga")


def uses_seek_points(path: str) -> bool:
    """Whether a read of ``path`` goes by its seek points when its index row has them.

    ``.flac``, ``.mp3`` and ``.ogg`` (``.oga``) URLs and members (with a
    recorded byte range) of remote tar shards; see the module docstring.

    >>> [uses_seek_points(p) for p in ("/data/a.flac", "s3://b/a.wav", "s3://b/a.mp3", "s3://b/a.ogg")]
    [False, False, True, True]
    """
    name = format_name(path).lower()
    if not name.endswith((".flac", ".mp3", *_VORBIS)):
        return False
    if is_member(path):
        span = recorded_span(path)
        if span is None or not storage.is_url(span[0]):
            return False
    elif not storage.is_url(path):
        return False
    return True


@contextlib.contextmanager
def seek_hint(path: str, points: np.ndarray, size: int, version: Any = None) -> Iterator[None]:
    """Within this block, :func:`hinted` opens ``path`` as a :class:`FlacSeekFile` over ``points``.

    ``size`` is the file's (or member's) byte count and ``version`` anything
    that tells its versions apart (the index row's modification time): both
    key the header cache.
    """
    token = _HINT.set((path, points, int(size), version))
    try:
        yield
    finally:
        _HINT.reset(token)


def hinted(path: str) -> "FlacSeekFile | MpegSeekFile | VorbisSeekFile | None":
    """A :class:`FlacSeekFile` (an :class:`MpegSeekFile` for ``.mp3``, a :class:`VorbisSeekFile` for ``.ogg``) of
    ``path`` when :func:`seek_hint` names it, else ``None``."""
    hint = _HINT.get()
    if hint is None or hint[0] != path:
        return None
    name = format_name(path).lower()
    kind = MpegSeekFile if name.endswith(".mp3") else VorbisSeekFile if name.endswith(_VORBIS) else FlacSeekFile
    return kind(path, hint[1], size=hint[2], version=hint[3])


def header_cache_size() -> int:
    """How many file headers this process keeps."""
    return len(_HEADERS)


def clear_header_cache() -> None:
    """Forgets every kept header (the next excerpt of each file fetches its header again)."""
    _HEADERS.clear()


def _mismatch(path: str, what: str) -> AudioReadError:
    name = storage.redact(path)
    return AudioReadError(
        f"Failed to read audio file '{name}': {what}, so the file does not match the seek table its corpus index "
        "row holds (was it changed or replaced since it was indexed, or the index edited?). Rebuild the index "
        "(`audiotree index ...` over the same sources), or use on_read_error=\"skip\".", name)


def _byte_reader(path: str) -> Callable[[int, int], bytes]:
    """``read(lo, hi)``: bytes ``[lo, hi)`` of the file or member ``path`` (one ranged GET, or one ``pread``)."""
    span = recorded_span(path) if is_member(path) else None
    limit = None if span is None else span[2]

    def checked(lo: int, hi: int) -> bytes:
        if limit is not None and hi > limit:
            raise _mismatch(path, f"its seek table reaches byte {hi} of a {limit}-byte member")
        try:
            data = read_item_bytes(path, lo, hi)
        except AudioReadError:
            raise
        except OSError as exc:
            raise AudioReadError(f"Failed to read audio file '{path}': {exc}. Check the path (was it moved or "
                                 f"deleted?), {SKIP_HINT}.", path) from exc
        if len(data) != hi - lo:
            raise _mismatch(path, f"it ends before byte {hi} ({lo + len(data)})")
        return data

    return checked


class _SeekFile:
    """What the seek files share: ``info``, ``read`` (checked arguments, clamped at the end) and closing.

    A subclass sets ``path``, ``info`` and ``_points`` and decodes frames
    ``[start, end)`` (``start < end <= info.frames``) in ``_excerpt``.
    """

    path: str
    info: AudioInfo
    closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, points={len(self._points)})"

    def close(self) -> None:
        self.closed = True

    def read(self, start_frame: int, num_frames: int | None = None) -> np.ndarray:
        """Frames ``[start_frame, start_frame + num_frames)`` (clamped at the end) as float32 ``(frames, channels)``."""
        if self.closed:
            raise ValueError(f"I/O operation on closed {type(self).__name__} ({self.path!r}).")
        start = operator.index(start_frame)
        if start < 0:
            raise ValueError(f"start_frame must be >= 0, got {start}.")
        if num_frames is not None and operator.index(num_frames) < 0:
            raise ValueError(f"num_frames must be >= 0 or None, got {num_frames}.")
        frames = self.info.frames
        end = frames if num_frames is None else min(frames, start + operator.index(num_frames))
        if start >= end:
            return np.empty((0, self.info.channels), dtype=np.float32)
        return self._excerpt(start, end)

    def _excerpt(self, start: int, end: int) -> np.ndarray:
        raise NotImplementedError

    def _decoded(self, decode: Callable[[], np.ndarray], start: int, end: int, parts: str) -> np.ndarray:
        """``decode()``, the samples of frames ``[start, end)`` decoded from the file's ``parts`` (its frames, its
        pages) by libsndfile, checked for their shape; a fault is an error naming the file."""
        try:
            x = decode()
        except ValueError as exc:
            raise _mismatch(self.path, str(exc)) from None
        except AudioReadError:
            raise
        except Exception as exc:  # libsndfile's errors: the bytes are not the parts the table names
            raise _mismatch(self.path, f"its {parts} from frame {start} do not decode ({exc})") from None
        if x.shape != (end - start, self.info.channels):
            raise _mismatch(self.path, f"its {parts} decode to {x.shape[0]} frames of {x.shape[1]} channel(s) from "
                                       f"frame {start}, not {end - start} of {self.info.channels}")
        return x

    def read_all(self) -> np.ndarray:
        return self.read(0, None)


class FlacSeekFile(_SeekFile):
    """An indexed FLAC file read by its seek points, with :class:`~audiotree.io.AudioFile`'s ``info``/``read``.

    ``points`` is the row's ``int64 (K, 2)`` table ``[first sample, byte
    offset]``; ``size`` the file's bytes. Opening fetches the header (unless
    this process has it). ``read(start, n)`` returns float32 ``(frames,
    channels)``, fewer frames only where the file ends, exactly what
    ``AudioFile.read`` returns. Not thread-safe (like ``AudioFile``).
    """

    backend = "soundfile"

    def __init__(self, path: str, points: np.ndarray, *, size: int, version: Any = None) -> None:
        self.path = path
        points = np.asarray(points, dtype=np.int64).reshape(-1, 2)
        size = int(size)
        if (len(points) == 0 or points[0, 0] != 0 or np.any(np.diff(points, axis=0) <= 0)
                or points[0, 1] < 8 or points[-1, 1] >= size):
            raise _mismatch(path, f"its seek table (K={len(points)}) does not start at sample 0, increase, and stay "
                                  f"inside its {size} bytes")
        self._points, self._size = points, size
        self._read = _byte_reader(path)
        self._head = _HEADERS.get_or_make((path, int(points[0, 1]), size, version),
                                          lambda: self._streaminfo(int(points[0, 1])))
        rate, channels, bits, total = stream_info(self._head)
        if total <= points[-1, 0] or rate <= 0:
            raise _mismatch(path, f"its STREAMINFO says {total} samples at {rate} Hz")
        self._block = int.from_bytes(self._head[8 + 2:8 + 4], "big")  # STREAMINFO max block size
        self.info = AudioInfo(path, int(total), int(rate), int(channels), "FLAC", _SUBTYPES.get(bits, f"PCM_{bits}"))

    def _streaminfo(self, first: int) -> bytes:
        """The file's marker and STREAMINFO (42 bytes, all a decode needs), from one read of its whole header (the
        range the read-ahead plans), checked to end where the table's first frame starts; tags and cover art are
        not kept."""
        header = self._read(0, first)
        try:
            info, end = streaminfo(header), header_length(header)
        except ValueError as exc:
            raise _mismatch(self.path, f"its first {len(header)} bytes are no FLAC header ({exc})") from None
        if end != first:
            raise _mismatch(self.path, f"its header ends at byte {end}, not {first}")
        return info

    def _excerpt(self, start: int, end: int) -> np.ndarray:
        points = self._points
        k = int(np.searchsorted(points[:, 0], start, side="right")) - 1
        j = int(np.searchsorted(points[:, 0], end, side="left"))
        lo, first = int(points[k, 1]), int(points[k, 0])
        hi, stop = (int(points[j, 1]), int(points[j, 0])) if j < len(points) else (self._size, self.info.frames)
        # The next frame's header comes in the same request (at most 16 bytes): both ends of the read are checked.
        tail = min(16, self._size - hi)
        body = self._read(lo, hi + tail)
        block = 0
        for pos, sample in ((0, first), (hi - lo, stop if j < len(points) else None)):
            if sample is None:
                continue
            frame = flac_frame_header(body, pos)
            if frame is None or (frame[0] if frame[2] else frame[0] * self._block) != sample:
                raise _mismatch(self.path, f"byte {lo + pos} is not the frame at sample {sample}")
            block = block or frame[1]
        frames = memoryview(body)[:hi - lo]
        x = self._decoded(lambda: decode_frames(self._head, frames, first, stop, block, start, end), start, end,
                          f"frames in bytes [{lo}, {hi})")
        check_finite(x, self.path, start)
        return x


class MpegSeekFile(_SeekFile):
    """An indexed MP3 read by its seek points, with :class:`~audiotree.io.AudioFile`'s ``info``/``read``.

    ``points`` is the row's table (:func:`audiotree.io.mpeg_seek_points.seek_points`:
    ``[first output sample, byte offset]`` of frames, the last row the
    stream's length and end); ``size`` the file's bytes. Opening fetches the
    first audio frame's header (unless this process has it). ``read(start, n)``
    returns exactly what ``AudioFile.read`` returns (the index build checked
    that before it wrote the table). Not thread-safe (like ``AudioFile``).
    """

    backend = "soundfile"

    def __init__(self, path: str, points: np.ndarray, *, size: int, version: Any = None) -> None:
        self.path = path
        points = np.asarray(points, dtype=np.int64).reshape(-1, 2)
        size = int(size)
        if (len(points) < 3 or not -MAX_DELAY <= points[0, 0] <= 0 or np.any(np.diff(points, axis=0) <= 0)
                or points[0, 1] < 0 or points[-1, 1] > size):
            raise _mismatch(path, f"its MP3 seek table (K={len(points)}) does not start at the first frame, "
                                  f"increase, and stay inside its {size} bytes")
        self._points, self._size = points, size
        self._read = _byte_reader(path)
        first = int(points[0, 1])
        head = _HEADERS.get_or_make((path, first, size, version, "mpeg"), lambda: self._read(first, first + 4))
        self._format = frame_format(head)
        if self._format is None:
            raise _mismatch(path, f"byte {first} is not the MPEG layer III frame header of its first audio frame")
        spf, rate, channels = self._format[:3]
        if np.any((points[:-1, 0] - points[0, 0]) % spf):
            raise _mismatch(path, f"its MP3 seek table's samples are not whole frames of {spf}")
        self.info = AudioInfo(path, int(points[-1, 0]), int(rate), int(channels), "MP3", "MPEG_LAYER_III")

    def _excerpt(self, start: int, end: int) -> np.ndarray:
        x = self._decoded(lambda: read_excerpt(self._points, self._format, start, end, self._read), start, end,
                          "MPEG frames")
        hole = concealed_span(x)
        if hole is not None:
            raise _mismatch(self.path, f"samples {start + hole[0]}-{start + hole[1]} decode to exact silence right "
                                       "after sound (the decoder replaced damaged MPEG frames with zeros)")
        check_finite(x, self.path, start)
        return np.ascontiguousarray(x)


class VorbisSeekFile(_SeekFile):
    """An indexed Ogg Vorbis file read by its seek points, with :class:`~audiotree.io.AudioFile`'s ``info``/``read``.

    ``points`` is the row's table (:func:`audiotree.io.ogg_seek_points.seek_points`:
    ``[first sample a page completes, its byte offset]``, the last row the
    final granule position and the file's end); ``size`` the file's bytes.
    Opening fetches the header pages (unless this process has them).
    ``read(start, n)`` returns exactly what ``AudioFile.read`` returns (the
    index build checked that before it kept the table). Not thread-safe
    (like ``AudioFile``).
    """

    backend = "soundfile"

    def __init__(self, path: str, points: np.ndarray, *, size: int, version: Any = None) -> None:
        self.path = path
        points = np.asarray(points, dtype=np.int64).reshape(-1, 2)
        size = int(size)
        if (len(points) < 2 or np.any(np.diff(points[:, 1]) <= 0) or np.any(np.diff(points[:, 0]) < 0)
                or points[0, 0] < 0 or points[0, 1] < 28 or points[-1, 1] != size):
            raise _mismatch(path, f"its Ogg seek table (K={len(points)}) does not increase from the first audio page "
                                  f"to the end of its {size} bytes")
        self._points = points
        self._read = _byte_reader(path)
        first = int(points[0, 1])
        self._header = _HEADERS.get_or_make((path, first, size, version, "vorbis"), lambda: self._read(0, first))
        try:  # (parsed once per process and file version, as its bytes are fetched once)
            head = _HEADERS.get_or_make((path, first, size, version, "vorbis-parsed"),
                                        lambda: ogg_seek_points.vorbis_header(self._header))
        except ValueError as exc:
            raise _mismatch(path, f"its first {first} bytes are not Ogg Vorbis header pages ({exc})") from None
        if head.length != first:
            raise _mismatch(path, f"its Vorbis header pages end at byte {head.length}, not {first}")
        self._head = head
        frames = int(points[-1, 0] - points[0, 0])
        self.info = AudioInfo(path, frames, int(head.rate), int(head.channels), "OGG", "VORBIS")
        self.closed = False

    def _excerpt(self, start: int, end: int) -> np.ndarray:
        pages = ogg_seek_points.read_excerpt
        x = self._decoded(lambda: pages(self._points, self._header, start, end, self._read, self._head), start, end,
                          "Ogg pages")
        check_finite(x, self.path, start)
        return np.ascontiguousarray(x)
