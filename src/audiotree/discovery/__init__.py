"""Finding what a corpus holds, below the index that records it and the builders that read it.

* :mod:`~audiotree.discovery.files`: audio files under folders, globs and URLs
  (:func:`~audiotree.discovery.files.discover`, ``find_audio_files``), and the
  ``(group, entry)`` pairs of a ``sources`` argument (``source_pairs``);
* :mod:`~audiotree.discovery.containers`: the members of webdataset tar shards
  and Parquet files (``ContainerItems``), brace patterns, and the label rows of
  their sidecars and columns (``label_rows``);
* :mod:`~audiotree.discovery.sharding`: the check of ``shard_options`` and each
  host's share of a list of items.

:mod:`audiotree.index` and :mod:`audiotree.sources` both import it; it imports
only :mod:`audiotree.io` and the plain helpers below it. The public names stay
importable from :mod:`audiotree.sources` as before.
"""
