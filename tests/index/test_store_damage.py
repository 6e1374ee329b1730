"""A flipped byte in any file of a column store is refused with one clear error naming that file (issue 36):
never a wrong label id, segment span, group or excerpt, a StaleFileError blaming a healthy audio file, or an
IndexError/KeyError/TokenError/UnicodeDecodeError."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import soundfile

from audiotree import ExcerptConfig
from audiotree.errors import ColumnStoreError
from audiotree.index import build_index, open_index
from audiotree.index.columns import open_columns
from audiotree.sources import Corpus, WindowConfig, create_audio_dataset, create_balanced_audio_dataset
from audiotree.sources import create_windowed_audio_dataset
from audiotree.synth import synthesize

RATE = 8000


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    """A whole-file index (groups, a category, a text and a numeric label, profiles) and a segment index."""
    root = tmp_path_factory.mktemp("damage")
    files = []
    for j, group in enumerate(("speech", "music")):
        for k in range(3):
            path = root / group / f"{group}{k}.wav"
            path.parent.mkdir(parents=True, exist_ok=True)
            soundfile.write(path, synthesize(group, 1.0 + 0.4 * k, RATE, 1, np.random.default_rng(10 * j + k)), RATE)
            files.append(str(path))
    labels = root / "labels.csv"
    labels.write_text("path,speaker,text,snr\n" + "".join(f"{f},{'ab'[k % 2]},words {k},{k}.5\n"
                                                          for k, f in enumerate(files)))
    whole = root / "whole.parquet"
    build_index({"speech": str(root / "speech"), "music": str(root / "music")}, whole, executor="serial",
                show_progress=False, labels=str(labels), text_columns=["text"])
    segments = root / "segments.parquet"
    build_index([str(root / "speech")], segments, executor="serial", show_progress=False,
                segments=[{"path": f, "start": 0.1 * k, "end": 0.1 * k + 0.5, "text": f"utterance {k}"}
                          for k, f in enumerate(files[:3])])
    return whole, segments


def _datasets(whole, segments):
    """Datasets that, between them, read every file of their stores (built now: they save their selections)."""
    loud = ExcerptConfig(strategy="loudest", lufs_cutoff=-70.0, allow_text_crops=True)
    return [
        create_audio_dataset(corpus=Corpus(index=whole, labels=["speaker", "text", "snr"], min_duration=1.2),
                             duration=0.5, sample_rate=RATE, excerpt=ExcerptConfig(allow_text_crops=True)),
        create_balanced_audio_dataset(corpus=Corpus(index=whole, group_by="text", labels=["text"]), duration=0.5,
                                      sample_rate=RATE, excerpt=loud, num_epochs=1),
        create_balanced_audio_dataset(corpus=Corpus(index=whole, group_by="group"), duration=0.5, sample_rate=RATE,
                                      num_epochs=1),
        create_windowed_audio_dataset(corpus=Corpus(index=whole), window=WindowConfig(duration=0.5, lufs_window_sec=0.4),
                                      sample_rate=RATE),
        create_audio_dataset(corpus=Corpus(index=segments, labels=["text"]), duration=None, sample_rate=RATE),
    ]


def _read_everything(planned, whole, segments):
    """Reads every item of the planned datasets in a fresh copy (a worker's view), builds them again, and reads
    every array of the stores (what no dataset here reads item by item: vocabularies, channel counts)."""
    for ds in planned:
        clone = pickle.loads(pickle.dumps(ds))
        for i in range(min(len(clone), 40)):
            clone[i]
    _datasets(whole, segments)
    for index in (whole, segments):
        store = open_columns(open_index(index))
        for name in store.manifest["arrays"]:
            store.column(name)


def _flip(path, position):
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x10]))


@pytest.mark.slow
def test_a_flipped_byte_in_any_store_file_is_refused_naming_the_file(indexes):
    whole, segments = indexes
    planned = _datasets(whole, segments)
    _read_everything(planned, whole, segments)
    folders = [open_columns(open_index(index)).directory for index in (whole, segments)]
    files = [os.path.join(folder, name) for folder in folders for name in sorted(os.listdir(folder))]
    kinds = {os.path.basename(f).split("-")[0].split(".")[0] for f in files}
    assert {"label", "window", "group", "sel", "profile", "slots", "path", "size", "mtime_ns", "manifest",
            "window-lufs"} - kinds - {"window-lufs"} == set(), kinds
    unnoticed, wrong = [], []
    for path in files:
        size = os.path.getsize(path)
        if size == 0:
            continue
        position = size - 1 if path.endswith(".npy") else size // 2  # (a .npy's last byte is data)
        _flip(path, position)
        try:
            _read_everything(planned, whole, segments)
            unnoticed.append(os.path.basename(path))
        except ColumnStoreError as exc:
            message = str(exc)
            named = path if not path.endswith(".crc") else path[:-len(".crc")]
            if not message.startswith(named + ":") or "rm -rf --" not in message:
                wrong.append((os.path.basename(path), message))
        except Exception as exc:  # noqa: BLE001  (any other error is the bug this test pins)
            wrong.append((os.path.basename(path), f"{type(exc).__name__}: {exc}"))
        finally:
            _flip(path, position)
    assert not unnoticed, "\n".join(unnoticed)
    assert not wrong, wrong
    _read_everything(planned, whole, segments)  # restored: everything reads again


def test_a_store_file_edited_in_place_is_refused_not_read_as_other_labels(indexes, tmp_path):
    """The label ids of rows 0 and 1 swapped keep the file's size; before checksums they were served."""
    import shutil

    whole, _ = indexes
    copy = tmp_path / "copy.parquet"
    shutil.copy(whole, copy)
    ds = create_audio_dataset(corpus=Corpus(index=copy, labels=["speaker"]), duration=0.5, sample_rate=RATE,
                              shuffle=False)
    store = open_columns(open_index(copy))
    key = store.label_key("speaker")
    ids = store.column(key).copy()
    ids[[0, 1]] = ids[[1, 0]]
    ids.tofile(os.path.join(store.directory, key + ".bin"))
    with pytest.raises(ColumnStoreError, match=rf"{key}\.bin: the index's column store is damaged \(bytes 0 to "):
        pickle.loads(pickle.dumps(ds))[0]
