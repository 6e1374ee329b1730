"""The loader that resumes exactly: ``AudioDataLoader``, ``create_dataloader``, ``as_torch_dataset``.

See :mod:`audiotree.torch` and ``docs/torch.md`` for the design.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import sys
import weakref
from typing import Any, Callable, Iterator

import torch
import torch.utils.data as _tud

from audiotree.sources.global_stream import (
    CHECKPOINT_KEY,
    CHECKPOINT_VERSION,
    CheckpointError,
    StreamPosition,
    checkpoint_position,
    merge_checkpoints,
    union_of_shares,
)
from audiotree.torch.iterable import TorchIterableDataset
from audiotree.torch.map_style import EpochSampler, TorchMapDataset
from audiotree.torch.reading import (
    ENDLESS_LENGTH_ERROR,
    STATE_VERSION,
    EpochCursor,
    WorkerInit,
    check_count,
    check_epoch,
    check_threads,
    dataset_length,
)
from audiotree.torch.tensors import collate, to_torch
from audiotree.validation import renamed_keywords

__all__ = ["AudioDataLoader", "create_dataloader", "as_torch_dataset", "merge_state_dicts"]

#: Loaders that started persistent workers, and the process that registered their stop at exit.
_LIVE_LOADERS: weakref.WeakSet = weakref.WeakSet()
_EXIT_HOOK_PID: list[int] = []


def _stop_workers_at_exit() -> None:
    """Stops the persistent workers still alive at exit as a finished loader would, letting them end normally.

    Left running, they are daemon processes that multiprocessing ends at exit
    with SIGTERM, so their exit handlers never run and their temporary
    folders stay (the staged shards of a remote ArrayRecord dataset, the
    ``pymp-*`` folders through which tensors were sent). Registered after
    torch's own exit hook, this runs before it, while torch still stops
    workers.
    """
    if _EXIT_HOOK_PID != [os.getpid()]:  # a forked copy of the registering process
        return
    for loader in list(_LIVE_LOADERS):
        with contextlib.suppress(Exception):  # a loader half torn down already: multiprocessing ends its workers
            loader._stop_workers()


def _stop_at_exit(loader: "AudioDataLoader") -> None:
    if _EXIT_HOOK_PID != [os.getpid()]:
        _EXIT_HOOK_PID[:] = [os.getpid()]
        atexit.register(_stop_workers_at_exit)
    _LIVE_LOADERS.add(loader)


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
    kwargs = dict(epoch_size=epoch_size, epoch=epoch, read_threads=check_threads(read_threads))
    if dataset_length(dataset) >= sys.maxsize:
        return TorchIterableDataset(dataset, **kwargs)
    return TorchMapDataset(dataset, **kwargs)


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
    base: StreamPosition = dataclasses.field(default_factory=StreamPosition)  # consumed before a re-shaped resume

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
      shuffle, shuffle_seed: finite datasets only; a per-epoch permutation keyed on
        ``(shuffle_seed, epoch)`` on top of the dataset's own order (audiotree's builders
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

    @renamed_keywords(seed="shuffle_seed")
    def __init__(self, dataset: Any, batch_size: int | None = 32, *, shuffle: bool = False, shuffle_seed: int = 0,
                 epoch: int = 0,
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
        if num_workers:
            from audiotree.io.read_board import reserve

            reserve()  # the workers count their reads on this process's board (audiotree.io.read_stats)
        # batch_size=None: the dataset yields whole batches; each counts as one step.
        self._step = 1 if batch_size is None else check_count("batch_size", batch_size)
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
            self._cursor = EpochCursor(check_epoch(epoch), advance_epochs)
            sampler = None
        else:
            sampler = EpochSampler(adapter, shuffle=shuffle, shuffle_seed=shuffle_seed, epoch=epoch,
                                   advance_epochs=advance_epochs)
            self._cursor = sampler.cursor
        kwargs["worker_init_fn"] = WorkerInit(kwargs.get("worker_init_fn"))
        # A shard_dataset share (a DistributedSampler-style rank): its items are positions of a global stream.
        self._stream_share = getattr(getattr(adapter, "dataset", None), "host_share", None)
        self._stream_source = getattr(adapter, "dataset", None)
        self._stream_base = StreamPosition()  # the whole run's items consumed before a merged resume
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
        epoch = check_epoch(epoch)
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
                raise TypeError(ENDLESS_LENGTH_ERROR)
            total += share // self.batch_size if self.drop_last else -(-share // self.batch_size)
        return total

    # ---------------------------------------------------------------- iteration
    def _get_iterator(self):
        # Workers start here, in this thread: they exit with this process (WorkerInit).
        if isinstance(self.worker_init_fn, WorkerInit):
            self.worker_init_fn.before_start()
        if self.num_workers > 0 and self.persistent_workers:
            _stop_at_exit(self)
        return super()._get_iterator()

    def __iter__(self) -> Iterator[Any]:
        return self._iter_iterable() if self._iterable else self._iter_map()

    def _iter_map(self) -> Iterator[Any]:
        epoch, start = self.sampler.cursor.peek()
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
        base = StreamPosition()
        if resume is not None:
            base = StreamPosition.from_dict(resume.get("base", {"prefix": 0}), where="base")
            if resume["num_workers"] != roles:
                # Another worker count: the items every role delivered become the base, and the new
                # roles share the rest of the epoch (audiotree.sources.global_stream).
                base = base.with_consumed(self._delivered(dataset, resume, base))
                resume = None
        totals = []
        for role in range(roles):
            share = dataset.shard_size(role, roles, base)
            if share is None:
                totals.append(None)
            else:
                totals.append(share // self._step if self.drop_last else -(-share // self._step))
        if resume is not None:
            batches, shift = list(resume["batches"]), int(resume["next_role"])
            consumed = []
            for role in range(roles):
                share = dataset.shard_size(role, roles, base)
                items = batches[role] * self._step
                consumed.append(items if share is None else min(items, share))
            dataset.resume_at({"epoch": epoch, "num_workers": roles, "shift": shift, "consumed": consumed,
                               "base": base.to_dict()})
        elif base.count:
            batches, shift = [0] * roles, 0
            dataset.resume_at({"epoch": epoch, "num_workers": roles, "shift": 0, "consumed": [0] * roles,
                               "base": base.to_dict()})
        else:
            batches, shift = [0] * roles, 0
            dataset.resume_at(None)
        dataset.set_epoch(epoch)
        progress = self._progress = _IterProgress(epoch, shift, batches, totals, base=base)
        try:
            iterator = _tud.DataLoader.__iter__(self)  # starts (or resumes) the workers with the state above
        finally:
            dataset.resume_at(None)
        try:
            for batch in iterator:
                progress.record()
                if batch is not None:
                    yield batch
        except GeneratorExit:
            progress.abandoned = True
            raise
        progress.finished = True

    def _host(self) -> tuple[int, int] | None:
        """(rank, world size) when the wrapped dataset is a host share (``shard_dataset``, builders' shard_options)."""
        share = self._stream_share
        return None if share is None else (int(share.index), int(share.count))

    def _share_position(self, state: dict) -> StreamPosition | None:
        """The items of this rank's share that ``state`` holds as consumed, as a position in the share's
        stream (``None``: not placeable: a finite share past its first pass, or a later epoch of an endless
        stream without ``epoch_size``)."""
        adapter, epoch = self.dataset, state["epoch"]
        length = dataset_length(adapter.dataset)
        if self._iterable:
            resume = state["resume"]
            start = None if adapter.epoch_size is None and epoch else adapter.epoch_start(epoch)
            within = StreamPosition()
            if resume is not None:
                base = StreamPosition.from_dict(resume.get("base", {"prefix": 0}), where="base")
                within = base.with_consumed(self._delivered(adapter, resume, base))
        else:
            start = epoch * adapter.epoch_size
            order = self.sampler.order(epoch)
            within = StreamPosition.of(order[: state["position"]])  # a slice of the range or the permutation
        if start is None:
            return None
        if length < sys.maxsize and start:
            return StreamPosition(length) if start >= length and not within.count else None
        return StreamPosition(start + within.prefix, tuple(start + i for i in within.beyond))

    def _stream_state(self, state: dict) -> dict | None:
        """This rank's checkpoint in the global stream (:mod:`audiotree.sources.global_stream`), for
        :func:`merge_state_dicts`; ``None`` when it cannot be placed there."""
        share = self._stream_share
        position = self._share_position(state)
        if share is None or position is None:
            return None
        stream = {CHECKPOINT_KEY: CHECKPOINT_VERSION, "host": [int(share.index), int(share.count)],
                  "position": position.to_dict()}
        if not share.placeable:
            stream["global_stream"] = False
        if self._stream_base.count:
            stream["base"] = self._stream_base.to_dict()
        return stream

    def _rebase(self, whole: StreamPosition) -> None:
        """Reads this rank's share of the items of the global stream that ``whole`` does not hold."""
        if whole == self._stream_base:
            return
        share = self._stream_share
        source = self._stream_source
        if whole.count:
            source = share.rest_after(whole)
        self._stop_workers()
        self.dataset.use_source(source)
        if not self._iterable:
            self.sampler.num_items = self.dataset.epoch_size
        self._stream_base = whole

    def _delivered(self, dataset: TorchIterableDataset, resume: dict, base: StreamPosition) -> StreamPosition:
        """The items of the epoch (after ``base``) that a checkpoint's roles delivered, as one position."""
        roles = int(resume["num_workers"])
        shares = []
        for role in range(roles):
            share = dataset.shard_size(role, roles, base)
            items = int(resume["batches"][role]) * self._step
            shares.append(StreamPosition(items if share is None else min(items, share)))
        return union_of_shares(shares)

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """Where the stream continues: the batch after the last one handed out, else the next epoch's start.

        Taken after ``break`` it still points at the batch after the last one you
        consumed, so "train N steps, break, save" resumes exactly (a new ``iter()``
        without :meth:`load_state_dict` starts the next epoch, as always).
        """
        state: dict = {"version": STATE_VERSION, "kind": "iterable" if self._iterable else "map"}
        host = self._host()
        if host is not None:
            state["host"] = list(host)
        return self._with_stream(self._state_dict(state))

    def _with_stream(self, state: dict) -> dict:
        """``state`` with this rank's position in the global stream under ``"stream"`` (shard_dataset shares)."""
        if self._stream_share is not None:
            stream = self._stream_state(state)
            if stream is not None:
                state["stream"] = stream
        return state

    def _state_dict(self, state: dict) -> dict:
        progress = self._progress
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
                if progress.base.count:
                    state["resume"]["base"] = progress.base.to_dict()
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
        state.update(num_items=sampler.num_items, shuffle=sampler.shuffle, shuffle_seed=sampler.shuffle_seed)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Makes the next ``iter()`` continue where ``state`` left off."""
        kind = "iterable" if self._iterable else "map"
        if state.get("kind") != kind:
            raise ValueError(f"This is a {state.get('kind')!r} checkpoint; this loader reads a {kind!r} dataset.")
        stream, host = state.get("stream"), self._host()
        if isinstance(stream, dict) and stream.get("merged_hosts") is not None:
            self._load_merged(stream)
            return
        saved = state.get("host")
        if saved is not None and host is not None and tuple(saved) != tuple(host):
            if self._stream_share is not None and self._stream_share.placeable:
                raise CheckpointError(
                    f"This checkpoint was taken on rank {saved[0]} of {saved[1]} (shard_dataset), and this loader "
                    f"reads rank {host[0]} of {host[1]}. A rank's checkpoint holds that rank's share only: merge the "
                    "state_dict() of all ranks with audiotree.torch.merge_state_dicts([...]) and give the merged "
                    "one to load_state_dict of every rank of the new world.")
            raise CheckpointError(
                f"This checkpoint was taken on rank {saved[0]} of {saved[1]}, and this loader reads rank {host[0]} "
                f"of {host[1]} of a stream of its own (a builder's shard_options, or a share reordered, filtered or "
                "batched after shard_dataset): resume it with the same rank and world size, or build the whole "
                "dataset and apply shard_dataset last.")
        if host is not None and self._stream_share.placeable:
            base = (stream or {}).get("base")
            self._rebase(StreamPosition() if base is None else StreamPosition.from_dict(base, where="base"))
        self._progress = None
        if not self._iterable:
            self.sampler.load_state_dict(state)
            return
        resume = state.get("resume")
        if resume is not None and resume.get("batch_size", self.batch_size) != self.batch_size:
            raise ValueError(
                f"This checkpoint was taken with batch_size={resume['batch_size']}, not {self.batch_size}."
            )
        self._cursor.set(check_epoch(state["epoch"]), resume)
        if resume is not None:
            self._stop_workers()  # live persistent workers cannot learn the resume point

    def _load_merged(self, stream: dict) -> None:
        """Continues with this rank's share of what no rank of the merged run consumed, from epoch 0."""
        share = self._stream_share
        if share is None or not share.placeable:
            raise CheckpointError(
                "This is a checkpoint merged from several ranks (merge_state_dicts); this loader's dataset is not a "
                "shard_dataset share of the same stream. Build each rank's dataset as shard_dataset(whole, "
                "ShardOptions(rank, world)), with shard_dataset last.")
        self._rebase(checkpoint_position(stream))
        self._progress = None
        if self._iterable:
            self._cursor.set(0, None)
        else:
            self.sampler.set_epoch(0)

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


def merge_state_dicts(states: Any) -> dict:
    """One checkpoint of the whole run from the ``state_dict()`` of every rank (``shard_dataset`` shares).

    Give the result to ``load_state_dict`` of each rank's loader in the new world,
    whatever its size: rank ``r`` of ``R`` then reads share ``r`` of ``R`` of the
    items no rank consumed, starting at epoch 0 (the merge is
    :func:`audiotree.sources.merge_checkpoints` of each rank's ``"stream"`` part).
    """
    states = list(states)
    if not states:
        raise CheckpointError("merge_state_dicts needs the state_dict() of every rank, got none")
    kinds = {state.get("kind") if isinstance(state, dict) else None for state in states}
    if len(kinds) > 1 or None in kinds:
        raise CheckpointError(f"merge_state_dicts needs the state_dict() of every rank's AudioDataLoader, of one "
                              f"kind; got kinds {sorted(map(str, kinds))}")
    for state in states:
        if not isinstance(state.get("stream"), dict):
            raise CheckpointError(
                f"the checkpoint of rank {state.get('host')} cannot be placed in the global stream: it is not of "
                "a shard_dataset share, or it was taken after the first pass of a finite share (or in a later "
                "epoch of an endless stream without epoch_size). Resume it with the same rank and world size.")
    merged = merge_checkpoints([state["stream"] for state in states])
    return {"version": STATE_VERSION, "kind": kinds.pop(), "stream": merged}
