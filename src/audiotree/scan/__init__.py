"""Corpus health reports: the library half of ``audiotree scan``.

Two reports with one schema (the ``--json`` output, :data:`REPORT_KEYS`):
:func:`scan_report` probes the files of folders, and
:func:`index_scan_report` reads a corpus index's rows and loudness profiles
(no audio file is opened). The keys:

- ``version`` (:data:`SCHEMA_VERSION`), ``index`` (the index file, ``None`` for
  folders), ``sources`` (``{group: [entries]}``, ``"(all)"`` without groups);
- ``files``, ``readable``, ``total_seconds``, ``total_hours``, and ``groups``
  (``{group: {"files", "readable", "seconds"}}``);
- ``formats`` (``"FORMAT/SUBTYPE"``), ``sample_rates`` and ``channels``: file
  counts over the readable files; ``duration_histogram`` (bins of seconds);
- ``unreadable`` (``[{"path", "reason"}]``), ``unreadable_by_reason`` (``{category: files}``, most
  first: the short :attr:`~audiotree.errors.AudioReadError.category` of each, so that a whole corpus refused
  for one cause shows as one line), ``short`` (``{"min_seconds",
  "files": [{"path", "seconds"}]}``: the readable files shorter than the
  excerpt length, padded when read), ``notes``;
- ``loudness``: ``None`` unless asked for, else the integrated loudness of the
  first ``max_seconds`` of each file (``mono``: of the channel average, as an
  index built with ``--mono`` profiles it; else BS.1770's weighted channels);
- ``windows``: for an index with profiles, each file's share of excerpt-length
  windows above a cutoff; ``None`` otherwise. A file shorter than the window
  has no full window: ``windows`` 0 and ``share_above`` ``None``;
- ``quality``: for an index with quality columns, each column's histogram and
  worst files (:mod:`audiotree.scan.quality`); ``None`` otherwise.

>>> sorted(REPORT_KEYS)[:4]
['channels', 'duration_histogram', 'files', 'formats']
"""

from __future__ import annotations

from audiotree.scan.folder import scan_report
from audiotree.scan.index import index_has_profiles, index_scan_report
from audiotree.scan.summary import LOUDNESS_KEYS, REPORT_KEYS, SCHEMA_VERSION, WINDOWS_KEYS

__all__ = ["SCHEMA_VERSION", "REPORT_KEYS", "LOUDNESS_KEYS", "WINDOWS_KEYS", "scan_report", "index_scan_report",
           "index_has_profiles"]
