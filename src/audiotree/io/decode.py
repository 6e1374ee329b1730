"""Decoding audio excerpts: open once, seek, decode only the requested frames.

This is the hot path of the data loader, so the common case (a WAV or FLAC
file read through libsndfile) does nothing beyond one ``seek`` and one
``read`` per excerpt plus a cheap finiteness check.

Layout and units
    Every read returns ``float32`` samples shaped ``(frames, channels)``
    (the interleaved decoder layout, C-contiguous), at the file's native
    sample rate; nothing is resampled or remixed. Positions and lengths are
    in *frames* (one sample per channel). Integer PCM is scaled to
    ``[-1, 1)`` exactly as libsndfile does (``x / 2**(bits-1)``).

Determinism
    For a given file and decoder version, ``read(start, n)`` returns the same
    samples as one sequential decode of the whole file sliced at
    ``[start:start + n]``, whatever reads came before on the same
    :class:`AudioFile`. This is exact for PCM, FLAC, Vorbis, MP3 and (PNS-free)
    AAC. Two decoders are only approximately seek-invariant: Opus (after a
    seek the decoder re-converges within libsndfile's 80 ms pre-roll; we
    measured deviations up to ~5e-3 at very low bitrates, ~1e-3 typically)
    and AAC streams using perceptual noise substitution (PNS bands come from
    a pseudo-random generator whose state depends on where decoding
    started). In both cases the *timing* is still sample-exact.

Bad data never passes as audio
    Every read either returns exactly the frames the header promised
    (``min(num_frames, info.frames - start_frame)``), finite, or raises
    :class:`~audiotree.errors.AudioReadError` naming the file and the fault.
    Opening a file checks its header's frame count against what the file's
    bytes can hold (:mod:`audiotree.io.integrity`; nothing is allocated for a
    lying header), refuses Ogg streams without their end-of-stream page and
    MP3s whose trusted Xing/Info tag records more bytes than the file has, and
    tells genuinely empty files from ones claiming 0 frames over audio data.
    An MP3's tag is only a length hint: one that fails its checks, or none,
    gives way to the count of its frames (:mod:`audiotree.io.mpeg_stream`).
    A decode that stops before the promised frames is an error, never padding.
    The one estimate is a remote MP3 without a trusted frame count: decoding
    may end up to :data:`MP3_ESTIMATE_TOLERANCE_FRAMES` MPEG frames before
    mpg123's estimated length, and that tail is returned as silence.

The decoders live in :mod:`audiotree.io.soundfile_reader` (libsndfile: WAV,
FLAC, Ogg, MP3, AIFF, ...) and :mod:`audiotree.io.pyav_reader` (FFmpeg through
PyAV: M4A/AAC, WMA, ...); their modules document the decoder workarounds. A
chained Ogg file (streams one after another) is read link by link
(:mod:`audiotree.io.ogg_chain`). This module opens files (local paths and
URLs), checks their headers, and is the public face: :class:`AudioFile`,
:func:`probe`, :func:`read_frames`.
"""

from __future__ import annotations

import io
import operator
import os
import struct
from typing import Any

import numpy as np

from audiotree.errors import AudioReadError
from audiotree.io import integrity, mpeg_stream, ogg_pages, open_checks, storage
from audiotree.io.extensions import PYAV_EXTENSIONS, normalize_extension, pyav_available
from audiotree.io.read_errors import (
    SKIP_HINT,
    bad_file,
    check_finite,
    describe,
    failure_hint,
    read_error,
)
from audiotree.io.byte_reads import file_size, read_span
from audiotree.io.pcm_layout import wav_data_chunk
from audiotree.io.item_bytes import item_size
from audiotree.io.info import AudioInfo
from audiotree.io.ogg_chain import reopen_if_chained
from audiotree.io.members import MemberInput, format_name, is_member, open_member
from audiotree.io.pyav_reader import PyAVReader
from audiotree.io.remote_file import open_input
from audiotree.io.soundfile_reader import SoundfileReader

__all__ = ["AudioInfo", "AudioFile", "probe", "read_frames"]

# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def _extension(path: str) -> str:
    ext = os.path.splitext(format_name(path))[1]  # a tar member's own name, not its shard's
    return normalize_extension(ext) if ext not in ("", ".") else ""


def _open_reader(path: str) -> SoundfileReader | PyAVReader:
    """Open ``path`` (a local path, a URL or a member URL) with the right decoder or raise AudioReadError."""
    if is_member(path):
        return _open_remote_reader(path, open_member)
    if storage.is_url(path):
        return _open_remote_reader(path)
    path = storage.local_path(path)
    try:
        size: int | None = file_size(path)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            hint = (
                "The file does not exist: check the path (was it moved or deleted after the file "
                f"list was built?), {SKIP_HINT}."
            )
        elif isinstance(exc, PermissionError):
            hint = "Check the file's permissions."
        else:
            hint = failure_hint(path, None)
        raise read_error(path, exc, hint) from exc
    return _open_decoder(path, size, lambda: path)


def _open_remote_reader(url: str, opener=open_input) -> SoundfileReader | PyAVReader:
    """Opens a URL through :mod:`audiotree.io.storage` (ranged reads, no download), or a tar
    member / Parquet cell with ``opener=open_member`` (:mod:`audiotree.io.members`)."""
    try:
        first = opener(url)
    except (ImportError, ValueError) as exc:
        raise AudioReadError(storage.redact(str(exc)), storage.redact(url)) from exc
    handles = [first]

    def reopen():
        # Each decoder attempt gets its own handle (a failed one may have
        # moved or closed it); the first is reused for the first attempt.
        if handles:
            return handles.pop()
        return opener(url)

    try:
        first.prefetch_head()  # a no-op when the opener fetched it already
        return _open_decoder(url, first.size, reopen)
    except BaseException:
        if not first.closed:
            first.close()
        raise


def _open_decoder(path: str, size: int | None, source) -> SoundfileReader | PyAVReader:
    """The decoder choice and fallbacks, for a local path or a remote file object.

    ``source()`` returns what the decoder opens (the path, or a fresh remote
    handle that the reader then owns).
    """
    ext = _extension(path)
    if ext in PYAV_EXTENSIONS:
        src = source()
        try:
            reader = PyAVReader(path, src)
        except ImportError as exc:
            _close_source(src)
            hint = (
                f"Decoding {ext} files needs the optional PyAV package: install it with "
                "`pip install av` (or `pip install audiotree[av]`), or convert the file to WAV/FLAC."
            )
            raise read_error(path, exc, hint) from exc
        except Exception as exc:
            _close_source(src)
            raise read_error(path, exc, failure_hint(path, size)) from exc
        return _checked(path, size, reader)

    src = source()
    try:
        reader = SoundfileReader(path, src)
    except Exception as exc:
        sf_exc = exc
        _close_source(src)
    else:
        reader = _settled(path, reader, size)
        if reader.info.format == "OGG":  # a chain of streams: each link checked as it opens
            chained = reopen_if_chained(path, reader, source, lambda r, n: _check_length_claim(path, n, r))
            if chained is not reader:
                return chained
        return _checked(path, size, reader)
    if not isinstance(src, str) and src.failure is not None:
        sf_exc = src.failure
    if isinstance(sf_exc, AudioReadError):  # a storage error (status named): no fallback helps
        raise sf_exc
    # An MP3 whose ID3v2 tag's size field runs past the stream's start: read the stream where it starts.
    reader = mpeg_stream.open_behind_id3(path, size, source()) if size else None
    if reader is not None:
        return _checked(path, size, _settled(path, reader, reader.source.size))
    # libsndfile could not open it. PyAV may (unusual WAV codecs, misnamed
    # files), but an empty file is hopeless, and a fallback that "succeeds"
    # with no audio is treated as a failure rather than as a valid empty file.
    hint = failure_hint(path, size)
    if size != 0 and pyav_available():
        src = source()
        try:
            reader = PyAVReader(path, src)
        except Exception as av_exc:
            _close_source(src)
            hint = f"(The PyAV fallback also failed: {describe(av_exc)}.) {hint}"
        else:
            if reader.info.frames > 0:
                return _checked(path, size, reader)
            reader.close()
    raise read_error(path, sf_exc, hint) from sf_exc


