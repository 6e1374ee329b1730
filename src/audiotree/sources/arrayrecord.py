"""Reading ArrayRecord datasets (``ArrayRecordWriter``, ``audiotree render --format arrayrecord``).

:class:`ArrayRecordAudioSource` is ``grain.sources.ArrayRecordDataSource``
over the shards, plus our record decoder (:mod:`audiotree.formats.arrayrecord`):
``source[i]`` is the same item (an ``AudioTree`` of batch 1, or the pytree
written) that was rendered, with no pickle involved. It is picklable and reads
in Grain's worker processes.

Many hosts: ``shard_options`` (a ``grain.sharding.ShardOptions``, e.g.
``ShardByJaxProcess()``) gives host ``i`` of ``n`` the *shard files*
``i, i + n, ...``, so each host opens only its own files; the shares are
disjoint and together complete. Use at least as many shards as hosts. To
split items rather than files, read everything and apply
:func:`audiotree.sources.shard_dataset`.
"""

from __future__ import annotations

import bisect
import json
import operator
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from audiotree._fs import read_limited
from audiotree.sources.lifecycle import hold_grain_flag_while_alive
from audiotree.formats.arrayrecord import INDEX_NAME, MAX_INDEX_BYTES, check_index, decode_item

__all__ = ["ArrayRecordAudioSource", "open_arrayrecord"]

_RENDER_RECORD = "render.json"


def _read_json(path: Path, what: str) -> Any:
    raw = read_limited(path, MAX_INDEX_BYTES, what)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: {what} is not UTF-8 JSON ({exc}); re-render the dataset.") from None


def _dataset_shards(folder: Path) -> list[tuple[str, int]]:
    index = folder / INDEX_NAME
    if not index.is_file():
        raise FileNotFoundError(f"{folder} holds no {INDEX_NAME}: it is not a finished ArrayRecord dataset "
                                "(was the writer closed, and is this the right folder?).")
    shards, _ = check_index(_read_json(index, "the ArrayRecord index"), str(index))
    return [(os.fspath(folder / name), count) for name, count in shards]


def _render_parts(folder: Path) -> list[Path]:
    """The finished part folders of an ``audiotree render --format arrayrecord`` folder, in item order."""
    record = _read_json(folder / _RENDER_RECORD, "the render record")
    parts = record.get("parts") if isinstance(record, dict) else None
    fmt = (record.get("config") or {}).get("format") if isinstance(record, dict) else None
    if not isinstance(parts, list) or fmt != "arrayrecord":
        raise ValueError(f"{folder / _RENDER_RECORD}: not a render with --format arrayrecord (format {fmt!r}); "
                         "read it with audiotree.sources.open_render.")
    out = []
    for part in parts:
        name = part.get("dir") if isinstance(part, dict) else None
        if not isinstance(name, str) or not name.startswith("part-") or "/" in name:
            raise ValueError(f"{folder / _RENDER_RECORD}: part entry {part!r} is damaged; re-render.")
        if part.get("count"):
            out.append(folder / name)
    return out


def _resolve(paths: Any) -> list[tuple[str, int]]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    shards: list[tuple[str, int]] = []
    for path in paths:
        folder = Path(path)
        if (folder / INDEX_NAME).is_file() or not (folder / _RENDER_RECORD).is_file():
            shards.extend(_dataset_shards(folder))
        else:
            for part in _render_parts(folder):
                shards.extend(_dataset_shards(part))
    return shards


class ArrayRecordAudioSource:
    """A Grain ``RandomAccessDataSource`` of the items in ArrayRecord datasets.

    Args:
      paths: a dataset folder (holding ``arrayrecord.json``), a render folder
        (``audiotree render --format arrayrecord``), or a list of them, read
        in order.
      shard_options: read only this host's shard files (see the module docstring).

    Raises:
      FileNotFoundError: a folder without an index (nothing finished there).
      ValueError: a damaged index, a shard whose record count differs from
        the index, or fewer shards than hosts. A damaged record raises
        ``ValueError`` naming its file when it is read.

    >>> import numpy as np, tempfile
    >>> from audiotree import AudioTree
    >>> from audiotree.writers import ArrayRecordWriter
    >>> folder = tempfile.mkdtemp()
    >>> with ArrayRecordWriter(folder, records_per_shard=2) as writer:
    ...     writer.write(AudioTree.create(np.zeros((5, 1, 4), np.float32), 8_000, offset=np.arange(5.0)))
    5
    >>> source = ArrayRecordAudioSource(folder)
    >>> len(source), float(source[3].offset[0]), len(source.shard_files)
    (5, 3.0, 3)
    """

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike], *, shard_options: Any = None):
        import grain

        shards = _resolve(paths)
        if shard_options is not None:
            index, count = int(shard_options.shard_index), int(shard_options.shard_count)
            if not 0 <= index < count:
                raise ValueError(f"shard_index must be in [0, {count}), got {index}.")
            if len(shards) < count:
                raise ValueError(f"{len(shards)} ArrayRecord shard file(s) cannot be split over {count} hosts; "
                                 "write more shards (a smaller records_per_shard or --part-size).")
            shards = shards[index::count]
        self.shard_files = [path for path, _ in shards]
        self._ends = []
        total = 0
        for _, n in shards:
            total += n
            self._ends.append(total)
        self._source = grain.sources.ArrayRecordDataSource(self.shard_files) if self.shard_files else None
        found = len(self._source) if self._source is not None else 0
        if found != total:
            raise ValueError(f"The ArrayRecord shards {self.shard_files[:3]} hold {found} records but their "
                             f"indexes list {total}; a shard was replaced or truncated. Re-render the dataset.")
        hold_grain_flag_while_alive(self)  # mp_prefetch from a plain script (audiotree.sources.lifecycle)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __repr__(self) -> str:
        return f"ArrayRecordAudioSource(shards={len(self.shard_files)}, num_records={len(self)})"

    def _where(self, i: int) -> str:
        shard = bisect.bisect_right(self._ends, i)
        first = self._ends[shard - 1] if shard else 0
        return f"{self.shard_files[shard]} record {i - first}"

    def _check(self, index: Any) -> int:
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"ArrayRecordAudioSource indices must be integers, got {type(index).__name__}.") from None
        if not 0 <= i < len(self):
            raise IndexError(f"Index {i} is out of range for {len(self)} records (negative indices are not supported).")
        return i

    def __getitem__(self, index: int) -> Any:
        i = self._check(index)
        return decode_item(self._source[i], self._where(i))

    def __getitems__(self, indices: Iterable[int]) -> list:
        checked = [self._check(i) for i in indices]
        records = self._source.__getitems__(checked) if checked else []
        return [decode_item(record, self._where(i)) for i, record in zip(checked, records)]


def open_arrayrecord(paths: str | os.PathLike | Sequence[str | os.PathLike], *, shard_options: Any = None):
    """The items of ArrayRecord datasets as a ``grain.MapDataset`` (see :class:`ArrayRecordAudioSource`)."""
    import grain

    from audiotree.sources.memory import wrap_stored

    return wrap_stored(grain.MapDataset.source(ArrayRecordAudioSource(paths, shard_options=shard_options)))
