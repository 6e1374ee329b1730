"""The encoder matrix: valid files written by real encoders, and how audiotree must read them.

A declarative list of :class:`Case`: each names the encoder, the command
lines that make the file from a source WAV, whether the format is lossless
or lossy, and the file's extension. :func:`build` writes every case's file
(encoders run in parallel threads, one subprocess each) and decodes its
oracle with ffmpeg (``ffmpeg -i f -f f32le -ac C -ar R -`` at the file's own
rate as audiotree reports it; see :func:`_opus_rate` for Opus). The checks (:func:`check_whole`,
:func:`check_excerpt`, :func:`check_item`) compare what audiotree reads with
that oracle: lossless exactly (within float rounding of the sample format),
lossy by correlation after aligning by cross-correlation.

Used by ``tests/io/test_encoder_matrix.py`` (one test per case and check)
and by ``fuzz/encoder_matrix_report.py`` (the table of docs/decoding.md).
Nothing here imports pytest.

A step of a case is either an argv (placeholders ``{src}``, ``{out}``,
``{tmp}``, ``{cover}``, ``{src24}`` are filled in) or ``("py", name, *args)``,
one of the few byte-level edits in :data:`PY_STEPS` that no Debian tool
makes (an APE tag, an ID3v2 tag in front of a FLAC file, an odd-sized WAV
chunk) or a file written by libsndfile through ``soundfile``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = ["Case", "CASES", "Built", "build", "check_whole", "check_excerpt", "check_item", "tools_present", "evaluate",
           "matrix_dataset", "ITEM_SECONDS", "ITEM_RATE",
           "EXCERPTS", "SECONDS"]

#: Seconds of every source signal.
SECONDS = 2.5
#: (offset, duration) in seconds of the two excerpts every case is read at.
EXCERPTS = ((0.37, 0.5), (1.61, 0.6))
#: Lossless: largest difference from the oracle (float rounding of the sample format).
LOSSLESS_ATOL = 2e-6
#: Lossy: least correlation with the aligned oracle.
MIN_CORR = 0.99
#: Lossy: largest lag (samples) searched between the whole read and the oracle.
MAX_LAG = 2500
#: Lossy: an excerpt may be this many samples off the whole file's lag.
EXCERPT_SLACK = 2
#: Lossy: how far the length may differ from the oracle's (encoder delay and padding that one decoder
#: trims and the other does not), in samples.
LENGTH_SLACK = {"mp3": 2 * 1152 + 1105, "ogg": 2048, "opus": 960 + 312, "m4a": 2048, "aac": 2048 + 1024,
                "webm": 960 + 312, "mka": 960 + 312}


@dataclasses.dataclass(frozen=True)
class Case:
    """One file from one encoder.

    ``source`` is ``"RATExCHANNELS"`` (16-bit PCM WAV; ``"-24"`` appended: 24-bit);
    ``rate`` is the file's rate as audiotree must report it (Opus: 48 kHz).
    """

    case_id: str
    encoder: str
    steps: tuple[tuple[str, ...], ...]
    kind: str  # "lossless" | "lossy"
    ext: str
    source: str
    rate: int
    channels: int
    tools: tuple[str, ...]
    format: str  # a short name for the report: MP3, FLAC, Vorbis, Opus, WAV, AIFF, AAC, ALAC, WavPack, ...

    @property
    def filename(self) -> str:
        return f"{self.case_id}{self.ext}"


def _source_spec(source: str) -> tuple[int, int, int]:
    rate_ch, _, bits = source.partition("-")
    rate, channels = rate_ch.split("x")
    return int(rate), int(channels), int(bits or 16)


CASES: list[Case] = []


def _add(case_id: str, encoder: str, fmt: str, kind: str, ext: str, source: str, *steps, rate: int | None = None,
         tools: tuple[str, ...] | None = None) -> None:
    src_rate, channels, _ = _source_spec(source)
    if tools is None:
        tools = tuple(sorted({s[0] for s in steps if s[0] != "py"}))
    CASES.append(Case(case_id, encoder, tuple(tuple(s) for s in steps), kind, ext, source, rate or src_rate,
                      channels, tools, fmt))


FF = ("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-i", "{src}")


def _ff(*args: str) -> tuple[str, ...]:
    return FF + tuple(args) + ("{out}",)


# ---------------------------------------------------------------- MP3
# MPEG-1 (32/44.1/48 kHz), MPEG-2 (16/22.05/24 kHz), MPEG-2.5 (8/11.025/12 kHz).
_CBR = {8000: "32k", 11025: "32k", 12000: "40k", 16000: "48k", 22050: "64k", 24000: "64k", 32000: "96k",
        44100: "128k", 48000: "160k"}
for _rate, _br in _CBR.items():
    for _ch in (1, 2):
        _add(f"mp3-ffmpeg-cbr-{_rate}x{_ch}", "ffmpeg", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
             _ff("-c:a", "libmp3lame", "-b:a", _br))
for _rate, _ch, _q in ((44100, 2, 2), (44100, 1, 6), (48000, 2, 4), (22050, 2, 4), (16000, 1, 7), (8000, 1, 5),
                       (32000, 2, 3), (11025, 2, 5), (24000, 1, 3)):
    _add(f"mp3-ffmpeg-vbr{_q}-{_rate}x{_ch}", "ffmpeg", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
         _ff("-c:a", "libmp3lame", "-q:a", str(_q)))
for _rate, _ch, _br in ((44100, 2, "128k"), (22050, 1, "48k"), (48000, 1, "96k")):
    _add(f"mp3-ffmpeg-abr-{_rate}x{_ch}", "ffmpeg", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
         _ff("-c:a", "libmp3lame", "-abr", "1", "-b:a", _br))
for _rate, _ch in ((44100, 2), (16000, 1)):
    _add(f"mp3-ffmpeg-bitexact-{_rate}x{_ch}", "ffmpeg", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
         _ff("-fflags", "+bitexact", "-c:a", "libmp3lame", "-b:a", _CBR[_rate]))
for _rate, _ch, _mode in ((44100, 2, "cbr"), (44100, 2, "vbr"), (22050, 1, "cbr"), (16000, 1, "vbr")):
    _rc = ("-b:a", _CBR[_rate]) if _mode == "cbr" else ("-q:a", "4")
    _add(f"mp3-ffmpeg-noxing-{_mode}-{_rate}x{_ch}", "ffmpeg", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
         _ff("-c:a", "libmp3lame", *_rc, "-write_xing", "0"))
_add("mp3-ffmpeg-id3v2-cover-44100x2", "ffmpeg", "MP3", "lossy", ".mp3", "44100x2",
     FF + ("-i", "{cover}", "-map", "0:a", "-map", "1:v", "-c:a", "libmp3lame", "-b:a", "128k", "-c:v", "copy",
           "-id3v2_version", "3", "-metadata", "title=Matrix", "-metadata:s:v", "comment=Cover (front)", "{out}"))
for _rate, _ch in ((44100, 2), (22050, 1)):
    _add(f"mp3-ffmpeg-id3v1-{_rate}x{_ch}", "ffmpeg", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
         _ff("-c:a", "libmp3lame", "-b:a", _CBR[_rate], "-write_id3v1", "1", "-metadata", "title=Matrix",
             "-metadata", "artist=audiotree"))
# libshine writes MPEG-1 rates only (ffmpeg would resample a 22.05 kHz input to 32 kHz).
for _rate, _ch, _br in ((44100, 2, "128k"), (48000, 1, "96k"), (32000, 2, "128k"), (32000, 1, "64k")):
    _add(f"mp3-shine-{_rate}x{_ch}", "libshine", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
         _ff("-c:a", "libshine", "-b:a", _br), tools=("ffmpeg:libshine",))

_LAME = ("lame", "--quiet")
for _rate, _ch, _args in ((44100, 2, ("-b", "128")), (44100, 1, ("-b", "96")), (22050, 2, ("-b", "64")),
                          (8000, 1, ("-b", "24")), (48000, 2, ("-b", "192"))):
    _add(f"mp3-lame-cbr-{_rate}x{_ch}", "lame", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
         _LAME + _args + ("{src}", "{out}"))
for _rate, _ch, _v in ((44100, 2, "2"), (48000, 1, "5"), (16000, 2, "4"), (11025, 1, "7"), (24000, 2, "3")):
    _add(f"mp3-lame-vbr{_v}-{_rate}x{_ch}", "lame", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
         _LAME + ("-V", _v, "{src}", "{out}"))
for _rate, _ch, _args in ((44100, 2, ("-b", "128")), (44100, 2, ("-V", "3")), (22050, 1, ("-b", "64"))):
    _mode = "cbr" if _args[0] == "-b" else "vbr"
    _add(f"mp3-lame-notag-{_mode}-{_rate}x{_ch}", "lame", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
         _LAME + ("-t",) + _args + ("{src}", "{out}"))
for _rate, _ch in ((44100, 2), (16000, 1)):
    _add(f"mp3-lame-crc-{_rate}x{_ch}", "lame", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
         _LAME + ("-p", "-b", _CBR[_rate].rstrip("k"), "{src}", "{out}"))
_add("mp3-lame-abr-32000x2", "lame", "MP3", "lossy", ".mp3", "32000x2", _LAME + ("--abr", "96", "{src}", "{out}"))
_add("mp3-lame-id3v2-44100x2", "lame", "MP3", "lossy", ".mp3", "44100x2",
     _LAME + ("-b", "128", "--add-id3v2", "--tt", "Matrix", "--ta", "audiotree", "{src}", "{out}"))
_add("mp3-lame-id3v1-22050x2", "lame", "MP3", "lossy", ".mp3", "22050x2",
     _LAME + ("-b", "64", "--id3v1-only", "--tt", "Matrix", "{src}", "{out}"))
_add("mp3-lame-ape-44100x2", "lame", "MP3", "lossy", ".mp3", "44100x2",
     _LAME + ("-b", "128", "{src}", "{out}"), ("py", "append_ape"))
for _rate, _ch, _c in ((44100, 2, "128"), (22050, 1, "-4.2"), (48000, 1, "96")):
    _add(f"mp3-sox-{_rate}x{_ch}", "sox", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
         ("sox", "{src}", "-C", _c, "{out}"))
for _rate, _ch in ((44100, 2), (16000, 1)):
    _add(f"mp3-soundfile-{_rate}x{_ch}", "soundfile", "MP3", "lossy", ".mp3", f"{_rate}x{_ch}",
         ("py", "soundfile", "MP3", "MPEG_LAYER_III"))

# ---------------------------------------------------------------- FLAC
_FLAC = ("flac", "--silent", "--force")
for _level in ("0", "5", "8"):
    _add(f"flac-flac-l{_level}-44100x2", "flac", "FLAC", "lossless", ".flac", "44100x2",
         _FLAC + (f"-{_level}", "-o", "{out}", "{src}"))
for _rate, _ch, _args, _name in ((48000, 2, ("--no-seektable",), "noseek"), (44100, 1, ("-b", "1152"), "b1152"),
                                  (22050, 2, ("-b", "4096"), "b4096"), (96000, 2, ("-b", "4608"), "b4608"),
                                  (8000, 1, ("-5",), "l5"), (16000, 2, ("-8",), "l8"), (88200, 2, ("-5",), "l5"),
                                  (32000, 1, ("-3",), "l3"), (11025, 2, ("-1",), "l1")):
    _add(f"flac-flac-{_name}-{_rate}x{_ch}", "flac", "FLAC", "lossless", ".flac", f"{_rate}x{_ch}",
         _FLAC + _args + ("-o", "{out}", "{src}"))
for _rate, _ch in ((96000, 2), (48000, 1), (44100, 2)):
    _add(f"flac-flac-24bit-{_rate}x{_ch}", "flac", "FLAC", "lossless", ".flac", f"{_rate}x{_ch}-24",
         _FLAC + ("-5", "-o", "{out}", "{src}"))
_add("flac-metaflac-picture-44100x2", "metaflac", "FLAC", "lossless", ".flac", "44100x2",
     _FLAC + ("-5", "-o", "{out}", "{src}"), ("metaflac", "--import-picture-from={cover}", "{out}"))
_add("flac-metaflac-tags-48000x1", "metaflac", "FLAC", "lossless", ".flac", "48000x1",
     _FLAC + ("-5", "-o", "{out}", "{src}"),
     ("metaflac", "--set-tag=TITLE=Matrix", "--set-tag=ARTIST=audiotree", "--add-padding=8192", "{out}"))
_add("flac-flac-id3v2-44100x2", "flac", "FLAC", "lossless", ".flac", "44100x2",
     _FLAC + ("-5", "-o", "{out}", "{src}"), ("py", "prepend_id3v2"))
for _rate, _ch, _args, _name in ((44100, 2, (), "default"), (8000, 1, (), "default"),
                                  (48000, 2, ("-compression_level", "12"), "l12")):
    _add(f"flac-ffmpeg-{_name}-{_rate}x{_ch}", "ffmpeg", "FLAC", "lossless", ".flac", f"{_rate}x{_ch}",
         _ff("-c:a", "flac", *_args))
_add("flac-ffmpeg-24bit-96000x1", "ffmpeg", "FLAC", "lossless", ".flac", "96000x1-24",
     _ff("-c:a", "flac", "-sample_fmt", "s32"))
_add("flac-sox-22050x2", "sox", "FLAC", "lossless", ".flac", "22050x2", ("sox", "{src}", "{out}"))
_add("flac-sox-24bit-48000x2", "sox", "FLAC", "lossless", ".flac", "48000x2-24", ("sox", "{src}", "{out}"))
_add("flac-soundfile-44100x2", "soundfile", "FLAC", "lossless", ".flac", "44100x2", ("py", "soundfile", "FLAC", "PCM_16"))
_add("flac-soundfile-24bit-96000x1", "soundfile", "FLAC", "lossless", ".flac", "96000x1-24",
     ("py", "soundfile", "FLAC", "PCM_24"))

# ---------------------------------------------------------------- Ogg Vorbis
for _rate, _ch, _q in ((44100, 2, "0"), (44100, 2, "5"), (44100, 2, "10"), (22050, 1, "3"), (48000, 1, "5"),
                       (8000, 1, "1"), (16000, 2, "4"), (96000, 2, "6"), (32000, 2, "2")):
    _add(f"vorbis-oggenc-q{_q}-{_rate}x{_ch}", "oggenc", "Vorbis", "lossy", ".ogg", f"{_rate}x{_ch}",
         ("oggenc", "--quiet", "-q", _q, "-o", "{out}", "{src}"))
for _rate, _ch in ((44100, 2), (32000, 1), (11025, 1)):
    _add(f"vorbis-ffmpeg-{_rate}x{_ch}", "ffmpeg", "Vorbis", "lossy", ".ogg", f"{_rate}x{_ch}",
         _ff("-c:a", "libvorbis", "-q:a", "4"))
_add("vorbis-sox-44100x2", "sox", "Vorbis", "lossy", ".ogg", "44100x2", ("sox", "{src}", "{out}"))
_add("vorbis-soundfile-22050x2", "soundfile", "Vorbis", "lossy", ".ogg", "22050x2", ("py", "soundfile", "OGG", "VORBIS"))

# ---------------------------------------------------------------- Opus
# libsndfile decodes an Ogg Opus file at the input rate its OpusHead records when Opus can decode at that rate
# (8/12/16/24/48 kHz), else at 48 kHz; PyAV (WebM, Matroska) always decodes at 48 kHz.
def _opus_rate(rate: int) -> int:
    return rate if rate in (8000, 12000, 16000, 24000, 48000) else 48000



for _rate, _ch, _br in ((16000, 1, "16"), (16000, 2, "32"), (44100, 2, "64"), (48000, 2, "96"), (48000, 1, "128"),
                        (8000, 1, "24"), (44100, 1, "48"), (24000, 2, "40")):
    _add(f"opus-opusenc-b{_br}-{_rate}x{_ch}", "opusenc", "Opus", "lossy", ".opus", f"{_rate}x{_ch}",
         ("opusenc", "--quiet", "--bitrate", _br, "{src}", "{out}"), rate=_opus_rate(_rate))
for _rate, _ch in ((48000, 2), (24000, 1), (16000, 1)):
    _add(f"opus-ffmpeg-{_rate}x{_ch}", "ffmpeg", "Opus", "lossy", ".opus", f"{_rate}x{_ch}",
         _ff("-c:a", "libopus", "-b:a", "64k"), rate=_opus_rate(_rate))
_add("opus-ffmpeg-webm-48000x2", "ffmpeg", "Opus", "lossy", ".webm", "48000x2",
     _ff("-c:a", "libopus", "-b:a", "96k"), rate=48000)
_add("opus-ffmpeg-mka-48000x1", "ffmpeg", "Opus", "lossy", ".mka", "48000x1",
     _ff("-c:a", "libopus", "-b:a", "64k"), rate=48000)
_add("opus-soundfile-48000x2", "soundfile", "Opus", "lossy", ".opus", "48000x2", ("py", "soundfile", "OGG", "OPUS"))

# ---------------------------------------------------------------- WAV
for _rate, _ch, _sub in ((8000, 1, "PCM_U8"), (44100, 2, "PCM_16"), (96000, 2, "PCM_24"), (48000, 1, "PCM_32"),
                         (44100, 2, "FLOAT"), (22050, 1, "DOUBLE"), (11025, 2, "PCM_16"), (88200, 1, "FLOAT")):
    _add(f"wav-soundfile-{_sub.lower()}-{_rate}x{_ch}", "soundfile", "WAV", "lossless", ".wav", f"{_rate}x{_ch}",
         ("py", "soundfile", "WAV", _sub))
for _rate, _ch, _sub in ((48000, 2, "PCM_16"), (44100, 1, "FLOAT"), (96000, 2, "PCM_24")):
    _add(f"wav-soundfile-wavex-{_sub.lower()}-{_rate}x{_ch}", "soundfile", "WAV", "lossless", ".wav",
         f"{_rate}x{_ch}", ("py", "soundfile", "WAVEX", _sub))
for _rate, _ch, _codec in ((8000, 1, "pcm_u8"), (16000, 2, "pcm_s16le"), (48000, 2, "pcm_s24le"),
                           (44100, 1, "pcm_s32le"), (32000, 2, "pcm_f32le"), (24000, 1, "pcm_f64le"),
                           (12000, 2, "pcm_s16le")):
    _add(f"wav-ffmpeg-{_codec}-{_rate}x{_ch}", "ffmpeg", "WAV", "lossless", ".wav", f"{_rate}x{_ch}",
         _ff("-c:a", _codec))
_add("wav-ffmpeg-rf64-44100x2", "ffmpeg", "WAV", "lossless", ".wav", "44100x2",
     _ff("-c:a", "pcm_s16le", "-rf64", "always"))
_add("wav-ffmpeg-rf64-24bit-48000x1", "ffmpeg", "WAV", "lossless", ".wav", "48000x1-24",
     _ff("-c:a", "pcm_s24le", "-rf64", "always"))
_add("wav-ffmpeg-list-bext-44100x2", "ffmpeg", "WAV", "lossless", ".wav", "44100x2",
     _ff("-c:a", "pcm_s16le", "-write_bext", "1", "-metadata", "title=Matrix", "-metadata", "artist=audiotree",
         "-metadata", "comment=a LIST/INFO chunk and a bext chunk before data", "-metadata",
         "originator=audiotree"))
_add("wav-ffmpeg-list-22050x1", "ffmpeg", "WAV", "lossless", ".wav", "22050x1",
     _ff("-c:a", "pcm_s16le", "-metadata", "title=Matrix"))
_add("wav-python-oddchunk-44100x2", "soundfile", "WAV", "lossless", ".wav", "44100x2",
     ("py", "soundfile", "WAV", "PCM_16"), ("py", "odd_chunk"))
_add("wav-python-oddchunk-8000x1", "soundfile", "WAV", "lossless", ".wav", "8000x1",
     ("py", "soundfile", "WAV", "PCM_16"), ("py", "odd_chunk"))
for _rate, _ch, _args, _name in ((44100, 2, ("-b", "24"), "s24"), (48000, 1, ("-e", "floating-point", "-b", "32"), "f32"),
                                  (8000, 2, ("-e", "unsigned-integer", "-b", "8"), "u8"), (16000, 1, (), "s16"),
                                  (96000, 2, ("-e", "signed-integer", "-b", "32"), "s32")):
    _add(f"wav-sox-{_name}-{_rate}x{_ch}", "sox", "WAV", "lossless", ".wav", f"{_rate}x{_ch}",
         ("sox", "{src}", *_args, "{out}"))
_add("wav-sox-comment-22050x2", "sox", "WAV", "lossless", ".wav", "22050x2",
     ("sox", "{src}", "--comment", "matrix", "{out}"))

# ---------------------------------------------------------------- AIFF, AIFC, others
_add("aiff-sox-44100x2", "sox", "AIFF", "lossless", ".aiff", "44100x2", ("sox", "{src}", "{out}"))
_add("aiff-sox-24bit-48000x1", "sox", "AIFF", "lossless", ".aiff", "48000x1-24", ("sox", "{src}", "{out}"))
_add("aifc-sox-22050x2", "sox", "AIFF", "lossless", ".aifc", "22050x2", ("sox", "{src}", "{out}"))
_add("aifc-sox-float-16000x1", "sox", "AIFF", "lossless", ".aifc", "16000x1",
     ("sox", "{src}", "-e", "floating-point", "-b", "32", "{out}"))
_add("aiff-ffmpeg-32000x2", "ffmpeg", "AIFF", "lossless", ".aiff", "32000x2", _ff("-c:a", "pcm_s16be"))
_add("aiff-soundfile-88200x2", "soundfile", "AIFF", "lossless", ".aiff", "88200x2", ("py", "soundfile", "AIFF", "PCM_16"))
_add("au-sox-8000x1", "sox", "AU", "lossless", ".au", "8000x1", ("sox", "{src}", "{out}"))
_add("w64-sox-44100x2", "sox", "W64", "lossless", ".w64", "44100x2", ("sox", "{src}", "{out}"))
_add("caf-ffmpeg-48000x2", "ffmpeg", "CAF", "lossless", ".caf", "48000x2", _ff("-c:a", "pcm_s16le"))

# ---------------------------------------------------------------- AAC and ALAC (PyAV)
for _rate, _ch, _br in ((44100, 2, "128k"), (48000, 1, "96k"), (22050, 2, "64k"), (16000, 1, "32k"),
                        (32000, 2, "96k")):
    _add(f"aac-ffmpeg-m4a-{_rate}x{_ch}", "ffmpeg", "AAC", "lossy", ".m4a", f"{_rate}x{_ch}",
         _ff("-c:a", "aac", "-b:a", _br))
for _rate, _ch in ((44100, 2), (24000, 1)):
    _add(f"aac-ffmpeg-adts-{_rate}x{_ch}", "ffmpeg", "AAC", "lossy", ".aac", f"{_rate}x{_ch}",
         _ff("-c:a", "aac", "-b:a", "96k"))
for _rate, _ch, _src in ((44100, 2, "44100x2"), (96000, 2, "96000x2-24"), (16000, 1, "16000x1")):
    _add(f"alac-ffmpeg-{_rate}x{_ch}{'-24bit' if _src.endswith('24') else ''}", "ffmpeg", "ALAC", "lossless",
         ".m4a", _src, _ff("-c:a", "alac"))

# ---------------------------------------------------------------- WavPack
for _rate, _ch, _args, _src in ((44100, 2, (), "44100x2"), (48000, 1, ("-hh",), "48000x1"),
                                (96000, 2, (), "96000x2-24")):
    _add(f"wavpack-{_rate}x{_ch}{'-24bit' if _src.endswith('24') else ''}", "wavpack", "WavPack", "lossless", ".wv",
         _src, ("wavpack", "-q", "-y", *_args, "{src}", "-o", "{out}"))


# ---------------------------------------------------------------- sources and byte-level steps
def source_signal(rate: int, channels: int, seconds: float = SECONDS) -> np.ndarray:
    """A deterministic test signal ``(frames, channels)`` float64 within +-0.7: chirps under an amplitude
    envelope plus a little noise (a unique alignment, no long periodicity)."""
    n = int(round(seconds * rate))
    t = np.arange(n) / rate
    rng = np.random.default_rng([rate, channels])
    top = min(rate / 2 * 0.8, 6000.0)
    out = np.empty((n, channels))
    for c in range(channels):
        x = np.zeros(n)
        for k, (f0, f1) in enumerate(((180.0, 420.0), (700.0, 1300.0), (2200.0, top))):
            f0, f1 = (f0 * (1 + 0.1 * c), min(f1, top))
            phase = 2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * seconds))
            x += (0.2 - 0.05 * k) * np.sin(phase + c)
        envelope = 0.6 + 0.4 * np.sin(2 * np.pi * (1.3 + 0.4 * c) * t) ** 2
        out[:, c] = envelope * x + 0.01 * rng.standard_normal(n)
    fade = min(n // 20, int(0.02 * rate))
    ramp = np.linspace(0.0, 1.0, fade)
    out[:fade] *= ramp[:, None]
    out[-fade:] *= ramp[::-1, None]
    return out


def _write_sources(folder: Path, cases: list[Case]) -> dict[str, Path]:
    import soundfile

    paths = {}
    for source in sorted({c.source for c in cases}):
        rate, channels, bits = _source_spec(source)
        path = folder / f"src-{source}.wav"
        soundfile.write(path, source_signal(rate, channels), rate, subtype=f"PCM_{bits}")
        paths[source] = path
    return paths


def _png(path: Path, width: int = 270, height: int = 250) -> None:
    """A valid PNG of seeded noise, about 200 KB (a cover image)."""
    raw = np.random.default_rng(3).integers(0, 256, (height, 1 + width * 3), dtype=np.uint8)
    raw[:, 0] = 0  # filter type None on every row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw.tobytes(), 1))
                     + chunk(b"IEND", b""))


def _syncsafe(n: int) -> bytes:
    return bytes([(n >> 21) & 0x7F, (n >> 14) & 0x7F, (n >> 7) & 0x7F, n & 0x7F])


def _prepend_id3v2(out: Path, src: Path, *_) -> None:
    """An ID3v2.3 tag (a title and 1 KiB of padding) in front of the file, as taggers write it."""
    text = b"\x00Matrix"
    frame = b"TIT2" + struct.pack(">I", len(text)) + b"\x00\x00" + text
    body = frame + bytes(1024)
    out.write_bytes(b"ID3\x03\x00\x00" + _syncsafe(len(body)) + body + out.read_bytes())


def _append_ape(out: Path, src: Path, *_) -> None:
    """An APEv2 tag (header, two items, footer) at the end of the file."""
    items = b""
    for key, value in ((b"Title", b"Matrix"), (b"Artist", b"audiotree")):
        items += struct.pack("<II", len(value), 0) + key + b"\x00" + value
    size = len(items) + 32

    def block(is_header: bool) -> bytes:
        flags = (1 << 31) | (1 << 29 if is_header else 0)
        return b"APETAGEX" + struct.pack("<IIII", 2000, size, 2, flags) + bytes(8)

    out.write_bytes(out.read_bytes() + block(True) + items + block(False))


def _odd_chunk(out: Path, src: Path, *_) -> None:
    """A 5-byte private chunk (plus its pad byte) between ``fmt `` and ``data``."""
    data = out.read_bytes()
    pos = 12
    while data[pos:pos + 4] != b"data":
        pos += 8 + struct.unpack_from("<I", data, pos + 4)[0]
    odd = b"xtra" + struct.pack("<I", 5) + b"odd!!" + b"\x00"
    data = data[:pos] + odd + data[pos:]
    out.write_bytes(data[:4] + struct.pack("<I", len(data) - 8) + data[8:])


def _soundfile(out: Path, src: Path, fmt: str, subtype: str) -> None:
    import soundfile

    data, rate = soundfile.read(src, dtype="float64")
    soundfile.write(out, data, rate, format=fmt, subtype=subtype)


PY_STEPS: dict[str, Callable[..., None]] = {"prepend_id3v2": _prepend_id3v2, "append_ape": _append_ape,
                                            "odd_chunk": _odd_chunk, "soundfile": _soundfile}


# ---------------------------------------------------------------- building
@dataclasses.dataclass
class Built:
    """A case's file and its oracle (``None`` with ``error`` when the build failed)."""

    case: Case
    path: Path
    oracle: np.ndarray | None = None  # (frames, channels) float32, ffmpeg's decode
    error: str | None = None


