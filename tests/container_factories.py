"""Test corpora in the shapes corpora ship in: one folder of FLAC files, the same files as tar shards and as Parquet.

Every item is the same encoded bytes in all three shapes, so datasets over
them must give identical items.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import soundfile

RATE = 16000


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def flac_bytes(seconds: float, seed: int, rate: int = RATE) -> bytes:
    rng = np.random.default_rng(seed)
    n = int(seconds * rate)
    # Loud and quiet stretches, so "loudest" has something to find.
    envelope = np.where((np.arange(n) // (rate // 4)) % 3 == seed % 3, 0.5, 0.02)
    x = (rng.standard_normal(n) * envelope).astype(np.float32)
    buf = io.BytesIO()
    soundfile.write(buf, x, rate, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


def make_corpus(root: Path, *, files: int = 8, per_shard: int = 2, seed: int = 0, extra_members: bool = True) -> dict:
    """``root/unpacked/uttNNNN.flac``, ``root/shards/train-NNNNNN.tar`` (with sidecars) and Parquet files.

    ``root/parquet/*.parquet`` has pyarrow's defaults (snappy, a dictionary
    page; row groups of 2), ``root/parquet_hf/*.parquet`` the layout Hugging
    Face ``datasets`` writes (audio bytes uncompressed and PLAIN, a page index;
    row groups of 3).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    unpacked, shards, parquet = root / "unpacked", root / "shards", root / "parquet"
    parquet_hf = root / "parquet_hf"
    for d in (unpacked, shards, parquet, parquet_hf):
        d.mkdir(parents=True, exist_ok=True)
    keys = [f"utt{i:04d}" for i in range(files)]
    data = {k: flac_bytes(0.8 + 0.35 * i, seed + i) for i, k in enumerate(keys)}
    labels = {k: {"speaker": f"spk{i % 3}", "n": i} for i, k in enumerate(keys)}
    for k in keys:
        (unpacked / f"{k}.flac").write_bytes(data[k])
    count = 0
    for s in range(0, files, per_shard):
        with tarfile.open(shards / f"train-{count:06d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for k in keys[s:s + per_shard]:
                add_member(tar, f"{k}.flac", data[k])
                add_member(tar, f"{k}.json", json.dumps(labels[k]).encode())
                add_member(tar, f"{k}.txt", f"words of {k}".encode())
                if extra_members:
                    add_member(tar, f"{k}.jpg", b"\xff\xd8 not looked at")
        count += 1
    half = files // 2
    for part, chunk in enumerate((keys[:half], keys[half:])):
        table = pa.table({
            "audio": pa.array([{"bytes": data[k], "path": f"{k}.flac"} for k in chunk],
                              type=pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            "speaker": [labels[k]["speaker"] for k in chunk],
        })
        pq.write_table(table, parquet / f"train-{part:05d}.parquet", row_group_size=2)
        pq.write_table(table, parquet_hf / f"train-{part:05d}.parquet", row_group_size=3,
                       compression={"audio.bytes": "none", "audio.path": "none", "speaker": "snappy"},
                       use_dictionary=["speaker"], write_page_index=True)
    return {"unpacked": unpacked, "shards": shards, "parquet": parquet, "parquet_hf": parquet_hf, "keys": keys, "data": data,
            "labels": labels, "num_shards": count}
