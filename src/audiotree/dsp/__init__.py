"""Signal processing: BS.1770 loudness and sample-rate conversion (NumPy/soxr).

The JAX engines are deliberately *not* imported here, so ``import
audiotree.dsp`` stays light in data-loader workers. Import them by name when
needed::

    from audiotree.dsp.loudness_jax import measure_jax, integrated_loudness_jax
    from audiotree.dsp.resample_jax import resample_jax

(``audiotree.dsp.resample`` is the function re-exported here; the module of
the same name is ``sys.modules["audiotree.dsp.resample"]``, reachable with
``from audiotree.dsp.resample import ...``.)
"""

from __future__ import annotations

from audiotree.dsp.loudness import (
    gain_db_to_linear, gated_from_block_power, integrated_from_power, integrated_loudness, k_weighted_power,
    k_weighting_sos, measure, shift_lufs, windowed_from_power,
)
from audiotree.dsp.resample import resample

__all__ = [
    "gain_db_to_linear", "gated_from_block_power", "integrated_from_power", "integrated_loudness", "k_weighted_power",
    "k_weighting_sos", "measure", "resample", "shift_lufs", "windowed_from_power",
]