def _tool_present(tool: str) -> bool:
    if tool == "ffmpeg:libshine":
        if shutil.which("ffmpeg") is None:
            return False
        out = subprocess.run(["ffmpeg", "-hide_banner", "-encoders"], capture_output=True, text=True).stdout
        return " libshine " in out
    return shutil.which(tool) is not None


def tools_present(cases: list[Case] = CASES) -> dict[str, bool]:
    """``{tool: present}`` for every tool the cases use (ffmpeg always: it decodes the oracle)."""
    tools = sorted({t for c in cases for t in c.tools} | {"ffmpeg"})
    return {t: _tool_present(t) for t in tools}


def decode_oracle(path: Path, rate: int, channels: int) -> tuple[np.ndarray, int]:
    """ffmpeg's decode of ``path`` as ``(frames, channels)`` float32 at ``rate`` (no resampling for the file's
    own rate), and the rate of the file's stream as ffmpeg reads it."""
    out = subprocess.run(["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "info", "-i", str(path), "-f", "f32le",
                          "-ac", str(channels), "-ar", str(rate), "-"], capture_output=True, check=True, timeout=120)
    found = re.search(rb"Stream #0:\d+.*?: Audio: .*?, (\d+) Hz", out.stderr)
    native = int(found.group(1)) if found else 0
    return np.frombuffer(out.stdout, dtype="<f4").reshape(-1, channels).copy(), native


