"""Choosing excerpts: the strategies, the ``loudest`` search and the corpus-index plan.

* :mod:`audiotree.excerpts.config`: :class:`ExcerptConfig` (which strategy, its
  knobs) and the offset searches (``uniform``, ``bias_early``). Pure configuration.
* :mod:`audiotree.excerpts.strategies`: :func:`select_clip` applies a strategy to
  one file (one open, one read; the reading is :mod:`audiotree.io.excerpt`), and
  :func:`loudest_clip` is its ``loudest`` strategy alone.
* :mod:`audiotree.excerpts.search`: the ``loudest`` search without an index (the
  first draw, the energy map, the probes).
* :mod:`audiotree.excerpts.plan`: the plan that replaces that search with a
  corpus index (qualifying window starts from the loudness profiles).

Importing this package loads only the configuration (NumPy); the readers load
on first use.

>>> from audiotree.excerpts import ExcerptConfig
>>> ExcerptConfig(strategy="loudest", num_tries=4).num_tries
4
"""

from __future__ import annotations

from audiotree.lazy_exports import lazy_exports

from audiotree.excerpts.config import ExcerptConfig, search_bias_early, search_uniform

__all__ = ["ExcerptConfig", "search_uniform", "search_bias_early", "select_clip", "loudest_clip"]

# Modules loaded on first use: they import the decoders.
_LAZY = {
    "select_clip": "audiotree.excerpts.strategies",
    "loudest_clip": "audiotree.excerpts.strategies",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
