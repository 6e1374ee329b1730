"""Building an index: discover, read every file once (in parallel), commit atomically.

How a build runs
----------------
1. SOURCES are discovered as everywhere else (folders, files, globs; a
   mapping ``{group: sources}`` names groups).
2. Rows are reused, never re-read, when their file's size and modification
   time are unchanged: from the existing index at ``out`` (an incremental
   update; rows of files no longer found are dropped) and from the part files
   of an interrupted build (a resume).
3. The other files are read in chunks by an executor: each chunk's rows are
   committed atomically as a Parquet part file in ``.<name>.parts/`` beside
   ``out`` as soon as the chunk ends, so an interrupted build keeps them.
4. The rows are sorted by (group, path), labels are joined, and the index is
   written to a temporary file, fsynced and renamed over ``out``; then the
   parts are removed. The output depends only on the files and the settings,
   never on the executor, the worker count or the order chunks finish in.

An unreadable file becomes a row with ``readable=False``, its error, and the
error's kind: ``"permanent"`` (the file is bad; the row is reused until the
file changes) or ``"transient"`` (the storage kept failing after its retries;
the next build reads the file again).
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process
import contextlib
import dataclasses
import functools
import json
import math
import os
import shutil
import warnings
from typing import Any, Mapping, Sequence

from audiotree.errors import AudioReadError
from audiotree.index._reuse import reusable, row_settings
from audiotree.index.labels import (append_label_columns, label_source_from, match_labels, raw_label_columns,
                                   typed_label_columns)
from audiotree.io import storage
from audiotree.io.decoder_identity import decoder_identity, same_decoder
from audiotree.index._rows import BASE_NAMES as _BASE_NAMES, current_table, rows_table, write_parquet
from audiotree.index.table_schema import (BLOCK_SEC, MIN_READER_VERSION, TYPED_CELLS_MIN_READER, arrow_schema,
                                          encode_metadata, require_pyarrow)
from audiotree.validation import is_int

__all__ = ["build_index", "IndexBuildReport"]

_GLOB_MAGIC = ("*", "?", "[")
_PARTS_SETTINGS = "settings.json"


@dataclasses.dataclass(frozen=True)
class IndexBuildReport:
    """What :func:`build_index` did.

    ``rows`` in the index; ``read`` files read now; ``reused`` rows kept from the
    previous index; ``resumed`` rows kept from an interrupted build; ``dropped``
    rows of files no longer found; ``unreadable`` rows with an error.
    """

    path: str
    rows: int
    read: int
    reused: int
    resumed: int
    dropped: int
    unreadable: int
    #: Members of tar shards that are neither audio nor sidecars, by extension (left out of the index).
    skipped_members: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: Rows that took labels from each source: the labels file (by its path) and ``"sidecars"`` (tar sidecars
    #: and Parquet columns). Labels merge per row: the labels file wins where it has a row.
    labels_filled: Mapping[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class LabelKinds:
    """The label columns declared text or numeric (``text_columns=``/``numeric_columns=``), for every source."""

    text_columns: Sequence[str] = ()
    numeric_columns: Sequence[str] = ()

    def __post_init__(self) -> None:
        for name in ("text_columns", "numeric_columns"):
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        both = sorted(set(self.text_columns) & set(self.numeric_columns))
        if both:
            raise ValueError(f"column(s) {both} are declared both text and numeric; choose one.")


def _source_root(entry: str) -> str:
    """The folder a source entry's files are relative to (for ``match='relative'`` labels)."""
    if storage.is_url(entry):
        head = entry
        if any(ch in entry.split("://", 1)[1] for ch in _GLOB_MAGIC):
            head = entry[: min(entry.find(ch) for ch in _GLOB_MAGIC if ch in entry)]
            return head.rsplit("/", 1)[0]
        return entry.rstrip("/")
    expanded = os.path.expandvars(os.path.expanduser(entry))
    if any(ch in expanded for ch in _GLOB_MAGIC):
        parts = expanded.replace(os.sep, "/").split("/")
        fixed = []
        for part in parts:
            if any(ch in part for ch in _GLOB_MAGIC):
                break
            fixed.append(part)
        base = "/".join(fixed) or "."
        return os.path.abspath(base)
    if os.path.isdir(expanded):
        return os.path.abspath(expanded)
    return os.path.dirname(os.path.abspath(expanded))


