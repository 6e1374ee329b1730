"""MPEG audio frames (MP3 and its layers I/II): headers, the Xing/Info/LAME tag, and frame counts.

An MP3 has no container: its length is whatever its first frame's Xing or
Info tag says, or mpg123's *estimate* from the file size and the first frames'
bitrate. libsndfile reports that length and never decodes past it. This module
reads what the bytes say; :mod:`audiotree.io.mpeg_stream` decides what to
trust:

* :func:`read_tag` reads the tag in the first frame and judges it: the LAME
  extension's CRC-16 (LAME sums the frame up to the CRC field, FFmpeg the
  first 190 bytes with the field zeroed: either holds for a valid tag), that
  the tag sits where the frame's header puts it (in a CRC-protected frame LAME
  leaves out the CRC's two bytes, and decoders accept both places), that an
  Info (constant bitrate) tag's frame count matches its audio bytes divided by
  the frame size, and that a Xing tag's count is at least what its bytes hold
  at the highest bitrate. A tag that fails is only *not trusted*; it also
  says where the audio frames start, after the tag's own frame.
* :func:`count_frames` walks the frame headers of a whole stream (no
  decoding; about half a microsecond per frame), and finds junk between
  frames (lost or damaged frames; tags between frames are not junk).
* :func:`concealed_span` finds a frame mpg123 could not decode and replaced
  with silence (its concealment): a run of exact zeros that starts right
  after audible samples, which no valid stream decodes to.

>>> frame_header(bytes([0xFF, 0xFB, 0x90, 0x64]))  # MPEG-1 layer III, 128 kbit/s, 44.1 kHz
(417, 1152, 44100)
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

__all__ = ["frame_header", "frame_chain", "count_frames", "first_frame", "chain_start", "read_tag", "Tag", "concealed_span", "MAX_KBPS"]

_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}  # by version id
_KBPS = {  # (MPEG-1?, layer id) -> bitrate index table (kbit/s)
    (True, 3): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 1): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 3): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 1): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
#: Highest bitrate (kbit/s) of each (MPEG-1?, layer id).
MAX_KBPS = {key: max(table) for key, table in _KBPS.items()}


def _build_table() -> dict[int, tuple[int, int, int]]:
    """(header bytes 1-2 without the padding bit) -> (frame bytes without padding, samples per frame, rate)."""
    table = {}
    for b1 in range(0xE0, 0x100):
        version, layer = (b1 >> 3) & 3, (b1 >> 1) & 3
        if version == 1 or layer == 0:
            continue
        mpeg1 = version == 3
        for b2 in range(256):
            index, rate_index = b2 >> 4, (b2 >> 2) & 3
            if index in (0, 15) or rate_index == 3 or b2 & 0x02:
                continue
            rate, kbps = _RATES[version][rate_index], _KBPS[(mpeg1, layer)][index]
            if layer == 3:  # layer I: 4-byte slots
                size, spf = 12 * kbps * 1000 // rate * 4, 384
            elif layer == 2 or mpeg1:  # layer II, and layer III of MPEG-1
                size, spf = 144 * kbps * 1000 // rate, 1152
            else:  # layer III of MPEG-2 and 2.5: half-length frames
                size, spf = 72 * kbps * 1000 // rate, 576
            table[b1 << 8 | b2] = (size, spf, rate)
    return table


_TABLE = _build_table()


def frame_header(header: bytes) -> tuple[int, int, int] | None:
    """(frame bytes, samples per frame, sample rate) of the MPEG frame header ``header[:4]``, or None."""
    if len(header) < 4 or header[0] != 0xFF:
        return None
    found = _TABLE.get(header[1] << 8 | (header[2] & 0xFD))
    if found is None:
        return None
    size, spf, rate = found
    padding = (header[2] >> 1) & 1
    return size + padding * (4 if spf == 384 else 1), spf, rate


def frame_chain(data: bytes) -> list[int]:
    """Offsets of the whole frames chained from byte 0 of ``data`` that share the first one's version, layer,
    protection, sample rate and channel count (mono or not), then the byte after the last of them.

    One pass over the headers alone (a read's check that its bytes are the frames its table names).

    >>> frame = bytes([0xFF, 0xFB, 0x90, 0x64]) + bytes(413)
    >>> frame_chain(frame * 3 + b"TAG")
    [0, 417, 834, 1251]
    >>> frame_chain(b"junk")
    [0]
    """
    if frame_header(data[:4]) is None:
        return [0]
    key, mono = data[1] << 8 | (data[2] & 0x0C), data[3] >= 0xC0
    table, out, i, end = _TABLE, [], 0, len(data)
    while i + 4 <= end and data[i] == 0xFF:
        b1, b2 = data[i + 1], data[i + 2]
        found = table.get(b1 << 8 | (b2 & 0xFD))
        if found is None or (b1 << 8 | (b2 & 0x0C)) != key or (data[i + 3] >= 0xC0) != mono:
            break
        size = found[0] + ((b2 >> 1) & 1) * (4 if found[1] == 384 else 1)
        if i + size > end:
            break
        out.append(i)
        i += size
    out.append(i)
    return out


# What may sit between MPEG frames without being damage: tags (ID3v2 of a concatenated file, ID3v1, APE, Lyrics3).
_TAGS_BETWEEN = (b"ID3", b"TAG", b"APETAGEX", b"LYRICSBEGIN")


def count_frames(data: bytes, start: int) -> tuple[int, int, int]:
    """(MPEG frames, samples per frame, gap) of the stream in ``data`` from its first frame at ``start``.

    Follows frame lengths; after junk it resyncs on a header whose successor
    is a header too (so stray sync bytes in a tag are not counted). Counts
    only frames of the first frame's version, layer and rate. ``gap`` is the
    offset of the first junk that frames follow (bytes that are neither frames
    nor a tag: lost or damaged frames), or -1.
    """
    first = frame_header(data[start : start + 4])
    if first is None:
        return 0, 0, -1
    spf, rate = first[1], first[2]
    key_mask = data[start + 1] << 8 | (data[start + 2] & 0x0C)  # version, layer, protection; rate bits
    table, n, i, end, gap = _TABLE, 0, start, len(data), -1
    while i + 4 <= end:
        if data[i] == 0xFF:
            found = table.get(data[i + 1] << 8 | (data[i + 2] & 0xFD))
            if found is not None and (data[i + 1] << 8 | (data[i + 2] & 0x0C)) == key_mask:
                size = found[0] + ((data[i + 2] >> 1) & 1) * (4 if spf == 384 else 1)
                if i + size <= end:
                    n += 1
                    i += size
                    continue
                break  # a cut last frame is not a frame
        # Resync: the next sync byte that starts a chain of two headers.
        junk = i
        i = data.find(b"\xff", i + 1)
        while i >= 0:
            here = frame_header(data[i : i + 4])
            if here is not None and here[2] == rate and frame_header(data[i + here[0] : i + here[0] + 4]) is not None:
                break
            i = data.find(b"\xff", i + 1)
        if i < 0:
            break
        if gap < 0 and not data.startswith(_TAGS_BETWEEN, junk):
            gap = junk
    return n, spf, gap


def _crc16(data: bytes) -> int:
    """CRC-16/ARC (reflected polynomial 0x8005, initial 0): the LAME tag's checksum."""
    crc = 0
    for byte in data:
        crc = _CRC16_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


def _crc16_table() -> tuple[int, ...]:
    out = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        out.append(crc)
    return tuple(out)


_CRC16_TABLE = _crc16_table()


# What starts a length tag, and the encoder names that start its extension.
_MAGICS = (b"Xing", b"Info", b"LAME", b"Lavc", b"Lavf")

# Bytes of the first frame that FFmpeg's mp3 muxer sums for the LAME tag's CRC (zero-padded past a short frame).
_FFMPEG_CRC_SPAN = 190


class Tag(NamedTuple):
    """What the first MPEG frames of a stream say about its length (see :func:`read_tag`).

    Attributes:
      audio: offset of the first audio frame in the bytes given (after a tag frame and any junk), -1 if none.
      frames: the audio frames the tag records (``None`` without a tag or a frame count).
      trust: ``"crc"`` when the LAME extension's CRC-16 holds over the tag, ``"bounds"`` when a tag without
        that CRC is consistent with the stream's size, ``""`` when there is no usable frame count.
      declared: the stream bytes the tag records (``None`` without that field).
      problem: why a tag that is there is not trusted (``None`` when trusted or absent).
    """

    audio: int
    frames: int | None
    trust: str
    declared: int | None
    problem: str | None


def _crc_holds(frame: bytes, lame: int) -> bool:
    """Whether the LAME extension at ``lame`` in ``frame`` (the whole first frame) has a valid CRC-16.

    Encoders disagree on what it covers: LAME sums the frame up to the CRC
    field (``lame + 34`` bytes, 190 for MPEG-1 stereo, fewer for mono and
    MPEG-2); FFmpeg sums 190 bytes with the field zeroed, padding a shorter
    frame with zeros. Either one is a valid tag.
    """
    stored = struct.unpack_from(">H", frame, lame + 34)[0]
    if _crc16(frame[: lame + 34]) == stored:
        return True
    zeroed = bytearray(frame[:_FFMPEG_CRC_SPAN])
    zeroed += bytes(_FFMPEG_CRC_SPAN - len(zeroed))
    field = zeroed[lame + 34 : lame + 36]  # (past the span in an MPEG-1 stereo frame: the conventions agree there)
    zeroed[lame + 34 : lame + 34 + len(field)] = bytes(len(field))
    return _crc16(bytes(zeroed)) == stored


def first_frame(head: bytes, start: int = 0) -> int:
    """Offset of the first MPEG frame header in ``head`` from ``start`` that the next frame's header follows.

    A header at the very end of ``head`` (its successor not in it) counts; -1 when there is none.
    """
    i = head.find(b"\xff", start)
    while i >= 0:
        found = frame_header(head[i : i + 4])
        if found is not None:
            after = i + found[0]
            if after + 4 > len(head) or frame_header(head[after : after + 4]) is not None:
                return i
        i = head.find(b"\xff", i + 1)
    return -1


def chain_start(data: bytes, lo: int, known: int) -> int:
    """The first offset in ``[lo, known)`` from which whole frames follow one another to ``known``, else ``known``.

    ``known`` is the offset of a frame; a stream that starts before it (an
    ID3v2 tag whose size field points past its end) is found this way.
    """
    i = data.find(b"\xff", lo, known)
    while i >= 0:
        j = i
        while j < known:
            found = frame_header(data[j : j + 4])
            if found is None:
                break
            j += found[0]
        if j == known:
            return i
        i = data.find(b"\xff", i + 1, known)
    return known


def _tag_offset(frame: bytes) -> int:
    """Where the Xing/Info tag sits in a first frame with this header: after the header and side information."""
    mpeg1, mono = (frame[1] >> 3) & 3 == 3, frame[3] >> 6 == 3
    side = (17 if mono else 32) if mpeg1 else (9 if mono else 17)
    return 4 + side + (0 if frame[1] & 0x01 else 2)  # a 16-bit CRC follows the header when protected


def _tag_at(frame: bytes) -> tuple[int, bytes, int] | None:
    """(offset, name, flags) of a Xing/Info tag where decoders look for it in the first frame ``frame``.

    That is right after the header and side information; in a CRC-protected
    frame LAME writes it there too, ignoring the CRC's two bytes, and mpg123 and
    FFmpeg read it, so both places count.
    """
    at = _tag_offset(frame)
    for where in (at, at - 2) if not frame[1] & 0x01 else (at,):
        name = frame[where : where + 4]
        if name in _MAGICS[:2] and where + 8 <= len(frame):
            return where, name, struct.unpack_from(">I", frame, where + 4)[0]
    return None


def read_tag(head: bytes, stream_bytes: int) -> Tag:
    """What the stream whose first bytes are ``head`` (after any ID3v2 tag) says about its length.

    ``stream_bytes`` is the size of the MPEG stream (the file without its
    ID3v2 tag). A tag is only a length hint: a damaged one (CRC, offsets,
    counts its own bytes contradict) is reported in ``problem`` and not
    trusted, and ``audio`` says where the audio frames start either way.
    """
    first = first_frame(head)
    if first < 0:
        return Tag(-1, None, "", None, None)
    header = frame_header(head[first : first + 4])
    frame = head[first : first + header[0]]
    following = first_frame(head, first + header[0])
    if any(magic in head[:first] for magic in _MAGICS[:2]):  # a tag whose frame header is damaged
        return Tag(first, None, "", None, "the MPEG frame holding its Xing/Info tag has a damaged header")
    tag = _tag_at(frame)
    if tag is None:
        at = _tag_offset(frame)
        if any(magic in frame[:200] for magic in _MAGICS[:2]):
            return Tag(following, None, "", None, "its first MPEG frame header does not match the Xing/Info tag "
                       "inside it (the header is damaged)")
        if frame[at + 4 : at + 8] == b"\0\0\0\x0f" and frame[at + 120 : at + 124] in _MAGICS[2:]:
            return Tag(following, None, "", None, "its first MPEG frame holds a LAME tag whose Xing/Info name is "
                       "damaged")
        if frame[36:40] == b"VBRI":  # Fraunhofer's tag: its count is not checked; the frame holds no audio
            return Tag(following, None, "", None, None)
        return Tag(first, None, "", None, None)
    at, name, flags = tag
    frames = struct.unpack_from(">I", frame, at + 8)[0] if flags & 1 and at + 12 <= len(frame) else None
    field = at + 8 + 4 * bool(flags & 1)
    declared = struct.unpack_from(">I", frame, field)[0] if flags & 2 and field + 4 <= len(frame) else None
    if frames is None:
        return Tag(following, None, "", declared, None)
    lame = at + 8 + 4 * bool(flags & 1) + 4 * bool(flags & 2) + 100 * bool(flags & 4) + 4 * bool(flags & 8)
    extension = frame[lame : lame + 36]
    trust = "bounds"
    # LAME (and FFmpeg's "Lavc"/"Lavf") write a 36-byte extension whose last two bytes
    # are a CRC-16 over the frame's first bytes; encoders without one leave zeros.
    if len(extension) == 36 and any(extension):
        if not _crc_holds(frame, lame):
            return Tag(following, None, "", None, "the LAME tag of its first MPEG frame fails its CRC check")
        trust = "crc"
    audio = (min(stream_bytes, declared) if declared else stream_bytes) - header[0]  # the tag's frame holds none
    mpeg1, layer = (frame[1] >> 3) & 3 == 3, (frame[1] >> 1) & 3
    densest = (144 if header[1] == 1152 else 72 if header[1] == 576 else 48) * MAX_KBPS[(mpeg1, layer)] * 1000
    fewest = audio * header[2] // densest  # frames at the highest bitrate the format allows
    if name == b"Info" and declared:  # constant bitrate: every frame has the first audio frame's size
        second = frame_header(head[first + header[0] : first + header[0] + 4])
        if second is not None:
            unpadded = second[0] - ((head[first + header[0] + 2] >> 1) & 1) * (4 if second[1] == 384 else 1)
            fewest = max(fewest, audio // (unpadded + 1) - 2)
    if frames < fewest - 1:
        return Tag(following, None, "", None, f"its {name.decode()} tag records {frames} MPEG frames, but its {audio} "
                   f"bytes of audio hold at least {fewest}")
    return Tag(following, frames, trust, declared, None)


# Concealment: mpg123 outputs a frame it cannot decode (damaged side
# information or Huffman data) as exact zeros, one granule (576 samples) or
# more. A valid stream never drops to exact zero at once: the synthesis
# filterbank and the MDCT overlap make audio decay first. Over 72 LAME encodes
# with hard cuts to digital silence (8-44.1 kHz, mono/stereo, CBR/VBR) the
# loudest sample in the 32 before an exact-zero run was 2e-6; concealed frames
# start after samples at the music's level (0.01 and up).
_CONCEAL_RUN = 576
_CONCEAL_EDGE = 32
_CONCEAL_LEVEL = 1e-3


def concealed_span(x: np.ndarray) -> tuple[int, int] | None:
    """(first, end) rows of a run of >= 576 exact-zero frames that starts right after audible samples, or None.

    ``x`` is decoded audio ``(frames, channels)``. One pass over ``x`` when it
    holds no exact zero (about as costly as the finiteness check).
    """
    if x.size == 0 or x.all():
        return None
    silent = x[:, 0] == 0
    for channel in range(1, x.shape[1]):
        silent &= x[:, channel] == 0
    edges = np.flatnonzero(np.diff(np.concatenate(([0], silent.view(np.int8), [0]))))
    for first, end in zip(edges[::2], edges[1::2]):
        if end - first >= _CONCEAL_RUN and first > 0:
            if np.abs(x[max(0, first - _CONCEAL_EDGE) : first]).max() > _CONCEAL_LEVEL:
                return int(first), int(end)
    return None
