"""Tensors and collate: ``TorchAudioTree``, ``to_torch``, ``collate``, ``collate_tensors``.

See :mod:`audiotree.torch` and ``docs/torch.md`` for the design.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, Callable, Sequence

import numpy as np
import torch

from audiotree.core import ARRAY_FIELDS, AudioTree
from audiotree.leaves import is_jax, map_leaves

__all__ = ["TorchAudioTree", "to_torch", "collate", "collate_tensors"]


def _is_number(x: Any) -> bool:
    return isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, (str, bytes))


def _array_to_tensor(a: np.ndarray) -> Any:
    if a.dtype.kind not in "biufc":
        return a  # strings, objects: not tensor material
    if not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a, copy=True, order="C")
    return torch.from_numpy(a)


def _leaf_to_torch(x: Any) -> Any:
    if x is None or isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return _array_to_tensor(x)
    if isinstance(x, np.generic) and x.dtype.kind in "biufc":
        return torch.from_numpy(np.asarray(x).reshape(()).copy())
    if is_jax(x):
        return _array_to_tensor(np.asarray(x))
    if isinstance(x, dict):
        return {k: _leaf_to_torch(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and x:
        if all(isinstance(v, torch.Tensor) for v in x):  # per-item tensors: join on the batch axis
            return torch.cat([v.reshape(1) if v.ndim == 0 else v for v in x], dim=0)
        if all(_is_number(v) for v in x):  # per-item scalars (labels, ids)
            return torch.as_tensor(np.asarray(x))
        return _rebuild(x, [_leaf_to_torch(v) for v in x])
    return x


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _rebuild(original: Any, items: list) -> Any:
    """A list/tuple/namedtuple of the same type as ``original`` holding ``items``."""
    return type(original)(*items) if _is_namedtuple(original) else type(original)(items)


def _map_tensors(value: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


def _is_batch_array(x: Any) -> bool:
    """A batch leaf that is an array: a torch tensor as well as a NumPy or JAX array."""
    return isinstance(x, (torch.Tensor, np.ndarray, np.generic)) or is_jax(x)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class TorchAudioTree(AudioTree):
    """An :class:`~audiotree.AudioTree` whose array fields are torch tensors.

    What :func:`collate` returns. Array fields and array ``extras`` are tensors;
    ``.filepath``/``.source`` are lists of strings and ``.offset`` is a float64
    ``(B,)`` CPU tensor of excerpt starts in seconds (``None`` if unknown; NaN for
    items without a file). ``lufs`` is ``None`` unless the items were metered:
    ``strategy="loudest"`` measures it, and the dataset builders' ``meter=True``
    measures it for any strategy. Supports batch indexing, ``split`` and
    mini-batch reshaping, :meth:`to` and :meth:`pin_memory` (so the DataLoader's
    ``pin_memory=True`` pins it). For audio DSP methods convert back with
    :meth:`numpy`. Not a JAX pytree.
    """

    @property
    def backend(self) -> str:
        return "torch"

    @property
    def offset(self) -> Any:
        """Excerpt start in seconds, a float64 ``(B,)`` CPU tensor; ``None`` if unknown.

        Provenance, like ``filepath``: it stays on the CPU (``to(device)`` and
        ``pin_memory`` leave it), and is a fresh tensor on every access.
        """
        value = self._metadata.get("offset")
        if value is None or isinstance(value, torch.Tensor):
            return value
        return torch.from_numpy(np.array(value, dtype=np.float64))

    def _map_batch(self, on_array: Callable, on_strings: Callable) -> "TorchAudioTree":
        updates = {
            name: map_leaves(getattr(self, name), on_array, on_strings, is_leaf_array=_is_batch_array)
            for name in (*ARRAY_FIELDS, "extras", "_metadata")
        }
        return dataclasses.replace(self, **updates)

    def _map_tensors(self, fn: Callable[[Any], Any]) -> "TorchAudioTree":
        updates = {name: _map_tensors(getattr(self, name), fn) for name in (*ARRAY_FIELDS, "extras")}
        return dataclasses.replace(self, **updates)

    def to(self, *args: Any, **kwargs: Any) -> "TorchAudioTree":
        """``tensor.to(*args, **kwargs)`` on every tensor (device, dtype, ``non_blocking``)."""
        return self._map_tensors(lambda t: t.to(*args, **kwargs))

    def pin_memory(self, *args: Any) -> "TorchAudioTree":
        """Page-locked copies of every tensor (called by ``DataLoader(pin_memory=True)``)."""
        return self._map_tensors(lambda t: t.pin_memory(*args))

    def mask(self) -> Any:
        """``(..., 1, T)`` bool tensor: True on real samples (all True without ``lengths``)."""
        shape = tuple(self.waveform.shape)
        device = self.waveform.device if isinstance(self.waveform, torch.Tensor) else None
        if self.lengths is None:
            return torch.ones(shape[:-2] + (1, shape[-1]), dtype=torch.bool, device=device)
        lengths = torch.as_tensor(self.lengths, device=device)
        return torch.arange(shape[-1], device=device) < lengths[..., None, None]

    def numpy(self) -> AudioTree:
        """A plain NumPy :class:`~audiotree.AudioTree` (tensors copied to the CPU)."""
        fn = lambda t: t.detach().cpu().numpy()  # noqa: E731
        updates = {name: _map_tensors(getattr(self, name), fn) for name in (*ARRAY_FIELDS, "extras")}
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(AudioTree)}
        fields.update(updates)
        return AudioTree(**fields)


def to_torch(value: Any) -> Any:
    """Converts NumPy/JAX leaves to torch tensors; ``AudioTree`` becomes :class:`TorchAudioTree`.

    Works through dicts, lists and tuples. Lists of numbers become 1-D tensors,
    strings and provenance are left alone. NumPy arrays are wrapped without a copy
    when they are writable and contiguous.
    """
    if isinstance(value, AudioTree):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(AudioTree)}
        for name in (*ARRAY_FIELDS, "extras"):
            fields[name] = _leaf_to_torch(fields[name])
        return TorchAudioTree(**fields)
    if isinstance(value, dict):
        return {k: to_torch(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and any(isinstance(v, (AudioTree, dict, list, tuple)) for v in value):
        return _rebuild(value, [to_torch(v) for v in value])
    return _leaf_to_torch(value)


def _tree_as_dict(tree: AudioTree) -> dict:
    out: dict = {"sample_rate": tree.sample_rate}
    for name in ARRAY_FIELDS:
        value = getattr(tree, name)
        if value is not None:
            out[name] = value
    if tree.extras:
        out["extras"] = dict(tree.extras)
    if tree.filepath:
        out["filepath"] = tree.filepath
    if tree.source:
        out["source"] = tree.source
    if tree.offset is not None:
        out["offset"] = np.asarray(tree.offset)
    return out


def _trees_as_dicts(value: Any) -> Any:
    if isinstance(value, AudioTree):
        return _tree_as_dict(value)
    if isinstance(value, dict):
        return {k: _trees_as_dicts(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return _rebuild(value, [_trees_as_dicts(v) for v in value])
    return value


def _batch(items: Sequence[Any]) -> Any:
    kept = [item for item in items if item is not None]
    if not kept:
        return None
    return AudioTree.batch(kept)


def collate(items: Sequence[Any]) -> Any:
    """Batches ``AudioTree`` items (or dicts/lists/tuples of them) into a :class:`TorchAudioTree`.

    The DataLoader ``collate_fn`` for audiotree datasets. ``None`` items (files
    skipped by ``on_read_error``) are dropped, so a batch can be smaller than
    ``batch_size``; a batch with nothing left is ``None`` (:class:`AudioDataLoader`
    skips it). Items are concatenated along their leading batch axis
    (:meth:`AudioTree.batch`), then every array becomes a tensor.
    """
    batched = _batch(items)
    return None if batched is None else to_torch(batched)


def collate_tensors(items: Sequence[Any]) -> Any:
    """Like :func:`collate`, but every ``AudioTree`` becomes a plain ``dict``.

    Keys: ``waveform`` and any other set array field (tensors), ``sample_rate``
    (int), ``extras`` (dict), ``filepath`` and ``source`` (lists of str) and
    ``offset`` (float64 tensor), the last three when the items carry provenance.
    """
    batched = _batch(items)
    return None if batched is None else to_torch(_trees_as_dicts(batched))
