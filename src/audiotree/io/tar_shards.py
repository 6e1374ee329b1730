"""Listing the members of a tar shard from its 512-byte headers, local or remote.

A webdataset shard is a plain (uncompressed) tar: each member is a 512-byte
header followed by its bytes, padded to 512. The stdlib :mod:`tarfile` parses
the headers (ustar, GNU long names, pax); it skips member data with a seek,
so over a URL only the headers are fetched, by ranged reads of a few KiB
(:class:`~audiotree.io.byte_range.RemoteSpan`), never the whole shard.

Keys follow webdataset: a member's key is its path up to the first dot of
its file name (``a/b/utt1.flac`` and ``a/b/utt1.json`` share the key
``a/b/utt1``), and a key's members are adjacent in the shard.

Faults are reported as :class:`~audiotree.errors.AudioReadError` naming the
shard and the member (or the header's byte offset): a header that does not
parse (bad checksum, garbage), a header cut off by the end of the file, and a
key seen twice in one shard. A member whose recorded size runs past the end
of the shard is listed (its read fails, naming it; see
:mod:`audiotree.io.members`).

>>> split_key("speaker1/utt-0001.flac")
('speaker1/utt-0001', 'flac')
"""

from __future__ import annotations

import dataclasses
import os
import tarfile
from typing import Any, Mapping

from audiotree.errors import AudioReadError
from audiotree.io import storage
from audiotree.io.byte_range import MemberInput, RemoteSpan

__all__ = ["TarMember", "ShardListing", "list_shard", "split_key", "HEADER_BLOCK"]

#: Bytes per tar block; a header is one block.
HEADER_BLOCK = 512
#: Bytes fetched per header request over a URL: one header plus the start of
#: the next members' headers when members are small.
_HEADER_FETCH = 8 * 1024


@dataclasses.dataclass(frozen=True)
class TarMember:
    """One regular file in a shard: its name, and its bytes ``[offset, offset + size)`` in the shard."""

    name: str
    offset: int
    size: int

    @property
    def key(self) -> str:
        return split_key(self.name)[0]

    @property
    def extension(self) -> str:
        return split_key(self.name)[1]


@dataclasses.dataclass(frozen=True)
class ShardListing:
    """The members of one shard in their order, and the faults met while listing it."""

    shard: str
    size: int
    mtime_ns: int
    members: tuple[TarMember, ...]
    problems: tuple[AudioReadError, ...] = ()


def split_key(name: str) -> tuple[str, str]:
    """``(key, extension)`` of a member name, as webdataset groups them (split at the file name's first dot)."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), (ext.lower() if dot else "")


def _fault(shard: str, what: str) -> AudioReadError:
    shown = storage.redact(shard)
    return AudioReadError(
        f"Failed to read tar shard '{shown}': {what}. The shard is corrupt or was cut off while being written or "
        "copied; re-create it, or use on_read_error=\"skip\" to skip what cannot be read.", shown)


def _open(shard: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, int, int]:
    if storage.is_url(shard):
        size, mtime = storage.stat(shard, storage_options=storage_options)
        # Headers only: small fetches at each member's header, never the members' bytes.
        span = RemoteSpan(shard, 0, size, storage_options, head=_HEADER_FETCH, fetch=_HEADER_FETCH)
        return MemberInput(shard, span, 0, size), size, mtime
    path = storage.local_path(shard)
    st = os.stat(path)
    return open(path, "rb"), int(st.st_size), int(st.st_mtime_ns)


def list_shard(shard: str, *, storage_options: Mapping[str, Any] | None = None) -> ShardListing:
    """The regular-file members of the tar at ``shard`` (a path or URL), with the faults found.

    Directories, links and other non-file entries are left out. Listing stops
    at a header that does not parse; that fault (naming its byte offset) is in
    ``problems``, with any key that occurs twice.

    Raises:
      FileNotFoundError: a local shard does not exist.
      AudioReadError: a remote shard cannot be reached, or the file is not a tar at all.
    """
    handle, size, mtime = _open(shard, storage_options)
    members: list[TarMember] = []
    problems: list[AudioReadError] = []
    try:
        try:
            archive = tarfile.open(fileobj=handle, mode="r:")
        except tarfile.ReadError as exc:
            if size == 0:
                raise _fault(shard, "the file is empty (0 bytes)") from exc
            raise _fault(shard, f"the first header does not parse as tar ({exc})") from exc
        stop = 0
        while True:
            try:
                info = archive.next()
            except tarfile.ReadError as exc:
                if "unexpected end of data" in str(exc) and members:
                    # The shard ends inside the last member: it is listed, and its read
                    # fails naming it (an item-level fault, through on_read_error).
                    stop = -1
                    break
                # A pax/GNU extension header whose payload is bad.
                problems.append(_fault(shard, f"the header at byte {archive.offset} does not parse ({exc})"))
                stop = -1
                break
            if info is None:
                stop = archive.offset
                break
            if info.isreg():
                members.append(TarMember(info.name, int(info.offset_data), int(info.size)))
        if stop >= 0:
            _check_end(handle, shard, stop, size, problems)
    finally:
        handle.close()
    members = _without_duplicates(shard, members, problems)
    return ShardListing(shard, size, mtime, tuple(members), tuple(problems))


def _check_end(handle: Any, shard: str, offset: int, size: int, problems: list[AudioReadError]) -> None:
    """Where tarfile stopped must be the end of the archive (zero blocks) or of the file.

    Why: tarfile ends a listing quietly at a header that fails its checksum
    (after the first member), which would drop the rest of the shard unseen.
    """
    if offset >= size:
        return
    handle.seek(offset)
    block = handle.read(HEADER_BLOCK)
    if not block.strip(b"\0"):
        return  # the end-of-archive marker
    if len(block) < HEADER_BLOCK:
        problems.append(_fault(shard, f"the header at byte {offset} is cut off by the end of the file "
                                      f"({len(block)} of {HEADER_BLOCK} bytes)"))
        return
    problems.append(_fault(shard, f"the header at byte {offset} does not parse (bad checksum or not a tar header); "
                                  "members from there on cannot be listed"))


def _without_duplicates(shard: str, members: list[TarMember], problems: list[AudioReadError]) -> list[TarMember]:
    """Members with each key's first group kept; a key met again later (or a name twice) is a fault."""
    seen_names: dict[str, int] = {}
    closed_keys: set[str] = set()
    current = None
    out = []
    for member in members:
        key = member.key
        if key != current:
            if current is not None:
                closed_keys.add(current)
            current = key
        if member.name in seen_names or key in closed_keys:
            first = seen_names.get(member.name)
            where = f"byte {first}" if first is not None else "an earlier group"
            problems.append(AudioReadError(
                f"Failed to read tar shard '{storage.redact(shard)}': member '{member.name}' at byte {member.offset} "
                f"repeats the key '{key}' (first seen at {where}); webdataset keys must be unique in a shard. The "
                "second copy is left out; de-duplicate the shard, or use on_read_error=\"skip\".",
                storage.redact(shard)))
            continue
        seen_names[member.name] = member.offset
        out.append(member)
    return out
