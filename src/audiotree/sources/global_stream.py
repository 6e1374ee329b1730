"""The global stream of a run, positions in it, and checkpoints as plain data.

Every item of an audiotree dataset is a pure function of (seed, index): the
epoch order, the mix and the excerpt of item ``g`` do not depend on which host
or worker reads it. So the items of a run form one **global stream**
``0, 1, 2, ...`` (the indices of the ``MapDataset`` given to
``to_iter_dataset``, or of the dataset ``shard_dataset`` split between hosts),
and the shape of the job only decides who reads which index:

* host ``h`` of ``H`` (:func:`~audiotree.sources.shard_dataset`) reads the
  indices ``h, h + H, h + 2H, ...`` of the stream (:func:`share_index`);
* inside a host, ``mp_prefetch`` worker ``w`` of ``W`` reads the indices
  ``w, w + W, ...`` of the host's stream, and the parent takes their elements
  round robin.

A :class:`StreamPosition` is the set of indices a run has consumed, written as
a prefix (every index below ``prefix``) and the few indices consumed beyond it
(workers and hosts run a little ahead of each other). A checkpoint is a small,
versioned, JSON-serialisable dict holding a position; resuming with another
shape serves exactly the indices the position does not hold
(:class:`RemainingDataset`), so nothing is repeated and nothing is skipped.

The checkpoint format is ``{"audiotree_checkpoint": 1, ...}``. A checkpoint of
a newer version is refused naming the version; a raw Grain state where ours is
expected is explained, not passed on to Grain's internals.
"""

from __future__ import annotations

import bisect
import functools
import sys
from dataclasses import dataclass
from typing import Any, Iterable

import grain

from audiotree.discovery.sharding import check_shard_options, strided_share
from audiotree.validation import is_int

__all__ = [
    "CHECKPOINT_KEY",
    "CHECKPOINT_VERSION",
    "CheckpointError",
    "HostShare",
    "RemainingDataset",
    "StreamPosition",
    "checkpoint_position",
    "merge_checkpoints",
    "read_checkpoint",
    "share_index",
    "share_of",
    "union_of_shares",
]

