"""The decode-only command pipes of Kaldi ``wav.scp`` files, read as the file they name (never run).

Most Kaldi recipes list their audio as *extended filenames*: a command whose
standard output is a WAV stream, ending in ``|``. When the command only
decodes one file, its output is that file's audio, so audiotree reads the
named file directly. :func:`piped_file` parses the command with ``shlex`` and
returns that file's name; the command is never run. These forms are read:

* ``flac -c -d -s FILE |`` (any of ``-c``, ``-d``, ``-s``, ``-f``, their long
  names, or combined as ``-dcs``);
* ``sox [-q|-V..|--no-show-progress] [-t TYPE] FILE [-t wav] - |`` with no
  effect after the ``-`` output;
* ``ffmpeg [-nostdin|-hide_banner|-y|-v LEVEL|-loglevel LEVEL] -i FILE [-f wav] - |``
  (or ``pipe:``, ``pipe:1`` as the output);
* ``cat FILE |``;
* ``sph2pipe [-f wav|-f rif] [-p] FILE |`` (a NIST SPHERE file; the caller
  checks that libsndfile reads it).

Anything else is refused with an :class:`UnsupportedPipe` saying why: any
``sox`` effect (``remix``, ``rate``, ``vol``, ...: the output is no longer the
file's audio), ``ffmpeg`` filters, channel maps and resampling (``-af``,
``-ac``, ``-ar``, ...), ``sph2pipe`` time or channel selections (``-t``,
``-c``), several input files, and other commands.

>>> piped_file("flac -c -d -s /data/a.flac |")
('/data/a.flac', 'flac')
>>> piped_file("sox /data/a.wav -t wav - |")
('/data/a.wav', 'sox')
>>> piped_file("sox /data/a.wav -t wav - remix 1 |")
Traceback (most recent call last):
...
audiotree.formats.kaldi_pipes.UnsupportedPipe: sox applies the effect(s) 'remix 1', so its output is not the file's audio
"""

from __future__ import annotations

import os
import shlex

__all__ = ["piped_file", "UnsupportedPipe", "DECODERS"]

#: The commands whose decode-only forms are read.
DECODERS = ("flac", "sox", "ffmpeg", "cat", "sph2pipe")


class UnsupportedPipe(ValueError):
    """A ``wav.scp`` command that does more than decode one file (the message says what)."""


def piped_file(command: str) -> tuple[str, str]:
    """``(file, program)`` of a decode-only ``wav.scp`` pipe (with its trailing ``|``); see the module docstring.

    Raises:
      UnsupportedPipe: the command does more than decode one file, or is not one of :data:`DECODERS`.
    """
    text = command.strip()
    if not text.endswith("|"):
        raise UnsupportedPipe("it is not an output pipe (a command ending in '|')")
    text = text[:-1].strip()
    if "|" in text:
        raise UnsupportedPipe("it chains several commands")
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UnsupportedPipe(f"its quoting cannot be parsed ({exc})") from None
    if not words:
        raise UnsupportedPipe("the command is empty")
    program = os.path.basename(words[0])
    parse = _PARSERS.get(program)
    if parse is None:
        raise UnsupportedPipe(f"{program!r} is not one of the decoders read without running them "
                              f"({', '.join(DECODERS)})")
    return parse(words[1:]), program


def _one(files: list, program: str) -> str:
    if len(files) != 1:
        shown = " ".join(files) if files else "none"
        raise UnsupportedPipe(f"{program} should read exactly one file, it names {shown}")
    return files[0]


def _flac(args: list) -> str:
    files = []
    for a in args:
        if a in ("--decode", "--stdout", "--silent", "--force"):
            continue
        if a.startswith("-") and not a.startswith("--") and len(a) > 1 and set(a[1:]) <= set("cdsf"):
            continue
        if a.startswith("-"):
            raise UnsupportedPipe(f"flac option {a!r} is not a plain decode (only -c, -d, -s, -f are)")
        files.append(a)
    if not any(a in ("--decode",) or (a.startswith("-") and not a.startswith("--") and "d" in a) for a in args):
        raise UnsupportedPipe("flac without -d encodes, it does not decode")
    return _one(files, "flac")


