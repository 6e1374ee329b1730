"""lhotse manifests: recordings, supervisions and cuts as JSON lines (optionally gzipped).

The layout is lhotse's own (``RecordingSet.to_file``, ``SupervisionSet.to_file``,
``CutSet.to_file`` with a ``.jsonl`` or ``.jsonl.gz`` name): one JSON object per
line.

* A recording: ``{"id", "sources": [{"type": "file", "channels": [0, ...],
  "source": PATH}], "sampling_rate", "num_samples", "duration"}``. Only
  ``"file"`` sources are read, one per recording, and ``"command"`` sources
  that only decode one file (``flac -c -d -s FILE``, ``sox FILE -t wav -``,
  as lhotse's Kaldi import writes them): parsed, never run, read as that
  file (:mod:`audiotree.formats.kaldi_pipes`); any other command is refused,
  as are ``"url"`` and ``"memory"`` sources and recordings split over several
  files. A recording with ``transforms`` (speed or volume perturbation: its
  times are of the transformed audio) is refused.
* A supervision: ``{"id", "recording_id", "start", "duration", "channel",
  "text", "speaker", "gender", "language"}`` (the last four optional). Ids
  are non-empty strings (a null id is refused, never read as ``"None"``). A
  supervision (or cut) on some of the channels of a multichannel recording
  (one speaker of a stereo call) reads those channels only (the segment's
  ``audio_channels``); on all of them, their mix.
* A cut (``MonoCut``): ``{"id", "start", "duration", "channel",
  "supervisions": [...], "recording": {...}}``, ``start`` within the recording.
  Two cuts naming one recording id must name the same file.

:func:`read_manifests` turns them into a segment list (``path``, ``start``,
``end``, ``id``, ``recording``, ``audio_channels`` where a segment is on some channels, and ``text``, ``speaker``, ``gender``,
``language`` where any row has one) with the line of each segment, for
:func:`audiotree.index.import_lhotse`. :func:`write_manifests` writes the
recordings and supervisions of a segment list in the same layout, so
``lhotse.load_manifest`` reads them. Every problem is a ``ValueError`` naming
the file and line.
"""

from __future__ import annotations

import gzip
import json
import os
from typing import Any, Iterator, Sequence

from audiotree.formats.imported import ImportedSegments, json_lines
from audiotree.validation import is_real

__all__ = ["read_manifests", "write_manifests", "SUPERVISION_FIELDS"]

#: Supervision fields carried as label columns.
SUPERVISION_FIELDS = ("text", "speaker", "gender", "language")


def _fail(path: str, line: int, message: str) -> ValueError:
    return ValueError(f"lhotse manifest {path} line {line}: {message}")


def _records(path: str) -> Iterator[tuple[int, dict]]:
    return json_lines(path, "lhotse")


def _recording_path(where: str, number: int, record: dict, audio_root: str) -> str:
    rid = record.get("id")
    sources = record.get("sources")
    if not isinstance(rid, str) or not rid or not isinstance(sources, list) or not sources:
        raise _fail(where, number, "is not a lhotse recording (it needs a string 'id' and 'sources'); id is "
                                   f"{rid!r}.")
    if len(sources) != 1:
        raise _fail(where, number, f"recording {rid!r} is split over {len(sources)} sources (one file per channel); "
                                   "audiotree reads one file per recording. Merge the channels into one file.")
    source = sources[0]
    kind = source.get("type") if isinstance(source, dict) else None
    target = str(source.get("source")) if isinstance(source, dict) else ""
    if kind == "command":
        target = _command_file(where, number, rid, target)
    elif kind != "file":
        raise _fail(where, number, f"recording {rid!r} has a {kind!r} source; only 'file' sources are supported.")
    transforms = record.get("transforms")
    if transforms:
        kinds = sorted({str(t.get("name", "?")) if isinstance(t, dict) else "?" for t in transforms}
                       if isinstance(transforms, list) else {"?"})
        raise _fail(where, number, f"recording {rid!r} has transforms {kinds} (e.g. speed perturbation): its times "
                                   "are those of the transformed audio, which audiotree does not apply. Write the "
                                   "transformed audio to files (lhotse: cuts.save_audios) and import those.")
    path = os.path.normpath(os.path.join(audio_root, os.path.expanduser(target)))
    if not os.path.isfile(path):
        raise _fail(where, number, f"recording {rid!r} names '{path}', which does not exist (relative paths start "
                                   f"from {audio_root}).")
    return path


