"""Command lines that library messages print: the ``audiotree`` command's spelling of library settings.

A stale index is an error that names the exact ``audiotree index ...`` that
refreshes it, whichever way the index was built. The reader of an index knows
the build settings (its metadata); how the command line spells them is the
CLI's business, kept here, in one place that imports neither click nor the
CLI, and checked against the ``audiotree index`` options by
``tests/index/test_refresh_command.py``.

>>> index_refresh_command("/data/corpus.parquet", {"sources": {"pool": ["/data/wav"], "segments": "seg.csv"}})
'audiotree index /data/wav --out /data/corpus.parquet --segments seg.csv'
"""

from __future__ import annotations

import os
import shlex

from audiotree.io.byte_paths import is_url

__all__ = ["index_refresh_command", "store_delete_command", "INDEX_SETTING_FLAGS", "INDEX_REPEATED_FLAGS", "INDEX_SWITCHES"]

#: ``audiotree index`` options that carry one build setting each: ``(flag, key in the index's "sources")``.
INDEX_SETTING_FLAGS = (("--labels", "labels"), ("--labels-key", "labels_key"), ("--labels-match", "labels_match"),
                       ("--labels-root", "labels_root"), ("--labels-missing", "labels_missing"), ("--root", "root"),
                       ("--segments", "segments"))
#: Options given once per value (``--text-columns a --text-columns b``).
INDEX_REPEATED_FLAGS = (("--text-columns", "text_columns"), ("--numeric-columns", "numeric_columns"))
#: The loudness switches the command line may carry.
INDEX_SWITCHES = ("--no-loudness", "--stereo")


def index_refresh_command(index_path: str, meta: dict) -> str:
    """The ``audiotree index`` command line that refreshes ``index_path``, from its metadata ``meta``.

    Groups become ``GROUP=SOURCE`` arguments, the pool plain ones (``SOURCES...``
    when the index records none); a local ``index_path`` is made absolute. Every
    argument is shell-quoted.
    """
    sources = meta.get("sources") or {}
    args = ["audiotree", "index"]
    for group, entries in (sources.get("groups") or {}).items():
        args += [f"{group}={e}" for e in entries]
    args += list(sources.get("pool") or [])
    if len(args) == 2:
        args.append("SOURCES...")
    args += ["--out", index_path if is_url(index_path) else os.path.abspath(index_path)]
    for flag, key in INDEX_SETTING_FLAGS:
        value = sources.get(key)
        if key == "labels_missing" and value == "error":  # indexes built before the word became "raise"
            value = "raise"
        if value:
            args += [flag, str(value)]
    for flag, key in INDEX_REPEATED_FLAGS:
        for column in sources.get(key) or ():
            args += [flag, column]
    loud = meta.get("loudness") or {}
    if not loud.get("enabled", True):
        args.append("--no-loudness")
    elif loud.get("mono") is False:
        args.append("--stereo")
    return " ".join(shlex.quote(a) for a in args)


def store_delete_command(folder: str) -> str:
    """The shell command that deletes a column store's folder (a cache the next dataset writes again).

    >>> store_delete_command("/data/corpus.parquet.columns/g2-ab12")
    'rm -rf -- /data/corpus.parquet.columns/g2-ab12'
    """
    return " ".join(shlex.quote(a) for a in ("rm", "-rf", "--", os.path.abspath(folder)))
