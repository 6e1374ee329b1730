"""audiotree: balanced, reproducible streams of audio excerpts for ML training.

The top-level namespace is kept light: ``import audiotree`` imports NumPy and
JAX's pytree utilities but not Grain, torch, or any decoder beyond soundfile.
``audiotree.sources`` and ``audiotree.transforms`` load on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from audiotree.lazy_exports import lazy_exports

from audiotree.version import __version__ as __version__  # re-exported

__all__ = ["AudioTree", "ExcerptConfig", "Output", "Order", "Corpus", "AudioWriter", "TreeWriter", "render", "sources", "transforms"]

_LAZY = {
    "AudioTree": ("audiotree.core", "AudioTree"),
    "ExcerptConfig": ("audiotree.excerpts.config", "ExcerptConfig"),
    "Output": ("audiotree.sources.datasets.options", "Output"),
    "Order": ("audiotree.sources.datasets.options", "Order"),
    "Corpus": ("audiotree.sources.datasets.options", "Corpus"),
    "AudioWriter": ("audiotree.writers", "AudioWriter"),
    "TreeWriter": ("audiotree.writers", "TreeWriter"),
    "render": ("audiotree.writers.render_run", "render"),
    "sources": ("audiotree.sources", None),
    "transforms": ("audiotree.transforms", None),
    "jax": ("audiotree.jax", None),  # not in __all__: JAX-only helpers, imported on first use
}

if TYPE_CHECKING:  # pragma: no cover
    from audiotree import sources, transforms
    from audiotree.core import AudioTree
    from audiotree.excerpts.config import ExcerptConfig
    from audiotree.sources.datasets.options import Corpus, Order, Output
    from audiotree.writers import AudioWriter, TreeWriter
    from audiotree.writers.render_run import render


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
