"""Writers of pre-rendered datasets.

* :class:`AudioWriter`: audio files plus a column manifest (``manifest.npz``),
  read back by :class:`audiotree.sources.AudioDataSource`.
* :class:`TreeWriter`: any pytree as one memory-mappable file per leaf plus
  ``manifest.json``, read back by :class:`audiotree.sources.TreeDataSource`.
* :class:`ArrayRecordWriter`: items as records in sharded ArrayRecord files
  plus ``arrayrecord.json``, read back by :func:`audiotree.sources.open_arrayrecord`.
"""

from __future__ import annotations

from audiotree.writers.arrayrecord_writer import ArrayRecordWriter
from audiotree.writers.audio import AudioWriter
from audiotree.writers.tree import TreeWriter

__all__ = ["AudioWriter", "TreeWriter", "ArrayRecordWriter"]
