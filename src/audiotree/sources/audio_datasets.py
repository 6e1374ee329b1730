"""Buffer-memory arithmetic for Grain pipelines of decoded audio.

Grain's defaults were tuned for records of a few KiB: ``ReadOptions`` buffers
500 elements per process, and ``mp_prefetch`` multiplies every buffer by the
worker count. Decoded audio is ~1 MB per 3 s stereo excerpt, so the defaults
can hold gigabytes. The datasets our builders return know the size of their
items; when a ``to_iter_dataset``/``batch``/``mp_prefetch`` chain would buffer
more than :data:`RAM_FRACTION` of physical memory, they warn once with the
figure and the terms that produce it. ``to_iter_dataset()`` without
``ReadOptions`` uses :func:`default_read_options`, sized in bytes for audio.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any, Callable, Sequence

import grain

__all__ = [
    "AudioMapDataset",
    "AudioIterDataset",
    "default_read_options",
    "physical_memory_bytes",
    "RAM_FRACTION",
    "DEFAULT_READ_BUFFER_BYTES",
]

#: Buffers above this fraction of physical memory trigger the warning.
RAM_FRACTION = 0.25
#: Decoded audio each process may buffer ahead with audiotree's default ReadOptions.
DEFAULT_READ_BUFFER_BYTES = 64 * 1024 * 1024


def default_read_options(item_bytes: int) -> grain.ReadOptions:
    """ReadOptions sized for decoded audio rather than Grain's small records.

    Grain's default (16 threads, 500 elements) can hold ~0.5 GB of 3 s stereo
    excerpts per process. Ours: up to 8 reader threads (decoding releases the
    GIL, so threads help a single process), and a buffer of at most
    :data:`DEFAULT_READ_BUFFER_BYTES` (never fewer than two items per thread).
    Pass explicit ``ReadOptions`` to override, e.g. ``num_threads=0`` inside
    ``mp_prefetch`` workers as the multiprocessing guide recommends.
    """
    threads = max(1, min(8, os.cpu_count() or 1))
    buffer = max(2 * threads, min(500, DEFAULT_READ_BUFFER_BYTES // max(int(item_bytes), 1)))
    return grain.ReadOptions(num_threads=threads, prefetch_buffer_size=buffer)


def physical_memory_bytes() -> int | None:
    """Total physical memory, or None where the platform does not say."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _fmt(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TB"


def _check(total: float, detail: str, ram: int | None) -> None:
    if ram and total > RAM_FRACTION * ram:
        warnings.warn(
            f"This pipeline's buffers can hold about {_fmt(total)} of decoded audio "
            f"({detail}), over {int(RAM_FRACTION * 100)}% of this machine's {_fmt(ram)} of RAM. "
            "Shrink ReadOptions.prefetch_buffer_size, MultiprocessingOptions.per_worker_buffer_size "
            "or num_workers, or use shorter excerpts.",
            UserWarning,
            stacklevel=3,
        )


#: Steps that keep item ``i`` at position ``i`` (so a dataset's plan still describes it).
_PER_ITEM = frozenset({"map", "map_with_index", "random_map", "filter", "seed"})


class _Chained:
    """Grain's element-wise transformations, each re-wrapped by the subclass's ``_then``."""

    def map(self, transform):
        return self._then("map", transform)

    def map_with_index(self, transform):
        return self._then("map_with_index", transform)

    def random_map(self, transform, *, seed: int | None = None):
        return self._then("random_map", transform, seed=seed)

    def filter(self, transform):
        return self._then("filter", transform)

    def seed(self, seed: int):
        return self._then("seed", seed)


