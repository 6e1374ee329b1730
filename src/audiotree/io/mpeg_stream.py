"""An MP3's length from its frames when its tag cannot be trusted: the frame walk and a corrected view.

libsndfile (mpg123 inside) reports an MP3's length from the Xing/Info tag of
its first frame (minus the encoder delay and padding its LAME extension
records), or without one *estimates* it from the file size and the first
frame's bitrate; and it never decodes past what it reported. A tag is only a
hint about the audio, though: encoders disagree on its checksum, some write
none, and damage to it says nothing about the frames that follow. So:

* a tag whose LAME extension's CRC-16 holds (in LAME's or FFmpeg's convention)
  is trusted: libsndfile's length stands, and a file shorter than the stream
  bytes that tag records is refused as truncated (for a local file whose
  bytes pass only when its ID3v2 tag is counted too, by its frame count);
* anything else (no tag, no frame count, a tag without that CRC, or one that
  fails a check) is verified, or replaced, by walking the frame headers of the
  whole stream (about a microsecond per frame), once per process for a local
  file (its plan is cached per path, size, mtime and inode), at every open for
  a tar member or in-memory bytes. The length is then every audio frame the
  walk found, untrimmed (a tag we do not trust is not asked for its encoder
  delay), junk between frames is refused (frames were lost there), and when
  libsndfile would stop early, or would read an untrusted tag, the decoder
  reads a *view* of the file: the stream from its first audio frame, followed
  by zeros it never reaches, so that mpg123's estimate covers every frame;
* remote objects (URLs) are never downloaded to count frames: a tag without
  the CRC whose bytes are consistent is kept, an untrusted one is hidden from
  the decoder by the same view, and the length is mpg123's estimate, within
  :data:`ESTIMATE_TOLERANCE_FRAMES` frames of slack at its end.
* an ID3v2 tag whose size field runs past the first frames (decoders would
  skip them, the Xing tag with them) or past the file (libsndfile cannot open
  it) is not trusted either: the stream is read, through a view, from where
  its frames run on (:func:`open_behind_id3`).

Nothing here refuses a file for its tag: only for the audio it lacks.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from audiotree.errors import AudioReadError
from audiotree.io import integrity, mpeg_frames
from audiotree.io.byte_reads import read_span
from audiotree.io.read_errors import bad_file
from audiotree.io.input_file import ReadOnlyInput
from audiotree.io.soundfile_reader import MPEG_PREROLL_FRAMES, SoundfileReader
from audiotree.io.byte_cache import memoized

__all__ = ["ESTIMATE_TOLERANCE_FRAMES", "StreamView", "open_behind_id3", "read_length_tag", "settle_length"]

#: An MP3 whose length is mpg123's estimate (remote, no trusted frame count) may decode up to this many MPEG
#: frames short of it (0.2-0.3 s); that tail is returned as silence. Further short is an error.
ESTIMATE_TOLERANCE_FRAMES = 8

# Bytes read after any ID3v2 tag to find the first frames (the largest MPEG frame is 1,729 bytes).
_HEAD = 8192
# The largest MPEG audio frame: the view is padded with this many zero bytes per frame, so that mpg123's
# estimate (size over the first frame's bytes) covers every frame whatever the first frame's bitrate.
_MAX_FRAME_BYTES = 1729


class StreamView(ReadOnlyInput):
    """Bytes ``[start, end)`` of a file as a whole file, followed by zeros up to ``length`` bytes.

    ``inner`` is a local path (read with ``pread``) or an open file object
    (a remote object or member), which the view owns and closes.
    """

    __slots__ = ("inner", "start", "end", "length", "size", "_fd", "_pos", "_failure")

    def __init__(self, inner: Any, start: int, end: int, length: int) -> None:
        self._fd = os.open(inner, os.O_RDONLY) if isinstance(inner, str) else -1
        self.inner = None if isinstance(inner, str) else inner
        self.start, self.end = int(start), int(end)
        self.size = self.end - self.start  # the real bytes (what a read-ahead hint is scaled by)
        self.length = max(int(length), self.size)
        self._pos = 0
        self._failure: AudioReadError | None = None

    @property
    def failure(self) -> AudioReadError | None:
        return self._failure if self.inner is None else getattr(self.inner, "failure", None)

    @property
    def probe_tolerant(self) -> bool:
        return bool(getattr(self.inner, "probe_tolerant", False))

    def expect(self, nbytes: int) -> None:
        if self.inner is not None and hasattr(self.inner, "expect"):
            self.inner.expect(nbytes)

    def read(self, n: int = -1) -> bytes:
        if self.failure is not None:
            raise self.failure
        pos = self._pos
        n = self.length - pos if n is None or n < 0 else min(int(n), self.length - pos)
        if n <= 0:
            return b""
        real = max(0, min(n, self.size - pos))
        data = b""
        if real:
            at = self.start + pos
            if self.inner is None:
                data = os.pread(self._fd, real, at)
            else:
                self.inner.seek(at)
                data = self.inner.read(real)
            if len(data) < real:  # the file shrank since it was opened
                self._pos = pos + len(data)
                return data
        self._pos = pos + n
        return data + bytes(n - real)

    def readinto(self, buffer) -> int:
        if self.inner is not None:
            return super().readinto(buffer)
        pos = self._pos  # a local file: one pread into the decoder's buffer (its callback's hot path)
        if pos + len(buffer) <= self.size:
            got = os.preadv(self._fd, (buffer,), self.start + pos)
            self._pos = pos + got
            return got
        n = min(len(buffer), self.length - pos)
        if n <= 0:
            return 0
        real = max(0, min(n, self.size - pos))
        out = memoryview(buffer).cast("B")
        got = os.preadv(self._fd, (out[:real],), self.start + pos) if real else 0
        if got < real:
            self._pos = pos + got
            return got
        out[real:n] = bytes(n - real)
        self._pos = pos + n
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        base = 0 if whence == 0 else self._pos if whence == 1 else self.length
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    @property
    def local(self) -> bool:
        """Whether the bytes are a local file's or in memory (see :func:`settle_length`)."""
        return self.inner is None or _local_bytes(self.inner)

    @property
    def closed(self) -> bool:
        return self._fd < 0 if self.inner is None else bool(getattr(self.inner, "closed", False))

    def close(self) -> None:
        if self.inner is None:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        elif not self.inner.closed:
            self.inner.close()