def _settled(path: str, reader: SoundfileReader, stream_size: int | None) -> SoundfileReader:
    """``reader`` (libsndfile) once an MP3's length is settled (:mod:`audiotree.io.mpeg_stream`); closed on errors."""
    try:
        _check_source(reader.source)
        if stream_size is not None and _is_mpeg(reader.info):  # its length: the tag, or the frames
            reader = mpeg_stream.settle_length(path, stream_size, reader)
            _check_source(reader.source)
    except AudioReadError:
        reader.close()
        raise
    return reader


def _is_mpeg(info: AudioInfo) -> bool:
    return info.format == "MP3" or (info.subtype or "").startswith("MPEG_LAYER")


def _checked(path: str, size: int | None, reader: SoundfileReader | PyAVReader):
    """``reader`` once its header's length claim is backed by the file, else closes it and raises."""
    def check() -> None:
        if isinstance(reader, SoundfileReader):
            _refuse_truncated_wav(path, size, reader)
        _check_length_claim(path, size, reader)

    try:
        open_checks.checked_once(path, size, reader, check)  # once per unchanged local file and process
    except BaseException:
        reader.close()
        raise
    return reader


def _check_source(source: Any) -> None:
    """Raises the storage error a remote read hit inside the decoder (see remote_file.RemoteInput)."""
    if not isinstance(source, str):
        source.check()


def _close_source(source: Any) -> None:
    if not isinstance(source, str) and not source.closed:
        source.close()



def _refuse_truncated_wav(path: str, size: int | None, reader: SoundfileReader) -> None:
    """Raises AudioReadError when a WAV file ends before its ``data`` chunk does.

    libsndfile quietly reports only the frames that are present, so a cut-off
    download would otherwise read as a shorter file and be padded with silence.
    The check reads the header bytes only. Streaming writers that leave the
    size at 0 or 0xFFFFFFFF (unknown) are accepted.
    """
    if size is None or reader.info.format not in ("WAV", "WAVEX"):
        return
    try:
        chunk = wav_data_chunk(read_span(reader.source, 0, 4096), reader.source)
    except OSError:
        return
    if chunk is None:
        return
    offset, declared = chunk
    if declared in (0, 0xFFFFFFFF) or offset + declared <= size:
        return
    raise AudioReadError(
        f"Failed to read audio file '{path}': the file is truncated: its header declares "
        f"{declared} bytes of audio but the file ends {offset + declared - size} bytes early "
        f"(only {reader.info.frames} frames are present). Re-download or re-encode it, {SKIP_HINT}.",
        path,
    )


#: An MP3 without a trusted frame count that is not walked (a remote object) has an *estimated* length:
#: decoding may end up to this many MPEG frames before it, and that tail is returned as silence (see
#: :mod:`audiotree.io.mpeg_stream`). Every other MP3 is held to its exact length, like every other format.
MP3_ESTIMATE_TOLERANCE_FRAMES = mpeg_stream.ESTIMATE_TOLERANCE_FRAMES

# The frame count libsndfile reports for a FLAC stream whose STREAMINFO does
# not record its length (total_samples = 0).
_UNKNOWN_LENGTH = 2**63 - 1


