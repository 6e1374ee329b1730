"""The libsndfile decoder (WAV, FLAC, Ogg Vorbis/Opus, MP3, AIFF, ...): sample-exact seeks.

Workarounds (measured with libsndfile 1.2.2 / soundfile 0.14 / PyAV 18)
    * soundfile re-seeks to the current position after *every* read call.
      For MP3 that re-seek makes mpg123 drop its bit reservoir, so reading
      a file in several calls returns wrong audio after the first call
      (errors ~0.5 on mono low-bitrate files); for Opus it corrupts a
      following read that starts inside the final Ogg page. Each excerpt of
      a lossy file is therefore decoded by one deliberate seek plus ONE read
      call that covers pre-roll and excerpt; decoder state left behind by an
      earlier read is never decoded from (Vorbis excepted, see below).
    * MP3: an mpg123 seek is not sample-exact for the first frames after it
      (missing bit reservoir). We seek 8 MPEG frames early and discard them.
    * Ogg/Vorbis: a forward seek of less than 2 s on a handle that has
      already decoded takes libsndfile's "skip" path, which miscounts lapped
      block sizes and returns shifted or garbled audio (libsndfile #885), so
      such hops decode through from the current position instead (for
      Vorbis soundfile's re-seek to the current position is a no-op).
    * Ogg/Vorbis and Ogg/Opus: a seek whose target lies in the final Ogg page
      is shifted by the end-trim amount (the page's granule position is used
      as if it were untrimmed). We never seek into the final page: we seek
      just before it (found by parsing the file's last pages) and decode
      forward.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import soundfile

from audiotree.io import mpeg_frames, ogg_pages
from audiotree.io.byte_reads import read_span
from audiotree.io.read_errors import bad_file
from audiotree.io.info import AudioInfo
from audiotree.io.quiet import quiet_c_stderr

__all__ = ["SoundfileReader", "MPEG_PREROLL_FRAMES"]

# ---------------------------------------------------------------------------
# libsndfile backend
# ---------------------------------------------------------------------------

# How libsndfile positions are reached for each codec family (_SHORTS: _EXACT, read as 16-bit integers).
_EXACT, _VORBIS, _OPUS, _MPEG, _SHORTS = range(5)

# 16-bit PCM in an uncompressed container is read as int16 and scaled here: libsndfile then hands over the
# excerpt's bytes in one read (a float read converts through an 8 KiB buffer: one read, and for a remote file
# one Python callback, per 8 KiB), and its own float conversion is this same exact product (x * 2**-15).
_SHORT_SCALE = np.float32(1.0 / 32768.0)
_UNCOMPRESSED = ("WAV", "WAVEX", "AIFF", "AIFC", "W64", "RF64", "CAF", "AU", "RAW")

# libsndfile's Vorbis decoder bisects only for seeks >= 2 s ahead (or any seek
# backwards); shorter forward seeks take the buggy skip path. Decoding
# through instead is correct and costs at most 2 s of extra decoding.
_VORBIS_SKIP_SECONDS = 2

# MP3 pre-roll in MPEG frames: the bit reservoir may reference up to 511 bytes
# of earlier frames (several frames at low bitrates) plus one granule of
# filterbank overlap. 6 frames was the smallest value with no mismatches
# over 30 files x 150 random seeks (8-48 kHz, mono/stereo, all compression
# levels); 8 leaves a margin.
MPEG_PREROLL_FRAMES = 8

_OGG_MAX_PAGE = ogg_pages.OGG_MAX_PAGE

# Granules before an excerpt's first decoded frame whose pages are checked as
# well: libsndfile's seek lands on the page before its target and decodes
# forward (Vorbis blocks overlap by up to 4096 samples; Opus pre-rolls 80 ms).
_OGG_CHECK_MARGIN = 16384


def _ogg_final_page_span(path: Any) -> int | None:
    """Granule span of the last Ogg page of ``path``, or None if unparsable.

    The span is in the codec's granule units (samples for Vorbis, 48 kHz
    samples for Opus). Only the tail of the file is read (at most two maximal
    pages); candidate pages are found by their capture pattern and accepted
    only if they chain back-to-back from the end of the file, which rejects
    "OggS" byte sequences that happen to occur inside packet data.
    """
    buf = read_span(path, -2 * _OGG_MAX_PAGE, 2 * _OGG_MAX_PAGE)
    pages: dict[int, tuple[int, int, int]] = {}  # end offset -> (start, granule, serial)
    i = buf.find(b"OggS")
    while i >= 0:
        if i + 27 <= len(buf) and buf[i + 4] == 0:
            nseg = buf[i + 26]
            body_start = i + 27 + nseg
            if body_start <= len(buf):
                end = body_start + sum(buf[i + 27 : body_start])
                if end <= len(buf):
                    granule, serial = struct.unpack_from("<qI", buf, i + 6)
                    pages.setdefault(end, (i, granule, serial))
        i = buf.find(b"OggS", i + 1)
    # The last page is the one ending at the end of the file (or, if junk
    # follows it, the one ending furthest into the tail). It must carry the
    # end-of-stream flag; otherwise the tail is not what we think it is.
    if not pages:
        return None
    last_end = len(buf) if len(buf) in pages else max(pages)
    last_start, last_granule, serial = pages[last_end]
    if last_granule < 0 or not buf[last_start + 5] & 0x04:
        return None
    # Walk back through the chain of pages to the previous page of the same
    # logical stream that has a granule position (-1 means "no packet ends on
    # this page").
    cursor = last_start
    while cursor in pages:
        start, granule, page_serial = pages[cursor]
        if page_serial == serial and granule >= 0:
            return max(0, last_granule - granule)
        cursor = start
    # The previous page is not in the tail: the last page starts the stream
    # (tiny file) or the chain is broken; let the caller be conservative.
    return None


class SoundfileReader:
    """A libsndfile handle plus the position bookkeeping the workarounds need."""

    backend = "soundfile"

    __slots__ = ("_file", "source", "info", "_mode", "_pos", "preroll", "_tail", "length_slack", "_stream", "_checked")

    def __init__(self, path: str, source: Any = None) -> None:
        # ``source``: the local path, or an open remote file object (closed by close()).
        self.source = path if source is None else source
        f = soundfile.SoundFile(self.source)
        self._file = f
        self.info = AudioInfo(path, int(f.frames), int(f.samplerate), int(f.channels), f.format, f.subtype)
        subtype = f.subtype
        self.preroll = 0
        if subtype == "VORBIS":
            self._mode = _VORBIS
        elif subtype == "OPUS":
            self._mode = _OPUS
        elif subtype in ("MPEG_LAYER_I", "MPEG_LAYER_II", "MPEG_LAYER_III") or f.format == "MP3":
            self._mode = _MPEG
            if subtype == "MPEG_LAYER_I":
                per_frame = 384
            elif subtype == "MPEG_LAYER_III" and f.samplerate < 32000:
                per_frame = 576  # MPEG-2/2.5 layer III frames are half length
            else:
                per_frame = 1152
            self.preroll = MPEG_PREROLL_FRAMES * per_frame
        elif subtype == "PCM_16" and f.format in _UNCOMPRESSED:
            self._mode = _SHORTS
        else:
            self._mode = _EXACT
        self._pos: int | None = 0  # libsndfile's read position, None if unknown
        self._tail: int | None = None  # first frame of the final Ogg page (lazy)
        # Frames by which decoding may fall short of an estimated length
        # (set by _check_length_claim for MP3 without a length header).
        self.length_slack = 0
        self._stream: tuple[int, int, int] | None = None  # Ogg (serial, granules per frame, pre-skip), lazy
        self._checked = (0, -1)  # the granule span whose Ogg pages passed their checks

    def close(self) -> None:
        self._file.close()
        if not isinstance(self.source, str):
            self.source.close()

    def detach(self) -> Any:
        """Closes the decoder but not its source, and returns the source (now the caller's to close)."""
        self._file.close()
        return self.source

    def _position(self) -> int:
        if self._pos is None:
            self._pos = int(self._file.tell())
        return self._pos

    def _final_page_start(self) -> int:
        """First frame of the final Ogg page; seeks must not target beyond it."""
        if self._tail is None:
            info = self.info
            try:
                span = _ogg_final_page_span(self.source)
            except OSError:
                span = None
            if span is None:
                # Unparsable tail: assume a generous page length. Correctness
                # is kept (we decode through), only near-end reads get slower.
                frames_in_page = 10 * info.sample_rate
            elif self._mode == _OPUS:
                # Opus granules count 48 kHz samples whatever the output rate.
                frames_in_page = -(-span * info.sample_rate // 48000)
            else:
                frames_in_page = span
            self._tail = max(0, info.frames - frames_in_page)
        return self._tail

    def _ogg_stream(self) -> tuple[int, int, int]:
        """(serial, granules per frame, pre-skip) of the Ogg audio stream, from its first page."""
        if self._stream is None:
            found = ogg_pages.first_page_info(read_span(self.source, 0, ogg_pages.OGG_MAX_PAGE))
            serial, packet = found if found is not None else (0, b"")
            scale, preskip = 1, 0
            if self._mode == _OPUS:  # Opus granules count 48 kHz samples, from before the pre-skip
                scale = max(1, 48000 // max(1, self.info.sample_rate))
                preskip = struct.unpack_from("<H", packet, 10)[0] if packet[:8] == b"OpusHead" else 0
            self._stream = (serial, scale, preskip)
        return self._stream

    def _check_pages(self, begin: int, end: int) -> None:
        """Raises AudioReadError if an Ogg page that decoding frames ``begin`` to ``end`` reads is damaged.

        libogg drops a page whose CRC fails and the decoder joins the audio
        around the hole (see :mod:`audiotree.io.ogg_pages`). Reads the span's
        pages and a few search probes; spans already checked are not re-read.
        """
        serial, scale, preskip = self._ogg_stream()
        first = max(0, begin * scale + preskip - _OGG_CHECK_MARGIN)
        last = None if end >= self.info.frames else end * scale + preskip
        done_first, done_last = self._checked
        if done_first <= first and (done_last is None or (last is not None and last <= done_last)):
            return
        total = self.info.frames * scale + preskip
        problem = ogg_pages.span_problem(self.source, serial, first, last, total)
        if problem:
            raise bad_file(self.info.path, problem)
        self._checked = (first, last)

    def _plan(self, start: int) -> int:
        """Frame at which decoding must start so that ``start`` comes out exact.

        Returns the current position when the excerpt should be reached by
        decoding through instead of seeking (Vorbis short forward hops).
        """
        mode = self._mode
        if mode == _MPEG:
            return max(0, start - self.preroll)
        target = start
        tail = self._final_page_start()
        if target > tail:
            target = max(0, tail - 1)
        if mode == _VORBIS:
            pos = self._position()
            if pos <= target < pos + _VORBIS_SKIP_SECONDS * self.info.sample_rate:
                return pos
        return target

    def read(self, start: int, count: int) -> np.ndarray:
        f = self._file
        try:
            if self._mode in (_EXACT, _SHORTS):
                if start != self._pos:
                    f.seek(start)
                if self._mode == _SHORTS:
                    x = f.read(count, dtype="int16", always_2d=True).astype(np.float32)
                    x *= _SHORT_SCALE
                else:
                    x = f.read(count, dtype="float32", always_2d=True)
                self._pos = start + len(x)
                return x
            # Lossy codecs: one deliberate seek, then ONE read call covering
            # pre-roll + excerpt. A single call matters: soundfile re-seeks
            # to the current position after every read, and for MP3 (mpg123)
            # that drops the bit reservoir, while for Opus it corrupts a
            # following read that starts inside the final page. State left
            # behind by an earlier read is therefore never decoded from,
            # except for Vorbis where that re-seek is a no-op.
            begin = self._plan(start)
            if self._mode != _MPEG:
                self._check_pages(begin, start + count)
            # The MP3 pre-roll makes libmpg123 complain on the C stderr stream
            # about the frames we discard; see audiotree.io.quiet.
            with quiet_c_stderr(self._mode == _MPEG):
                if self._mode != _VORBIS or begin != self._position():
                    begin = int(f.seek(begin))
                    if begin > start:  # pragma: no cover - defensive
                        raise RuntimeError(f"decoder seek to frame {start} landed at {begin}")
                x = f.read(start - begin + count, dtype="float32", always_2d=True)
            self._pos = begin + len(x)
            if self._mode == _MPEG:
                hole = mpeg_frames.concealed_span(x)
                if hole is not None:
                    raise bad_file(self.info.path, f"frames {begin + hole[0]}-{begin + hole[1]} decode to exact silence "
                                   "right after sound: the decoder replaced damaged MPEG frames with zeros")
            skip = start - begin
            if skip:
                # Copy so the caller does not keep the pre-roll buffer alive.
                x = x[skip:].copy() if len(x) > skip else x[:0].copy()
            return x
        except BaseException:
            self._pos = None  # the decoder state is unknown; re-query before reuse
            raise