#: The key that marks a dict as an audiotree checkpoint; its value is the format version.
CHECKPOINT_KEY = "audiotree_checkpoint"
#: The version this release writes (and the newest it reads).
CHECKPOINT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint cannot be read, merged or resumed as asked; the message says why and what to do."""


def share_index(local: int, index: int, count: int) -> int:
    """The stream index of item ``local`` of share ``index`` of ``count`` (``index + local * count``).

    >>> [share_index(k, 1, 3) for k in range(4)]
    [1, 4, 7, 10]
    """
    return int(index) + int(local) * int(count)


@dataclass(frozen=True)
class StreamPosition:
    """The indices of a stream a run has consumed: all of ``range(prefix)``, plus ``beyond``.

    ``beyond`` is sorted, and every index in it is greater than ``prefix``
    (``prefix`` itself is the first index not consumed). Build one with
    :meth:`of`, which normalises any set of indices.

    >>> p = StreamPosition.of([0, 1, 2, 4, 6])
    >>> p.prefix, p.beyond, p.count
    (3, (4, 6), 5)
    >>> [p.remaining(j) for j in range(4)]
    [3, 5, 7, 8]
    """

    prefix: int = 0
    beyond: tuple[int, ...] = ()

    @classmethod
    def of(cls, indices: Iterable[int], prefix: int = 0) -> "StreamPosition":
        """The position holding ``range(prefix)`` and ``indices``."""
        extra = sorted({int(i) for i in indices if int(i) >= prefix})
        start = 0
        while start < len(extra) and extra[start] == prefix:
            prefix += 1
            start += 1
        return cls(int(prefix), tuple(extra[start:]))

    @property
    def count(self) -> int:
        """How many indices the position holds."""
        return self.prefix + len(self.beyond)

    def __contains__(self, index: int) -> bool:
        if index < self.prefix:
            return True
        k = bisect.bisect_left(self.beyond, index)
        return k < len(self.beyond) and self.beyond[k] == index

    def count_below(self, n: int) -> int:
        """How many of the indices ``0 .. n - 1`` the position holds."""
        return min(self.prefix, n) + bisect.bisect_left(self.beyond, n)

    @functools.cached_property
    def _free_before(self) -> list[int]:
        """For each held index beyond the prefix, how many indices between the prefix and it are not held."""
        return [held - self.prefix - i for i, held in enumerate(self.beyond)]

    def remaining(self, j: int) -> int:
        """The ``j``-th index (from 0) the position does not hold (a bisection: read for every item)."""
        j = int(j)
        # Each held index at or below the answer pushes it one further.
        return self.prefix + j + bisect.bisect_right(self._free_before, j)

    def with_consumed(self, local: "StreamPosition") -> "StreamPosition":
        """This position plus ``local``, a position in the stream of indices this one does not hold."""
        if local.count == 0:
            return self
        if self.count == 0:
            return local
        # Everything up to the last of the first local.prefix remaining indices is now held.
        prefix = self.remaining(local.prefix - 1) + 1 if local.prefix else self.prefix
        return StreamPosition.of(list(self.beyond) + [self.remaining(j) for j in local.beyond], prefix=prefix)

    def to_dict(self) -> dict:
        return {"prefix": self.prefix, "beyond": list(self.beyond)}

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "position") -> "StreamPosition":
        if not isinstance(data, dict) or not is_int(data.get("prefix")) or data["prefix"] < 0:
            raise CheckpointError(f"checkpoint {where} must be {{'prefix': int >= 0, 'beyond': [int, ...]}}, "
                                  f"got {data!r}")
        beyond = data.get("beyond", [])
        if not isinstance(beyond, list) or not all(is_int(i) for i in beyond):
            raise CheckpointError(f"checkpoint {where}['beyond'] must be a list of integers, got {beyond!r}")
        return cls.of(beyond, prefix=int(data["prefix"]))


@dataclass(frozen=True)
class HostShare:
    """How :func:`~audiotree.sources.shard_dataset` made a host's dataset: share ``index`` of ``count``
    of ``stream``, followed by ``maps`` (element-wise functions applied since, in order).

    ``stream=None``: host ``index`` of ``count`` reads a stream of its own, not a share of one
    global stream (a builder's ``shard_options`` shards files, or the share was reordered,
    filtered or batched after ``shard_dataset``); its checkpoints resume only on the same host.
    """

    stream: Any
    index: int
    count: int
    drop_remainder: bool = False
    maps: tuple = ()

    @property
    def placeable(self) -> bool:
        """Whether the host's items are positions of one global stream."""
        return self.stream is not None

    def then_map(self, fn: Any) -> "HostShare":
        if not self.placeable:
            return self
        return HostShare(self.stream, self.index, self.count, self.drop_remainder, self.maps + (fn,))

    def rest_after(self, position: "StreamPosition") -> grain.MapDataset:
        """This host's share of the items of the global stream that ``position`` does not hold, with its maps."""
        rest = share_of(RemainingDataset(self.stream, position), self.index, self.count, self.drop_remainder)
        for fn in self.maps:
            rest = rest.map(fn)
        return rest

    def unplaced(self) -> "HostShare":
        """The same host, after a transformation that makes its items a stream of their own."""
        return HostShare(None, self.index, self.count)


class _EndlessShare(grain.MapDataset):
    """Items ``index, index + count, ...`` of an endless ``parent``, endless itself (``len == sys.maxsize``),
    so a mix still sees it as endless (a plain slice would claim ``sys.maxsize // count`` items)."""

    def __init__(self, parent: grain.MapDataset, index: int, count: int):
        super().__init__(parent)
        self._index, self._count = int(index), int(count)

    def __len__(self) -> int:
        return sys.maxsize

    def __str__(self) -> str:
        return f"EndlessShare({self._index} of {self._count})"

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        if index < 0:
            index += sys.maxsize
        return self._parent[share_index(index, self._index, self._count)]


