"""PyTorch ``DataLoader`` interop: audiotree datasets under torch workers, correct by default.

Install with ``pip install 'audiotree[torch]'``; nothing else in audiotree imports
torch. The guide, with the design (why items are right in every worker, how the
epoch reaches persistent workers, sharding, exact resume), is ``docs/torch.md``.

One module per concept:

* :mod:`~audiotree.torch.tensors`: ``TorchAudioTree``, ``to_torch``, ``collate``, ``collate_tensors``.
* :mod:`~audiotree.torch.map_style`: ``TorchMapDataset`` and its ``EpochSampler``.
* :mod:`~audiotree.torch.iterable`: ``TorchIterableDataset`` for endless streams.
* :mod:`~audiotree.torch.loader`: ``AudioDataLoader`` / ``create_dataloader``, which resume exactly.
* :mod:`~audiotree.torch.reading`: what the adapters share (epochs, reader threads).
* :mod:`~audiotree.torch.text`: ``TextCollator``, transcripts to padded CTC targets.

Quick start::

    from audiotree.sources import create_audio_dataset
    from audiotree.torch import create_dataloader

    ds = create_audio_dataset("data/", duration=1.0, sample_rate=16_000)  # one pass per epoch
    loader = create_dataloader(ds, batch_size=32, num_workers=4)
    for epoch in range(10):
        for batch in loader:        # a TorchAudioTree: batch.waveform is a (B, C, T) tensor
            ...                     # every epoch draws new excerpts
    state = loader.state_dict()     # resume later, in a new process, at the exact next batch
"""

from __future__ import annotations

try:
    import torch  # noqa: F401  (fail here, with the extra to install, not deep inside a submodule)
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError("audiotree.torch needs PyTorch: pip install 'audiotree[torch]'") from exc

from audiotree.torch.iterable import TorchIterableDataset
from audiotree.torch.loader import AudioDataLoader, as_torch_dataset, create_dataloader, merge_state_dicts
from audiotree.torch.map_style import EpochSampler, TorchMapDataset
from audiotree.torch.reading import DEFAULT_READ_THREADS, ENDLESS_EPOCH_STRIDE
from audiotree.torch.tensors import TorchAudioTree, collate, collate_tensors, to_torch
from audiotree.torch.text import TextCollator

__all__ = [
    "TorchAudioTree",
    "to_torch",
    "collate",
    "collate_tensors",
    "TextCollator",
    "TorchMapDataset",
    "TorchIterableDataset",
    "EpochSampler",
    "AudioDataLoader",
    "as_torch_dataset",
    "create_dataloader",
    "merge_state_dicts",
    "ENDLESS_EPOCH_STRIDE",
    "DEFAULT_READ_THREADS",
]
