"""NVIDIA NeMo manifests: one JSON object per line, an utterance each.

The layout is NeMo's speech manifest (as its data scripts write it, one
``json.dumps`` of a dict per line): ``audio_filepath`` (the audio; a relative
path starts from the manifest's own folder), ``duration`` (seconds read),
``offset`` (optional: seconds into the file where the utterance starts),
``text`` (optional: the transcript), and any other fields (``lang``,
``speaker``, ``pred_text``, ...).

:func:`read_manifests` turns one or more manifests into a segment list
(:class:`~audiotree.formats.imported.ImportedSegments`): each line is the
segment ``[offset, offset + duration)`` of its file (no ``offset``: from 0; no
``duration``: to the end of the file), its ``text`` (and any field whose name
ends in ``text``, such as ``pred_text``) a text label, and every other field a
label column as is. A field whose name is one of the segment list's own
columns (``path``, ``start``, ``end``, ``id``, ``recording``) or one of the
``reserved`` names the caller gives (:func:`audiotree.index.import_nemo`
gives the index's own columns: ``sample_rate``, ...) is kept as
``nemo_<name>``; a list or object value is kept as its JSON text. Ids: the
recording id is the file name without extension (its path relative to the
manifest's folder when two files share a name); a segment's id is its
recording's when the file has one segment, else
``<recording>-<start ms>-<end ms>``.

Every problem is a ``ValueError`` naming the manifest and line: a line that is
not a JSON object, a missing or non-string ``audio_filepath``, a ``duration``
or ``offset`` that is not a finite number (or a ``duration`` <= 0, an
``offset`` < 0), and an audio file that does not exist. With several
manifests, each line is named by its own manifest and line; ``where`` of the
result is the first manifest when there is one, else all of them joined.

>>> import json, os, tempfile, numpy as np, soundfile
>>> folder = tempfile.mkdtemp()
>>> soundfile.write(f"{folder}/long.wav", np.zeros(48000, np.float32), 16000)
>>> rows = [{"audio_filepath": "long.wav", "offset": 0.5, "duration": 1.0, "text": "hi", "lang": "en"},
...         {"audio_filepath": "long.wav", "offset": 1.75, "duration": 1.0, "text": "bye", "lang": "en"}]
>>> _ = open(f"{folder}/train.json", "w").write("".join(json.dumps(r) + "\\n" for r in rows))
>>> parsed = read_manifests([f"{folder}/train.json"])
>>> parsed.columns["id"], parsed.columns["start"], parsed.columns["end"], parsed.columns["lang"]
(['long-500-1500', 'long-1750-2750'], [0.5, 1.75], [1.5, 2.75], ['en', 'en'])
"""

from __future__ import annotations

import json
import math
import os
from typing import Collection, Iterator, Sequence

from audiotree.formats.imported import ImportedSegments, json_lines
from audiotree.validation import is_real

__all__ = ["read_manifests", "NEMO_FIELDS"]

#: The fields that describe the segment itself (every other field is a label).
NEMO_FIELDS = ("audio_filepath", "offset", "duration")


def _fail(path: str, line: int, message: str) -> ValueError:
    return ValueError(f"NeMo manifest {path} line {line}: {message}")


def _records(path: str) -> Iterator[tuple[int, dict]]:
    return json_lines(path, "NeMo")


def _seconds(where: str, number: int, record: dict, name: str) -> float | None:
    value = record.get(name)
    if value is None:
        return None
    if not is_real(value) or not math.isfinite(float(value)):
        raise _fail(where, number, f"{name} is {value!r}, not a finite number of seconds.")
    return float(value)


def _audio_path(where: str, number: int, record: dict) -> str:
    value = record.get("audio_filepath")
    if isinstance(value, list):
        raise _fail(where, number, "audio_filepath is a list (one file per channel); audiotree reads one file per "
                                   "utterance. Merge the channels into one file.")
    if not isinstance(value, str) or not value.strip():
        raise _fail(where, number, f"audio_filepath is {value!r}; every line needs the audio file's path.")
    if "://" in value:
        return value
    path = os.path.normpath(os.path.join(os.path.dirname(where), os.path.expanduser(value)))
    if not os.path.isfile(path):
        raise _fail(where, number, f"audio_filepath names '{path}', which does not exist (relative paths start from "
                                   "the manifest's folder).")
    return path


