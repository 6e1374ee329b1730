"""Writing ``AudioTree`` batches as webdataset tar shards: ``KEY.flac`` + ``KEY.json`` per item.

The shards are plain (uncompressed) ustar archives, readable by webdataset's
own ``WebDataset`` (``.flac`` bytes and a ``.json`` dict per sample), by
``tar``, and by audiotree's tar sources (``create_audio_dataset(sources=
"out/shard-*.tar")``), which read them in place. Every member's header is
deterministic (time 0, owner 0, mode 0444), so the same items give the same
bytes. A shard is written to a temporary file and renamed when complete: a
reader never sees half a shard.

Per item, the JSON holds ``sample_rate``, ``channels``, ``samples`` and,
when the batch carries them, ``filepath``, ``source``, ``offset``, ``lufs`` and
flat ``extras`` (scalars or one value per item).

>>> import tempfile, numpy as np
>>> from audiotree import AudioTree
>>> tree = AudioTree.create(np.zeros((2, 1, 800), np.float32), 8000)
>>> with tempfile.TemporaryDirectory() as d:
...     with WebDatasetWriter(d) as w:
...         w.write(tree)
...     sorted(os.listdir(d))
['shard-000000.tar']
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from audiotree.fs import fsync_dir, fsync_path
from audiotree.provenance import stored_extras
from audiotree.writers.writer_options import refuse_existing

__all__ = ["WebDatasetWriter"]


def _scalar(value: Any, i: int) -> Any:
    arr = np.asarray(value)
    if arr.ndim == 0:
        item = arr.item()
    elif arr.shape[0] > i and arr[i].size == 1:
        item = arr[i].reshape(()).item()
    else:
        return None
    if isinstance(item, bytes):
        item = item.decode("utf-8", errors="replace")
    if isinstance(item, float) and not np.isfinite(item):
        return None
    return item


class WebDatasetWriter:
    """Writes items to ``directory/shard-000000.tar``, ``shard-000001.tar``, ... (``items_per_shard`` each).

    Args:
      directory: output folder (created).
      items_per_shard: items per tar shard.
      pattern: shard file names, formatted with ``index``.
      subtype: FLAC sample format (``"PCM_16"`` or ``"PCM_24"``); samples are
        clipped to [-1, 1] by the encoder.
      key_prefix: prefix of every sample key (keys are ``{prefix}{n:09d}``,
        ``n`` counting items from 0); default the folder's name and ``_``, so
        shards of several folders have distinct keys.
      exist_ok: allow writing into a folder that already holds shards.
    """

    def __init__(self, directory: str | os.PathLike, *, items_per_shard: int = 1000,
                 pattern: str = "shard-{index:06d}.tar", subtype: str = "PCM_24", key_prefix: str | None = None,
                 exist_ok: bool = False) -> None:
        if not isinstance(items_per_shard, int) or items_per_shard < 1:
            raise ValueError(f"items_per_shard must be a positive int, got {items_per_shard!r}.")
        if subtype not in ("PCM_16", "PCM_24"):
            raise ValueError(f"subtype must be 'PCM_16' or 'PCM_24' (FLAC), got {subtype!r}.")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        if not exist_ok:  # listing the folder is needed only to refuse it
            refuse_existing(self.directory, "tar shards", sorted(p.name for p in self.directory.glob("*.tar")),
                            exist_ok=False)
        self.items_per_shard = items_per_shard
        self.pattern = pattern
        self.subtype = subtype
        self.key_prefix = f"{self.directory.name}_" if key_prefix is None else key_prefix
        self._count = 0
        self._shards = 0
        self._tar: tarfile.TarFile | None = None
        self._in_shard = 0
        self._tmp: Path | None = None
        self.paths: list[Path] = []

    def _add(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = 0
        info.mode = 0o444
        info.uname = info.gname = ""
        self._tar.addfile(info, io.BytesIO(data))

    def _open_shard(self) -> None:
        target = self.directory / self.pattern.format(index=self._shards)
        self._tmp = target.with_name(f".{target.name}.partial")
        self._tar = tarfile.open(self._tmp, "w", format=tarfile.USTAR_FORMAT)
        self._in_shard = 0

    def _close_shard(self) -> None:
        if self._tar is None:
            return
        self._tar.close()
        target = self.directory / self.pattern.format(index=self._shards)
        fsync_path(self._tmp)
        os.replace(self._tmp, target)
        self.paths.append(target)
        self._tar = self._tmp = None
        self._shards += 1

    def _item_json(self, tree: Any, i: int, samples: int, channels: int) -> dict:
        meta: dict[str, Any] = {"sample_rate": int(tree.sample_rate), "channels": channels, "samples": samples}
        metadata = tree.provenance
        for name in ("filepath", "source"):
            if name in metadata:
                values = getattr(tree, name)
                if values is not None and len(values) > i:
                    meta[name] = values[i]
        if metadata.get("offset") is not None:
            value = _scalar(metadata["offset"], i)
            if value is not None:
                meta["offset"] = value
        if getattr(tree, "lufs", None) is not None:
            value = _scalar(tree.lufs, i)
            if value is not None:
                meta["lufs"] = value
        for key, value in stored_extras(tree.extras).items():
            scalar = _scalar(value, i)
            if scalar is not None:
                meta[str(key)] = scalar
        return meta

    def write(self, tree: Any) -> None:
        """Appends the batch's items (``lengths``, when set, trims each item's padding)."""
        import soundfile

        waveform = np.asarray(tree.waveform)
        batch, channels, total = (int(d) for d in waveform.shape)
        lengths = None if tree.lengths is None else np.asarray(tree.lengths).reshape(-1)
        for i in range(batch):
            if self._tar is None:
                self._open_shard()
            samples = int(lengths[i]) if lengths is not None else total
            encoded = io.BytesIO()
            soundfile.write(encoded, np.ascontiguousarray(waveform[i, :, :samples].T), int(tree.sample_rate),
                            format="FLAC", subtype=self.subtype)
            key = f"{self.key_prefix}{self._count:09d}"
            self._add(f"{key}.flac", encoded.getvalue())
            meta = self._item_json(tree, i, samples, channels)
            self._add(f"{key}.json", json.dumps(meta, sort_keys=True).encode("utf-8"))
            self._count += 1
            self._in_shard += 1
            if self._in_shard >= self.items_per_shard:
                self._close_shard()

    def close(self) -> None:
        """Finishes the shard in progress (renamed into place) and syncs the folder."""
        self._close_shard()
        fsync_dir(self.directory)

    def abort(self) -> None:
        """Drops the shard in progress (its temporary file); finished shards stay."""
        if self._tar is not None:
            self._tar.close()
            if self._tmp is not None and self._tmp.exists():
                self._tmp.unlink()
            self._tar = self._tmp = None

    def __enter__(self) -> "WebDatasetWriter":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