_SOX_GLOBAL = {"-q", "--no-show-progress", "-S", "--show-progress", "-V", "-V0", "-V1", "-V2", "-V3", "-V4"}


def _sox(args: list) -> str:
    words, files, out_seen, i = list(args), [], False, 0
    while i < len(words):
        a = words[i]
        if a in _SOX_GLOBAL:
            i += 1
            continue
        if a in ("-t", "--type"):
            if i + 1 >= len(words):
                raise UnsupportedPipe("sox -t needs a type")
            kind = words[i + 1]
            if files and kind not in ("wav", "wavpcm"):  # an output type other than WAV
                raise UnsupportedPipe(f"sox writes {kind!r}, not WAV")
            i += 2
            continue
        if a.startswith("-t") and len(a) > 2:
            if files and a[2:] not in ("wav", "wavpcm"):
                raise UnsupportedPipe(f"sox writes {a[2:]!r}, not WAV")
            i += 1
            continue
        if a == "-":
            out_seen = True
            effects = words[i + 1:]
            if effects:
                raise UnsupportedPipe(f"sox applies the effect(s) {' '.join(effects)!r}, so its output is not the "
                                      "file's audio")
            break
        if a.startswith("-"):
            raise UnsupportedPipe(f"sox option {a!r} changes the audio or its encoding (only -t TYPE, -q and -V are "
                                  "read as a plain decode)")
        files.append(a)
        i += 1
    if not out_seen:
        raise UnsupportedPipe("sox does not write to standard output ('-')")
    return _one(files, "sox")


_FFMPEG_FLAGS = {"-nostdin", "-hide_banner", "-y", "-n", "-nostats"}
_FFMPEG_VALUE = {"-v", "-loglevel"}


def _ffmpeg(args: list) -> str:
    files, out_seen, i = [], False, 0
    while i < len(args):
        a = args[i]
        if a in _FFMPEG_FLAGS:
            i += 1
        elif a in _FFMPEG_VALUE and i + 1 < len(args):
            i += 2
        elif a == "-i" and i + 1 < len(args):
            files.append(args[i + 1])
            i += 2
        elif a == "-f" and i + 1 < len(args):
            if args[i + 1] != "wav":
                raise UnsupportedPipe(f"ffmpeg writes {args[i + 1]!r}, not WAV")
            i += 2
        elif a in ("-", "pipe:", "pipe:1"):
            if i + 1 < len(args):
                raise UnsupportedPipe(f"ffmpeg has arguments after its output ({' '.join(args[i + 1:])!r})")
            out_seen = True
            i += 1
        else:
            raise UnsupportedPipe(f"ffmpeg option {a!r} changes the audio or is not a plain decode (only -i FILE, "
                                  "-f wav, -v/-loglevel, -nostdin, -hide_banner, -y are)")
    if not out_seen:
        raise UnsupportedPipe("ffmpeg does not write to standard output ('-' or 'pipe:')")
    return _one(files, "ffmpeg")


def _cat(args: list) -> str:
    if any(a.startswith("-") and a != "-" for a in args):
        raise UnsupportedPipe("cat takes no options here")
    return _one(list(args), "cat")


def _sph2pipe(args: list) -> str:
    files, i = [], 0
    while i < len(args):
        a = args[i]
        if a == "-f" and i + 1 < len(args):
            if args[i + 1] not in ("wav", "rif"):
                raise UnsupportedPipe(f"sph2pipe writes {args[i + 1]!r}, not WAV")
            i += 2
        elif a in ("-fwav", "-frif", "-p"):
            i += 1
        elif a.startswith("-"):
            raise UnsupportedPipe(f"sph2pipe option {a!r} selects or changes part of the audio (only -f wav and -p "
                                  "are a plain decode)")
        else:
            files.append(a)
            i += 1
    return _one(files, "sph2pipe")


_PARSERS = {"flac": _flac, "sox": _sox, "ffmpeg": _ffmpeg, "cat": _cat, "sph2pipe": _sph2pipe}
