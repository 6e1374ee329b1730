"""Writer output on object storage (``s3://``, ``gs://``, ...): stage locally, upload finished files.

Object stores have no rename and no partial writes, and the writers rely on
both (``os.replace`` commits, ``pwrite`` into preallocated files, ``fsync``).
So a writer given a URL writes into a local staging folder exactly as it would
on disk, and :class:`RemoteOutput` uploads each finished piece: a writer's
whole folder when it closes, a render's part when it is recorded, and the
render record only after the parts it names. A reader of the URL therefore
never sees a record naming something that is not there. Storage options come
from ``storage_options=`` and the backends' environment variables (see
:mod:`audiotree.io.storage`).

Reading back: the readers read URLs in place (:mod:`audiotree.io.ranges`);
:func:`fetch_folder` copies a whole remote folder to a local cache for tools
that need local files; files already cached with the same version are not
fetched again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from audiotree.fs import private_temp_folder
from audiotree.io import storage
from audiotree.io.ranges import default_cache_dir
from audiotree.writers.writer_options import refuse_existing

__all__ = ["RemoteOutput", "fetch_folder", "staged", "upload_folder"]


class RemoteOutput:
    """A local staging folder mirroring the remote folder ``url``.

    ``local`` is where writers write. :meth:`push` uploads a finished file or
    folder (relative name) and, for a folder, frees its local copy;
    :meth:`pull` fetches one remote file into ``local`` when it exists (a
    render record to resume from). :meth:`close` removes the staging folder.

    >>> out = RemoteOutput("memory://doc/out")
    >>> _ = (out.local / "a.txt").write_text("hi")
    >>> out.push("a.txt"); out.close()
    >>> storage.filesystem("memory://").cat_file("memory://doc/out/a.txt")
    b'hi'
    """

    def __init__(self, url: str, *, storage_options: Mapping[str, Any] | None = None) -> None:
        if not storage.is_url(url):
            raise ValueError(f"RemoteOutput needs a URL (s3://, gs://, ...), got {url!r}.")
        self.url = url.rstrip("/")
        self.storage_options = dict(storage_options or {})
        # Removed by close(), else when this object is collected or the process exits (a writer never closed).
        self.local = private_temp_folder("audiotree-out-", owner=self)

    def remote(self, name: str) -> str:
        return f"{self.url}/{name}"

    def pull(self, name: str) -> bool:
        """Downloads ``url/name`` to ``local/name`` if it exists; whether it did."""
        target = self.remote(name)
        storage.forget_listings(target, storage_options=self.storage_options)
        if not storage.exists(target, storage_options=self.storage_options):
            return False
        (self.local / name).parent.mkdir(parents=True, exist_ok=True)
        storage.download(target, self.local / name, storage_options=self.storage_options)
        return True

    def names(self) -> set[str]:
        """The names directly under ``url`` (files and folders), listed now: one request."""
        storage.forget_listings(self.url, storage_options=self.storage_options)
        if not storage.exists(self.url, storage_options=self.storage_options):
            return set()
        fs = storage.filesystem(self.url, self.storage_options)
        return {name.rstrip("/").rsplit("/", 1)[-1] for name in fs.ls(self.url, detail=False)}

    def push(self, name: str, *, keep: bool = False) -> None:
        """Uploads ``local/name`` (a file, or a folder recursively) to ``url/name``."""
        source = self.local / name
        storage.upload(source, self.remote(name), storage_options=self.storage_options)
        if source.is_dir() and not keep:
            shutil.rmtree(source)

    def publish_render(self, record: dict, record_name: str) -> None:
        """Uploads the recorded parts not yet uploaded, then the record naming them (in that order)."""
        pushed = self.__dict__.setdefault("_pushed", set())
        for part in record.get("parts", []):
            name = part["dir"]
            if name in pushed:
                continue
            if (self.local / name).is_dir():
                self.push(name)
            pushed.add(name)  # or it was recorded by an earlier run, and uploaded then
        self.push(record_name)

    def clear_render(self, record_name: str) -> None:
        """Deletes a previous render's record and parts at the URL (``--overwrite``), nothing else."""
        fs = storage.filesystem(self.url, self.storage_options)
        storage.forget_listings(self.url, storage_options=self.storage_options)
        if not storage.exists(self.url, storage_options=self.storage_options):
            return
        for name in fs.ls(self.url, detail=False):
            base = name.rstrip("/").rsplit("/", 1)[-1]
            if base == record_name or base.startswith("part-"):
                fs.rm(name, recursive=True)

    def finish(self, *, last: tuple[str, ...] = ()) -> None:
        """Uploads every staged file (``last`` ones after the rest), deletes remote files not staged, cleans up.

        ``last`` names the files that make a dataset visible (its manifest or
        index): uploaded after the data they describe. Remote files the new
        output does not have (a replaced dataset's leftovers) are deleted.
        """
        try:
            names = upload_folder(self.local, self.url, last=last, storage_options=self.storage_options)
            storage.forget_listings(self.url, storage_options=self.storage_options)
            if storage.exists(self.url, storage_options=self.storage_options):
                fs = storage.filesystem(self.url, self.storage_options)
                for remote in storage.list_files(self.url, storage_options=self.storage_options):
                    if remote.startswith(self.url + "/") and remote[len(self.url) + 1:] not in names:
                        fs.rm(remote)
        finally:  # a failed upload cannot be resumed from here: the staged files go either way
            self.close()

    def remove(self, name: str) -> None:
        """Deletes ``url/name`` (recursively) if it exists."""
        target = self.remote(name)
        fs = storage.filesystem(target, self.storage_options)
        if storage.exists(target, storage_options=self.storage_options):
            fs.rm(target, recursive=True)

    def close(self) -> None:
        shutil.rmtree(self.local, ignore_errors=True)

    def __enter__(self) -> "RemoteOutput":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def upload_folder(local: str | os.PathLike, url: str, *, last: tuple[str, ...] = (),
                  storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """Uploads every file under ``local`` to ``url`` (same relative names), files named in ``last`` after the rest.

    ``last`` names the files that make a dataset visible (its manifest or
    index), so a reader never finds one before the data it describes.
    Returns the relative names uploaded.
    """
    local = Path(local)
    names = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    for name in sorted(names, key=lambda n: n.rsplit("/", 1)[-1] in last):
        storage.upload(local / name, f"{url.rstrip('/')}/{name}", storage_options=storage_options)
    return names


def staged(directory: str | os.PathLike, *, storage_options: Mapping[str, Any] | None, markers: tuple[str, ...],
           exist_ok: bool, what: str) -> tuple[Path, RemoteOutput | None]:
    """A writer's folder: the local path itself, or a staging folder for a URL (with its RemoteOutput).

    Raises ``FileExistsError`` when the URL already holds one of ``markers``
    (a dataset) and ``exist_ok`` is false, as a local folder would.
    """
    directory = os.fspath(directory)
    if not storage.is_url(directory):
        return Path(directory), None
    remote = RemoteOutput(directory, storage_options=storage_options)
    if not exist_ok:
        found = [m for m in markers if storage.exists(remote.remote(m), storage_options=remote.storage_options)]
        if found:
            remote.close()
            refuse_existing(storage.redact(directory), what, found, exist_ok=False)
    return remote.local, remote


def fetch_folder(url: str, *, cache_dir: str | os.PathLike | None = None,
                 storage_options: Mapping[str, Any] | None = None) -> Path:
    """A local copy of the remote folder ``url`` (under ``cache_dir``), for readers that memory-map.

    Every object under ``url`` is downloaded unless the cache already holds
    that version of it (same size, modification time and ETag, recorded in the
    copy's ``.fetched.json``); the copy's folder is named after a hash of the
    URL. Cached files no longer under ``url`` are removed.

    Raises:
        FileNotFoundError: nothing exists at ``url`` (names it).
    """
    import json

    url = url.rstrip("/")
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    local = base / "remote" / hashlib.sha256(url.encode()).hexdigest()[:24]
    record = local / ".fetched.json"
    try:
        fetched = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        fetched = {}
    now = {}
    storage.forget_listings(url, storage_options=storage_options)
    for remote in storage.list_files(url, storage_options=storage_options):
        rel = remote[len(url) + 1:] if remote.startswith(url + "/") else remote.rsplit("/", 1)[-1]
        version = list(storage.version(remote, storage_options=storage_options))
        target = local / rel
        now[rel] = version
        if fetched.get(rel) == version and target.is_file() and target.stat().st_size == version[0]:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.download")
        storage.download(remote, tmp, storage_options=storage_options)
        os.replace(tmp, target)
    for rel in set(fetched) - set(now):
        with contextlib.suppress(OSError):
            (local / rel).unlink()
    local.mkdir(parents=True, exist_ok=True)
    tmp = record.with_name(".fetched.json.tmp")
    tmp.write_text(json.dumps(now), encoding="utf-8")
    os.replace(tmp, record)
    return local