def _normalize_sources(sources: Any) -> tuple[list[tuple[str | None, str]], dict]:
    """(group, entry) pairs, and the JSON description kept for the refresh command."""
    from audiotree.discovery.files import source_pairs

    pairs = source_pairs(sources)

    def absolute(entry: str) -> str:
        if storage.is_url(entry):
            return entry
        return os.path.abspath(os.path.expandvars(os.path.expanduser(entry)))

    described: dict = {}
    if any(g is not None for g, _ in pairs):
        groups: dict[str, list[str]] = {}
        for g, e in pairs:
            groups.setdefault(g or "audio", []).append(absolute(e))
        described["groups"] = groups
    else:
        described["pool"] = [absolute(e) for _, e in pairs]
    return pairs, described


def _absolute_entry(entry: str) -> str:
    """A local source entry (a folder, file, glob or brace pattern) as an absolute path; a URL as it is."""
    if storage.is_url(entry):
        return entry
    return os.path.abspath(os.path.expandvars(os.path.expanduser(storage.local_path(entry))))


def _discover(pairs, extensions, containers: Any = None,
              audio_column: str | None = None) -> list[tuple[str, str | None, str]]:
    """(absolute path, group, source root) per file, first listing wins.

    ``containers`` (a :class:`~audiotree.discovery.containers.ContainerItems`)
    collects the sidecar labels, skipped members and listing faults of tar
    shards and Parquet files; each fault's group is kept in its ``groups``.
    """
    from audiotree.io.members import absolute as member_absolute
    from audiotree.discovery.files import discover as discover_files

    seen: dict[str, str | None] = {}
    out = []
    for group, entry in pairs:
        before = len(containers.problems) if containers is not None else 0
        # Resolved once, before anything is keyed: members and their sidecar labels are named by the absolute
        # container path whichever spelling (relative, ./, absolute) the source used.
        files, _ = discover_files(_absolute_entry(entry), extensions, strict=True, audio_column=audio_column,
                                  containers=containers)
        if containers is not None:
            for exc in containers.problems[before:]:
                containers.groups.setdefault(exc.file_path, group)
        root = _source_root(entry)
        for f in files:
            path = member_absolute(f)  # local files, and the local shards of members, absolute
            if path in seen:
                if seen[path] != group:
                    warnings.warn(f"'{path}' is listed under groups {seen[path]!r} and {group!r}; it is indexed once, "
                                  f"under {seen[path]!r}.", UserWarning, stacklevel=3)
                continue
            seen[path] = group
            out.append((path, group, root))
    return out


def _stat(path: str, storage_options: Mapping[str, Any] | None = None) -> tuple[int, int]:
    from audiotree.io.members import member_stat

    try:
        return member_stat(path, storage_options=storage_options)
    except (OSError, AudioReadError):
        return (-1, -1)


class _Parts:
    """The committed part files of an unfinished build, beside the output."""

    def __init__(self, out: str, settings: dict, sink: Any = None):
        self.dir = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.parts")
        self.settings = settings
        self._next = 0
        self._sink = sink  # a remote build's copy of the parts (see _RemoteParts)

    def load(self) -> list:
        """Tables of the parts of an interrupted build with the same settings (newest first)."""
        import pyarrow.parquet as pq

        if not os.path.isdir(self.dir):
            return []
        try:
            with open(os.path.join(self.dir, _PARTS_SETTINGS), encoding="utf-8") as f:
                same = json.load(f) == self.settings
        except (OSError, ValueError):
            same = False
        if not same:  # another build's leftovers: start over
            shutil.rmtree(self.dir, ignore_errors=True)
            return []
        names = sorted(n for n in os.listdir(self.dir) if n.startswith("part-") and n.endswith(".parquet"))
        tables = []
        for name in reversed(names):
            try:
                tables.append(current_table(pq.read_table(os.path.join(self.dir, name))))  # (base columns only)
            except Exception:  # a part is committed by rename, so this is outside damage: re-read its files
                continue
        if names:
            self._next = int(names[-1][len("part-"):-len(".parquet")]) + 1
        return tables

    def commit(self, rows: Sequence[dict]) -> None:
        from audiotree.fs import write_json_atomic

        if not os.path.isdir(self.dir):
            os.makedirs(self.dir, exist_ok=True)
            write_json_atomic(os.path.join(self.dir, _PARTS_SETTINGS), self.settings)
            if self._sink is not None:
                self._sink.commit(os.path.join(self.dir, _PARTS_SETTINGS))
        path = os.path.join(self.dir, f"part-{self._next:08d}.parquet")
        write_parquet(rows_table(rows), path)
        if self._sink is not None:
            self._sink.commit(path)
        self._next += 1

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _open_runner(executor: Any, max_workers: int | None, ray_address: str | None, stack: contextlib.ExitStack):
    """The :mod:`audiotree.parallel` runner of ``executor`` (closed by ``stack``): the one corpus-job layer."""
    from audiotree.parallel import open_executor

    if (executor is None or executor == "serial") and max_workers is not None:
        raise ValueError(f"max_workers={max_workers!r} sizes a process pool, and executor={executor!r} runs in this "
                         "process; pass executor='process' as well.")
    return stack.enter_context(open_executor(executor, ray_address=ray_address, workers=max_workers))


