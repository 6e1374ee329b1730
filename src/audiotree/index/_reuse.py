"""Which rows of an earlier build (the index being updated, or an interrupted build's parts) are kept.

A row is reused, not read again, when it was built with the same row
settings and its file is still listed with the same size and modification
time. Rows of transient failures are always read again, and so are FLAC
rows written before the index had seek points (format 1.2), to get theirs,
and rows with a profile but no quality columns (written before format 1.3),
to measure them. So are profiled FLAC, MP3 and Ogg Parquet cells whose URL
records their range but not their format (written before cells were typed:
``&format=``), so they get their seek tables; a header-only row keeps its form.
With ``retable`` (the index was built under another decoder,
:mod:`audiotree.io.decoder_identity`), so are MP3 and Ogg rows with seek tables,
to check their tables again.
"""

from __future__ import annotations

__all__ = ["row_settings", "reusable"]


def row_settings(loudness: bool, mono: bool, root: str | None, block_sec: float | None) -> dict:
    """The build settings a row's content depends on (JSON-serialisable, compared with ``==``).

    ``mono`` and the profile's block length shape profiles only: a header-only
    build (``loudness=False``) records neither, so its rows are reused whatever
    ``mono`` says, and a build with profiles never reuses header-only rows (nor
    the reverse: decoding finds errors that a header read does not).

    >>> row_settings(False, True, None, 0.1) == row_settings(False, False, None, None)
    True
    >>> row_settings(True, True, None, 0.1) == row_settings(True, False, None, 0.1)
    False
    """
    loudness = bool(loudness)
    return {"loudness": loudness, "mono": bool(mono) if loudness else None, "root": root,
            "block_sec": block_sec if loudness else None}


def reusable(table, stored_to_abs: dict, current: dict, taken: set, *, retable: bool = False):
    """Mask (an Arrow bool array) of the rows of ``table`` to keep.

    A row is kept when its stored path (a Parquet row's without its cell range) is listed now (``stored_to_abs``), its
    file's ``(size, mtime_ns)`` in ``current`` equals the row's, no earlier
    table already gave that file a row (``taken``, updated here), and it is not
    a transient failure.
    """
    import pyarrow as pa

    paths = table.column("path").to_pylist()
    sizes = table.column("size").to_pylist()
    mtimes = table.column("mtime_ns").to_pylist()
    transient = [k == "transient" for k in table.column("error_kind").to_pylist()]
    if "seek_points" in table.column_names:  # a FLAC row from before format 1.2 ([]: no table known) is read again
        import pyarrow.compute as pc

        unknown = pc.fill_null(pc.equal(pc.list_value_length(table.column("seek_points")), 0), False).to_pylist()
        transient = [a or b for a, b in zip(transient, unknown)]
    if "bandwidth_hz" in table.column_names and "profile" in table.column_names:  # profiled before format 1.3
        import pyarrow.compute as pc

        blocks = pc.fill_null(pc.list_value_length(table.column("profile")), 0)  # (a file under 100 ms has none)
        unmeasured = pc.and_(pc.greater(blocks, 0), pc.is_null(table.column("bandwidth_hz")))
        if "clip_blocks" in table.column_names:  # (profiled before the per-block clipping column)
            unmeasured = pc.or_(unmeasured, pc.and_(pc.greater(blocks, 0), pc.is_null(table.column("clip_blocks"))))
        transient = [a or bool(b) for a, b in zip(transient, unmeasured.to_pylist())]
    if retable and "seek_points" in table.column_names and "container" in table.column_names:
        import pyarrow.compute as pc

        lossy = pc.is_in(table.column("container"), value_set=pa.array(["MP3", "OGG"]))
        tabled = pc.greater(pc.fill_null(pc.list_value_length(table.column("seek_points")), 0), 0)
        again = pc.fill_null(pc.and_(lossy, tabled), False).to_pylist()
        transient = [a or b for a, b in zip(transient, again)]
    from audiotree.io.members import without_cell

    if "container" in table.column_names and "profile" in table.column_names:
        untyped = _untyped_cells(paths, table.column("container").to_pylist(), table.column("profile"))
        transient = [a or b for a, b in zip(transient, untyped)]
    keep = []
    for p, s, m, again in zip(paths, sizes, mtimes, transient):
        ap = stored_to_abs.get(p) or stored_to_abs.get(without_cell(p))  # (a Parquet row's range: listed without)
        ok = not again and ap is not None and ap not in taken and current.get(ap, (None, None)) == (s, m)
        if ok:
            taken.add(ap)
        keep.append(ok)
    return pa.array(keep, type=pa.bool_())


def _untyped_cells(paths: list, containers: list, profiles) -> list[bool]:
    """Per row: a profiled FLAC, MP3 or Ogg Parquet cell with a recorded range and no recorded format."""
    import pyarrow.compute as pc

    from audiotree.io.members import is_member, parse

    profiled = pc.is_valid(profiles).to_pylist()
    out = []
    for p, c, has in zip(paths, containers, profiled):
        again = False
        if has and c in ("FLAC", "MP3", "OGG") and isinstance(p, str) and p.startswith("parquet://") \
                and is_member(p):
            try:
                ref = parse(p)
            except ValueError:
                ref = None
            again = ref is not None and ref.cell is not None and not ref.format
        out.append(again)
    return out