class AudioMapDataset(_Chained, grain.MapDataset):
    """A pass-through ``MapDataset`` that knows its item size in bytes.

    Grain's transformations called on it (``map``, ``random_map``, ``filter``,
    ``batch``, ``shuffle``, ``slice``, ...) return an ``AudioMapDataset`` again,
    so a chain that starts at an audiotree builder keeps audiotree's
    ``to_iter_dataset``/``mp_prefetch`` (memory checks, default read options,
    and workers that run from plain scripts, see :mod:`audiotree.sources.workers.start`).
    ``item_bytes`` stays the builder's estimate through ``map`` (we cannot know
    what a function returns) and is multiplied by ``batch``.

    ``plan`` is the builder's plan (:class:`~audiotree.sources.datasets.plan.DatasetPlan`;
    ``batch_by_duration`` gives its ``BucketPlan``), kept through the per-item
    steps (``map``, ``map_with_index``, ``random_map``, ``filter``, ``seed``),
    which leave item ``i`` where it was, and ``None`` after steps that move items.
    """

    #: Set by :func:`~audiotree.sources.shard_dataset`: which share of which stream this is
    #: (a :class:`~audiotree.sources.global_stream.HostShare`), kept through ``map``.
    host_share = None
    #: ``(make, below)`` when this is ``AudioMapDataset(make(below))`` and ``make``'s step must stay the outermost:
    #: the steps applied later (all but ``batch``, whose runs of items it sees in order) go below it. The
    #: read-ahead of a remote render (:func:`~audiotree.sources.open_render`) is such a step: it must see the
    #: order items are read in, not the order a ``shuffle`` takes them from the render.
    on_top = None

    def __init__(self, parent: grain.MapDataset, *, item_bytes: int, plan: Any = None):
        super().__init__(parent)
        self.item_bytes = int(item_bytes)
        self.plan = plan

    def __len__(self) -> int:
        return len(self._parent)

    def __str__(self) -> str:
        return "AudioMapDataset"

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        return self._parent[index]

    def _getitems(self, indices: Sequence[int]):
        return self._parent._getitems(indices)  # pylint: disable=protected-access

    def _then(self, name: str, *args, factor: int = 1, **kwargs) -> "AudioMapDataset":
        # Applied to the parent and re-wrapped, so the wrapper is only ever the
        # outermost node: the graph below is Grain's own, and so are the
        # default seeds Grain derives from it (they depend on node depths).
        plan = self.plan if name in _PER_ITEM else None
        if self.on_top is not None and name != "batch":
            make, below = self.on_top
            moved = getattr(below, name)(*args, **kwargs)
            result = AudioMapDataset(make(moved), item_bytes=self.item_bytes * factor, plan=plan)
            result.on_top = (make, moved)
        else:
            result = AudioMapDataset(getattr(self._parent, name)(*args, **kwargs),
                                     item_bytes=self.item_bytes * factor, plan=plan)
        if self.host_share is not None:
            # An element-wise function keeps items a function of their stream index; anything else
            # (index-seeded maps, filters, reorders, batches) makes the share a stream of its own.
            share = self.host_share
            result.host_share = share.then_map(args[0]) if name == "map" else share.unplaced()
        return result

    def shuffle(self, seed: int | None = None):
        return self._then("shuffle", seed)

    def slice(self, sl: slice):
        return self._then("slice", sl)

    def repeat(self, num_epochs: int | None = None, *, reseed_each_epoch: bool = True):
        return self._then("repeat", num_epochs, reseed_each_epoch=reseed_each_epoch)

    def batch(self, batch_size: int, *, drop_remainder: bool = False, batch_fn: Callable | None = None):
        return self._then("batch", batch_size, factor=batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)

    def to_iter_dataset(self, read_options: grain.ReadOptions | None = None, *, allow_nones: bool = False):
        """Like Grain's, with :func:`default_read_options` when none are given.

        With default options, a later ``mp_prefetch`` switches the workers to
        synchronous reads (``num_threads=0``), as the multiprocessing guide
        recommends: the processes are the parallelism, and reader threads in
        every worker would only add memory and contention.
        """
        defaulted = read_options is None
        options = read_options or default_read_options(self.item_bytes)
        return AudioIterDataset(
            self._iter_with(options, allow_nones), source=self, allow_nones=allow_nones,
            element_bytes=self.item_bytes, read_options=options, defaulted=defaulted, steps=(),
        )

    def _iter_with(self, options: grain.ReadOptions, allow_nones: bool) -> grain.IterDataset:
        buffered = options.prefetch_buffer_size + options.num_threads
        _check(
            buffered * self.item_bytes,
            f"ReadOptions buffer {options.prefetch_buffer_size} + {options.num_threads} threads "
            f"x {_fmt(self.item_bytes)} per item",
            physical_memory_bytes(),
        )
        return super().to_iter_dataset(options, allow_nones=allow_nones)


