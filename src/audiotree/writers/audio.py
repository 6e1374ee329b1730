"""``AudioWriter``: batches of ``AudioTree`` items to audio files plus a manifest.

Each item becomes one audio file (named by ``pattern``) and one row of
``manifest.npz`` (see :mod:`audiotree.formats.manifest`): its geometry, labels,
extras, provenance and tags. Read the result with
:class:`audiotree.sources.AudioDataSource`.

Guarantees
----------
* ``write`` is atomic per call: everything is validated first; then the audio
  files are written, each to a temporary name, ``fsync``-ed and renamed into
  place; if any of them fails, the files of this call are removed and the
  writer is unchanged.
* The schema (label fields, extras keys, provenance, sample rate and every
  column's value kind) is pinned by the first write; later writes that drift
  raise ``ValueError`` before anything is written.
* The manifest lists only files that were completely written and made durable
  before it, and it is replaced atomically. A writer killed at any instant
  leaves the manifest of its last save (every ``manifest_every`` entries, and
  on ``close``): a consistent prefix of what was written.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import numbers
import os
import string
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from audiotree import limits
from audiotree.fs import check_relative, close_keeping_error, fsync_dir, fsync_path, naming_os_errors
from audiotree.formats import manifest as _manifest
from audiotree.provenance import stored_extras
from audiotree.tree_fields import LABEL_FIELDS
from audiotree.validation import is_int
from audiotree.writers.writer_options import progress_bar, refuse_existing

__all__ = ["AudioWriter"]

_EXTENSION_FORMATS = {"AIF": "AIFF", "AIFC": "AIFF", "OGA": "OGG", "OPUS": "OGG"}
_FIXED_POINT = ("PCM_S8", "PCM_U8", "PCM_16", "PCM_24", "PCM_32", "ALAW", "ULAW", "DPCM_8", "DPCM_16")


def _container(pattern: str) -> tuple[str, str | None]:
    """``(soundfile format, default subtype or None)`` for the pattern's extension."""
    import soundfile

    ext = os.path.splitext(pattern)[1].lstrip(".").upper()
    fmt = _EXTENSION_FORMATS.get(ext, ext)
    if fmt not in soundfile.available_formats():
        raise ValueError(
            f"pattern {pattern!r} has extension {ext.lower() or '(none)'!r}, which soundfile cannot write; use e.g. "
            ".wav, .flac, .aiff or .ogg."
        )
    if ext == "OPUS":
        return fmt, "OPUS"
    return fmt, None


def _widest_subtype(fmt: str) -> str | None:
    import soundfile

    for subtype in ("FLOAT", "PCM_24"):
        if soundfile.check_format(fmt, subtype):
            return subtype
    return soundfile.default_subtype(fmt)


def _has_index_field(pattern: str) -> bool:
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(pattern) if f is not None]
    except ValueError as exc:
        raise ValueError(f"pattern {pattern!r} is not a valid format string: {exc}") from None
    return any(f.split(".")[0].split("[")[0] == "index" for f in fields)


def _row(value: Any, i: int, batch: int, name: str) -> Any:
    """Row ``i`` of a per-item value: scalars repeat, arrays are sliced."""
    if isinstance(value, (str, bytes, bool, numbers.Number, np.generic)):
        return value
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value):
            if len(value) != batch:
                raise ValueError(f"{name} has {len(value)} strings for a batch of {batch}.")
            return value[i]
        raise ValueError(f"{name} is a {type(value).__name__} of non-strings; convert it with np.asarray first.")
    array = np.asarray(value)
    if array.dtype == object:
        raise ValueError(f"{name} has dtype object, which the manifest cannot store without pickling.")
    if array.ndim == 0:
        return array[()]
    if array.shape[0] < batch:
        raise ValueError(f"{name} has {array.shape[0]} rows for a batch of {batch}.")
    cell = array[i]
    return cell[()] if np.ndim(cell) == 0 else np.array(cell)


