"""Iterators whose checkpoints are positions in the global stream, resumable with another shape.

:class:`ResumableIterDataset` wraps the pipeline audiotree builds at
``to_iter_dataset`` (no workers) or ``mp_prefetch`` (``W`` workers). Its
iterator's ``get_state()`` returns an audiotree checkpoint
(:mod:`audiotree.sources.global_stream`): the indices of the host's stream
consumed so far, the host share, and, to resume the same shape exactly, the
Grain state underneath. ``set_state`` then:

* with the same host share and worker count, restores Grain's state (what a
  Grain checkpoint did before; batches in flight are re-read exactly);
* with another worker count (0, 1, 3, ...), builds the same pipeline over the
  indices the checkpoint does not hold (:class:`~audiotree.sources.global_stream.RemainingDataset`)
  and starts it fresh;
* with another host share, needs a checkpoint of the whole run
  (:func:`~audiotree.sources.global_stream.merge_checkpoints` of all hosts' checkpoints),
  and reads this host's share of the indices nobody consumed.

How consumption is read off Grain's state: the source iterator of each
pipeline stores ``next_index``, the next index of its dataset it will return;
worker ``w`` of ``W`` reads indices ``w, w + W, ...`` of the host's dataset, so it
has consumed the first ``next_index`` of those. Items a worker read ahead but the
parent has not returned are not counted (Grain records each worker's state with
each element). Transformations after ``to_iter_dataset`` that hold items across
elements (a batch in progress is fine; an IterDataset-level shuffle buffer or
``filter`` is not) are not seen; audiotree's own ``batch_by_duration`` and
``MapDataset.batch`` make each element a function of one index, so they are exact.
"""

from __future__ import annotations

from typing import Any, Callable

import grain

from audiotree.sources.global_stream import (
    CHECKPOINT_KEY,
    CHECKPOINT_VERSION,
    CheckpointError,
    HostShare,
    RemainingDataset,
    StreamPosition,
    checkpoint_position,
    read_checkpoint,
    union_of_shares,
)

__all__ = ["ResumableIterDataset", "ResumableIterator"]


def _find(state: Any, key: str) -> dict | None:
    """The first dict (depth first) in ``state`` that has ``key``."""
    stack = [state]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if key in node:
                return node
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, (list, tuple)):
            stack.extend(reversed(node))
    return None


def _next_index(state: Any, what: str) -> int:
    found = _find(state, "next_index")
    if found is None or not isinstance(found["next_index"], int):
        raise CheckpointError(
            f"cannot place this pipeline's state in the global stream: {what} has no 'next_index' "
            f"(state {str(state)[:200]}). Resume with the same worker count, or call to_iter_dataset/mp_prefetch "
            "on an audiotree dataset with no IterDataset steps that hold items between elements.")
    return found["next_index"]


class ResumableIterDataset(grain.IterDataset):
    """A pass-through whose iterators checkpoint positions in the global stream (see the module doc).

    ``rebuild(source)`` returns the same pipeline over another source dataset;
    ``source`` is the dataset the pipeline reads (a host share when it carries a
    ``host_share``); ``workers`` the ``mp_prefetch`` worker count (0 for none).
    """

    def __init__(self, parent: grain.IterDataset, *, rebuild: Callable[[grain.MapDataset], grain.IterDataset],
                 source: grain.MapDataset, workers: int, sequential_slice: bool = False):
        super().__init__(parent)
        self.rebuild = rebuild
        self.source = source
        self.workers = int(workers)
        self.sequential_slice = bool(sequential_slice)

    def __str__(self) -> str:
        return "ResumableIterDataset"

    def rebuild_for(self, source: grain.MapDataset | None) -> grain.IterDataset:
        """The pipeline over ``source``; ``None``: the one this dataset was built with."""
        return self._parent if source is None else self.rebuild(source)

    def __iter__(self) -> "ResumableIterator":
        return ResumableIterator(self)


