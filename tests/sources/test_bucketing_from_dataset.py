"""batch_by_duration starting from the dataset: durations from an index (files or segments), any item order,
pad_multiple, and neutral labels in filler slots."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from audiotree.index import build_index
from audiotree.sources import BucketConfig, Corpus, batch_by_duration, create_audio_dataset
from audiotree.sources.bucketing import FILLER

SR = 8000


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("bucket_corpus")
    rng = np.random.default_rng(0)
    lines = ["path,start,end,id,speaker"]
    files = []
    for i in range(24):
        seconds = float(rng.uniform(0.3, 2.5))
        path = root / f"u{i:02d}.wav"
        sf.write(path, (0.1 * rng.standard_normal(int(seconds * SR))).astype(np.float32), SR)
        files.append(str(path))
    for r in range(3):
        path = root / f"long{r}.wav"
        sf.write(path, (0.1 * rng.standard_normal(30 * SR)).astype(np.float32), SR)
        t = 0.0
        for k in range(8):
            length = float(rng.uniform(0.4, 3.0))
            lines.append(f"long{r}.wav,{t:.3f},{t + length:.3f},r{r}s{k},spk{k % 3}")
            t += length + 0.2
    (root / "segments.csv").write_text("\n".join(lines) + "\n")
    labels = root / "labels.csv"
    labels.write_text("path,speaker\n" + "\n".join(f"u{i:02d}.wav,spk{i % 4}" for i in range(24)) + "\n")
    files_ix = str(root / "files.parquet")
    build_index([str(root / f"u{i:02d}.wav") for i in range(24)], files_ix, labels=str(labels), executor="serial",
                show_progress=False, loudness=False)
    segments_ix = str(root / "segments.parquet")
    build_index([str(root / f"long{r}.wav") for r in range(3)], segments_ix, segments=str(root / "segments.csv"),
                executor="serial", show_progress=False, loudness=False)
    return files, files_ix, segments_ix


def _signature(batch):
    return (batch.waveform.shape, list(batch.filepath), [None if o != o else round(float(o), 4) for o in batch.offset],
            batch.lengths.tolist())


@pytest.mark.parametrize("which", ["files", "segments"])
def test_durations_from_the_index_and_any_item_order(corpus, which):
    files, files_ix, segments_ix = corpus
    index = files_ix if which == "files" else segments_ix
    kwargs = dict(corpus=Corpus(index=index), duration=None, sample_rate=SR)
    plain = create_audio_dataset(shuffle=False, **kwargs)
    shuffled = create_audio_dataset(shuffle=True, shuffle_seed=7, **kwargs)
    endless = create_audio_dataset(shuffle=True, num_epochs=None, **kwargs)
    batches = [batch_by_duration(ds, bucketing=BucketConfig(max_seconds=6.0, buckets=3), shuffle_seed=1, num_epochs=2)
               for ds in (plain, shuffled, endless)]
    assert len(batches[0]) == len(batches[1]) == len(batches[2]) > 2
    for k in range(len(batches[0])):
        a, b, c = (_signature(ds[k]) for ds in batches)
        assert a == b == c
    # Every item of epoch 0 appears exactly once, with its real length.
    seen = []
    for k in range(batches[1].plan.batches_in_epoch(0)):
        batch = batches[1][k]
        for path, offset, length in zip(batch.filepath, batch.offset, batch.lengths):
            if path:
                seen.append((path, round(float(offset), 3), int(length)))
    assert len(seen) == len(plain) == len(set(seen))


def test_segment_batches_read_exact_segments(corpus):
    _, _, segments_ix = corpus
    from audiotree.index import open_index

    ix = open_index(segments_ix)
    bounds = {(p, round(s, 3)): round(e, 3) for p, s, e in zip(ix.paths(), ix.column("start"), ix.column("end"))}
    items = create_audio_dataset(corpus=Corpus(index=segments_ix), duration=None, sample_rate=SR)
    ds = batch_by_duration(items, bucketing=BucketConfig(max_seconds=8.0, buckets=2), num_epochs=1)
    for k in range(len(ds)):
        batch = ds[k]
        for i, (path, offset, length) in enumerate(zip(batch.filepath, batch.offset, batch.lengths)):
            if not path:
                continue
            end = bounds[(path, round(float(offset), 3))]
            ref, _ = sf.read(path, start=round(offset * SR), stop=round(end * SR), dtype="float32")
            assert int(length) == ref.shape[0]
            np.testing.assert_array_equal(batch.waveform[i, 0, : int(length)], ref)


@pytest.mark.parametrize("pad_to", ["bucket", "longest"])
@pytest.mark.parametrize("buckets", [3, [0.8, 1.7, 2.5]])
def test_pad_multiple_rounds_every_batch(corpus, pad_to, buckets):
    _, files_ix, _ = corpus
    items = create_audio_dataset(corpus=Corpus(index=files_ix), duration=None, sample_rate=22050)
    hop = 256
    ds = batch_by_duration(items, bucketing=BucketConfig(max_seconds=7.0, buckets=buckets), pad_to=pad_to, pad_multiple=hop, num_epochs=1)
    edges_samples = np.round(ds.plan.edges * 22050, 6)
    assert np.all(edges_samples % hop == 0), edges_samples
    shapes = set()
    for k in range(len(ds)):
        batch = ds[k]
        assert batch.waveform.shape[-1] % hop == 0
        assert batch.waveform.shape[0] * batch.waveform.shape[-1] / 22050 <= 7.0 + 1e-9 or pad_to == "longest"
        batch.waveform.reshape(batch.waveform.shape[0], -1, hop)  # a framing reshape works
        shapes.add(batch.waveform.shape)
    if pad_to == "bucket":
        assert len(shapes) <= ds.plan.edges.size
    with pytest.raises(ValueError, match="pad_multiple must be a positive int"):
        batch_by_duration(items, bucketing=BucketConfig(max_seconds=7.0), pad_multiple=0)


def test_filler_slots_carry_neutral_labels(corpus):
    _, files_ix, _ = corpus

    def add_text(item):
        return item.replace_extras(text=np.array(["some words"]), weight=np.array([0.5], np.float32))

    items = create_audio_dataset(corpus=Corpus(index=files_ix, labels=["speaker"]), duration=None, sample_rate=SR).map(add_text)
    ds = batch_by_duration(items, bucketing=BucketConfig(max_seconds=12.5, buckets=[2.5], remainder="pad"), num_epochs=1)
    fillers = 0
    for k in range(len(ds)):
        _, slots, _ = ds.plan.batch(k)
        batch = ds[k]
        for i, slot in enumerate(slots):
            speaker = int(batch.extras["speaker"][i])
            if slot == FILLER:
                fillers += 1
                assert speaker == -1
                assert batch.extras["text"][i] == ""
                assert np.isnan(batch.extras["weight"][i])
                assert batch.lengths[i] == 0
            else:
                assert speaker >= 0
                assert batch.extras["text"][i] == "some words"
    assert fillers > 0
