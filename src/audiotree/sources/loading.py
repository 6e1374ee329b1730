"""The per-item work of a dataset: one file path and one RNG in, one excerpt out.

Loaders are frozen dataclasses defined at module level, so they pickle with the
standard library (PyTorch's spawn and forkserver workers) as well as with
cloudpickle (Grain's workers).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Mapping

import grain
import numpy as np

from audiotree.errors import AudioReadError, ChannelMismatchError
from audiotree.core import AudioTree
from audiotree.excerpts.config import ExcerptConfig
from audiotree.excerpts.strategies import select_clip
from audiotree.io.read_errors import ON_READ_ERROR, check_on_read_error, handle_read_error
from audiotree.io.storage import call_with_storage_options
from audiotree.sources.item_labels import KEY, encode_key, item_key

__all__ = ["ExcerptLoader", "StorageScope", "in_storage_scope", "StampSource", "MeasureLufs", "OnReadError", "ON_READ_ERROR", "check_on_read_error"]

OnReadError = Literal["raise", "skip", "warn"]


@dataclasses.dataclass(frozen=True)
class ExcerptLoader(grain.transforms.RandomMap):
    """Reads one excerpt of a file path with the item's own ``rng``.

    Returns a batch-of-1 ``AudioTree`` ``(1, C, round(duration * sample_rate))``
    (``duration=None``: the whole file, with ``lengths``; see ``strategy="full"``)
    or ``None`` when the file is dropped by ``on_read_error`` or ``on_failure``.
    """

    sample_rate: int
    duration: float | None
    mono: bool = True
    pad_mode: str | None = "constant"
    excerpt: ExcerptConfig = ExcerptConfig()
    source: str | None = None
    channels: int | None = None
    on_read_error: str = "raise"
    #: Labels read without an index (the sidecars of tar members, Parquet columns): ``labels.leaves(path)``.
    labels: Any = None

    def random_map(self, element: Any, rng: np.random.Generator):
        return self.read(element, rng)

    def read(self, path: Any, rng: np.random.Generator, plan: Any = None, window: Any = None):
        """One excerpt of ``path``; ``plan`` is a corpus index's ``RowPlan`` for ``loudest``;
        ``window=(start, end)`` seconds confines the read to that segment of the file.
        Remote paths are read with the storage options in effect (see :class:`StorageScope`)."""
        try:
            clip = select_clip(
                path, rng, duration=self.duration, excerpt=self.excerpt, sample_rate=self.sample_rate,
                mono=self.mono, pad_mode=self.pad_mode, plan=plan, window=window,
            )
            tree = None if clip is None else AudioTree.from_clip(clip, source=self.source)
            if tree is not None:
                tree = tree.replace_extras(**self._extras(path))
        except AudioReadError as exc:
            handle_read_error(exc, self.on_read_error)
            return None
        if tree is not None and self.channels is not None and not self.mono and tree.num_channels != self.channels:
            raise ChannelMismatchError(str(path), tree.num_channels, self.channels)
        return tree

    def _extras(self, path: Any) -> dict:
        extras = {} if self.labels is None else self.labels.leaves(path)
        if KEY not in extras:
            extras[KEY] = encode_key([item_key(path)])
        return extras


@dataclasses.dataclass(frozen=True, eq=False)
class StorageScope(grain.transforms.RandomMap):
    """A dataset's per-item loader, run with the dataset's storage options in effect.

    Storage options reach the reads by one channel: the context of
    :func:`audiotree.io.storage.use_storage_options`, which every read of a
    remote path consults. A context does not travel into worker processes, so a
    dataset keeps its options on this one step (Grain pickles it into every
    worker) and enters them around each item; the loader and everything below
    it take them from the context, never as an argument.
    """

    loader: Any
    storage_options: Mapping[str, Any] | None = None

    def random_map(self, element: Any, rng: np.random.Generator):
        return call_with_storage_options(self.storage_options, self.loader.random_map, element, rng)


def in_storage_scope(loader: Any, storage_options: Mapping[str, Any] | None) -> Any:
    """``loader`` as the step a dataset maps: in a :class:`StorageScope` when there are options, else itself."""
    return StorageScope(loader, storage_options) if storage_options else loader


@dataclasses.dataclass(frozen=True)
class StampSource(grain.transforms.Map):
    """Labels every item of a pre-built dataset with its group name.

    Missing provenance is filled so items from files and from datasets batch
    together: ``filepath`` becomes ``""``, ``offset`` NaN, and the item key
    (``extras["key"]``, code-point rows) ``""``.
    """

    name: str

    def map(self, element: Any):
        if element is None:
            return None
        from audiotree.provenance import encode_strings

        batch = element.batch_size
        metadata = element.provenance
        metadata["source"] = encode_strings([self.name] * batch)
        metadata.setdefault("filepath", encode_strings([""] * batch))
        metadata.setdefault("offset", np.full((batch,), np.nan))
        element = element.replace(_metadata=metadata)
        if KEY not in element.extras:  # every item has a key (see audiotree.sources.item_labels)
            element = element.replace_extras(**{KEY: encode_key([""] * batch)})
        return element


@dataclasses.dataclass(frozen=True)
class MeasureLufs(grain.transforms.Map):
    """Measures ``lufs`` ``(1,)`` and ``lufs_windows`` ``(1, W)`` (0.4 s windows) of items that lack them.

    What the builders' ``measure_lufs=True`` appends. It meters the item as it
    is returned (after resampling and downmixing, padding included: BS.1770's
    gate leaves digital silence out), one K-weighting pass per item. Items that
    already carry loudness (``strategy="loudest"``, which meters every candidate
    at the file's own rate) keep theirs. Deterministic: a pure function of the item.
    """

    def map(self, element: Any):
        if element is None or element.lufs is not None:
            return element
        return element.replace_lufs(engine="numpy")
