"""16-bit PCM (WAV, AIFF) is read as integers and scaled: the same samples as libsndfile's float read, in one read.

libsndfile converts to float through an 8 KiB buffer, so a float read of a
3 s stereo excerpt is ~65 reads of its source, each a Python callback for a
remote file. Read as int16 the excerpt is one read; the scale (2**-15) is
libsndfile's own, so the samples are equal bit for bit. Files written by sox.
"""

from __future__ import annotations

import io
import shutil
import subprocess

import numpy as np
import pytest
import soundfile

from audiotree.io import AudioFile
from audiotree.io.soundfile_reader import SoundfileReader

pytestmark = pytest.mark.skipif(shutil.which("sox") is None, reason="sox is not installed")


def _sox(path, *args):
    subprocess.run(["sox", "-n", *args, str(path), "synth", "4", "pinknoise", "sine", "300", "vol", "0.9"],
                   check=True, capture_output=True)
    return path


class _CountedBytes(io.BytesIO):
    reads = 0

    def readinto(self, buffer):
        self.reads += 1
        return super().readinto(buffer)

    def read(self, size=-1):
        self.reads += 1
        return super().read(size)


@pytest.mark.parametrize("name, args", [
    ("s16.wav", ["-r", "44100", "-c", "2", "-b", "16"]),
    ("m16.wav", ["-r", "16000", "-c", "1", "-b", "16"]),
    ("s16.aiff", ["-r", "48000", "-c", "2", "-b", "16"]),   # big-endian samples
    ("s24.wav", ["-r", "44100", "-c", "2", "-b", "24"]),    # (read as floats, as before)
    ("u8.wav", ["-r", "8000", "-c", "1", "-b", "8"]),
])
def test_reads_equal_libsndfiles_float_read(tmp_path, name, args):
    path = _sox(tmp_path / name, *args)
    with soundfile.SoundFile(path) as f:
        whole = f.read(dtype="float32", always_2d=True)
    with AudioFile(str(path)) as f:
        for start, count in ((0, 1000), (12345, 50000), (len(whole) - 700, 5000), (len(whole), 10)):
            got = f.read(start, count)
            assert got.dtype == np.float32 and got.shape[1] == whole.shape[1]
            np.testing.assert_array_equal(got, whole[start:start + count])
        np.testing.assert_array_equal(f.read(0, None), whole)


def test_a_16_bit_excerpt_is_one_read_of_its_source(tmp_path):
    path = _sox(tmp_path / "s16.wav", "-r", "44100", "-c", "2", "-b", "16")
    source = _CountedBytes(path.read_bytes())
    reader = SoundfileReader(str(path), source)
    try:
        reader.read(44100, 3 * 44100)  # (the first read moves to the excerpt)
        before = source.reads
        x = reader.read(2 * 44100, 3 * 44100)
        assert source.reads - before <= 2, source.reads - before  # a float read made 65 here
    finally:
        reader.close()
    np.testing.assert_array_equal(x, soundfile.read(path, start=2 * 44100, frames=3 * 44100, dtype="float32")[0])
