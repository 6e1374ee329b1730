"""Writes tests/data/hf_parquet/train-00000-of-00001.parquet with Hugging Face ``datasets`` itself.

Run in a separate venv (never the project's): ``pip install datasets soundfile``, then
``python tests/data/hf_parquet/make_fixture.py``. Four short FLAC/WAV utterances
(8 kHz, deterministic noise and tones) with a transcript, a speaker and a number,
as ``Dataset.from_dict(...).cast_column("audio", Audio(decode=False)).to_parquet``
writes them: an ``audio`` struct column of ``{bytes, path}`` beside the others.
The fourth row's audio cell is not audio (a bad-input case the tests use).
"""

import io
import os

import numpy as np
import soundfile as sf
from datasets import Audio, Dataset

HERE = os.path.dirname(os.path.abspath(__file__))
RATE = 8000


def encode(x: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, RATE, format=fmt, subtype="PCM_16")
    return buf.getvalue()


def main() -> None:
    rng = np.random.default_rng(24)
    t = np.arange(int(0.6 * RATE)) / RATE
    clips = [
        (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32),
        (0.1 * rng.standard_normal(int(0.4 * RATE))).astype(np.float32),
        (0.2 * np.sin(2 * np.pi * 220 * t[: int(0.5 * RATE)])).astype(np.float32),
    ]
    audio = [
        {"bytes": encode(clips[0], "FLAC"), "path": "utt0.flac"},
        {"bytes": encode(clips[1], "WAV"), "path": "utt1.wav"},
        {"bytes": encode(clips[2], "FLAC"), "path": "utt2.flac"},
        {"bytes": b"this is not audio at all" * 4, "path": "broken.flac"},
    ]
    ds = Dataset.from_dict({
        "audio": audio,
        "text": ["a tone at four forty", "some noise", "a lower tone", "not audio"],
        "speaker": ["spk1", "spk2", "spk1", "spk3"],
        "score": [1.5, 2.0, 0.5, 0.0],
    }).cast_column("audio", Audio(decode=False))
    ds.to_parquet(os.path.join(HERE, "train-00000-of-00001.parquet"))


if __name__ == "__main__":
    main()