def _run_chunks(chunks, runner, loudness: bool, mono: bool, on_rows, storage_options=None) -> None:
    """Indexes every chunk on ``runner``; rows reach ``on_rows`` on the driver, chunk by chunk, in chunk order."""
    from audiotree.index._work import index_chunk

    work = functools.partial(index_chunk, loudness=loudness, mono=mono,
                             storage_options=dict(storage_options) if storage_options else None)
    try:
        for _, rows in runner.run(work, chunks):
            on_rows(rows)
    except concurrent.futures.process.BrokenProcessPool as exc:
        raise RuntimeError(
            "The index build's worker processes died (finished chunks are kept; re-run to resume). A script that "
            "calls build_index with executor='process' needs an `if __name__ == \"__main__\":` guard, since "
            "spawned workers import it; or pass executor='serial' or a ThreadPoolExecutor."
        ) from exc


def _check_declared(kinds: LabelKinds, raw: Sequence[tuple[str, Any]], label_source: Any) -> None:
    """Columns declared text or numeric must exist (a labels file checks its own)."""
    if label_source is not None:
        return
    present = {name for name, _ in raw}
    undeclared = sorted((set(kinds.text_columns) | set(kinds.numeric_columns)) - present)
    if undeclared:
        raise ValueError(f"text_columns/numeric_columns (--text-columns/--numeric-columns) name {undeclared}, which "
                         f"no tar sidecar or Parquet column of the sources holds (their labels: {sorted(present)}); "
                         "declare the kinds of a labels file's columns with labels= (--labels).")


def _previous_labels(out: str, previous: Any) -> dict:
    """The string labels of the index being updated: ``{label: vocabulary}`` (categories), ``{label: None}`` (text)."""
    if previous is None:
        return {}
    from audiotree.index.reader import open_index

    kinds = {n: s["kind"] for n, s in previous.meta["labels"].items() if s["kind"] in ("category", "text")}
    if not kinds:
        return {}
    ix = open_index(out, columns=["path"], labels=list(kinds))
    return {n: ix.vocabulary(n) if kind == "category" else None for n, kind in kinds.items()}


