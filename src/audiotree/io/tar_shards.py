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
parse (bad checksum, garbage), a header cut off by the end of the file, a
shard that ends without its end-of-archive blocks (cut exactly between two
members: later members may be lost; the members before the cut are listed),
a sparse member (GNU or PAX sparse format: its stored bytes are not the
file's bytes, so it is refused rather than read as contiguous bytes), a hard
link whose target is not an earlier member, and a key seen twice in one
shard. A member whose recorded size runs past the end of the shard is listed
(its read fails, naming it; see :mod:`audiotree.io.members`).

A hard link is listed as a member of its own name over its target's bytes
(what extracting the shard would give). Symbolic links and device or FIFO
entries are counted in ``skipped``; directories are left out.

>>> split_key("speaker1/utt-0001.flac")
('speaker1/utt-0001', 'flac')
"""

from __future__ import annotations

import collections
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
    #: Entries that are not files and not listed, by kind (``"(symbolic link)"``, ``"(device or FIFO)"``).
    skipped: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: The fault of each member that is refused (a sparse member, a hard link to nothing), by member name.
    refused: Mapping[str, AudioReadError] = dataclasses.field(default_factory=dict)


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


def _refusal(shard: str, name: str, offset: int, what: str, todo: str) -> AudioReadError:
    shown = storage.redact(shard)
    return AudioReadError(f"Failed to read tar shard '{shown}': member '{name}' (header at byte {offset}) {what}. "
                          f"{todo}, or use on_read_error=\"skip\" to skip it.", shown)


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
    skipped: collections.Counter = collections.Counter()
    refused: dict[str, AudioReadError] = {}
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
                    # The shard ends inside the last member: it is listed, and its read fails naming it (an
                    # item-level fault, through on_read_error). Cut in its padding, its bytes are all there: the
                    # shard was cut between members (checked as such below).
                    last = members[-1]
                    stop = size if last.offset + last.size <= size else -1
                    break
                # A pax/GNU extension header whose payload is bad.
                problems.append(_fault(shard, f"the header at byte {archive.offset} does not parse ({exc})"))
                stop = -1
                break
            if info is None:
                stop = archive.offset
                break
            _add_entry(shard, info, members, skipped, refused)
        if stop >= 0:
            _check_end(handle, shard, stop, size, problems, bool(members or skipped or refused))
    finally:
        handle.close()
    problems[:0] = refused.values()
    members = _without_duplicates(shard, members, problems)
    return ShardListing(shard, size, mtime, tuple(members), tuple(problems), dict(skipped), refused)


def _add_entry(shard: str, info: tarfile.TarInfo, members: list[TarMember], skipped: collections.Counter,
               refused: dict[str, AudioReadError]) -> None:
    """Lists one tar entry: a file, a hard link (over its target's bytes), or counts/refuses it."""
    if info.issparse():
        refused[info.name] = _refusal(
            shard, info.name, info.offset, f"is a sparse file ({'PAX' if info.pax_headers else 'GNU'} sparse format): "
            f"its {info.size} bytes are stored as data segments with holes, not as one run of bytes",
            "Re-create the shard without --sparse (-S)")
    elif info.isreg():
        members.append(TarMember(info.name, int(info.offset_data), int(info.size)))
    elif info.islnk():
        target = next((m for m in reversed(members) if m.name in (info.linkname, info.linkname.lstrip("/"))), None)
        if target is None:
            refused[info.name] = _refusal(
                shard, info.name, info.offset, f"is a hard link to '{info.linkname}', which is not an earlier file "
                "in the shard", "Re-create the shard with the file itself (tar --hard-dereference)")
        else:
            members.append(TarMember(info.name, target.offset, target.size))
    elif info.issym():
        skipped["(symbolic link)"] += 1
    elif not info.isdir():
        skipped["(device or FIFO)"] += 1


def _check_end(handle: Any, shard: str, offset: int, size: int, problems: list[AudioReadError],
               entries: bool) -> None:
    """Where tarfile stopped must be the end of the archive (zero blocks).

    Why: tarfile ends a listing quietly at a header that fails its checksum
    (after the first member), which would drop the rest of the shard unseen;
    and quietly at the end of the file, which is where a shard cut between two
    members (a writer killed, a copy cut short) ends: the members after the cut
    are gone, and only the missing end-of-archive blocks say so.
    """
    if offset >= size:
        if entries:
            problems.append(_fault(shard, f"the shard ends at byte {size}, right after a member, without the "
                                          "end-of-archive blocks every tar writer adds when it finishes; members "
                                          "after that point may be missing (the ones listed are complete)"))
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
