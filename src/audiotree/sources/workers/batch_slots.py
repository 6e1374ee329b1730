"""Batches from ``mp_prefetch`` workers through shared-memory slots reused across batches.

Grain's ``mp_prefetch`` already sends arrays through shared memory, but each
leaf of each element gets a fresh POSIX segment. A fresh 17 MB segment has to
be zero-filled and faulted in on both sides (about 4,300 pages each), which
costs 10 to 17 ms of CPU per batch of 32 x 3 s at 44.1 kHz: the loss that made
two workers worth less than two cores (benchmarks/PROFILE.md).

Here every worker keeps a small **ring of slots**, one segment per slot,
created on demand and reused:

* **Worker side** (:class:`SlotWriterIterDataset`, the last step of the
  pipeline that runs in a worker): every non-empty C-contiguous NumPy leaf of
  an element is copied into one free slot (64-byte aligned, in the order of
  ``jax.tree_util.tree_leaves``), and the element leaves the worker as a small
  :class:`InSlot` record that names the slot. A slot is free while its header
  byte is 0; the worker sets it to 1 before sending. When every slot is taken
  (the trainer holds more batches than the ring has slots), the element is
  sent unchanged, through Grain's own per-batch segments, so nothing waits.
  A worker keeps only the slot it wrote last mapped: the others' pages are
  dropped from its page tables (the segment keeps their contents for the
  trainer), and a slot is mapped again in one ``MADV_POPULATE_WRITE`` call
  before it is written. So a worker's RSS counts one slot, not the ring, and a
  batch's pages are not counted by the worker and the trainer both.
* **Trainer side** (:class:`SlotReader`): the segment is mapped once and its
  name unlinked at once (the mapping stays valid), so nothing is left in
  ``/dev/shm`` by a batch the trainer has received. Leaves are plain
  ``np.ndarray`` views of the slot: no copy. The slot is handed back (header
  byte 0) when the last view of that batch is garbage collected, so the
  trainer may hold batches as long as it likes.

**Leaks and deaths.** A segment's name lives in ``/dev/shm`` only between its
creation in a worker and its first mapping by the trainer. Names carry a
per-pipeline token and the creating worker's pid
(``audiotree_<token>_<pid>_<slot>_<generation>``). A worker unlinks the slots it
never sent when it exits; the trainer, when its iterator is closed or fails
(for example a worker killed with SIGKILL: Grain raises "Worker process was
terminated unexpectedly"), unlinks every name of its token whose worker is no
longer alive. Segments are registered with the parent's resource tracker,
which unlinks what is left if the whole process tree dies.

Slots are used on Linux (POSIX shared memory under ``/dev/shm``); elsewhere,
or with ``AUDIOTREE_BATCH_SLOTS=0``, batches travel as Grain sends them.
Values, dtypes, shapes and the pytree structure are identical either way.
"""

from __future__ import annotations

import dataclasses
import glob
import mmap
import os
import secrets
import sys
import weakref
from multiprocessing import resource_tracker, util
from typing import Any

import grain
import jax
import numpy as np

__all__ = ["InSlot", "SlotReader", "SlotWriterIterDataset", "new_token", "prepare_tracker", "slots_available"]

_SHM_DIR = "/dev/shm"
_PREFIX = "audiotree_"
_HEADER = 64  # bytes before the data; byte 0 is the slot's state
_ALIGN = 64
_FREE, _BUSY = 0, 1
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux 5.14+; not named by every Python


def slots_available() -> bool:
    """True where slots can be used: Linux with ``/dev/shm``, unless ``AUDIOTREE_BATCH_SLOTS=0``."""
    if os.environ.get("AUDIOTREE_BATCH_SLOTS", "1").strip() in ("0", "false", "no"):
        return False
    return sys.platform.startswith("linux") and os.path.isdir(_SHM_DIR)


def prepare_tracker() -> None:
    """Starts this process's resource tracker, so that every worker registers its slots with it.

    Spawned workers share the parent's tracker anyway; a forked worker would
    start a tracker of its own if the parent had none yet, and the trainer's
    unlink could not unregister what that one holds.
    """
    resource_tracker.ensure_running()


def new_token() -> str:
    """A fresh name prefix for one pipeline's slots (random, 10 hex digits)."""
    return secrets.token_hex(5)


@dataclasses.dataclass(frozen=True)
class _Piece:
    """Where one leaf lies in a slot: byte offset from the data start, shape, dtype."""

    offset: int
    shape: tuple
    dtype: np.dtype


