"""What a byte-layer name is: a URL of remote storage or a local path (the lowest module of the byte layer).

It imports nothing (no fsspec, no other module of :mod:`audiotree.io`), so
low modules such as :mod:`audiotree.commands` can tell a URL from a path
without loading the storage layer.

>>> is_url("s3://bucket/a.wav"), is_url("/data/a.wav"), is_url("file:///data/a.wav")
(True, False, False)
"""

from __future__ import annotations

import os
import re

__all__ = ["is_url", "local_path", "join", "protocol"]

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


def is_url(path: str | os.PathLike) -> bool:
    """Whether ``path`` names remote (non-local) storage: ``proto://...`` other than ``file://``.

    >>> is_url("gs://b/x.flac"), is_url("local:///x.flac"), is_url(b"s3://x")
    (True, False, False)
    """
    if not isinstance(path, str):
        return False
    m = _URL.match(path)
    return m is not None and m.group(1).lower() not in ("file", "local")


def local_path(path: str | os.PathLike) -> str:
    """``path`` as a local path string: ``file://`` and ``local://`` prefixes removed.

    >>> local_path("file:///data/a.wav")
    '/data/a.wav'
    """
    path = os.fsdecode(path)
    m = _URL.match(path)
    if m is not None and m.group(1).lower() in ("file", "local"):
        return path[m.end():]
    return path


def join(url: str, relative: str) -> str:
    """``relative`` (``/``-separated, may hold ``..``) resolved against the folder URL ``url``.

    >>> join("s3://bucket/corpus/index", "../audio")
    's3://bucket/corpus/audio'
    """
    import posixpath

    scheme, rest = url.split("://", 1)
    return f"{scheme}://{posixpath.normpath(posixpath.join(rest, relative))}"


def protocol(url: str) -> str:
    """The lower-cased protocol of a URL (``"s3"`` for ``s3://b/k``); ``"file"`` for a local path.

    >>> protocol("S3://b/k"), protocol("/x")
    ('s3', 'file')
    """
    m = _URL.match(url)
    return "file" if m is None else m.group(1).lower()
