"""Kept so that existing imports work: file discovery lives in :mod:`audiotree.discovery.files`."""

from audiotree.discovery.files import SourceSpec, discover, find_audio_files, source_pairs

__all__ = ["find_audio_files", "SourceSpec", "source_pairs", "discover"]
