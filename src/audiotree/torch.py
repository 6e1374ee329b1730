"""PyTorch ``DataLoader`` interop: audiotree datasets under torch workers, correct by default.

Install with ``pip install 'audiotree[torch]'``. Nothing else in audiotree imports
torch; this module is the only one that does.

Quick start::

    from audiotree.sources import create_audio_dataset
    from audiotree.torch import create_dataloader

    ds = create_audio_dataset("data/", duration=1.0, sample_rate=16_000)  # one pass per epoch
    loader = create_dataloader(ds, batch_size=32, num_workers=4)
    for epoch in range(10):
        for batch in loader:        # a TorchAudioTree: batch.waveform is a (B, C, T) tensor
            ...                     # every epoch draws new excerpts

    # Checkpoint mid-epoch, and resume in a new process at the exact next batch:
    state = loader.state_dict()
    loader = create_dataloader(ds, batch_size=32, num_workers=4)
    loader.load_state_dict(state)

Benchmark one-liner (the same dataset the Grain ``mp_prefetch`` path reads)::

    batches = iter(audiotree.torch.create_dataloader(ds, batch_size=32, num_workers=2))

Design
------
**Item = pure function of (seed, epoch, index).** An audiotree dataset is a Grain
``MapDataset`` that follows Grain's epoch convention: index ``e * n + i`` of a
dataset of length ``n`` is item ``i`` of epoch ``e`` (sources wrap around,
``shuffle`` draws a new permutation per epoch, ``random_map`` seeds every *global*
index with its own generator). The adapters here read item ``i`` of epoch ``e`` as
``ds[e * n + i]``. Epoch 0 is therefore exactly ``ds[0], ..., ds[n - 1]``, later
epochs revisit the same files with fresh excerpts (and a fresh file order when the
dataset shuffles), and nothing depends on worker identity, worker count, start
method or global RNG state. The seeds are the dataset's own (``shuffle_seed``,
``excerpt_seed``). This needs the dataset to honour Grain's contract that indices
past ``len(ds)`` read later epochs (Grain's own transformations all do; it is what
``MapDataset.repeat`` relies on). A dataset that refuses them gets an error naming
the workaround: build it endless (``num_epochs=None``) and pass
``epoch_size=len(files)``, which reads exactly the same items.

**How the epoch reaches the workers.** With ``persistent_workers=True`` each worker
holds a *copy* of the dataset made when it started, so setting an attribute in the
main process later is invisible to it. Two channels avoid that:

* Map-style: :class:`EpochSampler` runs in the main process (torch samplers always
  do) and yields ``(epoch, index)`` keys. The epoch travels with every request
  through the DataLoader's index queue, so it is right for persistent workers, any
  start method, prefetched requests and resumed runs, with no shared state. The
  sampler starts the next epoch on every new ``iter(loader)``; ``set_epoch(n)``
  overrides it.
* Iterable (endless datasets): there is no sampler, so the epoch lives in a
  two-int64 shared-memory tensor owned by the adapter. Torch shares it with workers
  under fork, spawn and forkserver (it is handed over at worker start), the main
  process writes it in ``set_epoch(n)``, and each worker reads it when it starts an
  epoch's iterator, which happens only after ``iter(loader)``. A plain
  ``DataLoader`` needs ``dataset.set_epoch(n)`` before each epoch (like
  ``DistributedSampler``); :class:`AudioDataLoader` calls it for you. A worker that
  sees an epoch replayed without ``set_epoch`` warns once.

**Sharding.** :class:`TorchIterableDataset` gives worker ``w`` of ``k`` the indices
``w, w + k, w + 2k, ...`` of the epoch's range ``[e * S, (e + 1) * S)``, so the
multiset of an epoch does not depend on ``num_workers``. Balanced mixes stay mixed
in every batch because any subset of a mix block is a random draw (see
:mod:`audiotree.sources.mixing`).

**Resume.** State is a cursor, never a replay: items are pure functions of their
keys, so resuming skips work instead of re-reading it.

* :class:`EpochSampler` has ``state_dict``/``load_state_dict`` (``epoch``,
  ``position``); torchdata's ``StatefulDataLoader`` snapshots it right after it
  draws each batch, so its checkpoints are exact.
* The iterator a :class:`TorchIterableDataset` returns in each worker has
  ``state_dict``/``load_state_dict`` (epoch, shard, items consumed), which
  ``StatefulDataLoader`` collects per worker.
* :class:`AudioDataLoader` (a ``torch.utils.data.DataLoader``) counts the batches it
  has *handed to you* (not what its workers prefetched) and turns that into the
  same cursors. For iterables it relies on torch's in-order round robin over
  workers: on resume, worker ``0`` takes over the shard that was due next. A
  map-style checkpoint resumes with any ``num_workers``; an iterable one taken
  mid-epoch needs the same ``num_workers``. A checkpoint taken after ``break``
  resumes at the batch after the last one you consumed.

With torchdata (``pip install torchdata``; optional, nothing here imports it)::

    from torchdata.stateful_dataloader import StatefulDataLoader
    loader = StatefulDataLoader(TorchMapDataset(ds), batch_size=32, sampler=EpochSampler(len(ds)),
                                num_workers=4, collate_fn=collate)
    # Endless: StatefulDataLoader(TorchIterableDataset(ds, epoch_size=N), ...) and
    # call dataset.set_epoch(e) before each epoch.

**Throughput.** Inside each process (every worker, or the main process when
``num_workers=0``) the items of a batch are read on ``read_threads`` threads
(default 4): decoding and resampling release the GIL, and Grain's own readers use
threads the same way. Items are pure functions of their keys, so this never
changes what is read.

**Start methods.** Every class and the collate functions are module-level and
pickle with the standard :mod:`pickle`, so ``fork``, ``spawn`` and ``forkserver``
(Python 3.14's Linux default) all work. Under spawn/forkserver the script must
guard its entry point with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import collections
import dataclasses
import numbers
import os
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, Sequence

import numpy as np

try:
    import torch
    import torch.utils.data as _tud
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError("audiotree.torch needs PyTorch: pip install 'audiotree[torch]'") from exc

from audiotree.core import ARRAY_FIELDS, AudioTree

__all__ = [
    "TorchAudioTree",
    "to_torch",
    "collate",
    "collate_tensors",
    "TorchMapDataset",
    "TorchIterableDataset",
    "EpochSampler",
    "AudioDataLoader",
    "as_torch_dataset",
    "create_dataloader",
]

#: Distance between epoch starts of an endless stream read without ``epoch_size``.
ENDLESS_EPOCH_STRIDE = 2**36
_ENDLESS_LEN = (
    "This audiotree stream is endless (the dataset was built with num_epochs=None), so it has no length. "
    "Pass epoch_size=N (items per epoch) to create_dataloader()/AudioDataLoader/TorchIterableDataset: each "
    "iteration is then one epoch of N items and len(loader) is its number of batches, the steps_per_epoch an "
    "LR scheduler needs (e.g. OneCycleLR(opt, max_lr, total_steps=epochs * len(loader))). Or keep it endless "
    "and give the scheduler your own step count."
)
#: Threads each process (worker, or the main process with ``num_workers=0``) reads with.
DEFAULT_READ_THREADS = 4
_STATE_VERSION = 1


# ------------------------------------------------------------------ small helpers
def _check_epoch(epoch: Any) -> int:
    if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral) or epoch < 0:
        raise ValueError(f"epoch must be a non-negative int, got {epoch!r}.")
    return int(epoch)


def _check_positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")
    return int(value)


def _length(dataset: Any) -> int:
    try:
        return len(dataset)
    except TypeError:
        raise TypeError(
            f"Expected an audiotree/Grain MapDataset (with len() and random access), got {type(dataset).__name__}."
        ) from None


def _worker() -> tuple[int, int]:
    info = _tud.get_worker_info()
    if info is None:
        return 0, 1
    return int(info.id), int(info.num_workers)


def _read(dataset: Any, index: int, length: int) -> Any:
    """``dataset[index]``, explaining the failure when a dataset refuses Grain's epoch indexing."""
    try:
        return dataset[index]
    except IndexError as exc:
        if index < length:
            raise
        raise IndexError(
            f"Reading a later epoch needs index {index} of a dataset of length {length}, and this dataset "
            f"refuses indices past its length ({exc}). Grain MapDatasets accept them: index e * len + i is "
            f"item i of epoch e (see grain.MapDataset.repeat). Workaround: build the dataset endless "
            f"(num_epochs=None) and pass epoch_size={length}."
        ) from exc


