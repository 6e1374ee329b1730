"""The windowed builder checks every number it takes from a corpus index: a hostile duration is a clear error naming
the index and the row, never an OverflowError, a giant allocation, or a third of the windows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.index import build_index
from audiotree.sources import Corpus, WindowConfig, create_windowed_audio_dataset

RATE = 8_000


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile_windowed")
    rng = np.random.default_rng(0)
    for i in range(3):
        soundfile.write(root / "audio" / f"f{i}.wav" if (root / "audio").exists() else _mk(root) / f"f{i}.wav",
                        (0.1 * rng.standard_normal(2 * RATE)).astype(np.float32), RATE)
    out = root / "good.parquet"
    build_index(str(root / "audio"), out, executor="serial", show_progress=False, loudness=False)
    return root, out


def _mk(root):
    (root / "audio").mkdir()
    return root / "audio"


def _with_duration(src, dst, value):
    table = pq.read_table(src)
    durations = table.column("duration").to_pylist()
    durations[1] = value
    i = table.column_names.index("duration")
    table = table.set_column(i, "duration", pa.array(durations, type=pa.float64()))
    pq.write_table(table, dst)  # the schema metadata (the audiotree header) is kept
    return dst


@pytest.mark.parametrize("value, why", [
    (float("inf"), "not a finite number"),
    (float("nan"), "not a finite number"),
    (-3.0, "negative"),
    (1e300, "implausible"),
    (1e9, "implausible"),
])
def test_a_hostile_index_duration_is_refused_naming_the_index_and_row(index, tmp_path, value, why):
    _, good = index
    bad = _with_duration(good, tmp_path / "bad.parquet", value)
    with pytest.raises(ValueError, match=why) as info:
        create_windowed_audio_dataset(corpus=Corpus(index=bad), window=WindowConfig(duration=0.5), sample_rate=RATE)
    message = str(info.value)
    assert str(bad) in message and "f1.wav" in message and "row" in message


def test_a_duration_longer_than_the_file_is_a_read_error(index, tmp_path):
    _, good = index
    bad = _with_duration(good, tmp_path / "long.parquet", 60.0)  # the file holds 2 s
    ds = create_windowed_audio_dataset(corpus=Corpus(index=bad), window=WindowConfig(duration=0.5, jitter=False), sample_rate=RATE, shuffle=False)
    with pytest.raises(AudioReadError, match=r"f1\.wav") as info:
        for i in range(len(ds)):
            ds[i]
    assert "index" in str(info.value)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, 1e30])
def test_bad_explicit_durations_name_the_file(index, value):
    root, _ = index
    files = sorted(str(p) for p in (root / "audio").glob("*.wav"))
    durations = {f: 2.0 for f in files} | {files[0]: value}
    with pytest.raises(ValueError, match=r"The duration of '.*f0\.wav' in durations="):
        create_windowed_audio_dataset(filepaths=files, durations=durations, window=WindowConfig(duration=0.5), sample_rate=RATE)
