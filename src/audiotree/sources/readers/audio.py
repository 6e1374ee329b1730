"""``AudioDataSource``: random access to an ``AudioWriter`` dataset, for Grain.

The manifest is validated when the source is built (header and version,
closed column set, kinds, lengths, masks, and that every file name is a
relative path without ``..``); each audio path is resolved again at read time
and refused if a symlink leads outside the folder. A file whose header no
longer matches its manifest row (rate, channels or length) is a read error,
never a silently short item. The reading itself is
:class:`audiotree.formats.manifest_reader.ManifestReader`.
"""

from __future__ import annotations

import functools
from typing import Any

from audiotree.core import AudioTree
from audiotree.formats.manifest_reader import ManifestReader
from audiotree.process_local import ExitsWithPickler
from audiotree.sources.workers.lifecycle import hold_grain_flag_while_alive

__all__ = ["AudioDataSource"]


class AudioDataSource(ExitsWithPickler, ManifestReader):
    """A Grain ``RandomAccessDataSource`` over an :class:`~audiotree.AudioWriter` folder.

    ``source[i]`` is a batch-of-1 ``AudioTree`` with the item's audio (or
    zeros for a manifest-only dataset), its label fields, ``extras`` (with a
    batch axis) and provenance.

    Args:
      path: the dataset folder or its ``manifest.npz``.
      audio_dir: where the audio files are (default: the manifest's folder).
      num_records: keep only the first this many entries (after ``filter_fn``).
      sample_rate: resample to this rate (default: the stored rate).
      mono: average channels.
      duration: read this many seconds from the start of each file (padded
        with ``pad_mode``); default the whole file.
      filter_fn: ``entry dict -> bool``; see :meth:`get_entry` for the entry.
      on_read_error: a missing, undecodable or changed audio file ``"raise"``s
        an ``AudioReadError``, or is ``"warn"``-ed about / ``"skip"``-ped
        (the item is ``None``, which ``to_iter_dataset`` drops).

    Derived fields (``lufs``, ``lufs_windows``, ``codes``, ``latents``) are
    restored only when the audio is read unchanged (same rate, no mono fold
    of a multichannel file, full length). Indices must be ``0 <= i < len``.
    The source pickles with the standard library.
    """

    @functools.wraps(ManifestReader.__init__)
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        hold_grain_flag_while_alive(self)  # mp_prefetch from a plain script (audiotree.sources.workers.lifecycle)

    def __getitem__(self, index: int) -> Any:
        """Item ``index`` as a batch-of-1 ``AudioTree`` (or ``None`` when dropped by ``on_read_error``)."""
        fields = self.read_fields(index)
        return None if fields is None else AudioTree(**fields)
