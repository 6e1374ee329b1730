"""JAX-side helpers of the loader: moving batches onto accelerators ahead of the step.

Imported on first use (``audiotree.jax``); importing it imports JAX but starts
no thread and touches no device.
"""

from __future__ import annotations

from audiotree.jax.prefetch import DevicePrefetchIterator, prefetch_to_device

__all__ = ["DevicePrefetchIterator", "prefetch_to_device"]