def _build_one(case: Case, folder: Path, sources: dict[str, Path], cover: Path) -> Built:
    out = folder / case.filename
    built = Built(case, out)
    fill = {"src": str(sources[case.source]), "out": str(out), "tmp": str(folder / f"{case.case_id}.tmp"),
            "cover": str(cover)}
    try:
        for step in case.steps:
            if step[0] == "py":
                PY_STEPS[step[1]](out, sources[case.source], *step[2:])
                continue
            argv = [a.format(**fill) for a in step]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
        built.oracle, native = decode_oracle(out, case.rate, case.channels)
        expected = 48000 if case.format == "Opus" else case.rate  # ffmpeg decodes every Opus stream at 48 kHz
        if native != expected:  # the encoder resampled: the case must declare the rate it wrote
            raise RuntimeError(f"the encoder wrote a {native} Hz stream; the case declares {expected} Hz")
    except Exception as exc:  # reported per case by the tests
        built.error = f"{type(exc).__name__}: {exc}"
    return built


def build(folder: str | os.PathLike, cases: list[Case] = CASES, jobs: int = 4) -> dict[str, Built]:
    """Writes every case's file under ``folder`` and decodes its oracle; ``{case_id: Built}``.

    Encoders run ``jobs`` at a time (threads, one subprocess each). A case whose
    tool is missing is not built (``error`` says which tool).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    src_dir = folder.parent / f"{folder.name}-sources"
    src_dir.mkdir(exist_ok=True)
    sources = _write_sources(src_dir, cases)
    cover = src_dir / "cover.png"
    _png(cover)
    present = tools_present(cases)
    result: dict[str, Built] = {}
    runnable = []
    for case in cases:
        lacking = [t for t in case.tools if not present[t]] + ([] if present["ffmpeg"] else ["ffmpeg"])
        if lacking:
            result[case.case_id] = Built(case, folder / case.filename, error=f"missing tool: {', '.join(lacking)}")
        else:
            runnable.append(case)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for built in pool.map(lambda c: _build_one(c, folder, sources, cover), runnable):
            result[built.case.case_id] = built
    return {c.case_id: result[c.case_id] for c in cases}


# ---------------------------------------------------------------- comparing
def _corr(a: np.ndarray, b: np.ndarray) -> float:
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    a, b = a - a.mean(), b - b.mean()
    denom = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / denom) if denom > 0 else 0.0


def find_lag(got: np.ndarray, oracle: np.ndarray, max_lag: int = MAX_LAG) -> int:
    """The lag ``L`` (``got[i]`` ~ ``oracle[i + L]``) within ``+-max_lag`` that maximises the cross-correlation."""
    a, b = got.astype(np.float64).mean(axis=1), oracle.astype(np.float64).mean(axis=1)
    n = 1 << int(np.ceil(np.log2(len(a) + len(b) + 1)))
    xc = np.fft.irfft(np.fft.rfft(b, n) * np.conj(np.fft.rfft(a, n)), n)
    lags = np.r_[0:max_lag + 1, -max_lag:0]
    values = xc[lags % n]
    return int(lags[int(np.argmax(values))])


def _aligned(got: np.ndarray, oracle: np.ndarray, lag: int, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``got`` (read at ``start``) and the oracle's frames it should equal under ``lag``, cut to their overlap."""
    lo = start + lag
    skip = max(0, -lo)
    ref = oracle[max(0, lo): max(0, lo + len(got))]
    got = got[skip: skip + len(ref)]
    return got, ref[: len(got)]


