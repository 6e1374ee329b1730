"""audiotree's on-disk layouts, one module each, shared by the writers and the readers.

* :mod:`~audiotree.formats.header`: the versioned header every layout starts with.
* :mod:`~audiotree.formats.manifest`: the ``AudioWriter`` NPZ manifest; :mod:`~audiotree.formats.manifest_reader`
  reads it and the audio it names (through :mod:`audiotree.io`).
* :mod:`~audiotree.formats.tree`: the ``TreeWriter`` memmap layout.
* :mod:`~audiotree.formats.window_lufs`: the per-window loudness cache.
* :mod:`~audiotree.formats.render_record`: the record a ``render`` run leaves behind.
* :mod:`~audiotree.formats.kaldi`, :mod:`~audiotree.formats.lhotse`: other toolkits'
  corpus descriptions (Kaldi data directories, lhotse manifests), read into
  :mod:`~audiotree.formats.imported` segment lists; lhotse manifests written back.
"""