def share_of(ds: grain.MapDataset, index: int, count: int, drop_remainder: bool = False) -> grain.MapDataset:
    """Items ``index, index + count, ...`` of ``ds`` (endless when ``ds`` is); with ``drop_remainder``
    every share of a finite dataset has the same length."""
    options = grain.sharding.ShardOptions(index, count, drop_remainder)
    check_shard_options(options)
    length = len(ds)
    if length >= sys.maxsize:
        return _EndlessShare(ds, index, count)
    return ds[strided_share(length, options)]


class RemainingDataset(grain.MapDataset):
    """The items of ``parent`` at the indices ``position`` does not hold, in order.

    Item ``j`` is ``parent[position.remaining(j)]``; an endless parent gives an
    endless dataset (``len == sys.maxsize``).
    """

    def __init__(self, parent: grain.MapDataset, position: StreamPosition):
        super().__init__(parent)
        self.position = position
        length = len(parent)
        held = position.count_below(length)
        self._length = length if length >= sys.maxsize else max(0, length - held)

    def __len__(self) -> int:
        return self._length

    def __str__(self) -> str:
        return f"RemainingDataset(after {self.position.count} consumed)"

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        if index < 0:
            index += self._length
        return self._parent[self.position.remaining(int(index))]


# -- checkpoints as data -----------------------------------------------------------------------------

def _looks_like_grain_state(state: Any) -> bool:
    return isinstance(state, dict) and bool({"next_index", "iterators_in_use_states", "workers_state",
                                             "next_index_in_cycle"} & set(state))


def read_checkpoint(state: Any) -> dict:
    """``state`` checked as an audiotree checkpoint (a dict ``{"audiotree_checkpoint": 1, ...}``).

    Raises :class:`CheckpointError` naming the problem: not a dict, a raw
    Grain state, a version newer than this release reads, or a missing field.
    """
    if not isinstance(state, dict):
        raise CheckpointError(f"an audiotree checkpoint is a dict {{'{CHECKPOINT_KEY}': {CHECKPOINT_VERSION}, ...}} "
                              f"(what get_state() returns), got {type(state).__name__}")
    if CHECKPOINT_KEY not in state:
        if _looks_like_grain_state(state):
            raise CheckpointError(
                "this is a raw Grain iterator state, not an audiotree checkpoint: it only fits a pipeline of "
                "exactly the same shape (workers, hosts) and cannot be placed in the global stream. Take "
                "checkpoints with get_state() of an iterator of an audiotree dataset (after to_iter_dataset or "
                "mp_prefetch), which returns {'audiotree_checkpoint': 1, ...}.")
        raise CheckpointError(f"not an audiotree checkpoint: the dict has no '{CHECKPOINT_KEY}' key "
                              f"(keys: {sorted(map(str, state))[:8]})")
    version = state[CHECKPOINT_KEY]
    if not is_int(version) or version < 1:
        raise CheckpointError(f"checkpoint version must be a positive integer, got {version!r}")
    if version > CHECKPOINT_VERSION:
        raise CheckpointError(f"this checkpoint has format version {version}; this audiotree release reads "
                              f"versions up to {CHECKPOINT_VERSION}. Resume it with the audiotree release that "
                              "wrote it, or a newer one.")
    if "position" not in state:
        raise CheckpointError("checkpoint has no 'position' (the consumed indices of the stream)")
    return state


def _host_of(state: dict) -> tuple[int, int] | None:
    host = state.get("host")
    if host is None:
        return None
    if (not isinstance(host, (list, tuple)) or len(host) != 2 or not all(is_int(v) for v in host)
            or not 0 <= host[0] < host[1]):
        raise CheckpointError(f"checkpoint 'host' must be [index, count] with 0 <= index < count, got {host!r}")
    return int(host[0]), int(host[1])


