"""Reading an ``AudioWriter`` dataset: its manifest rows and the audio they name.

:class:`ManifestReader` returns each item as the plain fields of an
``AudioTree`` (arrays and encoded provenance), so the container can load a whole
dataset (``AudioTree.from_manifest``) without this module importing it;
:class:`~audiotree.sources.AudioDataSource` wraps the same fields for Grain.

The manifest is validated when the source is built (header and version,
closed column set, kinds, lengths, masks, and that every file name is a
relative path without ``..``); each audio path is resolved again at read time
and refused if a symlink leads outside the folder. A file whose header no
longer matches its manifest row (rate, channels or length) is a read error,
never a silently short item.
"""

from __future__ import annotations

import copy
import math
import operator
import os
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

from audiotree import limits
from audiotree.formats import manifest as _manifest
from audiotree.fs import check_relative, safe_join
from audiotree.provenance import KEY_EXTRA, encode_strings, restored_key
from audiotree.errors import AudioReadError
from audiotree.io import storage
from audiotree.io.excerpt import read_excerpt
from audiotree.io.read_errors import check_on_read_error
from audiotree.io.remote_file import first_read
from audiotree.tree_fields import DERIVED_FIELDS, LABEL_FIELDS
from audiotree.validation import check_duration, check_sample_rate, is_int

__all__ = ["ManifestReader"]

_REQUIRED = {
    "index": "iu",
    "filename": "U",
    "sample_rate": "iu",
    "channels": "iu",
    "samples": "iu",
    "files_written": "b",
}
_OPTIONAL = {
    "duration_seconds": "f",
    "subtype": "U",
    "timestamp": "U",
    "filepath": "U",
    "source": "U",
    "offset": "f",
}


def _validate(table: _manifest.ManifestColumns) -> None:
    where = f"Invalid manifest {table.path}:"
    for name, kinds in _REQUIRED.items():
        data = table.columns.get(name)
        if data is None:
            raise ValueError(f"{where} the required column {name!r} is missing. Re-render the dataset with AudioWriter.")
        if name in table.masks:
            raise ValueError(f"{where} column {name!r} must be present in every row. Re-render the dataset.")
    for name, kinds in {**_REQUIRED, **_OPTIONAL}.items():
        data = table.columns.get(name)
        if data is None:
            continue
        if data.ndim != 1 or data.dtype.kind not in kinds:
            raise ValueError(
                f"{where} column {name!r} has dtype {data.dtype} and shape {data.shape}; expected a 1-D column of "
                f"kind {kinds!r}. Re-render the dataset."
            )
    for name, minimum in (("sample_rate", 1), ("channels", 1), ("samples", 0)):
        data = table.columns[name]
        if data.size and int(data.min()) < minimum:
            raise ValueError(f"{where} column {name!r} holds {int(data.min())}, below {minimum}. Re-render the dataset.")
    # What the reader trusts (a manifest-only row allocates channels x samples zeros) stays sane.
    bounds = {
        "index": (0, limits.MAX_ITEMS, ""),
        "sample_rate": (1, limits.MAX_SAMPLE_RATE, " Hz"),
        "channels": (1, limits.MAX_CHANNELS, ""),
        "samples": (0, limits.MAX_FRAMES, ""),
        "duration_seconds": (0, float(limits.MAX_FRAMES), " s"),
    }
    for name, (low, high, unit) in bounds.items():
        data = table.columns.get(name)
        problem = None if data is None else limits.column_problem(name, data, low, high, unit)
        if problem:
            raise ValueError(f"{where} {problem} Re-render the dataset.")
    for name in LABEL_FIELDS:
        data = table.columns.get(name)
        if data is not None and data.dtype.kind not in "biufc":
            raise ValueError(f"{where} label column {name!r} has non-numeric dtype {data.dtype}. Re-render the dataset.")
    for row, filename in enumerate(table.columns["filename"]):
        check_relative(str(filename), where=f"{where} row {row} filename")


_MAX_MANIFEST_BYTES = 1 << 30