def build_index(
    sources: Any,
    out: str | os.PathLike,
    *,
    labels: Any = None,
    labels_key: str | None = None,
    labels_match: str | None = None,
    labels_root: str | os.PathLike | None = None,
    labels_missing: str | None = None,
    text_columns: Sequence[str] | None = None,
    numeric_columns: Sequence[str] | None = None,
    loudness: bool = True,
    executor: Any = None,
    show_progress: bool = True,
    mono: bool = True,
    root: str | os.PathLike | None = None,
    extensions: Sequence[str] | None = None,
    chunk_size: int | None = None,
    max_workers: int | None = None,
    ray_address: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    audio_column: str | None = None,
    segments: Any = None,
) -> IndexBuildReport:
    """Indexes ``sources`` into the Parquet file ``out``; see the module docstring.

    Args:
      sources: folders, files or globs, or ``{group: sources}``.
      out: the index file (``.parquet``). If it exists, it is updated: only new
        or changed files are read, rows of vanished files are dropped.
      labels: a labels file path or :class:`~audiotree.index.LabelSource`. It is
        read, checked and joined before any audio is decoded.
      labels_key, labels_match, labels_root, labels_missing: with a labels
        path, the :class:`~audiotree.index.LabelSource` fields ``key`` (default
        ``"path"``), ``match`` (``"path"``, ``"relative"`` or ``"stem"``),
        ``root`` and ``missing`` (``"raise"`` or ``"null"``), as the CLI's
        ``--labels-*`` options.
      text_columns: label columns that are free text: they reach items and
        batches as strings (``--text-columns``), for every source kind: a
        labels file's columns, tar sidecar fields, Parquet columns. Labels
        named ``text``, ``transcript``, ``sentence``, ``normalized_text`` or
        ``txt`` are text by default, and string columns of many distinct
        values are detected as text. The index records each label's kind.
      numeric_columns: label columns read as numbers even where their values
        look like identifiers (``"007"``; ``--numeric-columns``), for every
        source kind.
      loudness: compute each file's loudness profile (decodes every file once; FLAC seek points: ``seek_build``).
      executor: ``None``/``"serial"`` (this process, as every ``executor=``
        of audiotree), ``"process"`` (a spawn process pool of
        ``max_workers``, default one per core; what ``audiotree index``
        uses), or any
        ``concurrent.futures.Executor``, or ``"ray"`` (chunks as Ray tasks on the
        cluster at ``ray_address``, else ``RAY_ADDRESS``, else a local one; a
        task whose worker dies is re-run). The output is identical for all.
      show_progress: a tqdm bar over the files.
      mono: profile the channel average (as ``mono=True`` datasets meter)
        rather than BS.1770's weighted channels.
      root: store paths relative to this folder (which must hold every file);
        a relative ``root`` is kept relative to the index's folder, so the
        index and the corpus can move together. Default: absolute paths.
      extensions: file extensions to index (default: every decodable format).
      chunk_size: files per task and per committed part (default: balanced
        for the worker count, at most 64).
      storage_options: fsspec options (endpoint, credentials, ``anon``) for
        sources and ``out`` given as URLs (``s3://``, ``gs://``, ...); the
        backends' environment variables apply too (see
        :mod:`audiotree.io.storage`). Remote files are stored by URL; their
        modification time is the storage's. A URL ``out`` is built in a local
        temporary folder (after downloading an existing index to update it)
        and uploaded when complete, so readers never see a partial index; its
        parts are uploaded beside it (``.<name>.parts/``) as they are
        committed, so an interrupted remote build resumes from them.
      audio_column: the audio column of Parquet sources (default ``"audio"``).
        Tar shards and Parquet files with embedded audio are indexed in place,
        one row per member or row; their sidecars and other columns become
        label columns (see :mod:`audiotree.index.container_labels`).
      segments: a segment list, one index row per segment (see :mod:`audiotree.index.segment_build`).

    Returns:
      An :class:`IndexBuildReport`.

    Raises:
      FileNotFoundError / RuntimeError: a source is missing or holds no audio.
      ValueError: a file outside ``root``, bad labels (see
        :mod:`audiotree.index.labels`, :mod:`audiotree.index.segments`), or an unusable existing ``out``.
    """
    options = dict(storage_options or {})
    kinds = None
    if labels is None:  # declared kinds of the sidecar and Parquet labels
        kinds = LabelKinds(text_columns=text_columns or (), numeric_columns=numeric_columns or ())
        text_columns = numeric_columns = None
    labels = label_source_from(labels, key=labels_key, match=labels_match, missing=labels_missing,
                               root=None if labels_root is None else os.fspath(labels_root),
                               text_columns=text_columns, numeric_columns=numeric_columns)
    if kinds is None:
        kinds = LabelKinds(labels.text_columns, labels.numeric_columns) if labels is not None else LabelKinds()
    if storage.is_url(os.fspath(out)):
        return _build_remote(sources, os.fspath(out), labels=labels, kinds=kinds, loudness=loudness, executor=executor,
                             show_progress=show_progress, mono=mono, root=root, extensions=extensions,
                             chunk_size=chunk_size, max_workers=max_workers, ray_address=ray_address,
                             storage_options=options, audio_column=audio_column, segments=segments)
    with storage.use_storage_options(options):
        return _build(sources, out, labels=labels, kinds=kinds, loudness=loudness, executor=executor,
                      show_progress=show_progress,
                      mono=mono, root=root, extensions=extensions, chunk_size=chunk_size, max_workers=max_workers,
                      ray_address=ray_address, storage_options=options, audio_column=audio_column, segments=segments)