def _local_bytes(source: Any) -> bool:
    """Whether reading all of ``source`` costs no request per read (a local path, member or in-memory bytes)."""
    return isinstance(source, str) or bool(getattr(source, "local", False))


def read_length_tag(path: str, size: int, source: Any) -> tuple[mpeg_frames.Tag, int, bool] | None:
    """(the tag, where the stream starts, whether the ID3v2 tag's size says so) of the MPEG file ``path``.

    None if its head cannot be read. The stream starts after the ID3v2 tag,
    or before the end that tag's size field claims when frames run on from
    there (the field is damaged; decoders would skip the first frames).
    Raises AudioReadError for a file shorter than the stream bytes its trusted
    (CRC-checked) tag records: a cut download, whatever decoder reads it.
    """
    try:
        head = read_span(source, 0, _HEAD)
        start = id3 = integrity.id3v2_size(head)
        # The first frames: in the head, or after an ID3v2 tag longer than it (a cover picture).
        frames = head[id3:] if id3 + _HEAD // 2 <= len(head) else read_span(source, id3, _HEAD)
        first = mpeg_frames.first_frame(frames)
        if id3 and 0 < first and id3 + first <= _ID3_SEARCH:  # junk where the stream should start
            region = read_span(source, 0, id3 + first + 4)
            start = mpeg_frames.chain_start(region, 10, id3 + first)
            if start < id3:
                frames = read_span(source, start, _HEAD)
            else:
                start = id3
    except OSError:  # the file vanished after opening: the first read will say so
        return None
    tag = mpeg_frames.read_tag(frames, size - start)
    if tag.trust == "crc" and tag.declared is not None and tag.declared > size:
        raise bad_file(path, f"the file is truncated: its Xing/Info header records {tag.declared} bytes of MPEG "
                       f"audio but the file has only {size} bytes")
    return tag, start, start == id3


# How far into a file a stream that an ID3v2 tag's damaged size field hides is looked for.
_ID3_SEARCH = 1 << 20


def _stream_start(head: bytes, lo: int) -> int:
    """Offset of the first run of 4 whole frames in ``head`` from ``lo`` (or of frames up to its end), else -1."""
    i = mpeg_frames.first_frame(head, lo)
    while i >= 0:
        j, run = i, 0
        while run < 4 and j + 4 <= len(head):
            found = mpeg_frames.frame_header(head[j : j + 4])
            if found is None:
                break
            j, run = j + found[0], run + 1
        if run == 4 or j + 4 > len(head):
            return i
        i = mpeg_frames.first_frame(head, i + 1)
    return -1


def open_behind_id3(path: str, size: int, source: Any) -> SoundfileReader | None:
    """A reader of an MP3 that libsndfile could not open because its ID3v2 tag's size field runs past the
    stream's start (or past the file): a :class:`StreamView` from where the frames start. None otherwise.

    ``source`` is a fresh path or handle: the reader owns it (it is closed when None is returned).
    """
    view = None
    try:
        head = read_span(source, 0, 10)
        id3 = integrity.id3v2_size(head)
        if id3:
            head = read_span(source, 0, min(size, _ID3_SEARCH))
            start = _stream_start(head, 10)
            if 0 <= start < id3:
                view = StreamView(source, start, size, size - start)
                return SoundfileReader(path, view)
    except Exception:  # noqa: BLE001 - not such a file: the caller reports libsndfile's own error
        pass
    if view is not None:
        view.close()
    elif not isinstance(source, str) and not source.closed:
        source.close()
    return None