def _check_length_claim(path: str, size: int | None, reader: SoundfileReader | PyAVReader) -> None:
    """Refuses a header whose frame count the file's bytes cannot back (see io.integrity).

    Runs before anything is decoded or allocated. Reads the final page of an
    Ogg file, a 4 KiB head of a file whose claim is too large
    for its format's smallest blocks, and 1 MiB of a file claiming 0 frames
    (to tell an empty file from a cut one); nothing for typical WAV/FLAC.
    """
    info = reader.info
    if not 1 <= info.sample_rate <= integrity.MAX_SAMPLE_RATE:
        raise bad_file(path, f"its header claims a sample rate of {info.sample_rate} Hz, outside "
                        f"1-{integrity.MAX_SAMPLE_RATE} Hz; the header is corrupt")
    fmt, subtype = info.format, info.subtype
    try:
        size = os.stat(path).st_size if size is None else size
        # The head is read only when a check needs it (an MP3's tag was read when it was opened):
        # 0-frame claims, and claims too large for the format's smallest blocks.
        bound = None if info.frames == 0 else integrity.max_frames(
            fmt, subtype, info.channels, info.sample_rate, size, None
        )
        head = b""
        if info.frames == 0:
            head = read_span(reader.source, 0, 1 << 20)
        elif fmt == "OGG":  # the header pages and the first audio pages
            head = read_span(reader.source, 0, _OGG_HEAD_BYTES)
        elif bound is not None and info.frames > bound:
            head = read_span(reader.source, 0, 4096)
        if fmt == "OGG":  # two maximal pages: the last one and the page before it
            tail_at = max(0, size - 2 * ogg_pages.OGG_MAX_PAGE)
            tail = read_span(reader.source, tail_at, 2 * ogg_pages.OGG_MAX_PAGE)
        # Where the last FLAC frame ends, by its header: a small tail read through the same file object the
        # decoder reads (a path, a remote file, a tar member or a Parquet cell), so every path checks the same.
        flac_end = None
        if fmt == "FLAC" and info.frames and isinstance(reader, SoundfileReader):
            flac_head = head[:64] or read_span(reader.source, 0, 64)
            if flac_head[:4] == b"fLaC":
                flac_end = integrity.flac_last_frame_end(lambda n: read_span(reader.source, -n, n), flac_head)
    except OSError:  # the file vanished after opening: the first read will say so
        return
    if fmt == "OGG":
        problem = ogg_pages.tail_problem(tail, tail_at) or ogg_pages.head_problem(head, info.channels, subtype)
        if problem and problem.startswith("the file is truncated"):
            problem += f" (the decoder sees {info.frames} frames; the rest is missing)"
        if problem is None and isinstance(reader, PyAVReader):  # FFmpeg checks no page CRC: check them all once
            found = ogg_pages.first_page_info(head)
            problem = ogg_pages.span_problem(reader.source, found[0] if found else 0, 0, None)
        if problem:
            raise bad_file(path, problem)
    if info.frames == 0:
        wav_data = wav_data_chunk(head, reader.source) if fmt in ("WAV", "WAVEX") else None
        # PyAV containers that report no frames are refused like the PyAV
        # fallback's (see _open_reader): their length metadata is all we have.
        if isinstance(reader, PyAVReader) or integrity.holds_audio(fmt, subtype, head, size, wav_data):
            raise bad_file(path, f"its header claims 0 frames but the file ({size} bytes) holds audio data "
                            "after its header; it is truncated or its header is corrupt")
        return
    if flac_end is not None and flac_end > info.frames:
        raise bad_file(path, f"its STREAMINFO claims {info.frames} frames but its last FLAC frame ends at frame "
                        f"{flac_end}; the header is corrupt")
    if bound is not None and info.frames > bound:
        bound = integrity.max_frames(fmt, subtype, info.channels, info.sample_rate, size, head)
    if bound is not None and info.frames > bound:
        if fmt == "FLAC" and info.frames == _UNKNOWN_LENGTH:
            raise bad_file(path, "its FLAC header does not record the stream length (total_samples is 0), "
                            "so reads cannot be checked or positioned exactly")
        raise bad_file(path, f"its header claims {info.frames} frames but a {size}-byte {fmt} file "
                        f"holds at most {bound}; the header is corrupt")
    if isinstance(reader, PyAVReader) and _is_mpeg(info):  # (libsndfile's readers were settled when opened)
        mpeg_stream.read_length_tag(path, size, reader.source)


# Bytes of an Ogg file checked when it is opened: the header pages (a Vorbis
# setup header is up to a few KiB) and the first audio pages after them.
_OGG_HEAD_BYTES = 1 << 16