#: Reads inside ``mp_prefetch`` workers when the user left ReadOptions to us.
WORKER_READ_OPTIONS = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


class AudioIterDataset(_Chained, grain.IterDataset):
    """A pass-through ``IterDataset`` that checks ``mp_prefetch`` buffer memory.

    It remembers how it was built (the source, the read options, and every
    transformation called on it since), so that ``mp_prefetch`` can rebuild it
    with synchronous reads when the read options were audiotree's defaults.
    Like :class:`AudioMapDataset`, its transformations return an
    ``AudioIterDataset``, so ``mp_prefetch`` at the end of the chain is ours.
    """

    def __init__(self, parent: grain.IterDataset, *, source: AudioMapDataset, allow_nones: bool, element_bytes: int,
                 read_options: grain.ReadOptions, defaulted: bool, steps: tuple):
        super().__init__(parent)
        self._source = source
        self._allow_nones = allow_nones
        self.element_bytes = int(element_bytes)
        self._read_options = read_options
        self._defaulted = defaulted
        # (method name, args, kwargs) of every transformation since to_iter_dataset.
        self._steps = steps

    def __str__(self) -> str:
        return "AudioIterDataset"

    def __iter__(self):
        from audiotree.sources.stream_resume import ResumableIterDataset

        resumable = ResumableIterDataset(self._parent, rebuild=_Rebuild(self, self._read_options), source=self._source,
                                         workers=0)
        return resumable.__iter__()

    def _then(self, name: str, *args, factor: int = 1, **kwargs) -> "AudioIterDataset":
        return AudioIterDataset(
            getattr(self._parent, name)(*args, **kwargs),
            source=self._source, allow_nones=self._allow_nones, element_bytes=self.element_bytes * factor,
            read_options=self._read_options, defaulted=self._defaulted, steps=self._steps + ((name, args, kwargs),),
        )

    def batch(self, batch_size: int, *, drop_remainder: bool = False, batch_fn: Callable | None = None):
        return self._then("batch", batch_size, factor=batch_size, drop_remainder=drop_remainder, batch_fn=batch_fn)

    def _rebuilt(self, options: grain.ReadOptions, source: grain.MapDataset | None = None) -> grain.IterDataset:
        """This pipeline with ``options``, over ``source`` (a dataset of the same items) if given."""
        start = self._source if source is None else AudioMapDataset(source, item_bytes=self._source.item_bytes)
        ds = start._iter_with(options, self._allow_nones)  # pylint: disable=protected-access
        for name, args, kwargs in self._steps:
            ds = getattr(ds, name)(*args, **kwargs)
        return ds

    def mp_prefetch(self, options: grain.MultiprocessingOptions | None = None, worker_init_fn=None,
                    sequential_slice: bool = False, *, batch_slots: bool = True):
        """Grain's ``mp_prefetch``, with workers that run from plain scripts.

        See :mod:`audiotree.sources.workers.start` for what is prepared, for which
        processes, and the ``AUDIOTREE_PLAIN_WORKERS=1`` opt-out; iterators
        still open at interpreter exit are closed (:mod:`audiotree.sources.workers.lifecycle`).
        With ``batch_slots`` (the default, on Linux), workers send their
        elements' arrays through a few shared-memory slots that are reused
        across batches (:mod:`audiotree.sources.workers.batch_slots`); ``False`` or
        ``AUDIOTREE_BATCH_SLOTS=0`` keeps Grain's fresh segment per batch.
        The elements are the same either way.
        """
        from audiotree.io.read_board import reserve

        reserve()  # the workers count their reads on this process's board (audiotree.io.read_stats)
        resolved = options or grain.MultiprocessingOptions(num_workers=10)
        first = self._prefetched(None, options, worker_init_fn, sequential_slice, batch_slots)
        rebuild = _Rebuild(self, None, (options, worker_init_fn, sequential_slice, batch_slots))
        return _prefetched_type()(first, rebuild=rebuild, source=self._source, workers=resolved.num_workers,
                                  sequential_slice=sequential_slice)

    def _prefetched(self, source, options, worker_init_fn, sequential_slice, batch_slots) -> grain.IterDataset:
        """Grain's ``mp_prefetch`` of this pipeline (over ``source`` if given), with audiotree's workers."""
        from audiotree.sources.workers.batch_slots import SlotWriterIterDataset, new_token, slots_available
        from audiotree.sources.workers.lifecycle import ClosingIterDataset
        from audiotree.sources.workers.start import WorkerInit, plain_workers_requested

        resolved = options or grain.MultiprocessingOptions(num_workers=10)
        read = WORKER_READ_OPTIONS if self._defaulted and resolved.num_workers > 0 else self._read_options
        if source is not None:
            base = self._rebuilt(read, source)
        else:
            base = self._rebuilt(read) if read is not self._read_options else self._parent
        workers = max(resolved.num_workers, 1)
        read_items = read.prefetch_buffer_size + read.num_threads
        per_worker = read_items * self._source.item_bytes + resolved.per_worker_buffer_size * self.element_bytes
        parent_side = workers * resolved.per_worker_buffer_size * self.element_bytes
        _check(
            workers * per_worker + parent_side,
            f"{workers} workers x (read buffer {read_items} items + {resolved.per_worker_buffer_size} "
            f"x {_fmt(self.element_bytes)} elements), plus the parent's queue",
            physical_memory_bytes(),
        )
        plain = plain_workers_requested()
        init = WorkerInit(worker_init_fn, prepare_spawn=not plain)
        token = None
        if resolved.num_workers > 0 and batch_slots and slots_available():
            # Reused shared-memory slots instead of a fresh segment per batch (audiotree.sources.workers.batch_slots).
            token = new_token()
            base = SlotWriterIterDataset(base, token=token, slots=resolved.per_worker_buffer_size + 3)
        prefetched = base.mp_prefetch(options, worker_init_fn=init, sequential_slice=sequential_slice)
        return ClosingIterDataset(prefetched, prepare_workers=not plain, slot_token=token)