def _command_file(where: str, number: int, rid: str, command: str) -> str:
    """The file a decode-only ``"command"`` source reads (as a Kaldi ``wav.scp`` pipe: parsed, never run)."""
    from audiotree.formats.kaldi_pipes import UnsupportedPipe, piped_file

    piped = command.rstrip()
    piped = piped if piped.endswith("|") else piped + " |"  # lhotse keeps the command without Kaldi's "|"
    try:
        return piped_file(piped)[0]
    except UnsupportedPipe as exc:
        raise _fail(where, number, f"recording {rid!r} is a shell command ({command!r}) that audiotree does not "
                                   f"read: {exc}. audiotree never runs commands from a manifest; it reads "
                                   "decode-only commands (flac -c -d -s FILE, sox FILE -t wav -, ...) as the file "
                                   "they name. Convert it to an audio file first.") from None


def _identifier(where: str, number: int, record: dict, name: str, what: str) -> str:
    """``record[name]``, a non-empty string (a null or numeric id is refused, never read as ``"None"``)."""
    value = record.get(name)
    if not isinstance(value, str) or not value:
        raise _fail(where, number, f"the {what}'s {name!r} is {value!r}; lhotse ids are non-empty strings.")
    return value


def _recording_channels(recording: dict) -> list:
    source = recording["sources"][0]
    channels = source.get("channels") if isinstance(source, dict) else None
    return list(channels) if isinstance(channels, list) else [0]


def _channels_on(where: str, number: int, what: str, channel: Any, recording_channels: list, rid: str) -> list | None:
    """The file channels a supervision or cut is on (positions in its recording's source), ``None`` for all."""
    if channel is None:
        return None
    named = channel if isinstance(channel, list) else [channel]
    unknown = [c for c in named if c not in recording_channels]
    if unknown or not named:
        raise _fail(where, number, f"{what} is on channel(s) {named}, but recording {rid!r} has channels "
                                   f"{recording_channels}.")
    if sorted(set(named), key=str) == sorted(recording_channels, key=str):
        return None
    return sorted(recording_channels.index(c) for c in set(named))


def _seconds(where: str, number: int, record: dict, name: str) -> float:
    value = record.get(name)
    if not is_real(value):
        raise _fail(where, number, f"{name} is {value!r}, not a number of seconds.")
    return float(value)


def _supervision_labels(supervisions: Sequence[dict]) -> dict:
    out = {}
    for name in SUPERVISION_FIELDS:
        values = [s.get(name) for s in supervisions if s.get(name) is not None]
        if name == "text":
            out[name] = " ".join(str(v) for v in values) if values else None
        else:
            out[name] = str(values[0]) if values else None
    return out