# Containers whose decoders locate a position by reading around the file.
_PROBING_SEEKS = frozenset({"FLAC", "OGG", "MP3"})


class AudioFile:
    """An audio file opened once for repeated excerpt reads.

    ``AudioFile(path)`` opens the file with libsndfile, or with PyAV for
    container formats libsndfile cannot read (and as a fallback when
    libsndfile fails on a file and ``av`` is installed). ``path`` may be a URL
    (``s3://``, ``gs://``, ``https://``, ...; see :mod:`audiotree.io.storage`),
    read with ranged requests; ``storage_options`` are then the fsspec
    filesystem's options. Use it as a context manager or call :meth:`close`. Instances are not thread-safe; give each
    worker thread its own.

    Attributes:
        path: The file path (``str``).
        info: The :class:`AudioInfo` read from the header.
        backend: ``"soundfile"`` or ``"pyav"``.

    Raises:
        AudioReadError: if the file is missing, empty, unreadable or corrupt;
            the message names the file, the cause and what to do.
    """

    __slots__ = ("path", "info", "backend", "_reader")

    def __init__(self, path: str | os.PathLike[str], *, storage_options: dict | None = None) -> None:
        self.path: str = os.fsdecode(path)
        self._reader: SoundfileReader | PyAVReader | None = None
        if storage_options:
            with storage.use_storage_options(storage_options):
                reader = _open_reader(self.path)
        else:
            reader = _open_reader(self.path)
        self._reader = reader
        self.info: AudioInfo = reader.info
        self.backend: str = reader.backend

    @classmethod
    def from_bytes(cls, path: str | os.PathLike[str], data: bytes) -> AudioFile:
        """The file ``path`` opened from ``data``, its whole bytes already in memory (no storage access).

        ``path`` names it in errors and picks its decoder, as for ``AudioFile(path)``.
        """
        self = cls.__new__(cls)
        self.path, self._reader = os.fsdecode(path), None
        reader = _open_remote_reader(self.path, lambda url: MemberInput(url, io.BytesIO(data), 0, len(data)))
        self._reader, self.info, self.backend = reader, reader.info, reader.backend
        return self

    def __enter__(self) -> AudioFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._reader is None else self.backend
        return f"AudioFile({self.path!r}, {state})"

    @property
    def closed(self) -> bool:
        return self._reader is None

    def close(self) -> None:
        """Release the decoder. Idempotent."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()

    def read(self, start_frame: int, num_frames: int | None = None) -> np.ndarray:
        """Decode ``num_frames`` frames starting at frame ``start_frame``.

        Only the requested span is decoded (plus, for lossy codecs, a short
        codec-specific pre-roll needed for exact output; see the module
        docstring).

        Args:
            start_frame: First frame to return, ``>= 0``.
            num_frames: Number of frames, ``>= 0``; ``None`` reads to the end.

        Returns:
            ``float32`` array of shape ``(frames, channels)``, C-contiguous.
            Near the end of the file fewer than ``num_frames`` frames are
            returned; if ``start_frame >= info.frames`` the result has 0 rows
            (callers that need a full excerpt should check the length and
            report the file's duration).

        Raises:
            ValueError: for negative arguments or a closed file.
            AudioReadError: if decoding fails, ends before the frames the
                header promises (a truncated or corrupt file), runs out of
                memory, or the samples contain NaN/Inf.
        """
        reader = self._reader
        if reader is None:
            raise ValueError(f"I/O operation on closed AudioFile ({self.path!r}).")
        start = operator.index(start_frame)
        if start < 0:
            raise ValueError(f"start_frame must be >= 0, got {start}.")
        frames = self.info.frames
        if num_frames is None:
            end = frames
        else:
            count = operator.index(num_frames)
            if count < 0:
                raise ValueError(f"num_frames must be >= 0 or None, got {count}.")
            end = min(frames, start + count)
        if start >= end:
            return np.empty((0, self.info.channels), dtype=np.float32)
        source = reader.source
        probe_tolerant = getattr(source, "probe_tolerant", False)  # keeps bytes before a seek target (members)
        if not isinstance(source, str) and frames > 0 and (probe_tolerant or self.info.format not in _PROBING_SEEKS):
            # Uncompressed audio seeks straight to its bytes: fetch the excerpt
            # (its share of the file, +5%) in one ranged request. Codecs whose
            # seek probes the file first would spend the hint on a probe.
            source.expect(int(source.size * (end - start) / frames * 1.05))
        try:
            x = reader.read(start, end - start)
            _check_source(source)
        except AudioReadError:
            raise
        except MemoryError as exc:
            gib = (end - start) * self.info.channels * 4 / 2**30
            raise AudioReadError(
                f"Failed to read audio file '{self.path}': not enough memory to decode frames {start}-{end} "
                f"({gib:.2f} GiB as float32). Read shorter excerpts, {SKIP_HINT}.",
                self.path,
            ) from exc
        except Exception as exc:
            if not isinstance(source, str) and getattr(source, "failure", None) is not None:
                raise source.failure from exc  # the storage fault the decoder only saw as a failed read
            raise read_error(self.path, exc, failure_hint(self.path, item_size(self.path, or_none=True))) from exc
        if len(x) != end - start:
            x = self._short_read(x, start, end, reader.length_slack)
        check_finite(x, self.path, start)
        return x

    def _short_read(self, x: np.ndarray, start: int, end: int, slack: int) -> np.ndarray:
        """A decode that ended at frame ``start + len(x)`` before ``end``: pad within ``slack`` or raise.

        Only an estimated length (``slack > 0``) may come up short, and only
        near its estimated end; anything else means the file holds fewer
        frames than its header promises.
        """
        stopped = start + len(x)
        frames = self.info.frames
        if frames - stopped <= slack:
            out = np.zeros((end - start, self.info.channels), dtype=np.float32)
            out[: len(x)] = x
            return out
        if slack:
            what = (f"its length is estimated at {frames} frames (a remote MP3 without a trusted frame count: its "
                    f"frames are not counted, which would download it) but decoding stopped at frame {stopped}, more "
                    f"than the {slack}-frame tolerance short; it is truncated or corrupt, or a local copy reads whole")
        else:
            what = (f"decoding stopped at frame {stopped} but its header promises {frames} frames; "
                    "it is truncated or corrupt")
        raise bad_file(self.path, what)

    def read_all(self) -> np.ndarray:
        """Decode the whole file: ``read(0, None)``; shape ``(frames, channels)``."""
        return self.read(0, None)


def probe(path: str | os.PathLike[str], *, storage_options: dict | None = None) -> AudioInfo:
    """Read a file's header without decoding any audio.

    One open of the file (libsndfile, or PyAV for its formats). For
    libsndfile formats ``frames`` is exact (for Ogg it comes from the last
    page's granule position, for MP3 from the Xing/Info tag when its LAME CRC
    holds, else from a count of its frames, or for a remote file mpg123's estimate).
    For PyAV files it comes from the stream duration (exact for MP4/M4A,
    whose edit list already hides AAC encoder priming and padding), else the
    container duration (which FFmpeg may estimate from the bitrate), else
    the packet durations found by demuxing the file without decoding it
    (raw ADTS ``.aac`` and AC-3 always count their packets: FFmpeg's duration
    for them is a bitrate estimate). Matroska/WebM Opus and AAC end where
    their last packet does. A chained Ogg file's length is the sum of its links'.

    Raises:
        AudioReadError: if the file cannot be opened as audio.
    """
    with AudioFile(path, storage_options=storage_options) as f:
        return f.info


def read_frames(
    path: str | os.PathLike[str], start_frame: int = 0, num_frames: int | None = None
) -> tuple[np.ndarray, AudioInfo]:
    """Open ``path``, read one excerpt and close it.

    Returns:
        ``(samples, info)`` where ``samples`` is ``float32`` of shape
        ``(frames, channels)`` as returned by :meth:`AudioFile.read`.
    """
    with AudioFile(path) as f:
        return f.read(start_frame, num_frames), f.info
