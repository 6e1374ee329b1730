"""PyTorch path of duration-bucketed batches: the same batches as Grain, with
``lengths`` and mask tensors, real ``DataLoader`` workers and exact resume."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

torch = pytest.importorskip("torch")

from audiotree.sources import BucketConfig, batch_by_duration, create_audio_dataset, scan_durations  # noqa: E402
from audiotree.torch import EpochSampler, TorchAudioTree, TorchMapDataset, create_dataloader, to_torch  # noqa: E402

SR = 8000


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("torch_utterances")
    rng = np.random.default_rng(11)
    out = []
    for i in range(24):
        n = int(rng.uniform(0.3, 2.5) * SR)
        path = root / f"u{i:02d}.wav"
        sf.write(path, (0.1 * rng.standard_normal(n)).astype(np.float32), SR)
        out.append(str(path))
    return out


def _batches(files, num_epochs=1):
    items = create_audio_dataset(filepaths=files, duration=None, shuffle=False, sample_rate=SR)
    return batch_by_duration(items, scan_durations(files), BucketConfig(max_seconds=6.0, buckets=3), shuffle_seed=4, num_epochs=num_epochs)


def _key(batch):
    return (list(batch.filepath), np.asarray(batch.lengths).tolist())


def test_loader_gives_the_grain_batches_with_lengths_and_mask(files):
    batches = _batches(files)
    expected = [_key(batches[k]) for k in range(len(batches))]
    loader = create_dataloader(batches, batch_size=None, num_workers=2)
    got = []
    for batch in loader:
        assert isinstance(batch, TorchAudioTree)
        assert isinstance(batch.lengths, torch.Tensor) and batch.lengths.dtype == torch.int32
        mask = batch.mask()
        assert mask.dtype == torch.bool and tuple(mask.shape) == (batch.waveform.shape[0], 1, batch.waveform.shape[-1])
        assert torch.equal(mask.sum(dim=(1, 2)).to(torch.int32), batch.lengths)
        assert torch.all(batch.waveform.masked_select(~mask.expand_as(batch.waveform)) == 0)
        got.append((list(batch.filepath), batch.lengths.tolist()))
    assert got == expected
    second = [(list(b.filepath), b.lengths.tolist()) for b in loader]  # the next epoch: a new plan
    assert second == [_key(batches[len(batches) + k]) for k in range(len(batches))]
    assert second != got


def test_state_dict_resumes_mid_epoch_with_workers(files):
    batches = _batches(files)
    loader = create_dataloader(batches, batch_size=None, num_workers=2)
    it = iter(loader)
    for _ in range(2):
        next(it)
    state = loader.state_dict()
    rest = [(list(b.filepath), b.lengths.tolist()) for b in it]
    resumed = create_dataloader(_batches(files), batch_size=None, num_workers=2)
    resumed.load_state_dict(state)
    assert [(list(b.filepath), b.lengths.tolist()) for b in resumed] == rest
    assert len(rest) == len(batches) - 2


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_plain_dataloader_with_an_epoch_sampler(files, context):
    batches = _batches(files)
    adapter = TorchMapDataset(batches)
    loader = torch.utils.data.DataLoader(
        adapter, batch_size=None, sampler=EpochSampler(adapter, epoch=1), collate_fn=to_torch, num_workers=2,
        multiprocessing_context=context,
    )
    got = [(list(b.filepath), b.lengths.tolist()) for b in loader]
    assert got == [_key(batches[len(batches) + k]) for k in range(len(batches))]


def test_endless_plan_through_the_iterable_adapter(files):
    batches = _batches(files, num_epochs=None)
    per_epoch = batches.plan.batches_in_epoch(0)
    loader = create_dataloader(batches, batch_size=None, epoch_size=per_epoch, num_workers=2)
    got = [(list(b.filepath), b.lengths.tolist()) for b in loader]
    assert got == [_key(batches[k]) for k in range(per_epoch)]