def _label(values: list) -> tuple[list, bool]:
    """A label column of one type; ``True`` when it became JSON text (lists, objects, or mixed types)."""
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {int, float} or kinds <= {str} or kinds <= {bool}:
        return values, False
    return [None if v is None else v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
            for v in values], True


def _recording_ids(paths: Sequence[str], roots: dict) -> dict:
    stems: dict = {}
    for p in dict.fromkeys(paths):
        stems.setdefault(os.path.splitext(os.path.basename(p.split("://", 1)[-1]))[0], []).append(p)
    out = {}
    for stem, group in stems.items():
        for p in group:
            if len(group) == 1:
                out[p] = stem
            else:
                rel = p if "://" in p else os.path.relpath(p, roots[p])
                out[p] = os.path.splitext(rel)[0]
    return out


def read_manifests(manifests: Sequence[str | os.PathLike] | str | os.PathLike, *,
                   reserved: Collection[str] = ()) -> ImportedSegments:
    """Parses NeMo manifests into a segment list (see the module docstring).

    A field named as one of ``reserved`` (or as a column of the segment list) is kept as ``nemo_<name>``.
    """
    if isinstance(manifests, (str, os.PathLike)):
        manifests = [manifests]
    files = [os.path.abspath(os.fspath(m)) for m in manifests]
    if not files:
        raise ValueError("Give at least one NeMo manifest.")
    rows: list[dict] = []
    segment_paths, starts, ends, lines, origins = [], [], [], [], []
    roots: dict = {}
    for where in files:
        for number, record in _records(where):
            path = _audio_path(where, number, record)
            roots.setdefault(path, os.path.dirname(where))
            offset = _seconds(where, number, record, "offset")
            duration = _seconds(where, number, record, "duration")
            start = offset or 0.0
            if start < 0:
                raise _fail(where, number, f"offset is {offset}; an offset must be >= 0.")
            if duration is not None and duration <= 0:
                raise _fail(where, number, f"duration is {duration}; it must be > 0 (drop empty utterances).")
            segment_paths.append(path)
            starts.append(start)
            ends.append(None if duration is None else round(start + duration, 9))
            lines.append(number)
            origins.append(where)
            rows.append({k: v for k, v in record.items() if k not in NEMO_FIELDS})
    if not rows:
        raise ValueError(f"NeMo manifest {', '.join(files)}: holds no utterances.")
    rec_of = _recording_ids(segment_paths, roots)
    per_file: dict = {}
    for p in segment_paths:
        per_file[p] = per_file.get(p, 0) + 1
    ids = [rec_of[p] if per_file[p] == 1 else f"{rec_of[p]}-{round(s * 1000)}-{'end' if e is None else round(e * 1000)}"
           for p, s, e in zip(segment_paths, starts, ends)]
    columns: dict[str, list] = {"path": segment_paths, "start": starts, "end": ends, "id": ids,
                                "recording": [rec_of[p] for p in segment_paths]}
    taken = set(columns) | set(reserved)  # columns of the list or the caller's: a field of that name is renamed
    names = list(dict.fromkeys(k for r in rows for k in r))
    text = []
    for name in names:
        label = f"nemo_{name}" if name in taken else name
        values, as_json = _label([r.get(name) for r in rows])
        columns[label] = values
        if name.endswith("text") or as_json:  # text, pred_text, normalized_text: transcripts
            text.append(label)
    if len(files) > 1:
        _check_spans(origins, lines, segment_paths, starts, ends)
    where = files[0] if len(files) == 1 else " + ".join(files)
    return ImportedSegments(recordings={rec_of[p]: p for p in dict.fromkeys(segment_paths)}, columns=columns,
                            where=where, lines=lines, text_columns=tuple(text))


def _check_spans(origins: list, lines: list, paths: list, starts: list, ends: list) -> None:
    """Across several manifests, the same utterance listed twice, named by its manifest and line."""
    seen: dict = {}
    for i, span in enumerate(zip(paths, starts, ends)):
        if span in seen:
            j = seen[span]
            raise _fail(origins[i], lines[i], f"lists the same utterance as {origins[j]} line {lines[j]} "
                                              f"({span[0]!r}, {span[1]} to {span[2]} s); drop one.")
        seen[span] = i
