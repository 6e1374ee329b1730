"""Ogg pages that were damaged or lost are errors, not a shorter file (issue 29).

libogg drops a page whose CRC fails and libsndfile joins the audio on either
side of the hole: the file read as shorter, with the audio after the hole
moved earlier. Every read now checks the CRC, order and granule positions of
the pages it decodes (and the open checks the first and last pages).
"""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.io import AudioFile, probe
from audiotree.io import ogg_pages
from audiotree.io.integrity import max_frames
from audiotree.synth import synthesize


def _encode(subtype: str, seconds: float, rate: int, channels: int = 1, **kw) -> bytes:
    x = synthesize("music", seconds, rate, channels, np.random.default_rng(3))
    buf = io.BytesIO()
    soundfile.write(buf, x, rate, format="OGG", subtype=subtype, **kw)
    return buf.getvalue()


def _pages(data: bytes) -> list[ogg_pages.Page]:
    """Every page of ``data``, walked from offset 0."""
    out, offset = [], 0
    while offset < len(data):
        page = ogg_pages._parse(data, offset, 0)
        assert page is not None and page.crc_ok
        out.append(page)
        offset = page.end
    return out


def _recrc(data: bytearray, page: ogg_pages.Page) -> None:
    """Recomputes ``page``'s CRC after an edit (a deliberate change, not damage)."""
    data[page.offset + 22 : page.offset + 26] = struct.pack("<I", ogg_pages.page_crc(bytes(data[page.offset : page.end])))


