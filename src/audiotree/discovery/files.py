"""Finding audio files: folders (recursive), globs with ``**``, single files, and the members of containers."""

from __future__ import annotations

import collections
import glob
import os
import warnings
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence, Union

from audiotree.io import storage
from audiotree.io.read_errors import handle_read_error

if TYPE_CHECKING:
    from audiotree.discovery.containers import ContainerItems

__all__ = ["find_audio_files", "SourceSpec", "source_pairs"]

SourceSpec = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

# Extensions of audio formats in the wild, decodable here or not. Skipping one
# of these is worth a warning; skipping a ``.txt`` or ``.json`` sidecar is not.
_AUDIO_LIKE = frozenset(
    ".wav .wave .flac .mp3 .ogg .oga .opus .aif .aiff .aifc .caf .w64 .rf64 .au .snd "
    ".m4a .m4b .aac .mp4 .wma .webm .mka .ape .wv .alac .amr .ac3 .dts .mp2 .spx".split()
)
_GLOB_MAGIC = ("*", "?", "[")
_COMPRESSED_TARS = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst")


def _normalize_extensions(extensions: Iterable[str] | None) -> frozenset[str]:
    from audiotree.io.extensions import normalize_extension, supported_extensions

    if extensions is None:
        return frozenset(supported_extensions())
    if isinstance(extensions, str):
        extensions = [extensions]
    return frozenset(normalize_extension(e) for e in extensions)


def _as_list(sources: SourceSpec) -> list[str]:
    if isinstance(sources, (str, os.PathLike)):
        return [os.fspath(sources)]
    out: list[str] = []
    for entry in sources:
        out.extend(_as_list(entry))  # nested lists of folders are flattened
    return out


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _walk(directory: str) -> Iterable[str]:
    """Files below ``directory``; follows symlinked folders, but each real folder once."""
    seen: set[tuple[int, int]] = set()
    for root, dirs, files in os.walk(directory, followlinks=True):
        try:
            stat = os.stat(root)
        except OSError:
            continue
        if (stat.st_dev, stat.st_ino) in seen:  # a link back into the tree: already listed
            dirs[:] = []
            continue
        seen.add((stat.st_dev, stat.st_ino))
        dirs[:] = sorted(d for d in dirs if not _is_hidden(d))
        for name in files:
            if not _is_hidden(name):
                yield os.path.join(root, name)


def _named_member(url: str, wanted: frozenset[str], found: set[str], skipped: collections.Counter,
                  examples: dict[str, str]) -> int:
    """Adds a source entry that is a member URL, as a named file is added; 1 if added, else 0 (skipped).

    Its member's name (a tar member's) must have a wanted extension; a local
    container that does not exist raises ``FileNotFoundError``, as a missing file does.
    """
    from audiotree.io.members import format_name, local_container

    try:
        container = local_container(url)
    except ValueError as exc:
        raise ValueError(f"Audio source '{url}': {exc}") from None
    if container is not None and not os.path.exists(container):
        raise FileNotFoundError(f"Audio source '{url}' is in '{container}', which does not exist; check the path.")
    name = format_name(url)
    ext = os.path.splitext(name)[1].lower()
    if name and ext not in wanted:
        if ext in _AUDIO_LIKE:
            skipped[ext] += 1
            examples.setdefault(ext, url)
        return 0
    found.add(url)
    return 1


