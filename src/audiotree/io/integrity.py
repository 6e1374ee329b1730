"""What a file's size and bytes allow its header to claim, checked before decoding.

A decoder trusts the frame count in a file's header: libsndfile allocates and
reads that many frames and pads nothing, so a header that lies makes a read
either allocate absurd amounts of memory (a FLAC ``total_samples`` field set
to ``0xFF...``) or come back short or empty. This module bounds the claim by
what the file's bytes could possibly decode to, without decoding anything:

* :func:`max_frames` is an upper bound on the frames a file of ``size``
  bytes can hold, from the densest coding its format allows (e.g. an MPEG
  audio frame is at least ``8000 / 8 * spf / rate`` bytes, a FLAC frame at
  least ``8 + channels`` bytes for ``max_blocksize`` frames). A valid file is
  always below it; a header above it is lying.
* :func:`holds_audio` tells a genuinely empty file from one whose header
  claims 0 frames although audio follows (an Ogg stream cut before its last
  page reports 0 frames in libsndfile).
* :func:`mp3_length_is_estimated`: without a Xing/Info/VBRI header an MP3's
  length is mpg123's estimate from the file size and first frames.
* :func:`flac_frames_end`: where the last FLAC frame ends, by its header, so
  that a ``total_samples`` claiming less than the file holds is caught.

Ogg page checks are in :mod:`audiotree.io.ogg_pages`, MPEG frame and tag
checks in :mod:`audiotree.io.mpeg_frames`.

All functions read at most a bounded head or tail of the file (never the
whole file) and are pure given the file's bytes.
"""

from __future__ import annotations

import re
import struct
from typing import Callable

__all__ = ["MAX_SAMPLE_RATE", "max_frames", "holds_audio", "id3v2_size", "mp3_length_is_estimated", "mp3_declared_bytes",
           "flac_frames_end", "flac_frame_header", "flac_last_frame_end", "FLAC_TAIL_BYTES"]

#: Highest sample rate a header may claim, in Hz. Covers every audio rate in
#: use, ultrasonic recorders (up to ~1 MHz) and DSD64 carried as PCM
#: (2.8224 MHz). Beyond it the header is corrupt: a rate of 1 GHz would make a
#: 0.1 s excerpt 100 million frames long.
MAX_SAMPLE_RATE = 4_000_000

# Bits per sample of the uncompressed and fixed-rate libsndfile subtypes; the
# densest coding each can produce. Frames <= size * 8 / (bits * channels).
_BITS_PER_SAMPLE = {
    "PCM_S8": 8, "PCM_U8": 8, "ULAW": 8, "ALAW": 8,
    "PCM_16": 16, "PCM_24": 24, "PCM_32": 32, "FLOAT": 32, "DOUBLE": 64,
    "IMA_ADPCM": 4, "MS_ADPCM": 4, "VOX_ADPCM": 4, "G721_32": 4,
    "G723_24": 3, "G723_40": 5,
    "NMS_ADPCM_16": 2, "NMS_ADPCM_24": 3, "NMS_ADPCM_32": 4,
    "GSM610": 1.65,  # 33 bytes per 160 samples
    "DWVW_12": 1, "DWVW_16": 1, "DWVW_24": 1, "DWVW_N": 1,  # at least one bit per sample
}

_MPEG_SUBTYPES = ("MPEG_LAYER_I", "MPEG_LAYER_II", "MPEG_LAYER_III")


def _flac_max_blocksize(head: bytes | None) -> int:
    """STREAMINFO's max_blocksize, or FLAC's absolute maximum (65535) if unusable.

    ``head=None`` gives FLAC's smallest legal block size (16) instead.
    """
    if head is None:
        return 16
    # "fLaC", then a 4-byte metadata block header; STREAMINFO must come first:
    # min_blocksize (16 bits), max_blocksize (16 bits), ...
    if len(head) >= 12 and head[:4] == b"fLaC" and head[4] & 0x7F == 0:
        value = struct.unpack_from(">H", head, 10)[0]
        if value >= 16:
            return value
    return 65535


