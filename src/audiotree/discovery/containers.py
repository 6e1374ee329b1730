"""Sources that are containers: webdataset tar shards and Parquet files with embedded audio.

Discovery (:func:`audiotree.discovery.files.discover`) hands every ``.tar`` and
``.parquet`` file it finds to :func:`expand_container`, which lists the items
inside as member URLs (:mod:`audiotree.io.members`): one per audio member of a
shard (from its headers; remote shards by ranged reads, several shards at once)
and one per row of a Parquet file's audio column (from its footer). Source
entries may use webdataset's brace syntax (:func:`expand_braces`).

Sidecars
    In a shard, members sharing an audio member's key (``utt1.flac`` +
    ``utt1.json``, ``utt1.txt``, ``utt1.cls``) are its labels: a JSON
    object's fields, the text (column ``txt``) and the class (``cls``). In a
    Parquet file, every column but the audio is a label. The corpus index
    stores them as label columns (:func:`label_rows`); datasets built without
    an index read the audio only. Other members are skipped and counted.

>>> expand_braces("shards/train-{000000..000002}.tar")
['shards/train-000000.tar', 'shards/train-000001.tar', 'shards/train-000002.tar']
>>> expand_braces("{a,b}/x-{1..2}.tar")
['a/x-1.tar', 'a/x-2.tar', 'b/x-1.tar', 'b/x-2.tar']
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import re
from typing import Any, Iterable, Mapping

from audiotree.errors import AudioReadError
from audiotree.io import storage
from audiotree.io.members import parquet_url, tar_url

__all__ = ["expand_braces", "is_container", "expand_container", "ContainerItems", "SIDECAR_EXTENSIONS",
           "label_rows"]

#: Member extensions read as labels of the audio member with the same key.
SIDECAR_EXTENSIONS = ("json", "txt", "cls")
_CONTAINER_EXTENSIONS = (".tar", ".parquet")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
#: Shards listed at once over a URL (each listing waits on many small ranged reads).
_LIST_THREADS = 8


def _brace_span(text: str) -> tuple[int, int] | None:
    """The first top-level ``{...}`` holding a ``,`` or a ``..`` range."""
    depth, start = 0, -1
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                body = text[start + 1:i]
                if "," in body or _RANGE.match(body):
                    return start, i
    return None


def _split_top(body: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in body:
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur.append(ch)
    parts.append("".join(cur))
    return parts


def expand_braces(pattern: str) -> list[str]:
    """webdataset's brace syntax: ``{000..009}`` (zero padding kept, the first number's width) and ``{a,b}``.

    Several braces give their product, in order; nested braces expand too.
    Text without braces is returned as it is.
    """
    span = _brace_span(pattern)
    if span is None:
        return [pattern]
    start, end = span
    head, body, tail = pattern[:start], pattern[start + 1:end], pattern[end + 1:]
    m = _RANGE.match(body)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        width = len(m.group(1)) if m.group(1).lstrip("-").startswith("0") else 0
        step = 1 if hi >= lo else -1
        choices = [f"{n:0{width}d}" for n in range(lo, hi + step, step)]
    else:
        choices = _split_top(body)
    out: list[str] = []
    for choice in choices:
        out.extend(expand_braces(head + choice + tail))
    return out


def is_container(path: str) -> bool:
    """Whether discovery looks inside ``path`` (a ``.tar`` shard or a ``.parquet`` file)."""
    return path.lower().endswith(_CONTAINER_EXTENSIONS)


@dataclasses.dataclass
class ContainerItems:
    """What the containers of one discovery hold: item URLs, labels, skipped member types and faults."""

    items: list[str] = dataclasses.field(default_factory=list)
    labels: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    problems: list[AudioReadError] = dataclasses.field(default_factory=list)
    #: The group of each shard with faults (index builds).
    groups: dict[str, Any] = dataclasses.field(default_factory=dict)


def _sidecar_values(ext: str, data: bytes, where: str) -> dict[str, Any]:
    text = data.decode("utf-8", errors="replace")
    if ext == "json":
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from None
        if not isinstance(value, dict):
            return {"json": json.dumps(value, sort_keys=True)}
        return {k: (json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v) for k, v in value.items()}
    if ext == "cls":
        stripped = text.strip()
        return {"cls": int(stripped) if re.fullmatch(r"-?\d+", stripped) else stripped}
    return {"txt": text.strip()}


def _read_sidecars(shard: str, members: Iterable[Any], problems: list) -> dict[str, dict[str, bytes]]:
    """Bytes of the sidecar members, by key; one that cannot be read is a fault in ``problems``."""
    from audiotree.io.members import open_member

    out: dict[str, dict[str, bytes]] = {}
    for m in members:
        try:
            with open_member(tar_url(shard, m.name, m.offset, m.size)) as f:
                out.setdefault(m.key, {})[m.extension] = f.read()
        except AudioReadError as exc:
            problems.append(AudioReadError(str(exc), storage.redact(shard)))
    return out


def _expand_shard(listing: Any, wanted: frozenset[str], found: ContainerItems, with_labels: bool) -> None:
    shard = listing.shard
    found.problems.extend(listing.problems)
    found.skipped.update(listing.skipped)
    sidecars = [m for m in listing.members if m.extension in SIDECAR_EXTENSIONS]
    audio = []
    for m in listing.members:
        ext = "." + m.extension.rsplit(".", 1)[-1] if m.extension else ""
        if ext in wanted:
            audio.append(m)
        elif m.extension not in SIDECAR_EXTENSIONS:
            found.skipped[ext or "(no extension)"] += 1
    by_key = _read_sidecars(shard, sidecars, found.problems) if with_labels and sidecars else {}
    for m in audio:
        url = tar_url(shard, m.name, m.offset, m.size)
        found.items.append(url)
        if with_labels and m.key in by_key:
            values: dict[str, Any] = {}
            for ext, data in sorted(by_key[m.key].items()):
                try:
                    values.update(_sidecar_values(ext, data, f"'{storage.redact(shard)}' member {m.key}.{ext}"))
                except ValueError as exc:
                    found.problems.append(AudioReadError(f"Failed to read tar shard sidecar {exc}; fix the member, "
                                                         "or use Corpus(on_read_error=\"skip\").", storage.redact(shard)))
            found.labels[url] = values


def _expand_parquet(path: str, column: str | None, found: ContainerItems, with_labels: bool) -> None:
    from audiotree.io.parquet_audio import describe_file, read_labels

    described = describe_file(path, column)
    if described is None:
        if column is not None:
            raise AudioReadError(f"Parquet file '{storage.redact(path)}' has no audio column '{column}'; name it with "
                                 "Corpus(audio_column=...) (--audio-column).", storage.redact(path))
        found.skipped[".parquet (no 'audio' column)"] += 1
        return
    urls = [parquet_url(path, described.column, g, r)
            for g, n in enumerate(described.rows_per_group) for r in range(n)]
    found.items.extend(urls)
    if with_labels and described.label_columns:
        table = read_labels(path, described.column, described.label_columns)
        for url, row in zip(urls, table.to_pylist()):
            found.labels[url] = {k: (json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)
                                 for k, v in row.items()}


def expand_container(paths: list[str], wanted: frozenset[str], found: ContainerItems, *,
                     audio_column: str | None = None, with_labels: bool = False) -> None:
    """Adds the items of the shards and Parquet files ``paths`` to ``found``, in their order.

    Remote shards are listed by several threads at once; the order of the
    items does not depend on it.

    Raises:
      FileNotFoundError: a local container does not exist.
      AudioReadError: a container cannot be read at all (not a tar; not Parquet; unreachable).
    """
    from audiotree.io.tar_shards import list_shard

    shards = [p for p in paths if p.lower().endswith(".tar")]
    options = storage.merged_options(None)

    def listing(shard: str):
        return storage.call_with_storage_options(options, list_shard, shard)

    remote = any(storage.is_url(s) for s in shards)
    listings: dict[str, Any] = {}
    if remote and len(shards) > 1:
        with concurrent.futures.ThreadPoolExecutor(min(_LIST_THREADS, len(shards))) as pool:
            listings = dict(zip(shards, pool.map(listing, shards)))
    for path in paths:
        if path.lower().endswith(".tar"):
            _expand_shard(listings.get(path) or listing(path), wanted, found, with_labels)
        else:
            _expand_parquet(path, audio_column, found, with_labels)


def label_rows(labels: Mapping[str, Mapping[str, Any]], paths: list[str]) -> dict[str, list[Any]]:
    """Columns (name -> values aligned with ``paths``, ``None`` where absent) of the sidecar labels.

    A field holding numbers in some rows and text in others becomes text.
    """
    names = sorted({k for values in labels.values() for k in values})
    columns: dict[str, list[Any]] = {n: [] for n in names}
    for p in paths:
        values = labels.get(p, {})
        for n in names:
            columns[n].append(values.get(n))
    for n, col in columns.items():
        kinds = {type(v) for v in col if v is not None}
        if len(kinds) > 1 and str in kinds or bool in kinds and len(kinds) > 1:
            columns[n] = [None if v is None else str(v) for v in col]
    return columns
