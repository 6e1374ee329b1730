"""Readers of pre-rendered data: AudioWriter, TreeWriter, ArrayRecord datasets and renders."""