@functools.cache
def _prefetched_type() -> type:
    """What ``mp_prefetch`` returns: a ``ClosingIterDataset`` (iterators closed at exit) whose iterators
    checkpoint positions in the global stream (:mod:`audiotree.sources.stream_resume`)."""
    from audiotree.sources.stream_resume import ResumableIterDataset
    from audiotree.sources.workers.lifecycle import ClosingIterDataset

    def slot_token(self) -> str | None:
        """The batch slots' token of the pipeline the workers run (see ``ClosingIterDataset.slot_token``)."""
        return getattr(self.rebuild_for(None), "slot_token", None)

    return type("PrefetchedIterDataset", (ResumableIterDataset, ClosingIterDataset),
                {"__module__": __name__, "slot_token": property(slot_token)})


class _Rebuild:
    """The pipeline of an :class:`AudioIterDataset` over another source: to resume with another shape."""

    def __init__(self, ds: AudioIterDataset, read_options: grain.ReadOptions | None, prefetch: tuple | None = None):
        self.ds, self.read_options, self.prefetch = ds, read_options, prefetch

    def __call__(self, source: grain.MapDataset) -> grain.IterDataset:
        if self.prefetch is None:
            return self.ds._rebuilt(self.read_options, source)  # pylint: disable=protected-access
        return self.ds._prefetched(source, *self.prefetch)  # pylint: disable=protected-access


def wrap_stored(ds: grain.MapDataset, *, item_bytes: int | None = None) -> "AudioMapDataset":
    """``ds`` (items read back from disk) as an :class:`AudioMapDataset`, sized by its first item.

    So that pipelines over rendered datasets get audiotree's ``mp_prefetch``
    (plain-script workers, memory checks) like the builders' datasets. A
    known ``item_bytes`` (a waveform's bytes, from a manifest) spares reading
    the first item, which on object storage is a request.
    """
    if item_bytes is not None:
        return AudioMapDataset(ds, item_bytes=int(item_bytes))
    item_bytes = 0
    if len(ds):
        first = ds[0]
        waveform = getattr(first, "waveform", None)
        item_bytes = int(getattr(waveform, "nbytes", 0) or 0)
    return AudioMapDataset(ds, item_bytes=item_bytes)


def estimate_item_bytes(*, channels: int, sample_rate: int, duration: float) -> int:
    """Bytes of one float32 excerpt plus its provenance rows."""
    return int(channels) * int(round(duration * sample_rate)) * 4 + 2 * 1024 * 4 + 64