def best_corr(got: np.ndarray, oracle: np.ndarray, lag: int, start: int, slack: int) -> tuple[float, int]:
    """(best correlation, its lag) of ``got`` read at frame ``start`` against the oracle, lags ``lag +- slack``."""
    best = (-2.0, lag)
    for candidate in range(lag - slack, lag + slack + 1):
        a, b = _aligned(got, oracle, candidate, start)
        if len(a) < len(got) // 2:
            continue
        best = max(best, (_corr(a, b), candidate))
    return best


def check_whole(built: Built, whole: np.ndarray, rate: int, channels: int) -> tuple[bool, str, int]:
    """(read right, what differs, lag) of a whole-file read against the oracle."""
    case, oracle = built.case, built.oracle
    if (rate, channels) != (case.rate, case.channels):
        return False, f"read as {rate} Hz x {channels} ch, expected {case.rate} Hz x {case.channels} ch", 0
    if case.kind == "lossless":
        if whole.shape != oracle.shape:
            return False, f"{len(whole)} frames, the oracle has {len(oracle)}", 0
        err = float(np.max(np.abs(whole.astype(np.float64) - oracle))) if len(whole) else 0.0
        return err <= LOSSLESS_ATOL, f"max difference {err:.3g}", 0
    slack = LENGTH_SLACK[case.ext.lstrip(".")]
    if abs(len(whole) - len(oracle)) > slack:
        return False, f"{len(whole)} frames, the oracle has {len(oracle)} (more than {slack} apart)", 0
    lag = find_lag(whole, oracle)
    a, b = _aligned(whole, oracle, lag)
    corr = _corr(a, b)
    return corr >= MIN_CORR, f"correlation {corr:.4f} at lag {lag}", lag


