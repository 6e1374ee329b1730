"""Sharding over hosts, in one place: the check of ``shard_options`` and the arithmetic of each host's share.

A ``grain.sharding.ShardOptions`` (or ``ShardByJaxProcess()``) names host
``shard_index`` of ``shard_count``; :func:`check_shard_options` reads and checks
it for every reader and builder. A host's share of a list is one of three
shapes, each a pure function of the list and the options:

* :func:`strided_share`: items ``i, i + n, i + 2n, ...`` (what
  :func:`audiotree.sources.shard_dataset` takes of a dataset);
* :func:`host_range`: one contiguous run ``[length * i // n, length * (i + 1) // n)``
  (a render's parts: a host opens only the parts its run falls in);
* :func:`host_share` / :func:`host_items`: whole units (a tar shard, a Parquet
  row group, a plain file) dealt round robin (the builders' ``Order(shard_options=...)``).

With ``drop_remainder=True`` every host keeps the same number of items.

>>> import types
>>> options = types.SimpleNamespace(shard_index=1, shard_count=3)
>>> check_shard_options(options), strided_share(7, options), host_range(10, options)
((1, 3), slice(1, 7, 3), (3, 6))
"""

from __future__ import annotations

from typing import Any

from audiotree.io.members import is_member, parse

__all__ = ["check_shard_options", "strided_share", "host_range", "host_share", "host_items"]


def check_shard_options(shard_options: Any) -> tuple[int, int]:
    """``(shard_index, shard_count)`` of a ``grain.sharding.ShardOptions``; a clear error for anything else."""
    try:
        index, count = int(shard_options.shard_index), int(shard_options.shard_count)
    except (AttributeError, TypeError, ValueError):
        raise TypeError("shard_options must be a grain.sharding.ShardOptions (e.g. ShardOptions(host, hosts) or "
                        f"ShardByJaxProcess()), got {shard_options!r}.") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard_index must be in [0, shard_count), got {index} of {count}.")
    return index, count


def strided_share(length: int, shard_options: Any) -> slice:
    """Host ``i`` of ``n``'s items ``i, i + n, i + 2n, ...`` of ``length`` items, as a slice.

    Disjoint and together complete; with ``drop_remainder`` the last
    ``length % n`` items are left out, so every host gets ``length // n``.

    >>> import types
    >>> strided_share(7, types.SimpleNamespace(shard_index=1, shard_count=3, drop_remainder=True))
    slice(1, 6, 3)
    """
    index, count = check_shard_options(shard_options)
    stop = (length // count) * count if getattr(shard_options, "drop_remainder", False) else length
    return slice(index, stop, count)


def host_range(length: int, shard_options: Any) -> tuple[int, int]:
    """Host ``i`` of ``n``'s contiguous share ``[length * i // n, length * (i + 1) // n)`` of ``length`` items.

    Contiguous, so a host touches only the parts (objects) its items are in;
    the shares are disjoint and together complete. With ``drop_remainder``
    every host gets ``length // n`` items.

    >>> import grain
    >>> [host_range(10, grain.sharding.ShardOptions(i, 3)) for i in range(3)]
    [(0, 3), (3, 6), (6, 10)]
    """
    index, count = check_shard_options(shard_options)
    if getattr(shard_options, "drop_remainder", False):
        share = length // count
        return index * share, (index + 1) * share
    return length * index // count, length * (index + 1) // count


def _unit(path: str) -> tuple:
    """What one host reads whole: a shard, a Parquet row group, or a plain file."""
    if not is_member(path):
        return (path,)
    ref = parse(path)
    return (ref.container,) if ref.kind == "tar" else (ref.container, ref.offset)


def host_share(paths: Any, shard_options: Any, *, what: str = "the sources") -> list[int]:
    """Positions of ``paths`` that host ``shard_index`` of ``shard_count`` reads: whole shards / row groups.

    Units (a tar shard, a Parquet row group, a plain file) are dealt round
    robin in the order they first appear, so each host opens only its own
    1/``shard_count`` of the containers. With ``drop_remainder=True`` every
    host keeps the same number of items (the smallest share's). ``what``
    names the items in the error raised when a host would get none.

    >>> import types
    >>> urls = [f"tar://{k}.flac?offset={512 * k}&size=1::s-{k // 2}.tar" for k in range(6)]
    >>> host_share(urls, types.SimpleNamespace(shard_index=1, shard_count=2))
    [2, 3]
    """
    index, count = check_shard_options(shard_options)
    order: dict[tuple, int] = {}
    shares: list[list[int]] = [[] for _ in range(count)]
    for i, path in enumerate(paths):
        unit = order.setdefault(_unit(path), len(order))
        shares[unit % count].append(i)
    if not shares[index]:
        raise ValueError(f"Host {index} of {count} gets no items: there are only {len(order)} shard(s), row "
                         f"group(s) or file(s) in {what}. Use at most {len(order)} hosts, or shard by item "
                         "(shard_dataset).")
    mine = shares[index]
    if getattr(shard_options, "drop_remainder", False):
        mine = mine[: min(len(s) for s in shares)]
    return mine


def host_items(items: Any, shard_options: Any, *, what: str = "the sources") -> Any:
    """This host's share (:func:`host_share`) of a list of paths, or of index rows (anything with ``take`` and
    ``paths``, such as :class:`~audiotree.sources.indexed.IndexRows`); ``shard_options=None`` keeps them all.

    >>> import types
    >>> host_items(["a.flac", "b.flac", "c.flac"], types.SimpleNamespace(shard_index=0, shard_count=2))
    ['a.flac', 'c.flac']
    """
    if shard_options is None:
        return items
    if hasattr(items, "take") and hasattr(items, "paths"):
        return items.take(host_share(items.paths, shard_options, what=what))
    return [items[i] for i in host_share(items, shard_options, what=what)]
