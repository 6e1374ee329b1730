"""Pictures of audio and of pipelines: preview cards, corpus histograms, shared figure helpers.

Drawing uses matplotlib (a dependency of audiotree), imported only when
a function draws; the preview's SVG cards need nothing beyond NumPy.
"""

from __future__ import annotations

from audiotree.plots.mix import plot_mix_proportions
from audiotree.plots.scan import plot_scan

__all__ = ["plot_mix_proportions", "plot_scan"]