def checkpoint_position(state: Any) -> StreamPosition:
    """The indices of the global stream a whole-run checkpoint holds as consumed.

    The checkpoint of one host of several holds only that host's share: merge
    the hosts' checkpoints first (:func:`merge_checkpoints`).
    """
    state = read_checkpoint(state)
    base = StreamPosition.from_dict(state.get("base", {"prefix": 0}), where="base")
    host = _host_of(state)
    local = StreamPosition.from_dict(state["position"])
    if host is not None and host[1] > 1:
        raise CheckpointError(f"this is the checkpoint of host {host[0]} of {host[1]}: it holds that host's share "
                              "only. Merge the checkpoints of all hosts with merge_checkpoints([...]).")
    return base.with_consumed(local)


def union_of_shares(shares: list[StreamPosition]) -> StreamPosition:
    """The union, in stream indices, of position ``h`` in share ``h`` of ``len(shares)`` for every ``h``."""
    count = len(shares)
    prefix = min(share_index(p.prefix, h, count) for h, p in enumerate(shares))
    extra = []
    for h, p in enumerate(shares):
        first = max(0, -(-(prefix - h) // count))  # the first local index at or past the global prefix
        extra += [share_index(k, h, count) for k in range(first, p.prefix)]
        extra += [share_index(k, h, count) for k in p.beyond]
    return StreamPosition.of(extra, prefix=prefix)


def merge_checkpoints(states: Iterable[Any]) -> dict:
    """One checkpoint of the whole run from the checkpoints of all its hosts.

    Each host's checkpoint (from ``get_state()`` of its iterator over a
    :func:`~audiotree.sources.shard_dataset` share) holds the indices that host
    consumed. The merged checkpoint holds their union, in global indices; give
    it to ``set_state`` of every host of the resumed run, whatever its host and
    worker counts: host ``h`` of ``H`` then reads share ``h`` of ``H`` of the
    indices nobody consumed.

    >>> a = {"audiotree_checkpoint": 1, "host": [0, 2], "position": {"prefix": 3, "beyond": []}}
    >>> b = {"audiotree_checkpoint": 1, "host": [1, 2], "position": {"prefix": 2, "beyond": []}}
    >>> merge_checkpoints([a, b])["position"]
    {'prefix': 5, 'beyond': []}
    """
    states = [read_checkpoint(s) for s in states]
    if not states:
        raise CheckpointError("merge_checkpoints needs the checkpoints of all hosts, got none")
    if any(s.get("global_stream") is False for s in states):
        raise CheckpointError(
            "these checkpoints are of host datasets that are not shares of one global stream (a builder's "
            "shard_options shards files per host, or the dataset was reordered, filtered or batched after "
            "shard_dataset), so they cannot be merged. To change the host count, build the whole dataset and "
            "apply shard_dataset last, right before to_iter_dataset.")
    hosts = [_host_of(s) for s in states]
    if any(h is None for h in hosts):
        if len(states) == 1:
            return {CHECKPOINT_KEY: CHECKPOINT_VERSION, "position": checkpoint_position(states[0]).to_dict()}
        raise CheckpointError("only checkpoints of shard_dataset shares can be merged; one of these is of a "
                              "whole stream already (no 'host')")
    counts = {count for _, count in hosts}
    if len(counts) != 1:
        raise CheckpointError(f"these checkpoints come from runs with different host counts {sorted(counts)}; "
                              "merge the checkpoints of one run, taken at the same step")
    count = counts.pop()
    indices = sorted(index for index, _ in hosts)
    if indices != list(range(count)):
        raise CheckpointError(f"merge_checkpoints needs one checkpoint of each of the {count} hosts, "
                              f"got hosts {indices}")
    bases = {StreamPosition.from_dict(s.get("base", {"prefix": 0}), where="base") for s in states}
    if len(bases) != 1:
        raise CheckpointError("these hosts resumed from different checkpoints; merge checkpoints of one run")
    (base,) = bases
    by_host = sorted(zip(hosts, states), key=lambda pair: pair[0])
    local = union_of_shares([StreamPosition.from_dict(s["position"]) for _, s in by_host])
    merged = base.with_consumed(local)
    return {CHECKPOINT_KEY: CHECKPOINT_VERSION, "position": merged.to_dict(), "merged_hosts": count}