def read_manifests(recordings: str | os.PathLike | None = None, supervisions: str | os.PathLike | None = None, *,
                   cuts: str | os.PathLike | None = None, audio_root: str | os.PathLike | None = None
                   ) -> ImportedSegments:
    """Parses recordings + supervisions, or a cut manifest (see the module docstring).

    A cut becomes one segment (its span of the recording) whose text joins its
    supervisions' texts in order and whose speaker, gender and language are its
    first supervision's that has one. ``audio_root``: the folder relative
    source paths start from (default: the current directory, as lhotse does).
    """
    root = os.path.abspath(os.fspath(audio_root)) if audio_root is not None else os.getcwd()
    rows: dict[str, list] = {k: [] for k in ("path", "start", "end", "id", "recording", "audio_channels",
                                             *SUPERVISION_FIELDS)}
    lines: list[int] = []
    paths: dict[str, str] = {}
    first_line: dict[str, int] = {}
    if cuts is not None:
        if recordings is not None or supervisions is not None:
            raise ValueError("Give a cut manifest or recordings + supervisions, not both.")
        where = os.path.abspath(os.fspath(cuts))
        for number, cut in _records(where):
            recording = cut.get("recording")
            if not isinstance(recording, dict) or "id" not in cut:
                raise _fail(where, number, "is not a lhotse MonoCut (it needs 'id' and 'recording'); MixedCuts and "
                                           "PaddingCuts are not supported.")
            cid = _identifier(where, number, cut, "id", "cut")
            path = _recording_path(where, number, recording, root)
            rid = recording["id"]
            if paths.setdefault(rid, path) != path:
                raise _fail(where, number, f"cut {cid!r} names recording {rid!r} as '{path}', but line "
                                           f"{first_line[rid]} named it '{paths[rid]}'; one recording id must be one "
                                           "file.")
            first_line.setdefault(rid, number)
            on = _channels_on(where, number, f"cut {cid!r}", cut.get("channel"), _recording_channels(recording), rid)
            start = _seconds(where, number, cut, "start")
            end = start + _seconds(where, number, cut, "duration")
            sups = [s for s in cut.get("supervisions") or () if isinstance(s, dict)]
            _append(rows, path, start, end, cid, rid, _supervision_labels(sups), on)
            lines.append(number)
    else:
        if recordings is None or supervisions is None:
            raise ValueError("Give both a recordings and a supervisions manifest (or cuts=).")
        rec_where = os.path.abspath(os.fspath(recordings))
        channels: dict[str, list] = {}
        for number, record in _records(rec_where):
            rid = record.get("id")
            if rid in paths:
                raise _fail(rec_where, number, f"recording id {rid!r} is used twice.")
            paths[rid] = _recording_path(rec_where, number, record, root)
            channels[rid] = _recording_channels(record)
        where = os.path.abspath(os.fspath(supervisions))
        for number, sup in _records(where):
            if "id" not in sup or sup.get("recording_id") is None:
                raise _fail(where, number, "is not a lhotse supervision (it needs 'id' and 'recording_id').")
            sid = _identifier(where, number, sup, "id", "supervision")
            rid = _identifier(where, number, sup, "recording_id", "supervision")
            if rid not in paths:
                raise _fail(where, number, f"supervision {sid!r} is in recording {rid!r}, which {rec_where} "
                                           "does not list.")
            on = _channels_on(where, number, f"supervision {sid!r}", sup.get("channel"), channels[rid], rid)
            start = _seconds(where, number, sup, "start")
            end = start + _seconds(where, number, sup, "duration")
            _append(rows, paths[rid], start, end, sid, rid, _supervision_labels([sup]), on)
            lines.append(number)
    if not lines:
        raise ValueError(f"lhotse manifest {where}: holds no {'cuts' if cuts is not None else 'supervisions'}.")
    columns = {k: v for k, v in rows.items()
               if k not in (*SUPERVISION_FIELDS, "audio_channels") or any(x is not None for x in v)}
    return ImportedSegments(recordings=paths, columns=columns, where=where, lines=lines)


def _append(rows: dict, path: str, start: float, end: float, sid: Any, rid: Any, labels: dict,
            on: list | None) -> None:
    rows["path"].append(path)
    rows["audio_channels"].append(on)
    rows["start"].append(start)
    rows["end"].append(end)
    rows["id"].append(str(sid))
    rows["recording"].append(str(rid))
    for name in SUPERVISION_FIELDS:
        rows[name].append(labels.get(name))


def write_manifests(out_dir: str | os.PathLike, recordings: Sequence[dict], supervisions: Sequence[dict]) -> tuple[str, str]:
    """Writes ``recordings.jsonl.gz`` and ``supervisions.jsonl.gz`` into ``out_dir``; returns their paths.

    ``recordings``: dicts with ``id``, ``path``, ``sampling_rate``,
    ``num_samples``, ``channels``; ``supervisions``: dicts with ``id``,
    ``recording_id``, ``start``, ``duration``, ``channel`` and any of
    :data:`SUPERVISION_FIELDS`, plus ``custom`` (a dict) when not empty.
    Each file is written to a temporary name and renamed, so a reader never
    sees a partial manifest.
    """
    from audiotree.fs import atomic_file

    folder = os.fspath(out_dir)
    os.makedirs(folder, exist_ok=True)
    rec_path = os.path.join(folder, "recordings.jsonl.gz")
    sup_path = os.path.join(folder, "supervisions.jsonl.gz")
    with atomic_file(rec_path, suffix=".jsonl.gz") as tmp:
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            for r in recordings:
                record = {
                    "id": r["id"],
                    "sources": [{"type": "file", "channels": list(range(int(r["channels"]))), "source": r["path"]}],
                    "sampling_rate": int(r["sampling_rate"]), "num_samples": int(r["num_samples"]),
                    "duration": round(int(r["num_samples"]) / int(r["sampling_rate"]), 6),
                    "channel_ids": list(range(int(r["channels"]))),
                }
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
    with atomic_file(sup_path, suffix=".jsonl.gz") as tmp:
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            for s in supervisions:
                record = {k: v for k, v in s.items() if v is not None and (k != "custom" or v)}
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return rec_path, sup_path