_pools: dict[int, ThreadPoolExecutor] = {}
_pools_pid: int | None = None
_pools_lock = threading.Lock()


def _read_pool(threads: int) -> ThreadPoolExecutor:
    """This process's pool of ``threads`` reader threads (a forked child starts its own)."""
    global _pools_pid
    with _pools_lock:
        if _pools_pid != os.getpid():
            _pools.clear()  # inherited through fork: those threads do not exist here
            _pools_pid = os.getpid()
        pool = _pools.get(threads)
        if pool is None:
            pool = _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="audiotree-read")
        return pool


def _check_threads(read_threads: Any) -> int:
    if read_threads is None:
        return DEFAULT_READ_THREADS
    if isinstance(read_threads, bool) or not isinstance(read_threads, numbers.Integral) or read_threads < 0:
        raise ValueError(f"read_threads must be an int >= 0, got {read_threads!r}.")
    return int(read_threads)


class _SharedEpoch:
    """``[epoch, stamp]`` in shared memory; ``stamp`` counts ``set_epoch`` calls.

    Torch shares the tensor with DataLoader workers under every start method. The
    standard ``pickle`` copies it by value, which is what a pickled copy should do.
    """

    def __init__(self, epoch: int):
        self._values = torch.tensor([int(epoch), 0], dtype=torch.int64)
        self._values.share_memory_()

    def read(self) -> tuple[int, int]:
        epoch, stamp = self._values.tolist()
        return int(epoch), int(stamp)

    def write(self, epoch: int) -> None:
        self._values[0] = int(epoch)
        self._values[1] += 1


class _EpochCursor:
    """Decides where the next iteration starts: a pending ``(epoch, resume)`` or the next epoch."""

    def __init__(self, epoch: int, advance: bool):
        self.first = epoch
        self.advance = bool(advance)
        self.current: int | None = None
        self.pending: tuple[int, Any] | None = None

    def set(self, epoch: int, resume: Any = None) -> None:
        self.pending = (int(epoch), resume)

    def following(self) -> int:
        """The epoch an iteration starts with after the current one."""
        if self.current is None:
            return self.first
        return self.current + 1 if self.advance else self.current

    def peek(self) -> tuple[int, Any]:
        if self.pending is not None:
            return self.pending
        return self.following(), None

    def begin(self) -> tuple[int, Any]:
        start = self.peek()
        self.pending = None
        self.current = start[0]
        return start


# ------------------------------------------------------------------ tensors & collate
def _is_number(x: Any) -> bool:
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, (str, bytes))


def _array_to_tensor(a: np.ndarray) -> Any:
    if a.dtype.kind not in "biufc":
        return a  # strings, objects: not tensor material
    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a, copy=True, order="C")
    return torch.from_numpy(a)


