"""What a torch training loop reaches for: len(loader), batch.offset as a tensor, loudness for any strategy.

Every loader here is a real torch DataLoader with 2 worker processes.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.utils.data  # noqa: E402

import audiotree.torch as att  # noqa: E402
from audiotree.excerpts.config import ExcerptConfig  # noqa: E402
from audiotree.sources import Output, create_audio_dataset, create_balanced_audio_dataset  # noqa: E402

FAST = dict(duration=0.25, sample_rate=8000)


@pytest.fixture(scope="module")
def endless(corpus):
    return create_audio_dataset(list(corpus.values()), num_epochs=None, **FAST)


def test_len_of_an_endless_loader_says_what_to_pass(endless):
    loader = att.create_dataloader(endless, batch_size=4)
    with pytest.raises(TypeError, match=r"endless.*epoch_size=N.*len\(loader\).*LR scheduler"):
        len(loader)
    assert bool(loader)  # truth does not go through len()
    plain = torch.utils.data.DataLoader(att.TorchIterableDataset(endless), batch_size=4, collate_fn=att.collate)
    with pytest.raises(TypeError, match="epoch_size=N"):
        len(plain)
    assert bool(att.TorchIterableDataset(endless))


@pytest.mark.slow
@pytest.mark.parametrize("drop_last, expected", [(False, 4), (True, 2)])
def test_len_is_the_exact_batch_count_with_two_workers(endless, drop_last, expected):
    # 10 items over 2 workers: each batches its own 5, so there are 2 + 2 batches (torch alone would say 3).
    loader = att.create_dataloader(endless, batch_size=4, epoch_size=10, num_workers=2, drop_last=drop_last,
                                   multiprocessing_context="fork")
    assert len(loader) == expected
    for _ in range(2):  # two epochs, each as long as len() said
        assert sum(1 for _ in loader) == expected
    del loader


@pytest.mark.slow
def test_len_drives_an_lr_scheduler_through_map_style_epochs(corpus):
    finite = create_audio_dataset(list(corpus.values()), **FAST)  # 24 files
    loader = att.create_dataloader(finite, batch_size=5, num_workers=2, multiprocessing_context="fork")
    assert len(loader) == 5
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    epochs = 2
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=epochs * len(loader))
    steps = 0
    for _ in range(epochs):
        for batch in loader:
            optimizer.step()
            scheduler.step()  # raises past total_steps: len() must not undercount
            steps += 1
    assert steps == epochs * len(loader)
    del loader


@pytest.mark.slow
def test_offset_is_a_float64_tensor_that_stays_on_the_cpu(endless):
    loader = att.create_dataloader(endless, batch_size=4, epoch_size=8, num_workers=2, multiprocessing_context="fork")
    batches = list(loader)
    del loader
    offsets = [b.offset for b in batches]
    assert all(isinstance(o, torch.Tensor) and o.dtype == torch.float64 and o.shape == (4,) for o in offsets)
    expected = sorted(float(endless[i].offset[0]) for i in range(8))
    assert sorted(float(v) for o in offsets for v in o) == pytest.approx(expected)
    batch = batches[0]
    assert batch.to(torch.float32).offset.dtype == torch.float64  # provenance keeps its precision and device
    assert torch.equal(batch[1:3].offset, batch.offset[1:3])
    assert isinstance(batch.numpy().offset, np.ndarray)  # back to NumPy, back to an array
    assert att.collate_tensors([endless[0]])["offset"].dtype == torch.float64


@pytest.mark.slow
def test_measure_lufs_gives_loudness_for_any_strategy(corpus):
    folders = list(corpus.values())
    plain = create_audio_dataset(folders, num_epochs=None, **FAST)
    metered = create_audio_dataset(folders, num_epochs=None, output=Output(measure_lufs=True), **FAST)
    assert plain[0].lufs is None
    for i in range(4):  # the same excerpts, now with their loudness
        item, reference = metered[i], plain[i].replace_lufs()
        np.testing.assert_array_equal(item.waveform, reference.waveform)
        np.testing.assert_allclose(item.lufs, reference.lufs, rtol=0, atol=1e-5)
        assert item.lufs_windows.shape == reference.lufs_windows.shape
    loader = att.create_dataloader(metered, batch_size=4, epoch_size=8, num_workers=2, multiprocessing_context="fork")
    batches = list(loader)
    del loader
    for batch in batches:
        assert isinstance(batch.lufs, torch.Tensor) and batch.lufs.shape == (4,)
        assert torch.isfinite(batch.lufs).all() and (batch.lufs < 0).all()

    # Loudest items keep the loudness that chose them; balanced and windowed builders take the option too.
    loudest = ExcerptConfig(strategy="loudest", lufs_cutoff=-40)
    a = create_audio_dataset(folders, excerpt=loudest, **FAST)
    b = create_audio_dataset(folders, excerpt=loudest, output=Output(measure_lufs=True), **FAST)
    np.testing.assert_array_equal(a[3].lufs, b[3].lufs)
    mix = create_balanced_audio_dataset({k: [str(v)] for k, v in corpus.items()}, output=Output(measure_lufs=True), **FAST)
    assert all(mix[i].lufs is not None for i in range(3))
    from audiotree.sources import WindowConfig, create_windowed_audio_dataset

    windows = create_windowed_audio_dataset(folders, window=WindowConfig(duration=0.25), sample_rate=8000, output=Output(measure_lufs=True))
    assert np.isfinite(windows[0].lufs).all()
    for builder, length in ((create_audio_dataset, dict(duration=0.25)),
                            (create_windowed_audio_dataset, dict(window=WindowConfig(duration=0.25)))):
        with pytest.raises(TypeError, match="measure_lufs must be True or False"):
            builder(folders, output=Output(measure_lufs="yes"), sample_rate=8000, **length)
    with pytest.raises(TypeError, match="measure_lufs"):
        create_balanced_audio_dataset({"a": [str(folders[0])]}, output=Output(measure_lufs=1), **FAST)