def _build_remote(sources: Any, out: str, *, storage_options: dict, **kwargs: Any) -> IndexBuildReport:
    """:func:`build_index` into a URL: build in a local temporary folder, upload the finished file."""
    import tempfile

    if kwargs.get("root") is not None and not storage.is_url(os.fspath(kwargs["root"])):
        raise ValueError(f"root={kwargs['root']!r} is a local folder but the index goes to {storage.redact(out)}; "
                         "give root as a URL (the prefix that holds every source) or leave it out.")
    with tempfile.TemporaryDirectory(prefix="audiotree-index-") as tmp:
        local = os.path.join(tmp, out.rstrip("/").rsplit("/", 1)[-1] or "index.parquet")
        with storage.use_storage_options(storage_options):
            storage.forget_listings(out)
            if storage.exists(out):
                storage.download(out, local)
            parts = _RemoteParts(out, local)
            parts.pull()
            report = _build(sources, local, storage_options=storage_options, part_sink=parts, **kwargs)
            storage.upload(local, out)
            parts.remove()
    return dataclasses.replace(report, path=out)


class _RemoteParts:
    """The part files of a remote build, kept beside the remote index (``.<name>.parts/``) so a re-run resumes.

    Each committed part is uploaded as soon as it is written locally; a new
    build first downloads the parts an interrupted one uploaded, then
    :class:`_Parts` checks their settings and reuses their rows. The parts go
    once the index is uploaded.
    """

    def __init__(self, out: str, local: str) -> None:
        parent, name = out.rstrip("/").rsplit("/", 1)
        self.url = f"{parent}/.{name}.parts"
        self.local_dir = os.path.join(os.path.dirname(local), f".{os.path.basename(local)}.parts")

    def pull(self) -> int:
        storage.forget_listings(self.url)
        if not storage.is_dir(self.url):
            return 0
        found = storage.list_files(self.url)
        os.makedirs(self.local_dir, exist_ok=True)
        for url in found:
            storage.download(url, os.path.join(self.local_dir, url.rsplit("/", 1)[-1]))
        return len(found)

    def commit(self, path: str) -> None:
        storage.upload(path, f"{self.url}/{os.path.basename(path)}")

    def remove(self) -> None:
        fs = storage.filesystem(self.url)
        storage.forget_listings(self.url)
        if storage.exists(self.url):
            with contextlib.suppress(FileNotFoundError):
                fs.rm(self.url, recursive=True)