# What to do with an opened MPEG reader: (view start or -1, view length, frames or 0, slack).
_Plan = tuple[int, int, int, int]
_KEEP: _Plan = (-1, 0, 0, 0)


def _plan(path: str, size: int, source: Any, reported: int, spf: int) -> _Plan:
    """How to read the MPEG file ``path`` whose reader reports ``reported`` frames (see the module)."""
    found = read_length_tag(path, size, source)
    if found is None:
        return _KEEP
    tag, id3, id3_right = found
    audio = id3 + tag.audio
    if not id3_right and tag.audio >= 0 and tag.trust == "crc":
        return id3, size - id3, 0, 0  # a view from where the stream starts: the decoder reads its tag there
    if tag.trust == "crc" and tag.audio >= 0 and (tag.declared or 0) > size - id3 and _local_bytes(source):
        # LAME and FFmpeg count the stream without the ID3v2 tag (the check above counts it, for other
        # encoders): the frames tell a cut file from one whose encoder counted the tag too.
        try:
            frames = _walk(source, size, audio)[0]
        except OSError:
            frames = tag.frames
        if frames < tag.frames:
            raise bad_file(path, f"the file is truncated: its Xing/Info header records {tag.frames} MPEG frames "
                           f"({tag.declared} bytes after its ID3v2 tag) but the file holds {frames} "
                           f"({size - id3} bytes)")
    if tag.trust == "crc" or tag.audio < 0:
        return _KEEP  # exact (mpg123 trims the delay and padding the tag records), or no frame in the head
    if not _local_bytes(source):
        if tag.trust == "bounds" and (tag.declared is None or tag.declared <= size):
            return _KEEP  # consistent with its bytes; counting frames would download the object
        slack = ESTIMATE_TOLERANCE_FRAMES * spf
        if audio > id3 or tag.problem is not None or not id3_right:  # hide the tag (the decoder would trust it)
            return audio, size - audio, 0, slack
        return -1, 0, 0, slack
    try:
        frames, per_frame, gap = _walk(source, size, audio)
    except OSError:
        return _KEEP
    if frames == 0:
        return _KEEP
    if gap >= 0:
        raise bad_file(path, f"bytes from {gap} on are not MPEG frames, yet frames follow them: frames of its "
                       "stream are damaged or lost (a decoder would skip them and join the audio around the hole)")
    if tag.trust == "bounds" and frames == tag.frames:
        return _KEEP  # the walk agrees with the tag: libsndfile's length is exact
    samples = frames * per_frame
    if audio > id3 or reported < samples or not id3_right:
        return audio, size - audio + frames * _MAX_FRAME_BYTES, samples, 0
    return -1, 0, samples, 0


def _walk(source: Any, size: int, start: int) -> tuple[int, int, int]:
    """:func:`mpeg_frames.count_frames` of the whole file (a path or a local file object) from ``start``."""
    if isinstance(source, str):
        with open(source, "rb") as fh:
            return mpeg_frames.count_frames(fh.read(size), start)
    return mpeg_frames.count_frames(read_span(source, 0, size), start)


@memoized("mpeg_plans", max_entries=4096)
def _file_plan(path: str, size: int, mtime_ns: int, inode: int, reported: int, spf: int) -> _Plan:
    """:func:`_plan` of a local file, once per process and version of the file (failures are not kept)."""
    return _plan(path, size, path, reported, spf)


def settle_length(path: str, size: int, reader: SoundfileReader) -> SoundfileReader:
    """The reader of the MPEG file ``path`` (``size`` bytes) once its length is settled (see the module).

    ``reader`` is the open reader. Returns it, its ``info.frames`` or
    ``length_slack`` set as the walk or the estimate requires, or a new reader
    over a :class:`StreamView` of the same source (``reader`` is then closed).
    Raises AudioReadError only for a file shorter than the stream its trusted
    tag records, or for lost frames.
    """
    source, reported = reader.source, reader.info.frames
    spf = max(1, reader.preroll // MPEG_PREROLL_FRAMES)
    if isinstance(source, str):
        try:
            st = os.stat(source)
        except OSError:
            return reader
        plan = _file_plan(source, size, st.st_mtime_ns, st.st_ino, reported, spf)
    else:
        plan = _plan(path, size, source, reported, spf)
    start, length, frames, slack = plan
    if start >= 0:
        shared = not isinstance(source, str)  # an open handle: the view takes it over (its cached bytes too)
        saved = source.tell() if shared else 0
        view = StreamView(source, start, size, length)
        try:
            fresh = SoundfileReader(path, view)
        except Exception:
            if shared:
                source.seek(saved)  # the decoder's bookkeeping stays right
            else:
                view.close()
            return reader  # libsndfile cannot open the view: keep the file as it is
        if shared:
            reader.detach()
        else:
            reader.close()
        reader = fresh
    if frames and reader.info.frames >= frames:  # (the view's padding makes mpg123's estimate cover every frame)
        reader.info = dataclasses.replace(reader.info, frames=frames)
    reader.length_slack = slack
    return reader