def _write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_page_crc_is_the_ogg_crc():
    """The zlib-based CRC equals the bit-by-bit definition (poly 0x04C11DB7, MSB first, init 0, no XOR)."""
    def slow(data: bytes) -> int:
        crc = 0
        for byte in data:
            crc ^= byte << 24
            for _ in range(8):
                crc = ((crc << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if crc & 0x80000000 else (crc << 1) & 0xFFFFFFFF
        return crc

    rng = np.random.default_rng(0)
    for n in (27, 28, 300, 4000):
        page = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        page[22:26] = b"\0\0\0\0"
        assert ogg_pages.page_crc(bytes(page)) == slow(bytes(page))
    data = _encode("VORBIS", 0.5, 16000)
    assert all(p.crc_ok for p in _pages(data))  # every page libvorbis writes passes


@pytest.mark.parametrize("subtype, rate", [("VORBIS", 22050), ("OPUS", 48000)])
def test_a_bit_flip_in_page_2s_crc_is_an_error_not_a_shorter_file(tmp_path, subtype, rate):
    """The issue's example: one bit of page 2's CRC field; was 17,587 frames of 33,075, the rest shifted."""
    good = _encode(subtype, 1.5, rate)
    page = _pages(good)[2]
    bad = bytearray(good)
    bad[page.offset + 22] ^= 0x01
    path = _write(tmp_path, "bad.ogg", bytes(bad))
    with pytest.raises(AudioReadError) as info:  # at open here (the first 64 KiB are checked then), else on read
        with AudioFile(path) as f:
            f.read_all()
    message = str(info.value)
    assert info.value.file_path == path and "page 2" in message and "CRC" in message
    assert 'on_read_error="skip"' in message
    assert probe(_write(tmp_path, "good.ogg", good)).frames == len(soundfile.read(io.BytesIO(good))[0])


@pytest.mark.parametrize("subtype, rate", [("VORBIS", 44100), ("OPUS", 48000)])
def test_excerpts_check_only_their_own_pages(tmp_path, subtype, rate):
    """A damaged page in the middle fails the reads that decode it; excerpts elsewhere read exactly."""
    good = _encode(subtype, 20.0, rate, compression_level=0.0)
    pages = _pages(good)
    victim = pages[len(pages) // 2]
    assert 1 << 16 < victim.offset < victim.end < len(good) - 2 * ogg_pages.OGG_MAX_PAGE  # not checked at open
    bad = bytearray(good)
    bad[(victim.offset + victim.end) // 2] ^= 0x10  # payload damage
    path = _write(tmp_path, "mid.ogg", bytes(bad))
    reference, _ = soundfile.read(io.BytesIO(good), dtype="float32", always_2d=True)
    preskip = 312 if subtype == "OPUS" else 0
    scale = 48000 // rate
    hole = (victim.granule - preskip) // scale  # the damaged page ends its audio here
    with AudioFile(path) as f:
        assert f.info.frames == len(reference)
        head = f.read(rate, rate)  # 1-2 s: far from the damage
        np.testing.assert_allclose(head, reference[rate : 2 * rate], atol=5e-3 if subtype == "OPUS" else 0)
        tail = f.read(len(reference) - 2 * rate, rate)
        np.testing.assert_allclose(tail, reference[-2 * rate : -rate], atol=5e-3 if subtype == "OPUS" else 0)
        with pytest.raises(AudioReadError, match=f"page {victim.sequence} .*CRC"):
            f.read(hole - 100, 200)
        with pytest.raises(AudioReadError, match="CRC"):
            f.read_all()


def test_a_missing_page_is_named(tmp_path):
    good = _encode("VORBIS", 5.0, 16000)
    pages = _pages(good)
    gone = pages[3]
    path = _write(tmp_path, "hole.ogg", good[: gone.offset] + good[gone.end :])
    with pytest.raises(AudioReadError, match="page 3 is missing"), AudioFile(path) as f:
        f.read_all()


@pytest.mark.parametrize("subtype, rate", [("VORBIS", 22050), ("OPUS", 48000)])
@pytest.mark.parametrize("recompute_crc", [False, True])
def test_a_final_granule_claiming_less_than_the_file_holds_is_refused(tmp_path, subtype, rate, recompute_crc):
    """Issue 29: a last page rewritten to granule 1,000 made a 1.5 s file read as 1,000 frames."""
    good = _encode(subtype, 1.5, rate)
    last = _pages(good)[-1]
    bad = bytearray(good)
    bad[last.offset + 6 : last.offset + 14] = struct.pack("<q", 1000)
    if recompute_crc:
        _recrc(bad, last)
    path = _write(tmp_path, "short.ogg", bytes(bad))
    with pytest.raises(AudioReadError) as info:
        probe(path)
    expected = "below the" if recompute_crc else "fails its CRC check"
    assert info.value.file_path == path and expected in str(info.value) and f"page {last.sequence}" in str(info.value)


def test_a_damaged_header_page_is_refused_by_every_decoder(tmp_path):
    """FFmpeg checks no CRC: a damaged identification page is refused whichever decoder opens the file."""
    good = bytearray(_encode("VORBIS", 1.0, 16000))
    good[28 + 11] = 255  # the channel count of the identification header, CRC not recomputed
    path = _write(tmp_path, "ch.ogg", bytes(good))
    with pytest.raises(AudioReadError):
        probe(path)
    pytest.importorskip("av")
    from audiotree.io.decode import _checked
    from audiotree.io.pyav_reader import PyAVReader

    try:
        reader = PyAVReader(path)
    except Exception:  # noqa: BLE001 - FFmpeg may refuse it by itself
        return
    with pytest.raises(AudioReadError, match="page 0 .*CRC"):
        _checked(path, len(good), reader)


def test_a_channel_count_the_packets_cannot_hold_is_refused(tmp_path):
    """A small Vorbis file whose header claims 255 channels: its packets hold too few bits for them."""
    quiet = np.zeros((16000, 1), np.float32)  # silence codes as packets of a few bytes
    quiet[8000:8400, 0] = synthesize("music", 0.025, 16000, 1, np.random.default_rng(0))[:, 0]
    buf = io.BytesIO()
    soundfile.write(buf, quiet, 16000, format="OGG", subtype="VORBIS")
    data = bytearray(buf.getvalue())
    first = _pages(bytes(data))[0]
    data[first.offset + 27 + 1 + 11] = 255  # after the lacing value: b"\x01vorbis", version, channels
    _recrc(data, first)
    path = _write(tmp_path, "255.ogg", bytes(data))
    with pytest.raises(AudioReadError, match="claims 255 channels"):
        probe(path)
    # The size bound counts channels: a packet of 255 channels takes at least 33 bytes, not 2.
    assert max_frames("OGG", "VORBIS", 255, 16000, 12_700, None) * 255 * 4 < 2**27
    assert max_frames("OGG", "VORBIS", 1, 16000, 12_700, None) > 100 * 16000 // 10


def test_a_tag_after_the_last_page_still_reads(tmp_path):
    good = _encode("VORBIS", 2.0, 16000)
    path = _write(tmp_path, "tag.ogg", good + b"TAG" + b"x" * 125)
    with AudioFile(path) as f:
        assert f.read_all().shape == (32000, 1) and f.read(30000, 5000).shape == (2000, 1)