def _build(sources: Any, out: str | os.PathLike, *, labels: Any, kinds: "LabelKinds", loudness: bool, executor: Any, show_progress: bool,
           mono: bool, root: Any, extensions: Any, chunk_size: int | None, max_workers: int | None,
           ray_address: str | None, storage_options: dict, audio_column: str | None = None,
           part_sink: Any = None, segments: Any = None) -> IndexBuildReport:
    pa = require_pyarrow()
    import pyarrow.compute as pc
    from tqdm.auto import tqdm

    from audiotree.index.reader import open_index

    out = os.path.abspath(os.fspath(out))
    label_source = labels
    pairs, described = _normalize_sources(sources)
    if label_source is not None:
        described.update(labels=os.path.abspath(label_source.path), labels_key=label_source.key,
                         labels_match=label_source.match, labels_missing=label_source.missing)
        if label_source.root is not None:
            described["labels_root"] = os.path.abspath(label_source.root)
    for key in ("text_columns", "numeric_columns"):
        if getattr(kinds, key):
            described[key] = list(getattr(kinds, key))
    stored_root = root_abs = None
    if root is not None and storage.is_url(os.fspath(root)):
        root_abs = stored_root = os.fspath(root).rstrip("/")
        described["root"] = root_abs
    elif root is not None:
        root_abs = os.path.normpath(os.path.abspath(os.fspath(root)))
        stored_root = root_abs if os.path.isabs(os.fspath(root)) else os.path.relpath(root_abs, os.path.dirname(out))
        described["root"] = root_abs
    from audiotree.index import cell_ranges, container_labels, segment_build
    from audiotree.discovery.containers import ContainerItems
    from audiotree.io.members import without_cell

    containers = ContainerItems()
    found = _discover(pairs, extensions, containers, audio_column)
    segment_table, found, windows = segment_build.plan(segments, found, described)
    if segment_table is not None and kinds.text_columns:  # declared text applies to the segment list's labels too
        declared = tuple(n for n in kinds.text_columns if n in segment_table.label_names)
        segment_table = dataclasses.replace(segment_table,
                                            text_columns=tuple(dict.fromkeys(segment_table.text_columns + declared)))
    # The labels are read and joined before any file is decoded: a bad labels file costs nothing.
    matched = None if label_source is None else match_labels(label_source, [p for p, _, _ in found],
                                                             [r for _, _, r in found])

    def stored(path: str) -> str:
        if root_abs is None:
            return path
        if storage.is_url(root_abs) or storage.is_url(path):
            if not path.startswith(root_abs + "/"):
                raise ValueError(f"'{path}' is outside the index root {root_abs}; choose a root that holds every "
                                 "source.")
            return path[len(root_abs) + 1:]
        rel = os.path.relpath(path, root_abs)
        if rel == ".." or rel.startswith(".." + os.sep) or os.path.isabs(rel):
            raise ValueError(f"'{path}' is outside the index root {root_abs}; choose a root that holds every source.")
        return rel.replace(os.sep, "/")

    stored_paths = [stored(p) for p, _, _ in found]
    stored_to_abs = dict(zip(stored_paths, (p for p, _, _ in found)))
    current = {p: _stat(p, storage_options) for p, _, _ in found}
    settings = row_settings(loudness, mono, stored_root, BLOCK_SEC)

    previous = previous_table = None
    if os.path.exists(out):
        try:
            previous = open_index(out, columns=_BASE_NAMES)
        except ValueError as exc:
            raise ValueError(f"{exc} To start over, delete {out} (or choose another --out).") from None
        prev_settings = row_settings(previous.has_profile, previous.mono, previous.meta.get("root"),
                                      previous.meta["loudness"].get("block_sec"))
        if prev_settings != settings or windows is not None:
            previous_table = None  # other settings, or segments: every row is re-read
        else:
            previous_table = current_table(previous.table, before_seek_points=not previous.has_seek_points)
        # MP3 and Ogg tables checked under another decoder are checked again (their rows are read again).
        retable = not same_decoder(previous.meta.get("decoders"))
    parts = _Parts(out, settings, part_sink)
    taken: set[str] = set()
    kept = []
    resumed = 0
    for table in parts.load() if windows is None else ():  # a segment build reads every recording afresh
        mask = reusable(table, stored_to_abs, current, taken)
        table = table.filter(mask)
        resumed += table.num_rows
        kept.append(table)
    reused = dropped = 0
    if previous is not None:
        dropped = sum(1 for p in previous.table.column("path").to_pylist()
                      if p not in stored_to_abs and without_cell(p) not in stored_to_abs)
        if previous_table is not None:
            table = previous_table.filter(reusable(previous_table, stored_to_abs, current, taken, retable=retable))
            reused = table.num_rows
            kept.append(table)  # (current_table: a format 1.0 index's float32 profiles are encoded)

    todo = [(p, g) if windows is None else (p, g, windows[p]) for p, g, _ in found if p not in taken]
    # Parquet rows get their cells' byte ranges (each row group's audio read once, here): readers read a row at once.
    cells = cell_ranges.with_cells([t[0] for t in todo])
    todo = [(cells.get(t[0], t[0]), *t[1:]) for t in todo]
    kept = [cell_ranges.with_cells_in(t, stored, stored_to_abs) for t in kept]  # rows indexed before ranges were kept
    stack = contextlib.ExitStack()
    runner = _open_runner(executor, max_workers, ray_address, stack) if todo else None
    workers = runner.workers if runner is not None else 1
    if chunk_size is None:
        chunk_size = max(1, min(64, math.ceil(len(todo) / (4 * workers)))) if todo else 1
    elif not is_int(chunk_size) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}.")
    chunks = [todo[i:i + chunk_size] for i in range(0, len(todo), chunk_size)]
    new_rows: list[dict] = []
    bar = tqdm(total=len(found), initial=len(found) - len(todo), desc="Indexing", unit="file",
               disable=not show_progress)

    def on_rows(rows: list[dict]) -> None:
        for r in rows:
            plain = without_cell(r["path"])
            if plain != r["path"] and current.get(plain, (-1, -1))[0] >= 0:  # the version stat'ed before locating
                r["size"], r["mtime_ns"] = current[plain]
            r["path"] = stored(r["path"])
        parts.commit(rows)
        new_rows.extend(rows)
        bar.update(len(rows))

    try:
        if runner is not None:
            _run_chunks(chunks, runner, bool(loudness), bool(mono), on_rows, storage_options)
    finally:
        bar.close()
        stack.close()
    for row in container_labels.problem_rows(containers.problems, containers.groups):
        warnings.warn(f"{row['error']} (The shard's row in the index is marked unreadable.)", UserWarning, stacklevel=3)
        row["path"] = stored(row["path"])
        new_rows.append(row)

    tables = kept + ([rows_table(new_rows)] if new_rows else [])
    table = pa.concat_tables(tables) if tables else arrow_schema().empty_table()
    previous_labels = _previous_labels(out, previous)
    table, label_specs = segment_build.with_segment_columns(table, new_rows, segment_table, previous_labels)
    group_key = [g or "" for g in table.column("group").to_pylist()]
    table = table.append_column("_group_key", pa.array(group_key, type=pa.string()))
    # A shard's members (a Parquet file's rows) stay together, in their order in it; a recording's segments by time.
    table = table.append_column("_order", container_labels.order_column(table.column("path").to_pylist()))
    order = [("_group_key", "ascending"), ("_order", "ascending")] + segment_build.ORDER * (windows is not None)
    table = table.sort_by(order).drop_columns(["_group_key", "_order"])

    filled: dict[str, int] = {}
    if matched is not None or containers.labels:
        # a recording's segments share their file's labels
        abs_paths = [stored_to_abs.get(p) or stored_to_abs.get(without_cell(p), p)
                     for p in table.column("path").to_pylist()]
        raw, has_row = [], [False] * len(abs_paths)
        if matched is not None:
            raw = raw_label_columns(matched, abs_paths)
            segment_build.merge_specs(label_specs, dict(raw), label_source, segment_table)
            has_row = [matched.row_of.get(p) is not None for p in abs_paths]
        sidecars = container_labels.sidecar_columns(containers.labels, abs_paths, set(label_specs),
                                                    kinds.numeric_columns) if containers.labels else []
        raw, by_file, by_sidecar = container_labels.merge_label_columns(raw, has_row, sidecars)
        _check_declared(kinds, raw + [(n, None) for n in label_specs], label_source)
        columns, specs = typed_label_columns(raw, text_columns=kinds.text_columns, previous=previous_labels)
        label_specs = {**label_specs, **specs}
        table = append_label_columns(table, columns)
        if matched is not None:
            filled[label_source.path] = int(by_file.sum())
        if sidecars:
            filled["sidecars"] = int(by_sidecar.sum())
    else:
        _check_declared(kinds, [(n, None) for n in label_specs], label_source)
    typed_cells = table.num_rows and pc.any(pc.match_substring_regex(
        table.column("path"), r"^parquet://.*&format=[A-Za-z0-9]+::")).as_py()
    table = table.replace_schema_metadata(encode_metadata(
        root=stored_root, sources=described,
        loudness={"enabled": bool(loudness), "mono": bool(mono), "block_sec": BLOCK_SEC},
        labels=label_specs, min_reader=TYPED_CELLS_MIN_READER if typed_cells else MIN_READER_VERSION,
        decoders=decoder_identity(),
    ))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    write_parquet(table, out)
    parts.remove()
    unreadable = int(table.num_rows - pc.sum(table.column("readable").cast(pa.int64())).as_py()) \
        if table.num_rows else 0
    return IndexBuildReport(path=out, rows=table.num_rows, read=len(todo), reused=reused, resumed=resumed,
                            dropped=dropped, unreadable=unreadable, skipped_members=dict(containers.skipped),
                            labels_filled=filled)