@dataclasses.dataclass(frozen=True)
class InSlot:
    """An element whose array leaves are in the slot ``segment`` (the rest is in ``tree``)."""

    segment: str
    tree: Any


def _leaf_fits(leaf: Any) -> bool:
    # Grain's own criteria for what goes through shared memory.
    return (isinstance(leaf, np.ndarray) and not leaf.dtype.hasobject and leaf.flags.c_contiguous
            and leaf.size > 0)


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class _Slot:
    """One segment of a worker's ring (worker side)."""

    def __init__(self, name: str, capacity: int):
        self.name = name
        size = _HEADER + capacity
        # A plain mmap rather than SharedMemory: dropping and repopulating pages needs its madvise.
        fd = os.open(os.path.join(_SHM_DIR, name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        # Registered with the (parent's) resource tracker: the net for a dead tree.
        resource_tracker.register("/" + name, "shared_memory")
        self.capacity = capacity
        self.header = np.frombuffer(self.map, np.uint8, count=_HEADER)
        self.data = np.frombuffer(self.map, np.uint8, offset=_HEADER, count=capacity)
        self.sent = False

    def populate(self) -> bool:
        """Maps every page for writing in one call; False where the kernel cannot (before Linux 5.14)."""
        try:
            self.map.madvise(_MADV_POPULATE_WRITE)
        except (OSError, ValueError):
            return False
        return True

    def evict(self) -> None:
        """Drops this process's pages of the slot; the segment keeps its contents for the trainer."""
        self.map.madvise(mmap.MADV_DONTNEED)

    def discard(self) -> None:
        """Unmaps the slot, and unlinks its name if the trainer never received it."""
        self.header = self.data = None
        self.map.close()
        if not self.sent:
            _unlink(self.name)


def _discard_all(slots: list) -> None:
    while slots:
        slots.pop().discard()


class _Ring:
    """A worker's slots; at most ``count`` of them, each grown when an element outgrows it."""

    def __init__(self, token: str, count: int):
        self._base = f"{_PREFIX}{token}_{os.getpid()}_"
        self._count = count
        self._slots: list[_Slot | None] = []
        self._generation = 0
        # The one slot whose pages this process keeps mapped (None: none yet). False where the
        # kernel cannot populate a slot in one call: then every slot stays mapped.
        self._resident: _Slot | None = None
        self._evicting = True
        self._all: list[_Slot] = []  # for the exit finaliser
        util.Finalize(None, _discard_all, args=(self._all,), exitpriority=5)

    def _new(self, index: int, need: int) -> _Slot:
        self._generation += 1
        slot = _Slot(f"{self._base}{index}_{self._generation}", max(need + need // 8, mmap.PAGESIZE))
        self._all.append(slot)
        return slot

    def _acquire(self, need: int) -> _Slot | None:
        free = [i for i, s in enumerate(self._slots) if s.header[0] == _FREE]
        for i in free:
            if self._slots[i].capacity >= need:
                return self._slots[i]
        if free:  # regrow the first free slot
            i = free[0]
            old = self._slots[i]
            self._all.remove(old)
            old.discard()
            if old is self._resident:
                self._resident = None
            self._slots[i] = self._new(i, need)
            return self._slots[i]
        if len(self._slots) < self._count:
            self._slots.append(self._new(len(self._slots), need))
            return self._slots[-1]
        return None

    def _make_resident(self, slot: _Slot) -> None:
        # A worker's RSS would otherwise count every slot it ever wrote, on top of the trainer's
        # count of the same pages; populating a slot in one call costs about 1 ms per 18 MB,
        # a quarter of faulting its pages in one by one.
        if slot is self._resident or not self._evicting:
            return
        if not slot.populate():
            self._evicting = False  # old kernel: keep every slot mapped, as faults would cost more
            return
        if self._resident is not None:
            self._resident.evict()
        self._resident = slot

    def pack(self, element: Any) -> Any:
        leaves, treedef = jax.tree_util.tree_flatten(element)
        where, need = [], 0
        for leaf in leaves:
            if _leaf_fits(leaf):
                where.append(need)
                need += _aligned(leaf.nbytes)
            else:
                where.append(None)
        if need == 0:
            return element
        slot = self._acquire(need)
        if slot is None:
            return element  # every slot is held by the trainer: Grain's own transfer
        self._make_resident(slot)
        out = []
        for leaf, offset in zip(leaves, where):
            if offset is None:
                out.append(leaf)
                continue
            dest = slot.data[offset:offset + leaf.nbytes].view(leaf.dtype).reshape(leaf.shape)
            np.copyto(dest, leaf, casting="no")
            out.append(_Piece(offset, leaf.shape, leaf.dtype))
        slot.header[0] = _BUSY
        slot.sent = True
        return InSlot(slot.name, jax.tree_util.tree_unflatten(treedef, out))


class _SlotWriterIterator(grain.DatasetIterator):
    def __init__(self, parent: grain.DatasetIterator, token: str, count: int):
        super().__init__(parent)
        self._token = token
        self._count = count
        self._ring: _Ring | None = None

    def __next__(self):
        element = next(self._parent)
        if self._ring is None:
            self._ring = _Ring(self._token, self._count)
        return self._ring.pack(element)

    def get_state(self):
        return self._parent.get_state()

    def set_state(self, state):
        self._parent.set_state(state)

    def __str__(self) -> str:
        return "SlotWriterIterator"


class SlotWriterIterDataset(grain.IterDataset):
    """The worker's last step: array leaves of each element go into a reused slot.

    Its elements are :class:`InSlot` records, to be opened by a
    :class:`SlotReader` with the same ``token`` in the trainer.
    """

    def __init__(self, parent: grain.IterDataset, *, token: str, slots: int):
        super().__init__(parent)
        self._token = token
        self._slots = int(slots)

    def __iter__(self):
        return _SlotWriterIterator(self._parent.__iter__(), self._token, self._slots)

    def __str__(self) -> str:
        return f"SlotWriterIterDataset(slots={self._slots})"


class _Lease(np.ndarray):
    """The base of every view of one received batch; the slot is handed back when it is collected."""


def _release(header: np.ndarray) -> None:
    header[0] = _FREE


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[-1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _unlink(name: str) -> bool:
    try:
        os.unlink(os.path.join(_SHM_DIR, name))
    except FileNotFoundError:
        return False
    try:
        resource_tracker.unregister("/" + name, "shared_memory")
    except Exception:  # noqa: BLE001 - no tracker to tell (it is gone with the tree)
        pass
    return True


class SlotReader:
    """Opens :class:`InSlot` elements in the trainer process (one reader per iterator).

    Thread-compatible, not thread-safe: one consumer, like the iterator it serves.
    """

    def __init__(self, token: str):
        self._token = token
        self._mapped: dict[str, tuple[str, mmap.mmap, np.ndarray]] = {}  # ring slot -> (name, map, header)

    def open(self, element: Any) -> Any:
        """``element`` with its slot's arrays as views; anything else unchanged."""
        if not isinstance(element, InSlot):
            return element
        mapped = self._map(element.segment)
        lease_bytes = mapped.size() - _HEADER
        lease = np.frombuffer(mapped, np.uint8, count=lease_bytes, offset=_HEADER).view(_Lease)
        header = self._mapped[element.segment.rsplit("_", 1)[0]][2]
        weakref.finalize(lease, _release, header)

        def view(leaf):
            if not isinstance(leaf, _Piece):
                return leaf
            nbytes = int(np.prod(leaf.shape, dtype=np.int64)) * leaf.dtype.itemsize
            return lease[leaf.offset:leaf.offset + nbytes].view(leaf.dtype).reshape(leaf.shape).view(np.ndarray)

        leaves, treedef = jax.tree_util.tree_flatten(element.tree)
        return jax.tree_util.tree_unflatten(treedef, [view(leaf) for leaf in leaves])

    def _map(self, name: str) -> mmap.mmap:
        key = name.rsplit("_", 1)[0]  # one entry per ring slot; a regrown slot replaces its entry
        known = self._mapped.get(key)
        if known is not None and known[0] == name:
            return known[1]
        path = os.path.join(_SHM_DIR, name)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            raise RuntimeError(
                f"the shared-memory batch slot {path} is gone before the trainer read it: its worker died "
                "and the slot was cleaned up, or something else unlinked it. Restart the iterator."
            ) from None
        try:
            mapped = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        _unlink(name)  # from here on only the mappings hold the memory
        self._mapped[key] = (name, mapped, np.frombuffer(mapped, np.uint8, count=_HEADER))
        return mapped

    def sweep(self) -> list[str]:
        """Unlinks the slots of this token whose worker is no longer alive; returns their names."""
        removed = []
        for path in glob.glob(os.path.join(_SHM_DIR, f"{_PREFIX}{self._token}_*")):
            name = os.path.basename(path)
            try:
                pid = int(name[len(_PREFIX) + len(self._token) + 1:].split("_", 1)[0])
            except ValueError:
                continue
            if not _pid_alive(pid) and _unlink(name):
                removed.append(name)
        return removed