class AudioWriter:
    """Writes ``AudioTree`` batches as audio files and a column manifest.

    Args:
      directory: output folder (created if needed).
      pattern: file name per item, with an ``{index}`` field (e.g.
        ``"audio_{index:04d}.wav"``; sub-folders allowed). The extension
        picks the container.
      include_timestamp: record one ISO timestamp per ``write`` call.
      compress_manifest: zip-compress ``manifest.npz``.
      write_audio: ``False`` records only the manifest (no audio files).
      subtype: soundfile subtype; default the widest the container takes
        (``FLOAT`` for WAV/AIFF, ``PCM_24`` for FLAC, else its default).
      pbar / close_pbar: a tqdm-like bar advanced per item, closed on
        :meth:`close` if ``close_pbar``. ``show_progress=True`` makes one
        (described by ``progress_desc``) and always closes it.
      exist_ok: replace an existing manifest in ``directory`` (it is removed
        at the first write, before any audio file is written).
      manifest_every: save the manifest every this many new entries
        (``0``: only on :meth:`save_manifest` / :meth:`close`).
      storage_options: fsspec options when ``directory`` is a URL (``s3://``,
        ``gs://``, ...): the output is staged in a local folder and uploaded on
        :meth:`close`, the manifest last (see :mod:`audiotree.writers.remote`).

    The first write fixes the sample rate and the schema.
    """

    def __init__(
        self,
        directory: str | os.PathLike = ".",
        *,
        pattern: str = "audio_{index:04d}.wav",
        include_timestamp: bool = False,
        compress_manifest: bool = True,
        write_audio: bool = True,
        subtype: str | None = None,
        pbar: Any = None,
        close_pbar: bool = False,
        show_progress: bool = False,
        progress_desc: str | None = None,
        exist_ok: bool = False,
        manifest_every: int = 1000,
        storage_options: dict | None = None,
    ):
        from audiotree.writers.remote import staged

        # A URL (s3://, gs://, ...) is written in a local staging folder and uploaded on close.
        self.directory, self._remote = staged(directory, storage_options=storage_options,
                                              markers=(_manifest.MANIFEST_FILE, "manifest.json"), exist_ok=exist_ok,
                                              what="a dataset")
        if not is_int(manifest_every) or manifest_every < 0:
            raise ValueError(f"manifest_every must be an int >= 0, got {manifest_every!r}.")
        self.pattern = pattern
        self.write_audio = bool(write_audio)
        self._format = None
        self.subtype = subtype
        if self.write_audio:
            if not _has_index_field(pattern):
                raise ValueError(f"pattern {pattern!r} needs an {{index}} field so every item gets its own file.")
            try:
                example = pattern.format(index=0)
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"pattern {pattern!r} can only use the {{index}} field: {exc!r}") from None
            check_relative(example, where=f"pattern {pattern!r}")
            self._format, default = _container(example)
            if subtype is None:
                self.subtype = default or _widest_subtype(self._format)
            else:
                import soundfile

                if not soundfile.check_format(self._format, subtype):
                    raise ValueError(f"subtype {subtype!r} is not valid for {self._format} files.")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.manifest_path = self.directory / _manifest.MANIFEST_FILE
        existing = [n for n in (_manifest.MANIFEST_FILE, "manifest.json") if (self.directory / n).exists()]
        refuse_existing(self.directory, "a dataset", existing, exist_ok=exist_ok)
        self._retire_old = bool(existing)
        self.include_timestamp = bool(include_timestamp)
        self.compress_manifest = bool(compress_manifest)
        self.manifest_every = int(manifest_every)
        self._pbar, self._close_pbar = progress_bar(pbar, close_pbar, show_progress, progress_desc,
                                                    default_desc="Writing audio", unit="item")
        self._entries: list[dict] = []
        self._index = 0
        self._saved = 0
        self._sample_rate: int | None = None
        self._schema: tuple | None = None
        self._kinds: dict[str, tuple] = {}
        self._dirty_dirs: set[Path] = set()
        self._timestamps: set[str] = set()
        self._closed = False

    # ----------------------------------------------------------------- schema
    @staticmethod
    def _describe(tree: Any) -> tuple:
        labels = frozenset(f for f in LABEL_FIELDS if getattr(tree, f) is not None)
        extras = frozenset(tree.extras or {})
        provenance = frozenset(k for k in ("filepath", "source", "offset") if k in tree.provenance)
        return labels, extras, provenance

    def _check_schema(self, schema: tuple) -> None:
        if self._schema is None or schema == self._schema:
            return
        problems = []
        for label, got, want in zip(("label fields", "extras", "provenance"), schema, self._schema):
            if got != want:
                problems.append(f"{label}: missing {sorted(want - got)}, extra {sorted(got - want)}")
        raise ValueError(
            f"This batch's schema differs from the first write to {self.directory} ({'; '.join(problems)}); every "
            "write must carry the same label fields, extras keys and provenance."
        )

    # ------------------------------------------------------------------ write
    def _rows(self, tree: Any, tags: Mapping[str, Any] | None, timestamp: str | None) -> list[dict]:
        waveform = np.asarray(tree.waveform)
        batch, channels, samples = (int(d) for d in waveform.shape)
        rate = int(tree.sample_rate)
        extras = stored_extras(tree.extras)
        for key, value in extras.items():
            if not isinstance(key, str):
                raise ValueError(f"extras keys must be strings, got {key!r}.")
            if isinstance(value, Mapping):
                raise ValueError(
                    f"extras[{key!r}] is a nested dict; AudioWriter stores flat extras. Flatten it, or use "
                    "TreeWriter, which stores any nesting."
                )
        metadata = tree.provenance
        filepaths = tree.filepath if "filepath" in metadata else None
        sources = tree.source if "source" in metadata else None
        offsets = None if metadata.get("offset") is None else np.asarray(metadata["offset"], dtype=np.float64)
        for name, values in (("filepath", filepaths), ("source", sources)):
            if values is not None and len(values) < batch:
                raise ValueError(f"{len(values)} {name} for a batch of {batch}.")
        if offsets is not None and (offsets.ndim != 1 or offsets.shape[0] < batch):
            raise ValueError(f"offset has shape {offsets.shape} for a batch of {batch}.")
        tags = dict(tags or {})
        for key, value in tags.items():
            if not isinstance(key, str):
                raise ValueError(f"tag names must be strings, got {key!r}.")
            if not isinstance(value, (str, bytes, bool, numbers.Number, np.generic)):
                raise ValueError(f"tag {key!r} must be a scalar (str, bytes, bool or number), got {type(value).__name__}.")
        rows = []
        # A padded batch of whole utterances: each file holds only its item's real samples.
        real = None if tree.lengths is None else np.asarray(tree.lengths).reshape(-1)
        for i in range(batch):
            index = self._index + i
            samples = int(real[i]) if real is not None else int(waveform.shape[-1])
            row: dict[str, Any] = {
                "index": np.int32(index),
                "filename": self._filename(index),
                "sample_rate": np.int32(rate),
                "channels": np.int32(channels),
                "samples": np.int64(samples),
                "duration_seconds": np.float32(samples / rate),
                "files_written": self.write_audio,
                "subtype": self.subtype if self.write_audio else None,
            }
            if self.write_audio:
                check_relative(row["filename"], where=f"pattern {self.pattern!r}")
            if timestamp is not None:
                row["timestamp"] = timestamp
            for field in LABEL_FIELDS:
                value = getattr(tree, field)
                if value is not None:
                    row[field] = _row(value, i, batch, field)
            if filepaths is not None:
                row["filepath"] = filepaths[i]
            if sources is not None:
                row["source"] = sources[i]
            if offsets is not None:
                row["offset"] = float(offsets[i])
            for key, value in extras.items():
                row[_manifest.EXTRAS_PREFIX + key] = _row(value, i, batch, f"extras[{key!r}]")
            for key, value in tags.items():
                row[_manifest.TAG_PREFIX + key] = value
            rows.append(row)
        return rows

    def _filename(self, index: int) -> str:
        if self.write_audio:
            return self.pattern.format(index=index)
        try:
            return self.pattern.format(index=index) if _has_index_field(self.pattern) else f"item_{index:06d}"
        except (KeyError, IndexError, ValueError):
            return f"item_{index:06d}"

    def _check_kinds(self, rows: list[dict]) -> dict[str, tuple]:
        """Pins/validates each column's value kind; returns kinds new in this call."""
        pinned = dict(self._kinds)
        new: dict[str, tuple] = {}
        columns: dict[str, list] = {}
        for row in rows:
            for name, value in row.items():
                columns.setdefault(name, []).append(value)
        for name, values in columns.items():
            present = [v for v in values if v is not None]
            for value in present:
                try:
                    kind = _manifest.cell_kind(value)
                except ValueError as exc:
                    raise ValueError(f"Column {name!r}: {exc}") from None
                key = kind[:2] if kind[0] == "array" else kind
                shape = kind[2] if kind[0] == "array" else None
                want = pinned.get(name)
                if want is None:
                    pinned[name] = (key, shape)
                    new[name] = (key, shape)
                elif want != (key, shape):
                    raise ValueError(
                        f"Column {name!r} held {want[0]}{'' if want[1] is None else ' ' + str(list(want[1]))} values, "
                        f"but this batch gives {key}{'' if shape is None else ' ' + str(list(shape))}; a column keeps "
                        "one kind (and cell shape)."
                    )
            # Encoding this call's values alone catches what the full encode would reject.
            _manifest.encode_column(name, values)
        return new

    def _write_audio(self, tree: Any, rows: list[dict]) -> list[Path]:
        import soundfile

        waveform = np.asarray(tree.waveform)
        written: list[Path] = []
        try:
            for i, row in enumerate(rows):
                target = self.directory / row["filename"]
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(f".{target.name}.partial")
                # Encode in memory, then write the bytes ourselves: libsndfile reports a full
                # disk as "System error" with no errno, we get OSError(ENOSPC) naming the file.
                encoded = io.BytesIO()
                soundfile.write(
                    encoded, np.ascontiguousarray(waveform[i, :, : int(row["samples"])].T), int(tree.sample_rate),
                    subtype=self.subtype,
                    format=self._format,
                )
                try:
                    with naming_os_errors(target):
                        with open(tmp, "wb") as f:
                            f.write(encoded.getbuffer())
                        fsync_path(tmp)
                        os.replace(tmp, target)
                finally:
                    with contextlib.suppress(OSError):
                        tmp.unlink()
                written.append(target)
                self._dirty_dirs.add(target.parent)
        except BaseException:
            for path in written:
                with contextlib.suppress(OSError):
                    path.unlink()
            raise
        return written

    def write(self, tree: Any, tags: Mapping[str, Any] | None = None) -> list[Path]:
        """Writes every item of ``tree`` (one file and one manifest row each).

        ``tags`` (``{name: scalar}``) are stored on every row of this call and
        can be filtered on with :meth:`AudioDataSource.filter_by_tag`. Returns
        the written paths (the would-be paths when ``write_audio=False``).
        """
        from audiotree.core import AudioTree

        if self._closed:
            raise RuntimeError(f"AudioWriter for {self.directory} is closed; create a new one to write again.")
        if not isinstance(tree, AudioTree):
            raise TypeError(f"AudioWriter.write takes an AudioTree, got {type(tree).__name__}.")
        if tree.waveform is None:
            raise ValueError("AudioWriter needs a waveform; use TreeWriter to store token-only trees.")
        ndim = np.ndim(tree.waveform)
        if ndim != 3:
            raise ValueError(
                f"AudioWriter takes a rank 3 (B, C, T) waveform, got rank {ndim}; "
                + ("call flatten_mini_batches() first." if ndim == 4 else "build the tree with AudioTree.create().")
            )
        rate = limits.sane_sample_rate(tree.sample_rate, f"AudioWriter for {self.directory}")
        channels, frames = np.shape(tree.waveform)[1:]
        for field, value, low, high in (("channels", channels, 1, limits.MAX_CHANNELS),
                                        ("frames", frames, 0, limits.MAX_FRAMES)):
            problem = limits.int_problem(field, value, low, high)
            if problem:
                raise ValueError(f"AudioWriter for {self.directory}: {problem}")
        if self._sample_rate is not None and rate != self._sample_rate:
            raise ValueError(
                f"This batch is at {rate} Hz, but {self.directory} holds {self._sample_rate} Hz audio; resample it first."
            )
        schema = self._describe(tree)
        self._check_schema(schema)
        timestamp = datetime.datetime.now(datetime.timezone.utc).isoformat() if self.include_timestamp else None
        rows = self._rows(tree, tags, timestamp)
        new_kinds = self._check_kinds(rows)

        if self._retire_old:
            # Remove the replaced dataset's manifest before overwriting any file it lists.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.manifest_path)
            fsync_dir(self.directory)
            self._retire_old = False
        if self.write_audio:
            paths = self._write_audio(tree, rows)
            self._warn_clipping(tree, rows)
        else:
            paths = [self.directory / row["filename"] for row in rows]

        # Commit.
        self._kinds.update(new_kinds)
        if self._schema is None:
            self._schema = schema
            self._sample_rate = rate
        self._entries.extend(rows)
        self._index += len(rows)
        if timestamp is not None:
            self._timestamps.add(timestamp)
        if self._pbar is not None:
            self._pbar.update(len(rows))
        if self.manifest_every and len(self._entries) - self._saved >= self.manifest_every:
            self.save_manifest()
        return paths

    def _warn_clipping(self, tree: Any, rows: list[dict]) -> None:
        if self.subtype not in _FIXED_POINT or not rows:
            return
        peaks = np.max(np.abs(np.asarray(tree.waveform)), axis=(1, 2))
        worst = int(np.argmax(peaks))
        if peaks[worst] > 1.0:
            warnings.warn(
                f"{int(np.sum(peaks > 1.0))} item(s) peak above 1.0 and were clipped by the {self.subtype} subtype "
                f"(worst: {rows[worst]['filename']} at {float(peaks[worst]):.3f}); normalise them, or use a float "
                "subtype.",
                RuntimeWarning,
                stacklevel=3,
            )

    # --------------------------------------------------------------- manifest
    def save_manifest(self) -> Path | None:
        """Atomically (re)writes ``manifest.npz``; ``None`` when nothing has been written."""
        if not self._entries:
            return None
        for directory in sorted(self._dirty_dirs):
            fsync_dir(directory)
        self._dirty_dirs.clear()
        names: list[str] = []
        for entry in self._entries:
            for name in entry:
                if name not in names:
                    names.append(name)
        columns = {name: [entry.get(name) for entry in self._entries] for name in names}
        path = _manifest.write(self.manifest_path, columns, len(self._entries), compress=self.compress_manifest)
        self._saved = len(self._entries)
        return path

    def close(self) -> None:
        """Saves the manifest and closes the progress bar if asked. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if len(self._entries) != self._saved:
                self.save_manifest()
        finally:
            if self._pbar is not None and self._close_pbar:
                self._pbar.close()
        if self._remote is not None:  # only after a successful close: the manifest goes up last
            remote, self._remote = self._remote, None
            remote.finish(last=(_manifest.MANIFEST_FILE,))

    def __enter__(self) -> "AudioWriter":
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        close_keeping_error(self, exc)

    def get_stats(self) -> dict:
        """``{total_files, output_directory, current_index, write_audio}`` (+ ``total_batches`` with timestamps)."""
        stats = {
            "total_files": len(self._entries) if self.write_audio else 0,
            "total_entries": len(self._entries),
            "output_directory": str(self.directory),
            "current_index": self._index,
            "write_audio": self.write_audio,
        }
        if self.include_timestamp:
            stats["total_batches"] = len(self._timestamps)
        return stats