def _ogg_first_packet(head: bytes) -> bytes:
    """Body of the first Ogg page (the codec's identification header), or b''."""
    if len(head) < 27 or head[:4] != b"OggS":
        return b""
    nseg = head[26]
    start = 27 + nseg
    return head[start : start + sum(head[27:start])]


def _vorbis_max_block(head: bytes | None) -> int:
    """Vorbis blocksize_1 from the identification header, or the codec maximum (8192).

    ``head=None`` gives the codec's smallest legal blocksize_1 (64) instead.
    """
    if head is None:
        return 64
    packet = _ogg_first_packet(head)
    if len(packet) >= 29 and packet[:7] == b"\x01vorbis":
        exponent = packet[28] >> 4
        if 6 <= exponent <= 13:
            return 1 << exponent
    return 8192


def max_frames(
    fmt: str, subtype: str | None, channels: int, sample_rate: int, size: int, head: bytes | None
) -> int | None:
    """Upper bound on the frames that ``size`` bytes of this format can decode to.

    ``None`` when the codec has no useful bound (e.g. ALAC). The bounds are
    generous by design (they count every byte of the file as audio payload
    and assume the densest legal coding), so a valid file never exceeds them.
    FLAC and Vorbis bounds scale with the block size recorded in ``head``
    (the file's first bytes; the codec maximum if unparsable). With
    ``head=None`` they assume the smallest legal block size: a claim within
    that bound is within the real one too, so the head need not be read.
    """
    channels = max(1, channels)
    if fmt == "FLAC":  # its subtypes name the PCM width, but the data is compressed
        # Smallest FLAC frame: 6-byte header, one byte per CONSTANT subframe, 2-byte CRC.
        return (size // (8 + channels) + 1) * _flac_max_blocksize(head)
    if fmt not in ("OGG", "MP3") and subtype in _BITS_PER_SAMPLE:
        return int(size * 8 // (_BITS_PER_SAMPLE[subtype] * channels))
    pcm = re.fullmatch(r"PCM_[SUF](8|16|24|32|64)(LE|BE)?", subtype or "")  # FFmpeg's names (PyAV)
    if pcm:
        return int(size * 8 // (int(pcm.group(1)) * channels))
    if subtype == "VORBIS":
        # A Vorbis packet yields at most blocksize_1 / 2 frames and takes one
        # Ogg lacing byte plus its payload: the packet-type bit and at least
        # one floor bit per channel. A header claiming 255 channels in a small
        # file is held to that (the claim sizes every read: frames x channels).
        packet = 1 + (1 + channels + 7) // 8
        return (size // packet + 1) * (_vorbis_max_block(head) // 2)
    if subtype == "OPUS":
        # At most 120 ms (5760 samples at 48 kHz) per packet of >= 2 bytes.
        return (size // 2 + 1) * -(-5760 * sample_rate // 48000)
    if subtype == "AAC":
        # 1024 samples per raw frame (2048 with SBR), each frame >= 2 bytes.
        return (size // 2 + 1) * 2048
    if subtype in _MPEG_SUBTYPES or fmt == "MP3":
        # Frame bytes = spf / 8 * bitrate / rate, bitrate >= 8 kbps: at most
        # rate / 1000 frames per byte. Two frames of slack for decoder delay.
        return size * max(1, sample_rate) // 1000 + 2304
    return None


def _ogg_pages_with_audio(buf: bytes) -> bool:
    """Whether ``buf`` holds an Ogg page whose granule position is past 0 (audio)."""
    i = buf.find(b"OggS")
    while 0 <= i and i + 14 <= len(buf):
        if buf[i + 4] == 0:
            granule = struct.unpack_from("<q", buf, i + 6)[0]
            if granule > 0:
                return True
        i = buf.find(b"OggS", i + 1)
    return False


def _flac_audio_offset(head: bytes) -> int | None:
    """Offset of the first audio frame (just after the last metadata block), if in ``head``."""
    if head[:4] != b"fLaC":
        return None
    pos = 4
    while pos + 4 <= len(head):
        flags = head[pos]
        length = int.from_bytes(head[pos + 1 : pos + 4], "big")
        pos += 4 + length
        if flags & 0x80:
            return pos
    return None


def holds_audio(fmt: str, subtype: str | None, head: bytes, size: int, wav_data: tuple[int, int] | None) -> bool:
    """Whether a file whose header claims 0 frames nevertheless holds audio data.

    ``wav_data`` is the RIFF ``data`` chunk's ``(offset, declared size)``
    when known. Formats we cannot parse are given the benefit of the doubt
    (``False``), except MPEG audio: libsndfile only opens an MP3 after finding
    an MPEG frame, so one that reports 0 frames always holds audio bytes.
    """
    if fmt in ("WAV", "WAVEX"):
        if wav_data is None:
            return False
        offset, declared = wav_data
        if declared not in (0, 0xFFFFFFFF):
            return size > offset
        # A size of 0 (a streaming writer that never came back to fill it in):
        # libsndfile then reports 0 frames, so bytes that follow are audio
        # unless they are the next chunk of a genuinely empty file.
        following = head[offset : offset + 4]
        return size > offset and not (len(following) == 4 and following.isascii() and following.isalnum())
    if fmt == "FLAC":
        start = _flac_audio_offset(head)
        if start is None:
            return size > len(head)  # metadata longer than the head: audio may follow
        return head.find(b"\xff\xf8", start) >= 0 or head.find(b"\xff\xf9", start) >= 0 or size > len(head)
    if fmt == "OGG":
        return _ogg_pages_with_audio(head)
    if subtype in _MPEG_SUBTYPES or fmt == "MP3":
        return True
    return False


def id3v2_size(head: bytes) -> int:
    """Bytes taken by an ID3v2 tag at the start of an MP3 (0 if there is none)."""
    if len(head) >= 10 and head[:3] == b"ID3":
        b = head[6:10]
        return 10 + ((b[0] & 0x7F) << 21 | (b[1] & 0x7F) << 14 | (b[2] & 0x7F) << 7 | (b[3] & 0x7F))
    return 0


def mp3_length_is_estimated(frame_head: bytes) -> bool:
    """True unless the first MPEG frame carries a Xing, Info or VBRI length header.

    ``frame_head`` holds the file's bytes from the end of any ID3v2 tag
    (see :func:`id3v2_size`); 200 bytes are enough.

    With such a header mpg123 knows the exact frame count (and, from the LAME
    extension, the encoder delay and padding), so the length is exact.
    Without one it estimates the length from the file size and the first
    frames' bitrate.
    """
    # The tag sits in the first frame, at most 36 bytes of header and side
    # information after its sync word; look a little further for safety.
    window = frame_head[:200]
    return not any(tag in window for tag in (b"Xing", b"Info", b"VBRI"))


def mp3_declared_bytes(frame_head: bytes) -> int | None:
    """Stream size in bytes recorded by a Xing/Info header (its optional field), else None."""
    window = frame_head[:200]
    for tag in (b"Xing", b"Info"):
        i = window.find(tag)
        if i >= 0 and i + 16 <= len(window):
            flags = struct.unpack_from(">I", window, i + 4)[0]
            if flags & 0x2:
                return struct.unpack_from(">I", window, i + 12 if flags & 0x1 else i + 8)[0]
    return None


def _crc8(data: bytes) -> int:
    """CRC-8 of a FLAC frame header (polynomial 0x07, initial 0)."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _flac_frame(buf: bytes, i: int) -> tuple[int, int, bool] | None:
    """(coded number, block size, variable blocking) of a FLAC frame header at ``buf[i]`` whose CRC-8 holds."""
    if i + 6 > len(buf) or buf[i] != 0xFF or buf[i + 1] & 0xFE != 0xF8 or buf[i + 3] & 0x01:
        return None
    size_code, rate_code = buf[i + 2] >> 4, buf[i + 2] & 0x0F
    if size_code == 0 or rate_code == 0x0F or buf[i + 3] >> 4 > 10:
        return None
    first = buf[i + 4]  # the frame or sample number, coded like UTF-8 (up to 7 bytes)
    ones = next((k for k in range(8) if not first & (0x80 >> k)), 8)
    if ones == 1 or ones == 8:
        return None
    extra = max(0, ones - 1)
    number = first & (0x7F >> ones) if ones else first
    pos = i + 5
    for _ in range(extra):
        if pos >= len(buf) or buf[pos] & 0xC0 != 0x80:
            return None
        number = number << 6 | (buf[pos] & 0x3F)
        pos += 1
    if size_code == 6 or size_code == 7:
        width = 1 if size_code == 6 else 2
        block = int.from_bytes(buf[pos : pos + width], "big") + 1
        pos += width
    else:
        block = 192 if size_code == 1 else 576 << (size_code - 2) if size_code <= 5 else 256 << (size_code - 8)
    pos += 1 if rate_code == 12 else 2 if rate_code in (13, 14) else 0
    if pos >= len(buf) or _crc8(buf[i:pos]) != buf[pos]:
        return None
    return number, block, bool(buf[i + 1] & 0x01)


#: ``(coded number, block size, variable blocking)`` of the FLAC frame header at ``buf[i]`` (CRC-8 checked),
#: or ``None``; also what :mod:`audiotree.io.flac_seek_points` finds seek points with.
flac_frame_header = _flac_frame


def flac_frames_end(tail: bytes, head: bytes) -> int | None:
    """Sample at which the last FLAC frame in ``tail`` (the end of a file) ends, from its header, or None.

    ``head`` holds the file's first bytes (STREAMINFO: in fixed-blocksize
    streams the frame number counts blocks of its block size). Only a frame whose header follows the
    header of its predecessor in ``tail`` (consecutive numbers) counts, so a
    stray sync code inside compressed data is never taken for a frame.
    """
    fixed_block = _flac_max_blocksize(head)
    frames = []
    i = tail.find(b"\xff")
    while i >= 0:
        frame = _flac_frame(tail, i)
        if frame is not None:
            frames.append(frame)
        i = tail.find(b"\xff", i + 1)
    for later in reversed(range(1, len(frames))):
        number, block, variable = frames[later]
        start = number if variable else number * fixed_block
        for earlier in frames[:later]:
            e_number, e_block, e_variable = earlier
            follows = e_number + e_block == number if variable else e_number + 1 == number
            if e_variable == variable and follows:
                return start + block
    return None


#: Most bytes at the end of a FLAC stream searched for its last two frame headers.
FLAC_TAIL_BYTES = 1 << 16


def flac_last_frame_end(read_tail: Callable[[int], bytes], head: bytes) -> int | None:
    """:func:`flac_frames_end` of a stream whose last ``n`` bytes ``read_tail(n)`` returns.

    Reads two of STREAMINFO's ``max_framesize`` (plus 4 KiB for a trailing
    tag) when the header records it, so a member or remote file costs a small
    ranged read; the full :data:`FLAC_TAIL_BYTES` when that finds no two
    frames (an unrecorded or wrong maximum).
    """
    largest = int.from_bytes(head[15:18], "big") if len(head) >= 18 and head[4] & 0x7F == 0 else 0
    first = min(FLAC_TAIL_BYTES, 2 * largest + 4096) if largest else FLAC_TAIL_BYTES
    end = flac_frames_end(read_tail(first), head)
    if end is None and first < FLAC_TAIL_BYTES:
        end = flac_frames_end(read_tail(FLAC_TAIL_BYTES), head)
    return end
