"""Corpora from Kaldi, lhotse and NeMo, in one step; and back to lhotse.

:func:`import_kaldi`, :func:`import_lhotse` and :func:`import_nemo` read a
Kaldi data directory, lhotse manifests or NeMo manifests
(:mod:`audiotree.formats.kaldi`, :mod:`audiotree.formats.lhotse`,
:mod:`audiotree.formats.nemo`)
and build a segment index of their recordings (:func:`build_index` with
``segments=``): one row per utterance or supervision (or cut), its ``id``,
``recording``, ``start``, ``end``, and ``text``, ``speaker``, ``gender``
(and lhotse's ``language``) as label columns. Each recording is probed once.
:func:`export_lhotse` writes an index (of segments or of whole files) as lhotse
recordings + supervisions manifests. Importing an export gives the same
segments: the same ids, recordings, bounds and labels.

``audiotree import kaldi``, ``audiotree import lhotse``, ``audiotree import
nemo`` and ``audiotree export lhotse`` are their command-line twins.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from audiotree.index.build import IndexBuildReport, build_index
from audiotree.index.segments import read_segments

__all__ = ["import_kaldi", "import_lhotse", "import_nemo", "export_lhotse"]


def _build(recordings: dict, columns: dict, where: str, lines: list, out: Any, kwargs: dict,
           text_columns: Any = None) -> IndexBuildReport:
    from audiotree.io.extensions import supported_extensions

    table = read_segments(columns, where=where, lines=lines, text_columns=text_columns)
    kwargs.setdefault("show_progress", False)
    files = sorted(set(recordings.values()))
    if kwargs.get("extensions") is None:
        # A manifest names its files: index each one whatever its extension (NIST .sph, say), as the
        # decoder sniffs the format; one that does not decode is an unreadable row naming its file.
        bare = sorted(rid for rid, f in recordings.items() if not os.path.splitext(f)[1].strip("."))
        if bare:
            raise ValueError(f"{where}: recording {bare[0]!r} ('{recordings[bare[0]]}') has no file extension"
                             + (f" ({len(bare)} recordings in all)" if len(bare) > 1 else "")
                             + "; audiotree finds audio by extension. Give the files their format's extension "
                             "(.wav, .flac, .sph) and list those paths.")
        named = {os.path.splitext(f)[1].lower() for f in files}
        if not named <= set(supported_extensions()):
            kwargs["extensions"] = sorted(set(supported_extensions()) | named)
    return build_index(files, out, segments=table, **kwargs)


def import_kaldi(data_dir: str | os.PathLike, out: str | os.PathLike, *, audio_root: str | os.PathLike | None = None,
                 **build_options: Any) -> IndexBuildReport:
    """Builds the segment index ``out`` from a Kaldi data directory.

    Args:
      data_dir: the folder with ``wav.scp`` (paths, or decode-only pipes such
        as ``flac -c -d -s x.flac |``, parsed and never run, read as the file
        they name; any other command is refused, naming its line) and
        optionally ``segments``, ``text``, ``utt2spk``, ``spk2gender``.
      out: the index file (``.parquet``).
      audio_root: the folder relative ``wav.scp`` paths start from (default:
        the current directory, as in Kaldi).
      build_options: passed to :func:`~audiotree.index.build_index`
        (``loudness``, ``executor``, ``root``, ``max_workers``, ...).

    Raises:
      ValueError: a malformed or inconsistent data directory, naming the file
        and line (see :mod:`audiotree.formats.kaldi`), or bad segments (see
        :mod:`audiotree.index.segments`).

    >>> import numpy as np, soundfile, tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> soundfile.write(f"{folder}/rec1.wav", np.zeros(16000 * 3, np.float32), 16000)
    >>> _ = open(f"{folder}/wav.scp", "w").write(f"rec1 {folder}/rec1.wav\\n")
    >>> _ = open(f"{folder}/segments", "w").write("utt1 rec1 0.00 1.25\\nutt2 rec1 1.50 2.75\\n")
    >>> _ = open(f"{folder}/text", "w").write("utt1 HELLO THERE\\nutt2 GOOD BYE\\n")
    >>> import_kaldi(folder, f"{folder}/corpus.parquet", loudness=False, executor="serial").rows
    2
    """
    from audiotree.formats.kaldi import read_data_dir

    parsed = read_data_dir(data_dir, audio_root=audio_root)
    return _build(parsed.recordings, parsed.columns, parsed.where, parsed.lines, out, build_options)


def import_lhotse(recordings: str | os.PathLike | None = None, supervisions: str | os.PathLike | None = None,
                  out: str | os.PathLike | None = None, *, cuts: str | os.PathLike | None = None,
                  audio_root: str | os.PathLike | None = None, **build_options: Any) -> IndexBuildReport:
    """Builds the segment index ``out`` from lhotse manifests: recordings + supervisions, or ``cuts=``.

    Manifests are JSONL, gzipped or not, as lhotse writes them (see
    :mod:`audiotree.formats.lhotse`); a supervision (or cut) becomes a segment
    row. ``audio_root``: where relative source paths start (default: the
    current directory). ``build_options`` go to :func:`~audiotree.index.build_index`.
    """
    from audiotree.formats.lhotse import read_manifests

    if out is None:
        raise TypeError("import_lhotse needs out= (the index file to write).")
    parsed = read_manifests(recordings, supervisions, cuts=cuts, audio_root=audio_root)
    return _build(parsed.recordings, parsed.columns, parsed.where, parsed.lines, out, build_options)


def import_nemo(manifests: str | os.PathLike | Sequence[str | os.PathLike], out: str | os.PathLike,
                **build_options: Any) -> IndexBuildReport:
    """Builds the segment index ``out`` from one or more NeMo manifests (JSON lines, as NeMo writes them).

    Each line is the segment ``[offset, offset + duration)`` of its
    ``audio_filepath`` (relative paths start from the manifest's folder; no
    ``offset``: from 0; no ``duration``: to the end of the file); ``text`` is a
    text label and every other field a label as is (see
    :mod:`audiotree.formats.nemo`). ``build_options`` go to
    :func:`~audiotree.index.build_index` (``loudness``, ``executor``, ...).

    Raises:
      ValueError: a malformed line, naming the manifest and line, or bad
        segments (see :mod:`audiotree.index.segments`).

    >>> import json, numpy as np, soundfile, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> soundfile.write(f"{folder}/a.wav", np.zeros(32000, np.float32), 16000)
    >>> line = {"audio_filepath": "a.wav", "duration": 2.0, "text": "hello", "speaker": "s1"}
    >>> _ = open(f"{folder}/train_manifest.json", "w").write(json.dumps(line) + "\\n")
    >>> import_nemo(f"{folder}/train_manifest.json", f"{folder}/corpus.parquet", loudness=False, executor="serial").rows
    1
    """
    from audiotree.formats.nemo import read_manifests
    from audiotree.index.table_schema import RESERVED_COLUMNS

    parsed = read_manifests([manifests] if isinstance(manifests, (str, os.PathLike)) else list(manifests),
                            reserved=RESERVED_COLUMNS)  # read_manifests reserves its own (segment) columns
    return _build(parsed.recordings, parsed.columns, parsed.where, parsed.lines, out, build_options,
                  text_columns=parsed.text_columns)


def export_lhotse(index: str | os.PathLike, out_dir: str | os.PathLike) -> tuple[str, str]:
    """Writes ``out_dir/recordings.jsonl.gz`` and ``out_dir/supervisions.jsonl.gz`` from a corpus index.

    One recording per file (its id: the ``recording`` column, else the file
    name without extension; its length from the file's header, read once per
    file), one supervision per readable row (its id: the ``id`` column, else
    ``<recording>-<row>``; a whole-file row spans the file). The ``text``,
    ``speaker``, ``gender`` and ``language`` labels become supervision fields,
    other labels go into ``custom``. Returns the two paths.
    """
    import numpy as np

    from audiotree.formats.lhotse import SUPERVISION_FIELDS, write_manifests
    from audiotree.index.reader import open_index
    from audiotree.io import probe

    ix = open_index(index)
    paths = ix.paths()
    readable = ix.column("readable").astype(bool)
    has_segments = ix.has_segments
    names = ix.label_names
    values = {}
    for name in names:
        kind = ix.meta["labels"][name]["kind"]
        if kind == "text":  # strings as stored (a missing transcript stays None)
            values[name] = ix.table.column(name).to_pylist()
            continue
        raw = ix.label_values(name)
        if kind == "category":
            vocab = ix.vocabulary(name)
            values[name] = [None if v < 0 else vocab[v] for v in raw.tolist()]
        else:
            values[name] = [None if isinstance(v, float) and v != v else v for v in raw.tolist()]
    rec_ids = ix.table.column("recording").to_pylist() if has_segments else [None] * len(ix)
    seg_ids = ix.table.column("id").to_pylist() if has_segments else [None] * len(ix)
    starts = ix.column("start") if has_segments else np.zeros(len(ix))
    on = (ix.table.column("audio_channels").to_pylist() if "audio_channels" in ix.table.column_names
          else [None] * len(ix))
    durations = np.asarray(ix.column("duration"), dtype=np.float64)
    recordings: dict[str, dict] = {}
    by_path: dict[str, str] = {}
    supervisions = []
    for i in np.flatnonzero(readable):
        path = paths[i]
        rid = by_path.get(path)
        if rid is None:
            rid = rec_ids[i] or os.path.splitext(os.path.basename(path))[0]
            if rid in recordings:
                raise ValueError(f"{ix.path}: two files would both be lhotse recording {rid!r} ({path} and "
                                 f"{recordings[rid]['path']}); give them distinct recording ids.")
            info = probe(path)
            recordings[rid] = {"id": rid, "path": os.path.abspath(path) if "://" not in path else path,
                               "sampling_rate": info.sample_rate, "num_samples": info.frames,
                               "channels": info.channels}
            by_path[path] = rid
        channels = recordings[rid]["channels"]
        start = float(starts[i])
        if has_segments:
            duration = float(ix.column("end")[i]) - start
        else:
            duration = recordings[rid]["num_samples"] / recordings[rid]["sampling_rate"]
        sup = {"id": seg_ids[i] or f"{rid}-{int(i)}", "recording_id": rid, "start": round(start, 6),
               "duration": round(duration if has_segments else float(durations[i]), 6),
               "channel": (0 if channels == 1 else list(range(channels))) if on[i] is None
               else (on[i][0] if len(on[i]) == 1 else list(on[i]))}
        custom = {}
        for name in names:
            value = values[name][int(i)]
            if name in SUPERVISION_FIELDS:
                sup[name] = value
            elif value is not None:
                custom[name] = value
        sup["custom"] = custom
        supervisions.append(sup)
    if not supervisions:
        raise ValueError(f"{ix.path} has no readable rows to export.")
    return write_manifests(out_dir, list(recordings.values()), supervisions)