def discover(
    sources: SourceSpec, extensions: Iterable[str] | None, *, strict: bool, on_read_error: str = "raise",
    audio_column: str | None = None, containers: "ContainerItems | None" = None,
) -> tuple[list[str], dict[str, int]]:
    """Returns (sorted unique files, files found per source entry).

    Entries may use webdataset's brace syntax (``train-{000..099}.tar``). A
    ``.tar`` shard or ``.parquet`` file found is looked into: its items are
    member URLs (:mod:`audiotree.discovery.containers`), kept in their order in
    the container. A fault met while listing a shard (a corrupt header, a
    duplicate key) is an ``AudioReadError`` handled by ``on_read_error``, or
    collected in ``containers`` (with the sidecar labels) when it is given.

    A folder or file that does not exist raises ``FileNotFoundError``. A source
    that yields no audio raises ``RuntimeError`` when ``strict``, else warns.
    """
    from audiotree.io.members import is_member, order_key
    from audiotree.discovery.containers import ContainerItems, expand_braces, expand_container, is_container

    wanted = _normalize_extensions(extensions)
    found: set[str] = set()
    per_source: dict[str, int] = {}
    skipped: collections.Counter[str] = collections.Counter()
    skipped_example: dict[str, str] = {}
    box = containers if containers is not None else ContainerItems()
    compressed: list[str] = []
    for entry in _as_list(sources):
        count = 0
        container_paths: list[str] = []
        for sub in expand_braces(entry):
            if is_member(sub):  # one item named by its member URL (tar://MEMBER::SHARD, parquet://...::FILE)
                expanded = sub
                count += _named_member(sub, wanted, found, skipped, skipped_example)
                continue
            if storage.is_url(sub):
                expanded = sub
                glob_like = any(ch in sub.split("://", 1)[1] for ch in _GLOB_MAGIC)
                # A named shard is read, not listed: its headers are fetched next (a missing one is named then).
                remote = [sub] if is_container(sub) and not glob_like else storage.list_files(sub)
            else:
                expanded = os.path.expandvars(os.path.expanduser(storage.local_path(sub)))
                remote = None
            if remote is not None:
                matches = remote
            elif any(ch in expanded for ch in _GLOB_MAGIC):
                matches = sorted(glob.glob(expanded, recursive=True))
            elif os.path.exists(expanded):
                matches = [expanded]
            else:
                raise FileNotFoundError(
                    f"Audio source '{sub}' does not exist"
                    + (f" (expanded to '{expanded}')" if expanded != sub else "")
                    + "; check the path."
                )
            for match in matches:
                candidates = [match] if remote is not None or not os.path.isdir(match) else _walk(match)
                for path in candidates:
                    if _is_hidden(os.path.basename(path)):
                        continue
                    ext = os.path.splitext(path)[1].lower()
                    if is_container(path):
                        container_paths.append(path)
                    elif path.lower().endswith(_COMPRESSED_TARS):
                        compressed.append(path)
                    elif ext in wanted:
                        found.add(path)
                        count += 1
                    elif ext in _AUDIO_LIKE:
                        skipped[ext] += 1
                        skipped_example.setdefault(ext, path)
        if container_paths:
            before = len(box.items)
            expand_container(container_paths, wanted, box, audio_column=audio_column,
                             with_labels=containers is not None)
            new_items = box.items[before:]
            found.update(new_items)
            count += len(new_items)
        per_source[entry] = count
        if count == 0:
            message = (
                f"Audio source '{entry}' contains no files with extensions {sorted(wanted)}"
                + (f" (expanded to '{expanded}')" if expanded != entry else "")
                + "."
            )
            if strict:
                raise RuntimeError("No audio files found: " + message + " Point it at a folder of audio files or pass extensions=.")
            warnings.warn(message, UserWarning, stacklevel=3)
    if compressed:
        warnings.warn(f"Skipped {len(compressed)} compressed tar shard(s) (e.g. '{storage.redact(compressed[0])}'): a "
                      "compressed tar cannot be read by ranged reads. Decompress them to .tar (gunzip / zstd -d) to "
                      "read them in place.", UserWarning, stacklevel=3)
    if containers is None:
        for problem in box.problems:
            handle_read_error(problem, on_read_error)
    if skipped:
        detail = ", ".join(f"{n} {ext} (e.g. '{skipped_example[ext]}')" for ext, n in sorted(skipped.items()))
        hint = (
            "install the 'av' extra (pip install 'audiotree[av]') to decode them"
            if any(ext not in _normalize_extensions(None) for ext in skipped)
            else "pass extensions= to include them"
        )
        warnings.warn(f"Skipped audio files not in extensions {sorted(wanted)}: {detail}; {hint}.", UserWarning, stacklevel=3)
    return sorted(found, key=order_key), per_source


def find_audio_files(sources: SourceSpec, extensions: Iterable[str] | None = None) -> list[str]:
    """Lists audio files under ``sources``, sorted and de-duplicated.

    Args:
      sources: a folder, file or glob (``**`` allowed), or a list of them;
        ``~`` and ``$VARS`` are expanded. A URL (``s3://bucket/prefix``,
        ``gs://...``, ``https://...``) is listed through fsspec: a prefix
        recursively, a glob by pattern (see :mod:`audiotree.io.storage`). Folders are walked recursively; hidden
        files and folders (leading dot) are skipped.
      extensions: extensions to keep, case-insensitive, dot optional. Default:
        every format the installed decoders read (soundfile, plus PyAV's if
        installed). Skipped audio-like files are reported in one warning.

    Returns:
      Paths as discovered (absolute if the source was), in sorted order, so the
      result is identical across machines for the same tree.

    Raises:
      FileNotFoundError: a non-glob source does not exist.
    """
    files, _ = discover(sources, extensions, strict=False)
    return files


def source_pairs(sources: Any) -> list[tuple[str | None, str]]:
    """``(group, entry)`` pairs of ``sources``: ``{group: entries}``, or entries with no group (``None``).

    Entries are folders, files, globs or URLs (one or a list per group); the
    order is kept. What ``audiotree index`` and ``audiotree scan`` both take.

    >>> source_pairs({"speech": ["a", "b"], "music": "m"})
    [('speech', 'a'), ('speech', 'b'), ('music', 'm')]
    >>> source_pairs("corpus/")
    [(None, 'corpus/')]
    """
    if isinstance(sources, Mapping):
        pairs: list[tuple[str | None, str]] = []
        for group, entries in sources.items():
            if not isinstance(group, str) or not group:
                raise ValueError(f"Group names must be non-empty strings, got {group!r}.")
            items = [entries] if isinstance(entries, (str, os.PathLike)) else list(entries)
            pairs += [(group, os.fspath(e)) for e in items]
    else:
        items = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
        pairs = [(None, os.fspath(e)) for e in items]
    if not pairs:
        raise ValueError("sources is empty; give at least one folder, file or glob.")
    return pairs
