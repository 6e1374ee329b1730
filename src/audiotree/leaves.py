"""Batch-axis leaves: what an ``AudioTree`` holds and how one leaf is indexed or joined.

A *leaf* is a NumPy or JAX array with a leading batch axis, or a *string leaf*:
a bare ``str`` (one item) or a (nested) list of ``str`` (one per item). These
helpers work on one leaf or a nested dict of them, in the leaf's own array
library; they know nothing of the container's fields.

>>> index_strings(["a", "b", "c"], slice(1, None))
['b', 'c']
>>> normalize_key(-1, 3)
slice(2, 3, None)
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
import numpy as np

__all__ = [
    "is_jax",
    "array_module",
    "is_string_leaf",
    "is_array",
    "check_extras",
    "index_strings",
    "normalize_key",
    "map_leaves",
    "concat",
    "flatten_strings",
    "batch_nodes",
    "resolve_device",
]


def is_jax(x: Any) -> bool:
    return isinstance(x, jax.Array)


def array_module(*arrays: Any):
    """The array library (numpy or jax.numpy) that owns ``arrays``."""
    if any(is_jax(a) for a in arrays):
        import jax.numpy as jnp

        return jnp
    return np


def is_string_leaf(x: Any) -> bool:
    """A bare str, or a (possibly nested) list/tuple whose leaves are all str."""
    if isinstance(x, str):
        return True
    if isinstance(x, (list, tuple)):
        return all(is_string_leaf(v) for v in x)
    return False


def is_array(x: Any) -> bool:
    return isinstance(x, (np.ndarray, np.generic)) or is_jax(x)


def check_extras(value: Any, path: str = "extras") -> None:
    if isinstance(value, dict):
        for key, sub in value.items():
            check_extras(sub, f"{path}[{key!r}]")
    elif isinstance(value, (list, tuple)) and not is_string_leaf(value):
        raise TypeError(
            f"{path} is a {type(value).__name__} of non-strings; extras hold arrays with a "
            "leading batch axis, so convert it with np.asarray(...) first."
        )


def index_strings(value: Any, key: Any) -> list:
    """Indexes a string leaf along its batch axis; always returns a list."""
    items = [value] if isinstance(value, str) else list(value)
    if isinstance(key, slice):
        return items[key]
    key = np.asarray(key)
    if key.dtype == bool:
        if key.shape != (len(items),):
            raise IndexError(
                f"Boolean mask of shape {key.shape} does not match {len(items)} string items."
            )
        return [v for v, keep in zip(items, key) if keep]
    if not np.issubdtype(key.dtype, np.integer):
        raise IndexError(f"Cannot index string items with a key of dtype {key.dtype}.")
    return [items[int(i)] for i in key.reshape(-1)]


def normalize_key(key: Any, batch_size: int) -> Any:
    """Turns an integer-like key into a length-1 slice (keeping the batch axis)."""
    if isinstance(key, (bool, np.bool_)):
        raise IndexError("A bool is not a valid AudioTree index; use a boolean mask array.")
    integer = None
    if isinstance(key, (int, np.integer)):
        integer = int(key)
    elif is_array(key) and getattr(key, "ndim", None) == 0:
        if np.issubdtype(np.dtype(key.dtype), np.integer):
            integer = int(key)
    if integer is not None:
        if not -batch_size <= integer < batch_size:
            raise IndexError(f"Index {integer} is out of range for a batch of {batch_size}.")
        integer %= batch_size
        return slice(integer, integer + 1)
    if isinstance(key, (list, tuple)):
        key = np.asarray(key) if len(key) else np.zeros(0, dtype=np.intp)
    return key


def map_leaves(value: Any, on_array: Callable, on_strings: Callable, *,
               is_leaf_array: Callable[[Any], bool] | None = None) -> Any:
    """Applies ``on_array``/``on_strings`` through nested dicts of batch leaves.

    ``is_leaf_array`` decides what counts as an array (default :func:`is_array`;
    the torch adapter adds tensors).
    """
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: map_leaves(v, on_array, on_strings, is_leaf_array=is_leaf_array) for k, v in value.items()}
    if is_string_leaf(value):
        return on_strings(value)
    if (is_leaf_array or is_array)(value):
        return on_array(value)
    return value


def concat(values: Sequence[Any]) -> Any:
    xp = array_module(*values)
    return xp.concatenate([xp.asarray(v) for v in values], axis=0)


def flatten_strings(values: Sequence[Any]) -> list:
    out: list = []
    for v in values:
        if isinstance(v, str):
            out.append(v)
        else:
            out.extend(v)
    return out


def batch_nodes(nodes: Sequence[Any], batch_container: Callable[[Sequence[Any]], Any]) -> Any:
    """Concatenates a list of like-structured nodes along axis 0.

    ``batch_container(nodes)`` is tried first and batches the container types it
    knows (returning ``None`` for others); then dicts, lists and tuples recurse,
    string leaves are collected into one list, arrays concatenated (JAX if any
    input is JAX), and any other leaf is gathered with ``list(nodes)``.
    """
    batched = batch_container(nodes)
    if batched is not None:
        return batched
    first = nodes[0]
    if all(n is None for n in nodes):
        return None
    if all(is_string_leaf(n) for n in nodes):
        return flatten_strings(nodes)
    if isinstance(first, dict):
        keys = list(first)
        for n in nodes:
            if not isinstance(n, dict) or set(n) != set(keys):
                raise ValueError(
                    "Cannot batch items whose dict keys differ: "
                    f"{sorted(map(str, keys))} vs {sorted(map(str, n)) if isinstance(n, dict) else type(n)}."
                )
        return {k: batch_nodes([n[k] for n in nodes], batch_container) for k in keys}
    if isinstance(first, (list, tuple)):
        if any(not isinstance(n, (list, tuple)) or len(n) != len(first) for n in nodes):
            raise ValueError("Cannot batch items whose list structure differs.")
        return type(first)(batch_nodes([n[i] for n in nodes], batch_container) for i in range(len(first)))
    if all(is_array(n) and np.ndim(n) > 0 for n in nodes):
        shapes = {tuple(np.shape(n))[1:] for n in nodes}
        if len(shapes) != 1:
            raise ValueError(
                f"Cannot batch arrays whose shapes past the batch axis differ: {sorted(shapes)}. Only the "
                "waveform (and lufs_windows) of AudioTrees are padded; pad other variable-length leaves yourself."
            )
        return concat(nodes)
    return list(nodes)


def resolve_device(device: Any) -> Any:
    """``None``, a platform name (``"cpu"``, ``"gpu"``, ``"tpu"``) or a ``jax.Device`` as a device."""
    if device is None:
        return None
    if isinstance(device, str):
        if device not in ("cpu", "gpu", "tpu"):
            raise ValueError(f"Unknown device {device!r}; use 'cpu', 'gpu', 'tpu' or a jax.Device.")
        try:
            return jax.devices(device)[0]
        except RuntimeError as exc:
            raise ValueError(f"No {device!r} device is available: {exc}") from None
    if isinstance(device, jax.Device):
        return device
    raise TypeError(f"device must be None, a string or a jax.Device, got {type(device).__name__}.")