def check_excerpt(built: Built, got: np.ndarray, start: int, lag: int) -> tuple[bool, str]:
    """(read right, what differs) of an excerpt read at frame ``start`` (lossy: lags ``lag +- 2``)."""
    case, oracle = built.case, built.oracle
    if case.kind == "lossless":
        ref = oracle[start: start + len(got)]
        if ref.shape != got.shape:
            return False, f"{len(got)} frames at {start}, the oracle has {len(ref)} there"
        err = float(np.max(np.abs(got.astype(np.float64) - ref))) if len(got) else 0.0
        return err <= LOSSLESS_ATOL, f"max difference {err:.3g} at frame {start}"
    corr, best = best_corr(got, oracle, lag, start, EXCERPT_SLACK)
    return corr >= MIN_CORR, f"correlation {corr:.4f} at frame {start} (lag {best}, whole-file lag {lag})"


def check_item(built: Built, waveform: np.ndarray, offset: float, duration: float, sample_rate: int, lag: int,
               finish: Callable) -> tuple[bool, str]:
    """(right, what differs) of a dataset item ``waveform`` ``(C, T)`` read at ``offset`` seconds.

    ``finish(frames, native_rate, sample_rate, duration)`` turns the oracle's frames into an item (the
    library's downmix, resampling and fit to length); the frames are the oracle's at the item's offset
    (lossy: under lags ``lag +- 2``).
    """
    case, oracle = built.case, built.oracle
    start = int(round(offset * case.rate))
    count = int(np.ceil(duration * case.rate)) + (1 if sample_rate != case.rate else 0)
    if case.kind == "lossless":
        expected = finish(oracle[start: start + count], case.rate, sample_rate, duration)
        err = float(np.max(np.abs(expected - waveform)))
        return err <= 1e-4, f"max difference {err:.3g} at offset {offset:.4f} s"
    best = (-2.0, lag)
    for candidate in range(lag - EXCERPT_SLACK, lag + EXCERPT_SLACK + 1):
        lo = start + candidate
        if lo < 0:
            continue
        expected = finish(oracle[lo: lo + count], case.rate, sample_rate, duration)
        best = max(best, (_corr(expected, waveform), candidate))
    return best[0] >= MIN_CORR, f"correlation {best[0]:.4f} at offset {offset:.4f} s (lag {best[1]})"


