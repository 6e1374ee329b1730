"""Big corpus indexes made from a small real one, for the scale benchmarks.

``real_index`` writes ~100 real audio files (``benchmarks/corpus.py``: speech,
music and effects; WAV, FLAC, MP3 and OGG; 16 to 48 kHz; 0.4 s to 2 min, a
third of the longer ones mostly silent) and indexes them with
``audiotree.index.build_index``, loudness profiles included, exactly as
``audiotree index`` would.

``repeat_index`` writes an index of ``rows`` rows whose row ``i`` is a copy of
row ``i % n`` of that real index: every column and the file metadata as
``build_index`` wrote them, whatever they are (so a change to the index's
layout is measured as soon as ``build_index`` writes it). Only ``path``
changes: row ``i`` points at its own hard link to the real file
(``links/DDDDD/IIIIIIII-NAME``, same inode, so the stored size and mtime stay
exact and every staleness check passes), or, where the file system or the
disk cannot hold that many links, at the real file itself (repeated paths).
The table is written with pyarrow, a row group at a time, with no per-row
Python except ``os.link``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: ~100 files: 32 per group (half under 2 s, a quarter 2 to 30 s, a quarter 30 to 120 s).
BASE_FILES_PER_GROUP = 32
#: The most hard links made by default; above it, rows repeat the real paths.
MAX_LINKS = 1_000_000
_PER_FOLDER = 1000
_ROW_GROUP = 65_536  # what build_index writes (rows per Parquet row group)


def real_index(work: Path, *, files_per_group: int = BASE_FILES_PER_GROUP, quick: bool = False, log=print) -> Path:
    """The real corpus under ``work/base`` and its index ``work/base.parquet`` (rebuilt incrementally)."""
    import corpus as corpus_mod

    from audiotree.index import build_index

    spec = corpus_mod.QUICK_SPEC if quick else corpus_mod.BenchCorpusSpec(files_per_group=files_per_group)
    folders = corpus_mod.build_corpus(work / "base", spec, log=log)
    out = work / "base.parquet"
    build_index(folders, out, executor="serial", show_progress=False)
    return out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def link_budget(paths: list[str], rows: int, work: Path, *, max_links: int = MAX_LINKS) -> tuple[bool, str]:
    """Whether ``rows`` hard links to ``paths`` fit (count, per-file link limit, disk); and why not."""
    if rows > max_links:
        return False, f"{rows:,} rows > {max_links:,} links (--max-links)"
    per_file = -(-rows // len(paths)) + 1
    try:
        limit = min(os.pathconf(p, "PC_LINK_MAX") for p in paths)
    except (OSError, ValueError):
        limit = 65_000  # ext4's
    if per_file > limit:
        return False, f"{per_file:,} links per file > the file system's limit {limit:,}"
    need = rows * 120 + (1 << 30)  # directory entries (~100 B each) and a margin
    free = shutil.disk_usage(work).free
    if free < 2 * need:
        return False, f"{free / 2**30:.1f} GB free, < 2x the {need / 2**30:.1f} GB the links need"
    return True, ""


def _links(work: Path, base_paths: list[str], rows: int, stamp: str, log) -> Path:
    """Hard links ``0 .. rows-1`` under ``work/links`` (link ``i`` -> ``base_paths[i % n]``); reused across sizes."""
    root = work / "links"
    state = root / ".state.json"
    try:
        done = json.loads(state.read_text())
    except (OSError, ValueError):
        done = {}
    if done.get("base") != stamp:  # links to another build of the corpus: start over
        shutil.rmtree(root, ignore_errors=True)
        done = {"base": stamp, "count": 0}
    start = int(done.get("count", 0))
    if start < rows:
        log(f"hard links {start:,} .. {rows - 1:,} under {root} ...")
        names = [os.path.basename(p) for p in base_paths]
        n = len(base_paths)
        for i in range(start, rows):
            folder = root / f"{i // _PER_FOLDER:05d}"
            if i % _PER_FOLDER == 0 or i == start:
                folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"{i:08d}-{names[i % n]}"
            try:
                os.link(base_paths[i % n], target)
            except FileExistsError:
                pass
        root.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps({"base": stamp, "count": rows}))
    return root


def _link_paths(pa, pc, root: Path, names, lo: int, hi: int):
    """The path column of rows ``lo .. hi-1``: ``root/DDDDD/IIIIIIII-NAME``, vectorised."""
    import numpy as np

    i = np.arange(lo, hi, dtype=np.int64)
    folder = pc.utf8_lpad(pc.cast(pa.array(i // _PER_FOLDER), pa.string()), width=5, padding="0")
    number = pc.utf8_lpad(pc.cast(pa.array(i), pa.string()), width=8, padding="0")
    return pc.binary_join_element_wise(str(root), folder, pc.binary_join_element_wise(number, names, "-"), "/")


def repeat_index(base: Path, rows: int, out: Path, *, links: bool, log=print) -> dict:
    """Writes ``out``: ``rows`` rows repeating ``base``'s (see the module docs); returns what it did.

    Returns ``{"rows", "paths": "hard links" | "repeated paths", "bytes", "reused"}``. The
    result is cached: an ``out`` made from the same ``base`` bytes with the same settings is kept.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    stamp = _sha(base)
    info_path = out.with_suffix(".json")
    want = {"base": stamp, "rows": rows, "links": links}
    try:
        info = json.loads(info_path.read_text())
    except (OSError, ValueError):
        info = {}
    if out.exists() and {k: info.get(k) for k in want} == want:
        return {**info, "bytes": out.stat().st_size, "reused": True}
    pf = pq.ParquetFile(base)
    table = pf.read()
    meta = json.loads(table.schema.metadata[b"audiotree"])
    if meta.get("root") is not None:
        raise SystemExit(f"{base}: expected absolute paths (no root), as `audiotree index` writes by default")
    compression = pf.metadata.row_group(0).column(0).compression.lower() if pf.metadata.num_row_groups else "zstd"
    n = table.num_rows
    base_paths = table.column("path").to_pylist()
    names = pa.array([os.path.basename(p) for p in base_paths])
    link_root = _links(out.parent, base_paths, rows, stamp, log) if links else None
    log(f"writing {out.name}: {rows:,} rows ({'hard links' if links else 'repeated paths'}) ...")
    col = table.column_names.index("path")
    tmp = out.with_name(out.name + ".tmp")
    with pq.ParquetWriter(tmp, table.schema, compression=compression) as writer:
        for lo in range(0, rows, _ROW_GROUP):
            hi = min(rows, lo + _ROW_GROUP)
            take = pa.array(np.arange(lo, hi, dtype=np.int64) % n)
            chunk = table.take(take)
            if links:
                chunk = chunk.set_column(col, table.schema.field(col),
                                         _link_paths(pa, pc, link_root, names.take(take), lo, hi))
            writer.write_table(chunk, row_group_size=_ROW_GROUP)
    os.replace(tmp, out)
    info = {**want, "paths": "hard links" if links else "repeated paths", "base_rows": n}
    info_path.write_text(json.dumps(info))
    return {**info, "bytes": out.stat().st_size, "reused": False}