def _leaf_to_torch(x: Any) -> Any:
    if x is None or isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return _array_to_tensor(x)
    if isinstance(x, np.generic) and x.dtype.kind in "biufc":
        return torch.from_numpy(np.asarray(x).reshape(()).copy())
    if _is_jax_array(x):
        return _array_to_tensor(np.asarray(x))
    if isinstance(x, dict):
        return {k: _leaf_to_torch(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and x:
        if all(isinstance(v, torch.Tensor) for v in x):  # per-item tensors: join on the batch axis
            return torch.cat([v.reshape(1) if v.ndim == 0 else v for v in x], dim=0)
        if all(_is_number(v) for v in x):  # per-item scalars (labels, ids)
            return torch.as_tensor(np.asarray(x))
        return _rebuild(x, [_leaf_to_torch(v) for v in x])
    return x


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _rebuild(original: Any, items: list) -> Any:
    """A list/tuple/namedtuple of the same type as ``original`` holding ``items``."""
    return type(original)(*items) if _is_namedtuple(original) else type(original)(items)


def _is_strings(x: Any) -> bool:
    """A str, or a (nested) list/tuple of str: a string leaf of a batch."""
    if isinstance(x, str):
        return True
    return isinstance(x, (list, tuple)) and all(_is_strings(v) for v in x)


def _is_jax_array(x: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def _map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


def _map_batch_leaves(value: Any, on_array: Callable, on_strings: Callable) -> Any:
    """Like ``audiotree.core._map_leaves``, but torch tensors count as arrays."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: _map_batch_leaves(v, on_array, on_strings) for k, v in value.items()}
    if _is_strings(value):
        return on_strings(value)
    if isinstance(value, (torch.Tensor, np.ndarray, np.generic)) or _is_jax_array(value):
        return on_array(value)
    return value


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class TorchAudioTree(AudioTree):
    """An :class:`~audiotree.AudioTree` whose array fields are torch tensors.

    What :func:`collate` returns. Array fields and array ``extras`` are tensors;
    ``.filepath``/``.source`` are lists of strings and ``.offset`` is a float64
    ``(B,)`` CPU tensor of excerpt starts in seconds (``None`` if unknown; NaN for
    items without a file). ``lufs`` is ``None`` unless the items were metered:
    ``strategy="loudest"`` measures it, and the dataset builders' ``meter=True``
    measures it for any strategy. Supports batch indexing, ``split`` and
    mini-batch reshaping, :meth:`to` and :meth:`pin_memory` (so the DataLoader's
    ``pin_memory=True`` pins it). For audio DSP methods convert back with
    :meth:`numpy`. Not a JAX pytree.
    """

    @property
    def backend(self) -> str:
        return "torch"

    @property
    def offset(self) -> Any:
        """Excerpt start in seconds, a float64 ``(B,)`` CPU tensor; ``None`` if unknown.

        Provenance, like ``filepath``: it stays on the CPU (``to(device)`` and
        ``pin_memory`` leave it), and is a fresh tensor on every access.
        """
        value = self._metadata.get("offset")
        if value is None or isinstance(value, torch.Tensor):
            return value
        return torch.from_numpy(np.array(value, dtype=np.float64))

    def _map_batch(self, on_array: Callable, on_strings: Callable) -> "TorchAudioTree":
        updates = {
            name: _map_batch_leaves(getattr(self, name), on_array, on_strings)
            for name in (*ARRAY_FIELDS, "extras", "_metadata")
        }
        return dataclasses.replace(self, **updates)

    def _map_tensors(self, fn: Callable[[Any], Any]) -> "TorchAudioTree":
        updates = {name: _map_tensors(getattr(self, name), fn) for name in (*ARRAY_FIELDS, "extras")}
        return dataclasses.replace(self, **updates)

    def to(self, *args: Any, **kwargs: Any) -> "TorchAudioTree":
        """``tensor.to(*args, **kwargs)`` on every tensor (device, dtype, ``non_blocking``)."""
        return self._map_tensors(lambda t: t.to(*args, **kwargs))

    def pin_memory(self, *args: Any) -> "TorchAudioTree":
        """Page-locked copies of every tensor (called by ``DataLoader(pin_memory=True)``)."""
        return self._map_tensors(lambda t: t.pin_memory(*args))

    def mask(self) -> Any:
        """``(..., 1, T)`` bool tensor: True on real samples (all True without ``lengths``)."""
        shape = tuple(self.waveform.shape)
        device = self.waveform.device if isinstance(self.waveform, torch.Tensor) else None
        if self.lengths is None:
            return torch.ones(shape[:-2] + (1, shape[-1]), dtype=torch.bool, device=device)
        lengths = torch.as_tensor(self.lengths, device=device)
        return torch.arange(shape[-1], device=device) < lengths[..., None, None]

    def numpy(self) -> AudioTree:
        """A plain NumPy :class:`~audiotree.AudioTree` (tensors copied to the CPU)."""
        fn = lambda t: t.detach().cpu().numpy()  # noqa: E731
        updates = {name: _map_tensors(getattr(self, name), fn) for name in (*ARRAY_FIELDS, "extras")}
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(AudioTree)}
        fields.update(updates)
        return AudioTree(**fields)


def to_torch(value: Any) -> Any:
    """Converts NumPy/JAX leaves to torch tensors; ``AudioTree`` becomes :class:`TorchAudioTree`.

    Works through dicts, lists and tuples. Lists of numbers become 1-D tensors,
    strings and provenance are left alone. NumPy arrays are wrapped without a copy
    when they are writable and contiguous.
    """
    if isinstance(value, AudioTree):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(AudioTree)}
        for name in (*ARRAY_FIELDS, "extras"):
            fields[name] = _leaf_to_torch(fields[name])
        return TorchAudioTree(**fields)
    if isinstance(value, dict):
        return {k: to_torch(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and any(isinstance(v, (AudioTree, dict, list, tuple)) for v in value):
        return _rebuild(value, [to_torch(v) for v in value])
    return _leaf_to_torch(value)


def _tree_as_dict(tree: AudioTree) -> dict:
    out: dict = {"sample_rate": tree.sample_rate}
    for name in ARRAY_FIELDS:
        value = getattr(tree, name)
        if value is not None:
            out[name] = value
    if tree.extras:
        out["extras"] = dict(tree.extras)
    if tree.filepath:
        out["filepath"] = tree.filepath
    if tree.source:
        out["source"] = tree.source
    if tree.offset is not None:
        out["offset"] = np.asarray(tree.offset)
    return out


def _trees_as_dicts(value: Any) -> Any:
    if isinstance(value, AudioTree):
        return _tree_as_dict(value)
    if isinstance(value, dict):
        return {k: _trees_as_dicts(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return _rebuild(value, [_trees_as_dicts(v) for v in value])
    return value


def _batch(items: Sequence[Any]) -> Any:
    kept = [item for item in items if item is not None]
    if not kept:
        return None
    return AudioTree.batch(kept)


def collate(items: Sequence[Any]) -> Any:
    """Batches ``AudioTree`` items (or dicts/lists/tuples of them) into a :class:`TorchAudioTree`.

    The DataLoader ``collate_fn`` for audiotree datasets. ``None`` items (files
    skipped by ``on_read_error``) are dropped, so a batch can be smaller than
    ``batch_size``; a batch with nothing left is ``None`` (:class:`AudioDataLoader`
    skips it). Items are concatenated along their leading batch axis
    (:meth:`AudioTree.batch`), then every array becomes a tensor.
    """
    batched = _batch(items)
    return None if batched is None else to_torch(batched)


def collate_tensors(items: Sequence[Any]) -> Any:
    """Like :func:`collate`, but every ``AudioTree`` becomes a plain ``dict``.

    Keys: ``waveform`` and any other set array field (tensors), ``sample_rate``
    (int), ``extras`` (dict), ``filepath`` and ``source`` (lists of str) and
    ``offset`` (float64 tensor), the last three when the items carry provenance.
    """
    batched = _batch(items)
    return None if batched is None else to_torch(_trees_as_dicts(batched))


# ------------------------------------------------------------------ map-style
class TorchMapDataset(_tud.Dataset):
    """A map-style torch dataset over an audiotree (Grain) ``MapDataset``.

    ``dataset[(epoch, i)]`` is ``ds[epoch * epoch_size + i]``: item ``i`` of epoch
    ``epoch`` in Grain's own numbering, so epoch 0 reproduces ``ds`` exactly and
    each later epoch has new excerpts. Plain integer keys use the epoch set by
    :meth:`set_epoch` (shared with running workers).

    Args:
      dataset: a finite ``MapDataset`` (any audiotree builder, transformed or not).
      epoch_size: items per epoch; defaults to ``len(dataset)``. Required for an
        endless (``num_epochs=None``) dataset, or use :class:`TorchIterableDataset`.
      epoch: the epoch plain integer keys read until :meth:`set_epoch`.
      read_threads: threads that read the items of one batch concurrently in each
        process (``__getitems__``); decoding releases the GIL. ``0`` or ``1`` reads
        one at a time. Items do not depend on it.

    Use it with :class:`EpochSampler` (or :class:`AudioDataLoader`, which does).
    """

    def __init__(self, dataset: Any, *, epoch_size: int | None = None, epoch: int = 0,
                 read_threads: int = DEFAULT_READ_THREADS):
        length = _length(dataset)
        if epoch_size is None:
            if length >= sys.maxsize:
                raise ValueError(
                    "This dataset is endless (num_epochs=None); pass epoch_size= (items per epoch) "
                    "or use TorchIterableDataset."
                )
            epoch_size = length
        self.dataset = dataset
        self.epoch_size = _check_positive("epoch_size", epoch_size)
        self.read_threads = _check_threads(read_threads)
        self._length = length
        self._epoch = _SharedEpoch(_check_epoch(epoch))

    def __len__(self) -> int:
        return self.epoch_size

    def __repr__(self) -> str:
        return f"TorchMapDataset(epoch_size={self.epoch_size}, epoch={self.epoch}, dataset={self.dataset})"

    @property
    def epoch(self) -> int:
        """The epoch used by plain integer keys."""
        return self._epoch.read()[0]

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch of plain integer keys, in this process and its live workers."""
        self._epoch.write(_check_epoch(epoch))

    def global_index(self, epoch: int, index: int) -> int:
        """The index into the wrapped dataset of item ``index`` of ``epoch``."""
        n = self.epoch_size
        index = int(index)
        if not -n <= index < n:
            raise IndexError(f"Index {index} is out of range for an epoch of {n} items.")
        return _check_epoch(epoch) * n + index % n

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple):
            if len(key) != 2:
                raise IndexError(f"A key is an index or an (epoch, index) pair, got {key!r}.")
            epoch, index = key
        else:
            epoch, index = self.epoch, key
        return _read(self.dataset, self.global_index(int(epoch), int(index)), self._length)

    def __getitems__(self, keys: Sequence[Any]) -> list:
        """The items of one batch, read by ``read_threads`` threads (torch's batched fetch)."""
        if self.read_threads <= 1 or len(keys) <= 1:
            return [self[key] for key in keys]
        return list(_read_pool(self.read_threads).map(self.__getitem__, keys))


class EpochSampler(_tud.Sampler):
    """Yields ``(epoch, index)`` keys for :class:`TorchMapDataset`; resumable.

    Each ``iter()`` starts the next epoch (``epoch``, ``epoch + 1``, ...) unless
    :meth:`set_epoch` or :meth:`load_state_dict` said otherwise; with
    ``advance_epochs=False`` every pass repeats one epoch (validation). Order
    within an epoch is the dataset's own (already shuffled per epoch by audiotree's
    builders), or, with ``shuffle=True``, a permutation keyed on ``(seed, epoch)``.

    ``state_dict()`` is ``{"epoch", "position"}``: the next key the sampler would
    yield. ``StatefulDataLoader`` (torchdata) snapshots it as each batch is drawn,
    which makes its checkpoints exact. With a plain ``DataLoader`` the sampler runs
    ahead of consumption (prefetch), so checkpoint with :class:`AudioDataLoader`.
    """

    def __init__(self, data_source: Any, *, shuffle: bool = False, seed: int = 0, epoch: int = 0,
                 advance_epochs: bool = True):
        n = int(data_source) if isinstance(data_source, numbers.Integral) else _length(data_source)
        self.num_items = _check_positive("len(data_source)", n)
        self.shuffle = bool(shuffle)
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}.")
        self.seed = int(seed)
        self._cursor = _EpochCursor(_check_epoch(epoch), advance_epochs)
        self._position = 0

    def __len__(self) -> int:
        return self.num_items

    def __repr__(self) -> str:
        return f"EpochSampler(num_items={self.num_items}, shuffle={self.shuffle}, seed={self.seed}, epoch={self.epoch})"

    @property
    def epoch(self) -> int:
        """The epoch of the next key: the one being iterated, or the one the next iteration starts."""
        return self._next_key()[0]

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration start ``epoch`` from its beginning."""
        self._cursor.set(_check_epoch(epoch), 0)

    def order(self, epoch: int) -> Sequence[int]:
        """Indices of ``epoch`` in the order they are yielded."""
        if not self.shuffle:
            return range(self.num_items)
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, _check_epoch(epoch)]))
        return rng.permutation(self.num_items)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return self._keys()

    def _keys(self) -> Iterator[tuple[int, int]]:
        # A generator: the start is decided at the first next(), so iter() calls
        # that are never consumed (StatefulDataLoader makes some) change nothing.
        epoch, start = self._cursor.begin()
        start = int(start or 0)
        order = self.order(epoch)
        self._position = start
        for position in range(start, self.num_items):
            self._position = position + 1
            yield epoch, int(order[position])

    def _next_key(self) -> tuple[int, int]:
        cursor = self._cursor
        if cursor.pending is not None or cursor.current is None:
            epoch, start = cursor.peek()
            return epoch, int(start or 0)
        if self._position < self.num_items:
            return cursor.current, self._position
        return cursor.following(), 0

    def state_dict(self) -> dict:
        epoch, position = self._next_key()
        return {"version": _STATE_VERSION, "epoch": epoch, "position": position, "num_items": self.num_items,
                "shuffle": self.shuffle, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        for key in ("num_items", "shuffle", "seed"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"This state was saved with {key}={state[key]!r}, but the sampler has {getattr(self, key)!r}."
                )
        epoch, position = _check_epoch(state["epoch"]), int(state["position"])
        if not 0 <= position <= self.num_items:
            raise ValueError(f"position {position} is out of range for an epoch of {self.num_items} items.")
        if position == self.num_items:
            epoch, position = (epoch + 1 if self._cursor.advance else epoch), 0
        self._cursor.set(epoch, position)


# ------------------------------------------------------------------ iterable
class _ShardIterator:
    """One worker's share of one epoch; stateful for torchdata's StatefulDataLoader.

    With ``read_threads > 1`` it reads up to ``2 * read_threads`` items ahead on
    a thread pool. ``consumed`` counts items handed out, so read-ahead never shows
    in the state; items are pure functions of their index, so it never changes them.
    """

    def __init__(self, source: "TorchIterableDataset", epoch: int, role: int, num_roles: int, consumed: int):
        self._source = source
        self.epoch, self.role, self.num_roles, self.consumed = epoch, role, num_roles, int(consumed)
        self._ahead: collections.deque = collections.deque()

    def __iter__(self) -> "_ShardIterator":
        return self

    def _read(self, position: int) -> Any:
        source = self._source
        index = source.epoch_start(self.epoch) + self.role + position * self.num_roles
        return _read(source.dataset, index, source._length)

    def __next__(self) -> Any:
        total = self._source.shard_size(self.role, self.num_roles)
        if total is not None and self.consumed >= total:
            raise StopIteration
        threads = self._source.read_threads
        if threads <= 1:
            self.consumed += 1
            return self._read(self.consumed - 1)
        position = self.consumed + len(self._ahead)
        while len(self._ahead) < 2 * threads and (total is None or position < total):
            self._ahead.append(_read_pool(threads).submit(self._read, position))
            position += 1
        self.consumed += 1
        return self._ahead.popleft().result()

    def state_dict(self) -> dict:
        return {"version": _STATE_VERSION, "epoch": self.epoch, "role": self.role, "num_workers": self.num_roles,
                "consumed": self.consumed}

    def load_state_dict(self, state: dict) -> None:
        for future in self._ahead:
            future.cancel()
        self._ahead.clear()
        self.epoch = _check_epoch(state["epoch"])
        self.role, self.num_roles, self.consumed = int(state["role"]), int(state["num_workers"]), int(state["consumed"])


class TorchIterableDataset(_tud.IterableDataset):
    """An iterable torch dataset over an audiotree (Grain) ``MapDataset``, sharded by worker.

    Epoch ``e`` covers indices ``[e * S, (e + 1) * S)`` of the wrapped dataset,
    ``S = epoch_size``; worker ``w`` of ``k`` reads ``w, w + k, w + 2k, ...`` of that
    range, so the epoch's multiset is the same for any ``num_workers``. Without
    ``epoch_size`` a finite dataset uses its length, and an endless one never ends
    (epoch ``e`` then starts at ``e * 2**36``).

    Items are yielded as they are, ``None`` included, so that every batch covers a
    fixed span of indices (which keeps resuming exact); :func:`collate` drops them.

    Call :meth:`set_epoch` before each epoch when you drive a plain ``DataLoader``
    (:class:`AudioDataLoader` does it for you). The iterator returned in each
    worker has ``state_dict``/``load_state_dict``, which torchdata's
    ``StatefulDataLoader`` uses. ``read_threads`` as in :class:`TorchMapDataset`
    (here each worker reads ahead of its consumer).
    """

    def __init__(self, dataset: Any, *, epoch_size: int | None = None, epoch: int = 0,
                 read_threads: int = DEFAULT_READ_THREADS):
        length = _length(dataset)
        if epoch_size is None and length < sys.maxsize:
            epoch_size = length
        self.dataset = dataset
        self._length = length
        self.epoch_size = None if epoch_size is None else _check_positive("epoch_size", epoch_size)
        self.read_threads = _check_threads(read_threads)
        self._epoch = _SharedEpoch(_check_epoch(epoch))
        self._resume: dict | None = None
        self._seen_stamp: int | None = None
        self._warned = False

    def __repr__(self) -> str:
        return f"TorchIterableDataset(epoch_size={self.epoch_size}, epoch={self.epoch}, dataset={self.dataset})"

    def __len__(self) -> int:
        """Items per epoch (``epoch_size``). An endless stream has none: the error says what to pass."""
        if self.epoch_size is None:
            raise TypeError(_ENDLESS_LEN)
        return self.epoch_size

    def __bool__(self) -> bool:  # truth must not depend on len(), which an endless stream refuses
        return True

    @property
    def epoch(self) -> int:
        return self._epoch.read()[0]

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next iteration reads, in this process and its live workers."""
        self._epoch.write(_check_epoch(epoch))

    def epoch_start(self, epoch: int) -> int:
        return epoch * (self.epoch_size or ENDLESS_EPOCH_STRIDE)

    def shard_size(self, role: int, num_roles: int) -> int | None:
        """Items of an epoch that worker ``role`` of ``num_roles`` reads (``None``: endless)."""
        if self.epoch_size is None:
            return None
        return max(0, -(-(self.epoch_size - role) // num_roles))

    def __iter__(self) -> _ShardIterator:
        worker, num_workers = _worker()
        epoch, stamp = self._epoch.read()
        if self._seen_stamp == stamp and not self._warned:
            self._warned = True
            warnings.warn(
                f"TorchIterableDataset is reading epoch {epoch} again without set_epoch(), so this pass repeats "
                "the previous excerpts. Call dataset.set_epoch(n) before each epoch (AudioDataLoader does it).",
                UserWarning,
                stacklevel=2,
            )
        self._seen_stamp = stamp
        role, consumed = worker, 0
        resume, self._resume = self._resume, None
        if resume is not None and resume["epoch"] == epoch:
            if resume["num_workers"] != num_workers:
                raise ValueError(
                    f"Resuming mid-epoch needs the same number of workers ({resume['num_workers']}), got {num_workers}."
                )
            role = (worker + resume["shift"]) % num_workers
            consumed = resume["consumed"][role]
        return _ShardIterator(self, epoch, role, num_workers, consumed)


def as_torch_dataset(dataset: Any, *, epoch_size: int | None = None, epoch: int = 0,
                     read_threads: int | None = None) -> Any:
    """:class:`TorchMapDataset` for a finite dataset, :class:`TorchIterableDataset` for an endless one.

    Our adapters are returned unchanged (arguments that contradict them raise).
    """
    if isinstance(dataset, (TorchMapDataset, TorchIterableDataset)):
        for name, value in (("epoch_size", epoch_size), ("read_threads", read_threads)):
            if value is not None and value != getattr(dataset, name):
                raise ValueError(f"{name}={value} conflicts with the adapter's {name}={getattr(dataset, name)}.")
        return dataset
    kwargs = dict(epoch_size=epoch_size, epoch=epoch, read_threads=_check_threads(read_threads))
    if _length(dataset) >= sys.maxsize:
        return TorchIterableDataset(dataset, **kwargs)
    return TorchMapDataset(dataset, **kwargs)


# ------------------------------------------------------------------ the loader
@dataclasses.dataclass
class _MapProgress:
    epoch: int
    start: int
    batches: int = 0
    finished: bool = False
    abandoned: bool = False  # left early (``break``): the next iter() starts the next epoch


@dataclasses.dataclass
class _IterProgress:
    epoch: int
    next_role: int
    batches: list
    totals: list  # batches each role yields this epoch; None = endless
    finished: bool = False
    abandoned: bool = False

    def exhausted(self) -> bool:
        return all(total is not None and done >= total for done, total in zip(self.batches, self.totals))

    def record(self) -> None:
        roles = len(self.batches)
        for step in range(roles):
            role = (self.next_role + step) % roles
            if self.totals[role] is None or self.batches[role] < self.totals[role]:
                self.batches[role] += 1
                self.next_role = (role + 1) % roles
                return
        raise RuntimeError("The DataLoader returned more batches than the epoch holds.")


class AudioDataLoader(_tud.DataLoader):
    """A ``torch.utils.data.DataLoader`` for audiotree datasets that resumes exactly.

    Wraps ``dataset`` with :func:`as_torch_dataset` (finite: map-style with an
    :class:`EpochSampler`; endless: :class:`TorchIterableDataset`). Each ``iter()``
    is the next epoch, with new excerpts, also with persistent workers.
    :meth:`state_dict` counts the batches handed to you (not what workers
    prefetched), and :meth:`load_state_dict` makes the next iteration continue at
    the exact next batch, in this process or a new one. Batches that ``collate``
    returns as ``None`` (every item unreadable) are skipped.

    Args:
      dataset: an audiotree/Grain ``MapDataset`` or one of our adapters.
      batch_size: items per batch; ``None`` when every element already is a
        batch (``batch_by_duration``): elements are converted with
        :func:`to_torch`, one per step, and checkpoints count them.
      shuffle, seed: finite datasets only; a per-epoch permutation keyed on
        ``(seed, epoch)`` on top of the dataset's own order (audiotree's builders
        already shuffle per epoch).
      epoch: the first epoch. ``advance_epochs=False`` repeats it every pass.
      epoch_size: items per epoch. Required to give an endless dataset
        (``num_epochs=None``) epochs: each ``iter(loader)`` then reads ``N``
        items with fresh excerpts and ``len(loader)`` is its batch count (what
        an LR scheduler's ``steps_per_epoch``/``total_steps`` needs). Without it
        an endless stream never ends and ``len(loader)`` raises a ``TypeError``
        saying so. For a finite dataset it overrides ``len(dataset)``.
      read_threads: reader threads per process (default 4; see the adapters).
      num_workers, persistent_workers: ``persistent_workers`` defaults to
        ``num_workers > 0``.
      pin_memory: defaults to ``torch.cuda.is_available()``.
      collate_fn: defaults to :func:`collate`.
      **kwargs: other ``DataLoader`` arguments (``prefetch_factor``,
        ``multiprocessing_context``, ``worker_init_fn``, ``timeout``, ...).
        ``sampler``/``batch_sampler`` are owned by the loader; ``in_order=False``
        is refused because exact resume needs in-order delivery.

    Memory: about ``num_workers * prefetch_factor`` batches are in flight.
    """

    def __init__(self, dataset: Any, batch_size: int | None = 32, *, shuffle: bool = False, seed: int = 0, epoch: int = 0,
                 epoch_size: int | None = None, read_threads: int | None = None, advance_epochs: bool = True,
                 drop_last: bool = False,
                 collate_fn: Callable | None = None, num_workers: int = 0, persistent_workers: bool | None = None,
                 pin_memory: bool | None = None, **kwargs: Any):
        for owned in ("sampler", "batch_sampler"):
            if kwargs.get(owned) is not None:
                raise TypeError(
                    f"AudioDataLoader owns its {owned}; use torch's DataLoader with our adapters for a custom one."
                )
            kwargs.pop(owned, None)
        if kwargs.get("in_order") is False:
            raise ValueError("AudioDataLoader needs in_order=True: its checkpoints count batches in order.")
        # batch_size=None: the dataset yields whole batches; each counts as one step.
        self._step = 1 if batch_size is None else _check_positive("batch_size", batch_size)
        if batch_size is None and collate_fn is None:
            collate_fn = to_torch
        adapter = as_torch_dataset(dataset, epoch_size=epoch_size, epoch=epoch, read_threads=read_threads)
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        if pin_memory is None:
            pin_memory = torch.cuda.is_available()
        self._iterable = isinstance(adapter, TorchIterableDataset)
        self._progress: Any = None
        if self._iterable:
            if shuffle:
                raise ValueError(
                    "shuffle=True needs a finite dataset; an endless audiotree stream is already shuffled "
                    "(and balanced mixes are shuffled in blocks)."
                )
            self._cursor = _EpochCursor(_check_epoch(epoch), advance_epochs)
            sampler = None
        else:
            sampler = EpochSampler(adapter, shuffle=shuffle, seed=seed, epoch=epoch, advance_epochs=advance_epochs)
            self._cursor = sampler._cursor
        super().__init__(
            adapter, batch_size=batch_size, sampler=sampler, drop_last=drop_last,
            collate_fn=collate if collate_fn is None else collate_fn, num_workers=num_workers,
            persistent_workers=persistent_workers, pin_memory=pin_memory, **kwargs,
        )

    # ---------------------------------------------------------------- epochs
    @property
    def epoch(self) -> int:
        """The epoch being iterated, or the one the next iteration starts."""
        progress = self._progress
        if progress is not None and not progress.finished and not progress.abandoned:
            return progress.epoch
        return self._cursor.peek()[0]

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration start ``epoch`` from its beginning."""
        epoch = _check_epoch(epoch)
        self._progress = None
        if self._iterable:
            self._cursor.set(epoch, None)
        else:
            self.sampler.set_epoch(epoch)

    def __bool__(self) -> bool:  # truth must not depend on len(), which an endless stream refuses
        return True

    def __len__(self) -> int:
        """Batches per epoch, exactly as many as one iteration yields (``None`` batches aside).

        Map-style: ``ceil(items / batch_size)`` (``floor`` with ``drop_last``).
        Endless datasets read with ``epoch_size=N``: each worker batches its own
        shard, so this is the sum over workers of their shards' batch counts
        (torch's own estimate, ``ceil(N / batch_size)``, can be short by up to
        ``num_workers - 1``). Without ``epoch_size`` an endless stream has no
        length and the ``TypeError`` says what to pass.
        """
        if not self._iterable:
            return _tud.DataLoader.__len__(self)
        dataset: TorchIterableDataset = self.dataset
        roles = self._roles()
        total = 0
        for role in range(roles):
            share = dataset.shard_size(role, roles)
            if share is None:
                raise TypeError(_ENDLESS_LEN)
            total += share // self.batch_size if self.drop_last else -(-share // self.batch_size)
        return total

    # ---------------------------------------------------------------- iteration
    def __iter__(self) -> Iterator[Any]:
        return self._iter_iterable() if self._iterable else self._iter_map()

    def _iter_map(self) -> Iterator[Any]:
        epoch, start = self.sampler._cursor.peek()
        progress = self._progress = _MapProgress(epoch, int(start or 0))
        try:
            for batch in _tud.DataLoader.__iter__(self):
                progress.batches += 1
                if batch is not None:
                    yield batch
        except GeneratorExit:
            progress.abandoned = True  # state_dict() keeps the position; the next iter() starts the next epoch
            raise
        progress.finished = True

    def _roles(self) -> int:
        return max(int(self.num_workers), 1)

    def _iter_iterable(self) -> Iterator[Any]:
        dataset: TorchIterableDataset = self.dataset
        roles = self._roles()
        epoch, resume = self._cursor.begin()
        totals = []
        for role in range(roles):
            share = dataset.shard_size(role, roles)
            if share is None:
                totals.append(None)
            else:
                totals.append(share // self._step if self.drop_last else -(-share // self._step))
        if resume is not None:
            if resume["num_workers"] != roles:
                raise ValueError(
                    f"This checkpoint is mid-epoch with {resume['num_workers']} worker shard(s); resume it with "
                    f"num_workers={resume['num_workers'] if resume['num_workers'] > 1 else 0}, not {self.num_workers}."
                )
            batches, shift = list(resume["batches"]), int(resume["next_role"])
            consumed = []
            for role in range(roles):
                share = dataset.shard_size(role, roles)
                items = batches[role] * self._step
                consumed.append(items if share is None else min(items, share))
            dataset._resume = {"epoch": epoch, "num_workers": roles, "shift": shift, "consumed": consumed}
        else:
            batches, shift = [0] * roles, 0
            dataset._resume = None
        dataset.set_epoch(epoch)
        progress = self._progress = _IterProgress(epoch, shift, batches, totals)
        try:
            iterator = _tud.DataLoader.__iter__(self)  # starts (or resumes) the workers with the state above
        finally:
            dataset._resume = None
        try:
            for batch in iterator:
                progress.record()
                if batch is not None:
                    yield batch
        except GeneratorExit:
            progress.abandoned = True
            raise
        progress.finished = True

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """Where the stream continues: the batch after the last one handed out, else the next epoch's start.

        Taken after ``break`` it still points at the batch after the last one you
        consumed, so "train N steps, break, save" resumes exactly (a new ``iter()``
        without :meth:`load_state_dict` starts the next epoch, as always).
        """
        progress = self._progress
        state: dict = {"version": _STATE_VERSION, "kind": "iterable" if self._iterable else "map"}
        if self._iterable:
            if progress is not None and progress.abandoned and progress.exhausted():
                state.update(epoch=self._cursor.following(), resume=None)
            elif progress is None or progress.finished:
                epoch, resume = self._cursor.peek() if progress is None else (self._cursor.following(), None)
                state.update(epoch=epoch, resume=resume)
            else:
                state.update(epoch=progress.epoch, resume={
                    "num_workers": len(progress.batches), "next_role": progress.next_role,
                    "batches": list(progress.batches), "batch_size": self.batch_size,
                })
            return state
        sampler: EpochSampler = self.sampler
        if progress is None:
            inner = sampler.state_dict()
            state.update(epoch=inner["epoch"], position=inner["position"])
        else:
            position = min(progress.start + progress.batches * self._step, sampler.num_items)
            left = sampler.num_items - position
            if progress.finished or (progress.abandoned and (left == 0 or (self.drop_last and left < self._step))):
                state.update(epoch=self._cursor.following(), position=0)  # nothing of this epoch is left
            else:
                state.update(epoch=progress.epoch, position=position)
        state.update(num_items=sampler.num_items, shuffle=sampler.shuffle, seed=sampler.seed)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Makes the next ``iter()`` continue where ``state`` left off."""
        kind = "iterable" if self._iterable else "map"
        if state.get("kind") != kind:
            raise ValueError(f"This is a {state.get('kind')!r} checkpoint; this loader reads a {kind!r} dataset.")
        self._progress = None
        if not self._iterable:
            self.sampler.load_state_dict(state)
            return
        resume = state.get("resume")
        if resume is not None and resume.get("batch_size", self.batch_size) != self.batch_size:
            raise ValueError(
                f"This checkpoint was taken with batch_size={resume['batch_size']}, not {self.batch_size}."
            )
        self._cursor.set(_check_epoch(state["epoch"]), resume)
        if resume is not None:
            self._stop_workers()  # live persistent workers cannot learn the resume point

    def _stop_workers(self) -> None:
        iterator = getattr(self, "_iterator", None)
        if iterator is not None:
            shutdown = getattr(iterator, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            self._iterator = None


def create_dataloader(dataset: Any, batch_size: int = 32, num_workers: int = 0, **kwargs: Any) -> AudioDataLoader:
    """An :class:`AudioDataLoader` over ``dataset``: ``create_dataloader(ds, batch_size=32, num_workers=2)``.

    Finite datasets read map-style with an :class:`EpochSampler`; endless ones
    (``num_epochs=None``) through :class:`TorchIterableDataset` (pass
    ``epoch_size=`` for epochs). Defaults: :func:`collate`, persistent workers when
    ``num_workers > 0``, ``pin_memory`` only when CUDA is available. See
    :class:`AudioDataLoader` for the other arguments.
    """
    return AudioDataLoader(dataset, batch_size=batch_size, num_workers=num_workers, **kwargs)