def _remote_columns(url: str, storage_options: dict | None) -> _manifest.ManifestColumns:
    """The columns of a manifest on object storage: fetched in one request into a temporary file, then read."""
    import shutil
    import tempfile

    from audiotree.io.ranges import RemoteFolder

    folder, name = url.rsplit("/", 1)
    try:
        raw = RemoteFolder(folder, storage_options=storage_options).read_object(name, limit=_MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        raise FileNotFoundError(f"Manifest not found: {url}. Was the AudioWriter closed, and is this the right "
                                "URL?") from None
    tmp = Path(tempfile.mkdtemp(prefix="audiotree-manifest-"))
    try:
        (tmp / _manifest.MANIFEST_FILE).write_bytes(raw)
        try:
            return _manifest.read_columns(tmp / _manifest.MANIFEST_FILE)
        except ValueError as exc:
            raise ValueError(str(exc).replace(str(tmp / _manifest.MANIFEST_FILE), url)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


#: Bytes per sample of the PCM subtypes AudioWriter writes; other subtypes are compressed (smaller).
_SAMPLE_BYTES = {"PCM_S8": 1, "PCM_U8": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4, "FLOAT": 4, "DOUBLE": 8}


def _encoded_bytes(entry: dict) -> int:
    """About the size of an entry's audio file: its PCM samples plus room for the header (at most 8 bytes a sample)."""
    width = _SAMPLE_BYTES.get(str(entry.get("subtype") or "").upper(), 8)
    return int(entry["samples"]) * int(entry["channels"]) * width + 4096


def _item(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


class ManifestReader:
    """Random access to the items of an :class:`~audiotree.AudioWriter` folder.

    ``reader.read_fields(i)`` is item ``i`` as the keyword arguments of a
    batch-of-1 ``AudioTree``: the item's audio (or zeros for a manifest-only
    dataset), its label fields, ``extras`` (with a batch axis) and provenance.

    The arguments and the rules for derived fields are those of
    :class:`audiotree.sources.AudioDataSource`, which documents them.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        audio_dir: str | os.PathLike | None = None,
        num_records: int | None = None,
        sample_rate: int | None = None,
        mono: bool = False,
        duration: float | None = None,
        pad_mode: str | None = "constant",
        filter_fn: Callable[[dict], bool] | None = None,
        on_read_error: str = "raise",
        storage_options: dict | None = None,
    ):
        self.storage_options = dict(storage_options) if storage_options else None
        location = os.fspath(path)
        if storage.is_url(location):
            path = location.rstrip("/")
            path = path if path.endswith(".npz") else f"{path}/{_manifest.MANIFEST_FILE}"
        else:
            path = Path(path)
            if path.is_dir() or (not path.exists() and path.suffix == ""):
                path = path / _manifest.MANIFEST_FILE
            if path.suffix != ".npz":
                raise ValueError(f"Unsupported manifest format {path.suffix!r} for {path}; AudioWriter writes "
                                 "manifest.npz.")
            if not path.is_file():
                raise FileNotFoundError(
                    f"Manifest not found: {path}. Was the AudioWriter closed (or save_manifest() called), and is "
                    "this the right folder?"
                )
        check_on_read_error(on_read_error)
        sample_rate = check_sample_rate(sample_rate, optional=True)
        check_duration(duration)
        if num_records is not None and (not is_int(num_records) or num_records < 0):
            raise ValueError(f"num_records must be an int >= 0 or None, got {num_records!r}.")
        table = _remote_columns(path, self.storage_options) if isinstance(path, str) else _manifest.read_columns(path)
        _validate(table)
        entries = []
        for entry in _manifest.read_entries(table):
            for name in (*_REQUIRED, *_OPTIONAL):
                if name in entry:
                    entry[name] = _item(entry[name])
            entries.append(entry)
        if filter_fn is not None:
            entries = [e for e in entries if filter_fn(e)]
        if num_records is not None:
            entries = entries[: int(num_records)]
        if not entries:
            raise ValueError(
                f"No valid entries found in {path}"
                + (" after filter_fn/num_records." if filter_fn is not None or num_records is not None else ".")
            )
        self.manifest_path = path
        if audio_dir is not None:
            self.audio_dir = os.fspath(audio_dir) if storage.is_url(os.fspath(audio_dir)) else Path(audio_dir)
        else:
            self.audio_dir = path.rsplit("/", 1)[0] if isinstance(path, str) else path.parent
        self.sample_rate = None if sample_rate is None else int(sample_rate)
        self.mono = bool(mono)
        self.duration = None if duration is None else float(duration)
        self.pad_mode = pad_mode
        self.on_read_error = on_read_error
        self._entries = entries

    # ----------------------------------------------------------------- basics
    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        fields = {
            "path": str(getattr(self, "manifest_path", "")),
            "num_records": len(getattr(self, "_entries", ())),
            "sample_rate": getattr(self, "sample_rate", None),
            "mono": getattr(self, "mono", None),
            "duration": getattr(self, "duration", None),
        }
        return f"{type(self).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"

    def get_entry(self, index: int) -> dict:
        """A copy of the manifest row of item ``index`` (``tags`` gathered into a dict)."""
        return copy.deepcopy(self._entries[self._check_index(index)])

    def get_all_entries(self) -> list[dict]:
        """Copies of every manifest row in this (possibly filtered) source."""
        return copy.deepcopy(self._entries)

    # ---------------------------------------------------------------- filters
    def _view(self, entries: list[dict], what: str) -> "ManifestReader":
        if not entries:
            raise ValueError(f"No entries left after {what} on {self.manifest_path}.")
        view = copy.copy(self)
        view._entries = entries
        return view

    def filter(self, predicate: Callable[[dict], bool]) -> "ManifestReader":
        """A view keeping the entries for which ``predicate(entry)`` is true (filters compose)."""
        return self._view([e for e in self._entries if predicate(e)], "filter(predicate)")

    def filter_by_tag(self, name: str, value: Any) -> "ManifestReader":
        """A view keeping the entries written with ``tags={name: value}``."""
        return self._view(
            [e for e in self._entries if name in e.get("tags", {}) and e["tags"][name] == value],
            f"filter_by_tag({name!r}, {value!r})",
        )

    def filter_by_lufs(self, min_lufs: float | None = None, max_lufs: float | None = None) -> "ManifestReader":
        """A view keeping entries whose stored ``lufs`` is within ``[min_lufs, max_lufs]`` (entries without lufs go)."""

        def keep(entry: dict) -> bool:
            if "lufs" not in entry:
                return False
            value = np.asarray(entry["lufs"], dtype=np.float64)
            if value.size != 1:
                return False
            lufs = float(value.reshape(-1)[0])
            return (min_lufs is None or lufs >= min_lufs) and (max_lufs is None or lufs <= max_lufs)

        return self._view([e for e in self._entries if keep(e)], f"filter_by_lufs({min_lufs}, {max_lufs})")

    # ---------------------------------------------------------------- reading
    def _check_index(self, index: Any) -> int:
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"{type(self).__name__} indices must be integers, got {type(index).__name__}.") from None
        if not 0 <= i < len(self._entries):
            raise IndexError(f"Index {i} is out of range for {len(self._entries)} entries (negative indices are not supported).")
        return i

    def _audio_path(self, filename: str, *, check: bool = True):
        if isinstance(self.audio_dir, str):  # a URL: no symlinks to follow
            check_relative(filename, where=f"{self.manifest_path}")
            return storage.join(self.audio_dir, filename)
        return safe_join(self.audio_dir, filename, where=f"{self.manifest_path}") if check else self.audio_dir / filename

    def _read_audio(self, entry: dict) -> tuple[np.ndarray, str]:
        path = self._audio_path(entry["filename"])
        with storage.use_storage_options(self.storage_options):
            if not isinstance(self.audio_dir, str):
                return self._decode(path, entry)
            # A URL: the whole item (its size follows from the entry) in the one opening request.
            with first_read(_encoded_bytes(entry)):
                return self._decode(path, entry)

    def _decode(self, path, entry: dict) -> tuple[np.ndarray, str]:
        def matches_entry(info) -> None:
            expected = (entry["sample_rate"], entry["channels"], entry["samples"])
            if (info.sample_rate, info.channels, info.frames) != expected:
                raise AudioReadError(
                    f"'{path}' does not match its manifest entry: it has {info.sample_rate} Hz, {info.channels} "
                    f"channels, {info.frames} frames, but {self.manifest_path} recorded {expected[0]} Hz, "
                    f"{expected[1]} channels, {expected[2]} frames. The file was replaced or truncated; re-render "
                    "the dataset.",
                    path,
                )

        # One open (checked, then decoded): on object storage a separate probe is a second request.
        data, _ = read_excerpt(
            path, sample_rate=self.sample_rate or entry["sample_rate"], duration=self.duration, mono=self.mono,
            pad_mode=self.pad_mode if self.duration else None, check_info=matches_entry,
        )
        return data[None], str(path)

    @property
    def waveform_nbytes(self) -> int:
        """Bytes of the first item's float32 waveform as read (0 when there is none): from the manifest, no read."""
        if not self._entries:
            return 0
        entry = self._entries[0]
        rate = self.sample_rate or entry["sample_rate"]
        channels = 1 if self.mono else entry["channels"]
        if self.duration is not None:
            samples = int(round(self.duration * rate))
        else:
            samples = int(math.ceil(entry["samples"] * rate / entry["sample_rate"]))
        return 4 * channels * samples

    def _unchanged(self, entry: dict) -> bool:
        rate = self.sample_rate or entry["sample_rate"]
        if rate != entry["sample_rate"]:
            return False
        if self.mono and entry["channels"] > 1:
            return False
        if self.duration is not None and int(round(self.duration * rate)) != entry["samples"]:
            return False
        return True

    def read_fields(self, index: int) -> dict | None:
        """Item ``index`` as ``AudioTree(**fields)`` keywords (``None`` when dropped by ``on_read_error``)."""
        entry = self._entries[self._check_index(index)]
        rate = self.sample_rate or entry["sample_rate"]
        if entry["files_written"]:
            try:
                waveform, audio_path = self._read_audio(entry)
            except AudioReadError as exc:
                if self.on_read_error == "raise":
                    raise
                if self.on_read_error == "warn":
                    warnings.warn(f"Skipping unreadable audio: {exc}", UserWarning, stacklevel=3)
                return None
        else:
            audio_path = str(self._audio_path(entry["filename"], check=False))
            channels = 1 if self.mono else entry["channels"]
            if self.duration is not None:
                samples = int(round(self.duration * rate))
            elif rate == entry["sample_rate"]:
                samples = entry["samples"]
            else:
                samples = int(math.ceil(entry["samples"] * rate / entry["sample_rate"]))
            waveform = np.zeros((1, channels, samples), dtype=np.float32)

        unchanged = self._unchanged(entry)
        labels = {}
        for field in LABEL_FIELDS:
            if field in entry and (unchanged or field not in DERIVED_FIELDS):
                labels[field] = np.asarray(entry[field])[None]
        extras = {}
        for name, value in entry.items():
            if name.startswith(_manifest.EXTRAS_PREFIX):
                key = name[len(_manifest.EXTRAS_PREFIX):]
                extras[key] = (restored_key(value) if key == KEY_EXTRA else value if isinstance(value, str)
                               else np.asarray(value)[None])
        metadata = {"filepath": encode_strings([entry.get("filepath", audio_path)])}
        if "source" in entry:
            metadata["source"] = encode_strings([entry["source"]])
        metadata["offset"] = np.asarray([entry.get("offset", 0.0)], dtype=np.float64)
        return dict(waveform=waveform, sample_rate=int(rate), extras=extras, _metadata=metadata, **labels)