class ResumableIterator(grain.DatasetIterator):
    """Iterator of a :class:`ResumableIterDataset`; ``get_state`` returns an audiotree checkpoint."""

    def __init__(self, ds: ResumableIterDataset):
        super().__init__()
        self._ds = ds
        # Made on first use, so that a set_state with another shape never starts workers it then stops.
        self._made: grain.DatasetIterator | None = None
        self._closed_early = False
        share: HostShare | None = getattr(ds.source, "host_share", None)
        self._share = share
        self._host = (share.index, share.count) if share is not None else (0, 1)
        self._base = StreamPosition()        # of the stream the host share is taken from
        self._share_base = StreamPosition()  # of the host's stream the workers read

    @property
    def _inner(self) -> grain.DatasetIterator:
        if self._made is None:
            self._made = self._ds.rebuild_for(self._source()).__iter__()
        return self._made

    def __next__(self):
        made = self._made
        if made is None:  # the first element: make the pipeline (or stop, if closed before)
            if self._closed_early:
                raise StopIteration
            made = self._inner
        return next(made)

    # -- where the pipeline is --------------------------------------------------------------
    def _consumed(self, raw: Any) -> StreamPosition:
        """The indices of the workers' dataset consumed, from Grain's state ``raw``."""
        if self._ds.workers == 0:
            if _find(raw, "iterators_in_use_states") is not None:
                raise CheckpointError("this state is of a pipeline with mp_prefetch workers; this one has none")
            return StreamPosition(_next_index(raw, "the iterator's state"))
        cycle = _find(raw, "iterators_in_use_states")
        if cycle is None or len(cycle["iterators_in_use_states"]) != self._ds.workers:
            raise CheckpointError(f"cannot read the {self._ds.workers} workers' positions from this state "
                                  f"({str(raw)[:200]})")
        if self._ds.sequential_slice:
            return StreamPosition()  # not placed in the stream; the Grain state resumes it exactly
        indices = cycle.get("iterators_in_use_indices", list(range(self._ds.workers)))
        by_worker = dict(zip(indices, cycle["iterators_in_use_states"]))
        shares = [StreamPosition(_next_index(by_worker[w], f"worker {w}'s state")) for w in range(self._ds.workers)]
        return union_of_shares(shares)

    def get_state(self) -> dict:
        raw = self._inner.get_state()
        position = self._share_base.with_consumed(self._consumed(raw))
        state = {CHECKPOINT_KEY: CHECKPOINT_VERSION, "position": position.to_dict(), "host": list(self._host),
                 "workers": self._ds.workers, "grain": raw}
        if self._base.count:
            state["base"] = self._base.to_dict()
        if self._share_base.count:
            state["share_base"] = self._share_base.to_dict()
        if self._ds.sequential_slice:
            state["sequential_slice"] = True
        if self._share is not None and not self._share.placeable:
            state["global_stream"] = False
        return state

    # -- resuming ---------------------------------------------------------------------------
    def _restart(self, base: StreamPosition, share_base: StreamPosition) -> None:
        """Serves the host's share of the stream after ``base``, after ``share_base`` within that share."""
        if (base, share_base) == (self._base, self._share_base):
            return
        if self._ds.sequential_slice and share_base.count:
            raise CheckpointError("an mp_prefetch(sequential_slice=True) checkpoint resumes only with the same "
                                  "worker count: its workers read contiguous blocks, not interleaved shares. "
                                  "Resume with the same num_workers, or checkpoint without sequential_slice.")
        if self._made is not None:
            self._made.close()
            self._made = None
        self._base, self._share_base = base, share_base

    def _source(self) -> grain.MapDataset | None:
        """The dataset the workers read now (None: the one the pipeline was built with)."""
        base, share_base = self._base, self._share_base
        if not base.count and not share_base.count:
            return None
        source = self._ds.source
        if base.count:
            source = self._share.rest_after(base)
        if share_base.count:
            source = RemainingDataset(source, share_base)
        return source

    def set_state(self, state: Any) -> None:
        if isinstance(state, dict) and CHECKPOINT_KEY not in state:
            self._set_raw(state)
            return
        state = read_checkpoint(state)
        host = tuple(state.get("host") or (0, 1))
        if state.get("merged_hosts") is None and host == self._host:
            base = StreamPosition.from_dict(state.get("base", {"prefix": 0}), where="base")
            if base.count and self._share is None:
                raise CheckpointError("this checkpoint was taken on a host share of a resumed run, but this "
                                      "dataset is not a shard_dataset share; build it the same way")
            exact = (state.get("workers") == self._ds.workers and "grain" in state
                     and bool(state.get("sequential_slice")) == self._ds.sequential_slice)
            if exact:
                share_base = StreamPosition.from_dict(state.get("share_base", {"prefix": 0}), where="share_base")
                self._restart(base, share_base)
                self._inner.set_state(state["grain"])
            else:
                self._restart(base, StreamPosition.from_dict(state["position"]))
            return
        if self._share is not None and not self._share.placeable:
            raise CheckpointError(
                f"this iterator reads host {self._host[0]} of {self._host[1]}'s own stream (a builder's shard_options "
                "shards files per host, or the dataset was reordered, filtered or batched after shard_dataset), so a "
                f"checkpoint of host {host[0]} of {host[1]} cannot continue on it. Resume with the same host count, "
                "or build the whole dataset and apply shard_dataset last, right before to_iter_dataset.")
        if state.get("merged_hosts") is None and host[1] > 1:
            raise CheckpointError(
                f"this is the checkpoint of host {host[0]} of {host[1]}, and this iterator reads host "
                f"{self._host[0]} of {self._host[1]}. Merge the checkpoints of all {host[1]} hosts with "
                "audiotree.sources.merge_checkpoints([...]) and give the merged one to every host.")
        whole = checkpoint_position(state)
        if self._share is None:
            self._restart(StreamPosition(), whole)
        else:
            self._restart(whole, StreamPosition())

    def _set_raw(self, raw: dict) -> None:
        """A Grain state (as ``get_state`` returned before audiotree checkpoints): same shape only."""
        try:
            self._consumed(raw)
        except CheckpointError as error:
            raise CheckpointError(
                f"this raw Grain state does not fit this pipeline ({self._ds.workers} mp_prefetch workers): "
                "Grain states resume only the exact same shape. Checkpoints from get_state() of this "
                "audiotree release are {'audiotree_checkpoint': 1, ...} and resume with any worker count.") from error
        self._restart(StreamPosition(), StreamPosition())
        self._inner.set_state(raw)

    def close(self) -> None:
        if self._made is not None:
            self._made.close()
        else:
            self._closed_early = True

    def __str__(self) -> str:
        return "ResumableIterator"
