"""Which decoder an index's MP3 and Ogg Vorbis seek tables were checked with.

A lossy file's seek table (:mod:`audiotree.io.mpeg_seek_points`,
:mod:`audiotree.io.ogg_seek_points`) is kept by an index build only when
excerpts read by it equal the file's own read bit for bit. That equality is a
property of the decoder: mpg123's rounding follows its synthesis phase and
where its seek starts, libvorbis's its block lapping. Another libsndfile (a new
soundfile wheel) may round differently, and then an excerpt read by the table
would differ in its last bits from the same excerpt read locally. So a build
records :func:`decoder_identity` in the index's metadata (``decoders``), and a
reader uses the lossy tables only under the same decoder (:func:`same_decoder`);
otherwise those files read as they do without a table (correct, with more
requests) until an update checks their tables again. FLAC is lossless: its
tables hold under any decoder.

An index written before decoders were recorded (format 1.3) is trusted as
before: its tables were checked by the decoder of their build, which this
cannot know.

>>> sorted(decoder_identity())
['libsndfile', 'soundfile']
>>> same_decoder(None), same_decoder(decoder_identity()), same_decoder({"libsndfile": "0.0.1"})
(True, True, False)
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping

__all__ = ["decoder_identity", "same_decoder", "tables_hold"]


def decoder_identity() -> dict[str, str]:
    """The versions that decide a lossy decode's bits here: libsndfile's (with the mpg123 and libvorbis it is built
    with) and the soundfile package's (whose wheel bundles it)."""
    import soundfile

    return {"libsndfile": str(soundfile.__libsndfile_version__), "soundfile": str(soundfile.__version__)}


def same_decoder(recorded: Mapping[str, Any] | None) -> bool:
    """Whether tables checked under ``recorded`` (an index's ``decoders``; ``None``: not recorded) hold here."""
    return recorded is None or dict(recorded) == decoder_identity()


def tables_hold(recorded: Mapping[str, Any] | None, index_path: str, refresh: str) -> bool:
    """:func:`same_decoder`, with a warning naming the index at ``index_path`` and its update command ``refresh``
    when the tables it recorded do not hold here."""
    if same_decoder(recorded):
        return True
    warnings.warn(
        f"{index_path}: its MP3 and Ogg Vorbis seek tables were checked with {dict(recorded)}, and this process "
        f"decodes with {decoder_identity()}: they are not used, so remote MP3 and Ogg excerpts are read without them "
        f"(the same samples, more requests). Update the index to check them again: {refresh}",
        UserWarning, stacklevel=4)
    return False
