"""A small corpus of every source kind with labels, for the label-semantics tests.

``make_label_corpus(root)`` writes, under ``root``:

* ``wav/utt-N.wav``: plain files (0.2 s at 8 kHz), with ``wav/labels.csv``
  (keys relative to the labels file: ``utt-N.wav``; a ``speaker`` and a ``text``);
* ``wds/train-00000N.tar``: webdataset shards written by ``webdataset.TarWriter``,
  each member ``sN-K.flac`` with a ``.json`` sidecar (``text``, ``speaker``) and a ``.txt``;
* ``hf/train-00000-of-00001.parquet``: the Parquet file Hugging Face ``datasets``
  wrote (``tests/data/hf_parquet``: ``text``, ``speaker``, ``score``; the fourth
  row is not audio), copied.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import soundfile

RATE = 8000
HF_FIXTURE = Path(__file__).resolve().parent / "data" / "hf_parquet" / "train-00000-of-00001.parquet"


def audio_bytes(seed: int, fmt: str = "FLAC", seconds: float = 0.2) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    soundfile.write(buf, (0.2 * rng.standard_normal(int(seconds * RATE))).astype(np.float32), RATE, format=fmt,
                    subtype="PCM_16")
    return buf.getvalue()


def write_shards(folder: Path, shards: int = 2, per_shard: int = 3, *, txt: bool = True, prefix: str = "train",
                 fields: dict | None = None) -> list[str]:
    """Shards written by webdataset's own writer; returns the member keys in order."""
    import webdataset

    folder.mkdir(parents=True, exist_ok=True)
    keys = []
    for s in range(shards):
        with webdataset.TarWriter(str(folder / f"{prefix}-{s:06d}.tar")) as sink:
            for k in range(per_shard):
                key = f"s{s}-{k}"
                sample = {"__key__": key, "flac": audio_bytes(10 * s + k),
                          "json": {"text": f"shard words {s} {k}", "speaker": f"spk{k % 2}",
                                   **(fields or {})}}
                if txt:
                    sample["txt"] = f"plain words {s} {k}"
                sink.write(sample)
                keys.append(key)
    return keys


def make_label_corpus(root: Path) -> dict:
    wav = root / "wav"
    wav.mkdir(parents=True, exist_ok=True)
    names = [f"utt-{i}.wav" for i in range(3)]
    for i, name in enumerate(names):
        (wav / name).write_bytes(audio_bytes(100 + i, "WAV"))
    rows = "".join(f"{name},spk{i % 2},file words {i}\n" for i, name in enumerate(names))
    (wav / "labels.csv").write_text("path,speaker,text\n" + rows, encoding="utf-8")
    keys = write_shards(root / "wds")
    hf = root / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    shutil.copy(HF_FIXTURE, hf / HF_FIXTURE.name)
    return {"root": root, "wav_names": names, "shard_keys": keys}