# ---------------------------------------------------------------- reading a case the three ways
#: The dataset items: this long (seconds), at this rate, mono (the matrix mixes channel counts).
ITEM_SECONDS = 0.5
ITEM_RATE = 16000


def matrix_dataset(folder: str | os.PathLike):
    """One index-free ``create_audio_dataset`` over the matrix folder (random offsets, fixed duration, mono at
    :data:`ITEM_RATE`), and ``{file name: item index}``."""
    from audiotree.sources import ExcerptConfig, create_audio_dataset, find_audio_files
    from audiotree.sources.datasets.options import Order, Output

    ds = create_audio_dataset(str(folder), duration=ITEM_SECONDS, excerpt=ExcerptConfig(strategy="random"),
                              output=Output(sample_rate=ITEM_RATE, mono=True),
                              order=Order(shuffle=False, excerpt_seed=35))
    files = find_audio_files(str(folder))
    return ds, {os.path.basename(p): i for i, p in enumerate(files)}


def _finish(frames, native_rate, sample_rate, duration):
    from audiotree.io.excerpt import finish_frames

    data, _ = finish_frames(np.asarray(frames, np.float32), native_rate, sample_rate, duration, True, "constant")
    return data


def evaluate(built: Built, dataset=None) -> tuple[str, str, str | None]:
    """How audiotree reads ``built``: ``(outcome, detail, reason)``.

    ``outcome`` is ``"right"``, ``"refused"`` (an ``AudioReadError``; ``reason`` is its ``category``) or ``"wrong"``
    (read, but unlike ffmpeg's decode: ``detail`` says where). Reads (a) the whole file, (b) the two
    :data:`EXCERPTS`, and (c) with ``dataset`` (from :func:`matrix_dataset`) the file's item.
    """
    from audiotree import AudioTree
    from audiotree.errors import AudioReadError
    from audiotree.io import probe

    path = str(built.path)
    case = built.case
    try:
        info = probe(path)
        tree = AudioTree.from_file(path)
        whole = np.asarray(tree.waveform)[0].T
        ok, what, lag = check_whole(built, whole, int(tree.sample_rate), whole.shape[1])
        if not ok:
            return "wrong", f"whole read: {what}", None
        if info.frames != len(whole):
            return "wrong", f"probe says {info.frames} frames, the whole read has {len(whole)}", None
        for offset, duration in EXCERPTS:
            part = AudioTree.from_file(path, offset=offset, duration=duration)
            got = np.asarray(part.waveform)[0].T
            start = int(round(offset * info.sample_rate))
            ok, what = check_excerpt(built, got, start, lag)
            if not ok:
                return "wrong", f"excerpt at {offset} s: {what}", None
        if dataset is not None:
            ds, positions = dataset
            if built.path.name not in positions:
                return "wrong", f"the dataset over the matrix folder does not list {built.path.name}", None
            item = ds[positions[built.path.name]]
            if str(item.filepath[0]) != path:
                return "wrong", f"item {positions[built.path.name]} is {item.filepath[0]}, not {path}", None
            offset = float(np.asarray(item.offset)[0])
            waveform = np.asarray(item.waveform)[0]
            ok, what = check_item(built, waveform, offset, ITEM_SECONDS, ITEM_RATE, lag, _finish)
            if not ok:
                return "wrong", f"dataset item: {what}", None
        return "right", f"{case.case_id}: read right", None
    except AudioReadError as exc:
        return "refused", str(exc), getattr(exc, "category", None)
