"""Kaldi data directories: ``wav.scp``, ``segments``, ``text``, ``utt2spk``, ``spk2gender``.

The files follow Kaldi's documented conventions ("Data preparation" in the
Kaldi documentation): UTF-8 text, one entry per line, the first whitespace-
separated field the key, sorted or not.

* ``wav.scp``: ``<recording-id> <path>``, or a decode-only command pipe
  (``<id> flac -c -d -s a.flac |``, ``<id> sox a.wav -t wav - |``, ffmpeg,
  cat, sph2pipe): the command is parsed, never run, and the file it names is
  read (:mod:`audiotree.formats.kaldi_pipes`). Any other command (a sox
  effect such as ``remix`` or ``rate``, a chain of commands) is refused with
  an error naming the line; so is an archive offset (``foo.ark:12345``), which
  is not an audio file.
* ``segments`` (optional): ``<utterance-id> <recording-id> <start> <end>``
  in seconds. Without it every recording is one utterance whose id is the
  recording id, from start to end (Kaldi's rule).
* ``text`` (optional): ``<utterance-id> <transcript...>`` (the rest of the line).
* ``utt2spk`` (optional): ``<utterance-id> <speaker-id>``.
* ``spk2gender`` (optional): ``<speaker-id> <m|f>``.

:func:`read_data_dir` returns (as :class:`~audiotree.formats.imported.ImportedSegments`) the segment list (columns ``path``, ``start``,
``end`` (``None``: to the end of the file), ``id``, ``recording``, ``text``,
``speaker``, ``gender``; a label column only when its file exists) and the
line each segment came from, for :func:`audiotree.index.import_kaldi`. Every
problem is a ``ValueError`` naming the file and line: a malformed line, a
duplicate key, a piped or archive entry, an utterance of ``text``/``utt2spk``
that no segment has, a segment of a recording missing from ``wav.scp``, and a
recording whose file does not exist.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

from audiotree.formats.imported import ImportedSegments

__all__ = ["read_data_dir", "KALDI_FILES"]

#: The files of a data directory this module reads (``wav.scp`` is required).
KALDI_FILES = ("wav.scp", "segments", "text", "utt2spk", "spk2gender")


def _fail(path: str, line: int, message: str) -> ValueError:
    return ValueError(f"Kaldi {path} line {line}: {message}")


def _lines(path: str) -> Iterator[tuple[int, str]]:
    try:
        with open(path, encoding="utf-8-sig") as f:  # (a byte-order mark is not part of the first key)
            for number, line in enumerate(f, start=1):
                line = line.strip()
                if line:
                    yield number, line
    except UnicodeDecodeError as exc:
        raise ValueError(f"Kaldi {path}: not UTF-8 text ({exc}); Kaldi data files are UTF-8.") from None


def _table(path: str, *, fields: int | None, rest: bool = False) -> dict[str, tuple[int, Any]]:
    """``{key: (line, value)}`` of a key-value file; ``rest`` keeps the rest of the line as one string."""
    out: dict[str, tuple[int, Any]] = {}
    for number, line in _lines(path):
        parts = line.split(None, 1) if rest else line.split()
        if rest:
            if len(parts) < 1:
                raise _fail(path, number, "is empty.")
            value: Any = parts[1] if len(parts) > 1 else ""
        else:
            if fields is not None and len(parts) != fields:
                raise _fail(path, number, f"has {len(parts)} fields, expected {fields}: {line!r}.")
            value = parts[1:] if fields is None or fields > 2 else parts[1]
        key = parts[0]
        if key in out:
            raise _fail(path, number, f"key {key!r} was already given on line {out[key][0]}; keys must be unique.")
        out[key] = (number, value)
    return out


def _recordings(path: str, audio_root: str) -> dict[str, tuple[int, str]]:
    out: dict[str, tuple[int, str]] = {}
    for number, line in _lines(path):
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise _fail(path, number, f"needs '<recording-id> <path>', got {line!r}.")
        key, target = parts[0], parts[1].strip()
        if target.startswith("|"):
            raise _fail(path, number, f"recording {key!r} is an input pipe ({target!r}); audiotree never runs "
                                      "commands from a data directory. List the audio file's path instead.")
        program = None
        if target.endswith("|"):
            target, program = _pipe_target(path, number, key, target)
        elif " " in target or "\t" in target:
            raise _fail(path, number, f"recording {key!r} has more than one field after its id ({target!r}); only a "
                                      "plain path or a decode-only pipe (flac, sox, ffmpeg, cat, sph2pipe) is "
                                      "supported.")
        if _is_archive(target):
            raise _fail(path, number, f"recording {key!r} points into an archive ({target!r}); give the audio file's "
                                      "path instead.")
        if key in out:
            raise _fail(path, number, f"recording {key!r} was already given on line {out[key][0]}.")
        full = os.path.normpath(os.path.join(audio_root, os.path.expanduser(target)))
        if not os.path.isfile(full):
            raise _fail(path, number, f"recording {key!r} names '{full}', which does not exist (relative paths "
                                      f"start from {audio_root}; pass the folder Kaldi ran in as the audio root).")
        if program == "sph2pipe":
            _check_sphere(path, number, key, full)
        out[key] = (number, full)
    if not out:
        raise ValueError(f"Kaldi {path}: lists no recordings.")
    return out


def _pipe_target(path: str, number: int, key: str, target: str) -> tuple[str, str]:
    """The file a decode-only ``wav.scp`` pipe reads (parsed, never run); refuses any other command."""
    from audiotree.formats.kaldi_pipes import UnsupportedPipe, piped_file

    try:
        file, program = piped_file(target)
    except UnsupportedPipe as exc:
        raise _fail(path, number, f"recording {key!r} is a command pipe ({target!r}) that audiotree does not read: "
                                  f"{exc}. audiotree never runs commands from a data directory; it reads decode-only "
                                  "pipes (flac -c -d -s FILE |, sox FILE -t wav - |, ffmpeg -i FILE -f wav - |, "
                                  "cat FILE |, sph2pipe -f wav FILE |) as the file they name. Run this command once "
                                  "into a .wav or .flac file and list that path instead.") from None
    return file, program


def _check_sphere(path: str, number: int, key: str, file: str) -> None:
    """Refuses a SPHERE file that libsndfile cannot decode (shorten-compressed ones), naming the line."""
    import soundfile

    try:
        soundfile.info(file)
    except Exception as exc:  # libsndfile's own error type varies by version
        raise _fail(path, number, f"recording {key!r} is read by sph2pipe from {file!r}, which libsndfile cannot "
                                  f"decode ({exc}); it is likely a shorten-compressed SPHERE file. Convert it once "
                                  "with `sph2pipe -f wav FILE OUT.wav` and list OUT.wav.") from None


def _is_archive(target: str) -> bool:
    head, sep, tail = target.rpartition(":")
    return bool(sep) and tail.isdigit() and head.lower().endswith(".ark")


def read_data_dir(path: str | os.PathLike, *, audio_root: str | os.PathLike | None = None) -> ImportedSegments:
    """Parses the Kaldi data directory ``path`` (see the module docstring).

    Args:
      path: the folder holding ``wav.scp`` (and optionally ``segments``,
        ``text``, ``utt2spk``, ``spk2gender``).
      audio_root: the folder relative ``wav.scp`` paths start from. Kaldi
        resolves them from where its scripts run (the recipe folder, usually
        the data folder's grandparent); default: the current directory.
    """
    folder = os.path.abspath(os.fspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"Kaldi data directory not found: {folder}.")
    scp = os.path.join(folder, "wav.scp")
    if not os.path.isfile(scp):
        raise FileNotFoundError(f"{folder} has no wav.scp, so it is not a Kaldi data directory.")
    root = os.path.abspath(os.fspath(audio_root)) if audio_root is not None else os.getcwd()
    recordings = _recordings(scp, root)
    file = {name: os.path.join(folder, name) for name in KALDI_FILES}
    has = {name: os.path.isfile(p) for name, p in file.items()}
    ids, recs, starts, ends, lines = [], [], [], [], []
    if has["segments"]:
        where = file["segments"]
        for number, line in _lines(where):
            parts = line.split()
            if len(parts) != 4:
                raise _fail(where, number, f"needs '<utterance-id> <recording-id> <start> <end>', got {line!r}.")
            utt, rec, start, end = parts
            if rec not in recordings:
                raise _fail(where, number, f"utterance {utt!r} is in recording {rec!r}, which wav.scp does not list.")
            try:
                start_s, end_s = float(start), float(end)
            except ValueError:
                raise _fail(where, number, f"start and end must be seconds, got {start!r} and {end!r}.") from None
            if end_s == -1:  # Kaldi: -1 means the end of the recording
                end_s = None
            ids.append(utt)
            recs.append(rec)
            starts.append(start_s)
            ends.append(end_s)
            lines.append(number)
    else:
        where = scp
        for rec, (number, _) in recordings.items():
            ids.append(rec)
            recs.append(rec)
            starts.append(0.0)
            ends.append(None)
            lines.append(number)
    known = set(ids)
    columns: dict[str, list] = {
        "path": [recordings[r][1] for r in recs], "start": starts, "end": ends, "id": ids, "recording": recs,
    }
    if has["text"]:
        text = _table(file["text"], fields=None, rest=True)
        _check_known(file["text"], text, known)
        columns["text"] = [text[u][1] if u in text else None for u in ids]
    speakers: dict = {}
    if has["utt2spk"]:
        speakers = _table(file["utt2spk"], fields=2)
        _check_known(file["utt2spk"], speakers, known)
        columns["speaker"] = [speakers[u][1] if u in speakers else None for u in ids]
    if has["spk2gender"]:
        genders = _table(file["spk2gender"], fields=2)
        for spk, (number, value) in genders.items():
            if value not in ("m", "f"):
                raise _fail(file["spk2gender"], number, f"gender of {spk!r} is {value!r}; Kaldi uses 'm' or 'f'.")
        columns["gender"] = [genders[speakers[u][1]][1] if u in speakers and speakers[u][1] in genders else None
                             for u in ids]
    return ImportedSegments(recordings={k: v[1] for k, v in recordings.items()}, columns=columns, where=where,
                            lines=lines)


def _check_known(path: str, table: dict, known: set) -> None:
    for key, (number, _) in table.items():
        if key not in known:
            raise _fail(path, number, f"utterance {key!r} is not in the data directory's segments (or wav.scp); fix "
                                      "the key or run Kaldi's utils/fix_data_dir.sh.")
