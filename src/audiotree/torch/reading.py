"""How the adapters read items: epoch arithmetic, the epoch shared with workers, reader threads.

See :mod:`audiotree.torch` and ``docs/torch.md`` for the design.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import torch
import torch.utils.data as _tud

from audiotree.parallel.parent_death import exit_with_parent, started_by_main_thread
from audiotree.parallel.worker_memory import keep_freed_memory
from audiotree.validation import is_int

__all__ = ["ENDLESS_EPOCH_STRIDE", "ENDLESS_LENGTH_ERROR", "DEFAULT_READ_THREADS", "STATE_VERSION", "check_epoch", "check_count", "check_threads", "dataset_length", "worker_info", "WorkerInit", "read_item", "read_pool", "SharedEpoch", "SharedEpochMixin", "EpochCursor"]


#: Distance between epoch starts of an endless stream read without ``epoch_size``.
ENDLESS_EPOCH_STRIDE = 2**36


ENDLESS_LENGTH_ERROR = (
    "This audiotree stream is endless (the dataset was built with num_epochs=None), so it has no length. "
    "Pass epoch_size=N (items per epoch) to create_dataloader()/AudioDataLoader/TorchIterableDataset: each "
    "iteration is then one epoch of N items and len(loader) is its number of batches, the steps_per_epoch an "
    "LR scheduler needs (e.g. OneCycleLR(opt, max_lr, total_steps=epochs * len(loader))). Or keep it endless "
    "and give the scheduler your own step count."
)


#: Threads each process (worker, or the main process with ``num_workers=0``) reads with.
DEFAULT_READ_THREADS = 4


STATE_VERSION = 1


def check_epoch(epoch: Any) -> int:
    if not is_int(epoch) or epoch < 0:
        raise ValueError(f"epoch must be a non-negative int, got {epoch!r}.")
    return int(epoch)


def check_count(name: str, value: Any) -> int:
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")
    return int(value)


def dataset_length(dataset: Any) -> int:
    try:
        return len(dataset)
    except TypeError:
        raise TypeError(
            f"Expected an audiotree/Grain MapDataset (with len() and random access), got {type(dataset).__name__}."
        ) from None


def worker_info() -> tuple[int, int]:
    info = _tud.get_worker_info()
    if info is None:
        return 0, 1
    exit_with_parent()  # a plain DataLoader's worker over our adapters: see WorkerInit
    return int(info.id), int(info.num_workers)


class WorkerInit:
    """The ``worker_init_fn`` of :class:`~audiotree.torch.AudioDataLoader`: exits with the parent, then runs ``fn``.

    torch's own workers notice a dead parent only every 5 s, and not at all
    while blocked on a full pipe; ours exit within a fraction of a second
    (:func:`audiotree.parallel.parent_death.exit_with_parent`). They also keep
    the memory they free for reuse (:func:`audiotree.parallel.worker_memory.keep_freed_memory`). The loader sets
    ``parent_pid`` and ``main_thread`` just before it starts workers.
    """

    def __init__(self, fn: Callable[[int], Any] | None):
        self.fn = fn
        self.parent_pid = os.getpid()
        self.main_thread = False

    def before_start(self) -> None:
        """Called by the loader in the thread that is about to start the workers."""
        self.parent_pid = os.getpid()
        self.main_thread = started_by_main_thread()

    def __call__(self, worker_id: int) -> None:
        exit_with_parent(self.parent_pid, main_thread=self.main_thread)
        keep_freed_memory()  # see audiotree.parallel.worker_memory: no fresh pages per item
        if self.fn is not None:
            self.fn(worker_id)


def read_item(dataset: Any, index: int, length: int) -> Any:
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


def read_pool(threads: int) -> ThreadPoolExecutor:
    """This process's pool of ``threads`` reader threads (a forked child starts its own)."""
    global _pools_pid
    if _tud.get_worker_info() is not None:
        exit_with_parent()  # a plain DataLoader's worker over our adapters: see WorkerInit
    with _pools_lock:
        if _pools_pid != os.getpid():
            _pools.clear()  # inherited through fork: those threads do not exist here
            _pools_pid = os.getpid()
        pool = _pools.get(threads)
        if pool is None:
            pool = _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="audiotree-read")
        return pool


def check_threads(read_threads: Any) -> int:
    if read_threads is None:
        return DEFAULT_READ_THREADS
    if not is_int(read_threads) or read_threads < 0:
        raise ValueError(f"read_threads must be an int >= 0, got {read_threads!r}.")
    return int(read_threads)


class SharedEpoch:
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


class SharedEpochMixin:
    """The epoch of an adapter (``self._epoch``, a :class:`SharedEpoch`), shared with its live workers."""

    _epoch: SharedEpoch

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epoch_size={self.epoch_size}, epoch={self.epoch}, dataset={self.dataset})"

    @property
    def epoch(self) -> int:
        """The epoch the adapter reads now: plain integer keys, or the next iteration."""
        return self._epoch.read()[0]

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch, in this process and its live workers."""
        self._epoch.write(check_epoch(epoch))


class EpochCursor:
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
