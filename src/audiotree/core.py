"""The ``AudioTree`` container: a batch of audio excerpts as an immutable JAX pytree.

Shape conventions
-----------------
* ``waveform``: ``(B, C, T)`` channels-first; ``(M, B, C, T)`` after
  :meth:`AudioTree.reshape_mini_batches`. ``None`` gives a token-only tree.
* Per-item labels (``lufs``, ``pitch``, ``velocity``, ``note_duration``): ``(B,)``.
* ``lufs_windows``: ``(B, W)``. ``codes``/``latents``: codec-defined, leading ``B``.
* ``extras``: the user's dict of per-item leaves with a leading batch axis, lists of
  strings (one per item), a bare string (batch of one), or nested dicts of these.
* Provenance (``filepath``, ``source``, ``offset``) lives in the private
  ``_metadata`` dict; strings are int32 code-point rows ``(B, 1024)`` so they
  batch, cross processes and pass through ``jax.jit`` like any array.
* ``lengths``: ``(B,)`` int32, the real samples of each item of a padded batch
  of variable-length items (``(M, B)`` after mini-batching). ``None`` means
  every item fills the whole ``T`` (fixed-length excerpts): fixed-length
  batches keep the tree structure of audiotree 1.0. Samples at or past an
  item's length are padding: zeros, never metered, normalised or augmented.
  :meth:`AudioTree.mask` gives the ``(B, 1, T)`` boolean mask, in NumPy and
  under ``jit``.

``sample_rate`` is static pytree metadata: trees at different rates have
different tree definitions. Every method returns a new tree; nothing mutates.
NumPy and JAX leaves are both supported; operations stay in the leaf's library.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import jax
import numpy as np

from audiotree._strings import decode_strings, encode_strings

__all__ = [
    "AudioTree",
    "PYTREE_FIELDS",
    "ARRAY_FIELDS",
    "LABEL_FIELDS",
    "DERIVED_FIELDS",
    "METADATA_KEYS",
]

DERIVED_FIELDS = ("lufs", "lufs_windows", "codes", "latents")
METADATA_KEYS = ("filepath", "source", "offset")


def _is_jax(x: Any) -> bool:
    return isinstance(x, jax.Array)


def _xp(*arrays: Any):
    """The array library (numpy or jax.numpy) that owns ``arrays``."""
    if any(_is_jax(a) for a in arrays):
        import jax.numpy as jnp

        return jnp
    return np


def _is_string_leaf(x: Any) -> bool:
    """A bare str, or a (possibly nested) list/tuple whose leaves are all str."""
    if isinstance(x, str):
        return True
    if isinstance(x, (list, tuple)):
        return all(_is_string_leaf(v) for v in x)
    return False


def _is_array(x: Any) -> bool:
    return isinstance(x, (np.ndarray, np.generic)) or _is_jax(x)


def _check_extras(value: Any, path: str = "extras") -> None:
    if isinstance(value, dict):
        for key, sub in value.items():
            _check_extras(sub, f"{path}[{key!r}]")
    elif isinstance(value, (list, tuple)) and not _is_string_leaf(value):
        raise TypeError(
            f"{path} is a {type(value).__name__} of non-strings; extras hold arrays with a "
            "leading batch axis, so convert it with np.asarray(...) first."
        )


def _index_strings(value: Any, key: Any) -> list:
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


def _normalize_key(key: Any, batch_size: int) -> Any:
    """Turns an integer-like key into a length-1 slice (keeping the batch axis)."""
    if isinstance(key, (bool, np.bool_)):
        raise IndexError("A bool is not a valid AudioTree index; use a boolean mask array.")
    integer = None
    if isinstance(key, (int, np.integer)):
        integer = int(key)
    elif _is_array(key) and getattr(key, "ndim", None) == 0:
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


def _map_leaves(value: Any, on_array: Callable, on_strings: Callable) -> Any:
    """Applies ``on_array``/``on_strings`` through nested dicts of batch leaves."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {k: _map_leaves(v, on_array, on_strings) for k, v in value.items()}
    if _is_string_leaf(value):
        return on_strings(value)
    if _is_array(value):
        return on_array(value)
    return value


def _concat(values: Sequence[Any]) -> Any:
    xp = _xp(*values)
    return xp.concatenate([xp.asarray(v) for v in values], axis=0)


def _flatten_strings(values: Sequence[Any]) -> list:
    out: list = []
    for v in values:
        if isinstance(v, str):
            out.append(v)
        else:
            out.extend(v)
    return out


def check_lengths(lengths: Any, waveform: Any) -> Any:
    """Validated ``lengths`` for ``waveform`` ``(..., C, T)``: int32 ``(...,)`` in ``[0, T]``.

    Concrete values are checked; traced JAX values (under ``jit``) only by shape.
    """
    if waveform is None:
        raise ValueError("lengths needs a waveform to describe; this tree is token-only.")
    shape = tuple(np.shape(waveform))
    if _is_jax(lengths):
        import jax.numpy as jnp

        values = lengths
        if not jnp.issubdtype(values.dtype, jnp.integer):
            raise ValueError(f"lengths must be integers (samples), got dtype {values.dtype}.")
        if tuple(values.shape) != shape[:-2]:
            raise ValueError(
                f"lengths has shape {tuple(values.shape)} but the waveform {shape} has items {shape[:-2]}."
            )
        if isinstance(values, jax.core.Tracer):
            return values.astype(jnp.int32)
        concrete = np.asarray(values)
    else:
        concrete = np.asarray(lengths)
        if concrete.dtype.kind == "f" and concrete.size and np.all(np.mod(concrete, 1) == 0):
            concrete = concrete.astype(np.int64)
        if concrete.dtype.kind not in "iu" and concrete.size:
            raise ValueError(f"lengths must be integers (samples), got {concrete.dtype} values.")
        if concrete.shape != shape[:-2]:
            raise ValueError(
                f"lengths has shape {concrete.shape} but the waveform {shape} has items {shape[:-2]}; "
                "give one length (in samples) per item."
            )
    if concrete.size and (concrete.min() < 0 or concrete.max() > shape[-1]):
        raise ValueError(
            f"lengths {concrete.reshape(-1).tolist()[:8]} disagree with the waveform: every length must be in "
            f"[0, {shape[-1]}] samples (the waveform's last axis)."
        )
    return lengths.astype(np.int32) if _is_jax(lengths) else concrete.astype(np.int32)


def _check_pad_to(pad_to: Any) -> int:
    if isinstance(pad_to, bool) or not isinstance(pad_to, (int, np.integer)) or pad_to < 0:
        raise ValueError(f"pad_to must be a number of samples >= 0, got {pad_to!r}.")
    return int(pad_to)


def _pad_last(x: Any, target: int, value: float) -> Any:
    xp = _xp(x)
    missing = target - int(np.shape(x)[-1])
    if missing == 0:
        return x
    widths = [(0, 0)] * (np.ndim(x) - 1) + [(0, missing)]
    return xp.pad(xp.asarray(x), widths, constant_values=value)


def _pad_items(nodes: Sequence["AudioTree"], pad_to: int | None) -> list["AudioTree"] | None:
    """Items padded to one length with ``lengths`` filled, or None when plain concatenation fits."""
    if any(n.waveform is None for n in nodes):
        return None
    samples = [int(np.shape(n.waveform)[-1]) for n in nodes]
    if pad_to is None and len(set(samples)) == 1 and all(n.lengths is None for n in nodes):
        return None
    channels = {int(np.shape(n.waveform)[-2]) for n in nodes}
    if len(channels) != 1:
        raise ValueError(
            f"Cannot batch AudioTrees with different channel counts {sorted(channels)}; "
            "read them with mono=True or convert with to_mono()/to_stereo()."
        )
    target = max(samples) if pad_to is None else pad_to
    if target < max(samples):
        longest = int(np.argmax(samples))
        where = nodes[longest].filepath
        raise ValueError(
            f"Item {longest}{' (' + where[0] + ')' if where else ''} has {samples[longest]} samples, more than "
            f"pad_to={pad_to}; crop it first (ExcerptConfig(strategy='full', max_duration=...)) or pad to more."
        )
    windows = [n.lufs_windows for n in nodes if n.lufs_windows is not None]
    window_target = max(int(np.shape(w)[-1]) for w in windows) if windows else 0
    out = []
    for node, n in zip(nodes, samples):
        lengths = node.full_lengths() if node.lengths is None else check_lengths(node.lengths, node.waveform)
        updates: dict = {"waveform": _pad_last(node.waveform, target, 0.0), "lengths": lengths}
        if node.lufs_windows is not None:
            updates["lufs_windows"] = _pad_last(node.lufs_windows, window_target, -np.inf)
        out.append(dataclasses.replace(node, **updates))
    return out


def _batch_nodes(nodes: Sequence[Any], pad_to: int | None = None) -> Any:
    first = nodes[0]
    if isinstance(first, AudioTree):
        rates = {n.sample_rate for n in nodes}
        if len(rates) != 1:
            raise ValueError(f"Cannot batch AudioTrees with different sample rates: {sorted(rates)}.")
        padded = _pad_items(nodes, pad_to)
        if padded is not None:
            nodes = padded
            first = nodes[0]
        for field in ARRAY_FIELDS:
            present = [getattr(n, field) is not None for n in nodes]
            if any(present) and not all(present):
                raise ValueError(
                    f"Cannot batch AudioTrees where {field!r} is set for {sum(present)} of {len(nodes)} items; "
                    f"compute it for all items (e.g. replace_lufs()) or clear it (replace({field}=None))."
                )
        updates = {f: _batch_nodes([getattr(n, f) for n in nodes], pad_to) for f in PYTREE_FIELDS}
        return dataclasses.replace(first, **updates)
    if all(n is None for n in nodes):
        return None
    if all(_is_string_leaf(n) for n in nodes):
        return _flatten_strings(nodes)
    if isinstance(first, dict):
        keys = list(first)
        for n in nodes:
            if not isinstance(n, dict) or set(n) != set(keys):
                raise ValueError(
                    "Cannot batch items whose dict keys differ: "
                    f"{sorted(map(str, keys))} vs {sorted(map(str, n)) if isinstance(n, dict) else type(n)}."
                )
        return {k: _batch_nodes([n[k] for n in nodes], pad_to) for k in keys}
    if isinstance(first, (list, tuple)):
        if any(not isinstance(n, (list, tuple)) or len(n) != len(first) for n in nodes):
            raise ValueError("Cannot batch items whose list structure differs.")
        return type(first)(_batch_nodes([n[i] for n in nodes], pad_to) for i in range(len(first)))
    if all(_is_array(n) and np.ndim(n) > 0 for n in nodes):
        shapes = {tuple(np.shape(n))[1:] for n in nodes}
        if len(shapes) != 1:
            raise ValueError(
                f"Cannot batch arrays whose shapes past the batch axis differ: {sorted(shapes)}. Only the "
                "waveform (and lufs_windows) of AudioTrees are padded; pad other variable-length leaves yourself."
            )
        return _concat(nodes)
    return list(nodes)


@dataclasses.dataclass(frozen=True, eq=False)
class AudioTree:
    """A batch of audio excerpts with labels and provenance; an immutable pytree.

    Build one with :meth:`create`, :meth:`from_file` or :meth:`excerpt`; the raw
    constructor stores its arguments verbatim without validation. See the module
    docstring for shapes. All methods are pure and return new trees.
    """

    waveform: Any
    sample_rate: int
    # Gated BS.1770 loudness (B,) and 0.4 s window loudness (B, W), in LUFS. None until measured:
    # dataset items carry them with strategy="loudest" (it meters to choose) or measure_lufs=True
    # (any strategy); any tree gets them from replace_lufs().
    lufs: Any = None
    lufs_windows: Any = None
    pitch: Any = None
    velocity: Any = None
    note_duration: Any = None
    codes: Any = None
    latents: Any = None
    extras: dict = dataclasses.field(default_factory=dict)
    _metadata: dict = dataclasses.field(default_factory=dict)
    # Last, so positional construction and the 1.0 leaf order are unchanged.
    lengths: Any = None

    # ------------------------------------------------------------------ building
    @classmethod
    def create(
        cls,
        waveform: Any,
        sample_rate: int,
        *,
        lufs: Any = None,
        lufs_windows: Any = None,
        pitch: Any = None,
        velocity: Any = None,
        note_duration: Any = None,
        codes: Any = None,
        latents: Any = None,
        extras: dict | None = None,
        filepath: str | os.PathLike | Sequence[str] | None = None,
        source: str | Sequence[str] | None = None,
        offset: Any = None,
        lengths: Any = None,
    ) -> "AudioTree":
        """Builds a validated tree.

        ``waveform`` may be ``(T,)`` (becomes ``(1, 1, T)``), ``(C, T)`` (becomes
        ``(1, C, T)``), ``(B, C, T)``, or ``None``. ``filepath``/``source`` take one
        string (repeated for every item) or a list of exactly ``B``; ``offset``
        (seconds) a scalar or a ``(B,)`` array. ``lengths`` (samples, ``(B,)``
        integers in ``[0, T]``) marks padded items; samples past a length are
        set to zero. ``ValueError`` when ``lengths`` disagrees with the waveform.

        >>> import numpy as np
        >>> tree = AudioTree.create(np.ones((2, 1, 4), np.float32), 8000, lengths=[4, 2])
        >>> tree.mask()[:, 0].tolist()
        [[True, True, True, True], [True, True, False, False]]
        """
        if waveform is not None:
            ndim = np.ndim(waveform)
            if ndim == 1:
                waveform = waveform[None, None, :]
            elif ndim == 2:
                waveform = waveform[None, :, :]
            elif ndim > 3:
                raise ValueError(
                    f"create() takes a waveform of rank <= 3, got shape {tuple(np.shape(waveform))}; "
                    "build the tree at rank 3 and call reshape_mini_batches()."
                )
        extras = dict(extras) if extras else {}
        _check_extras(extras)
        batch = None
        for candidate in (waveform, codes, latents):
            if candidate is not None and np.ndim(candidate) > 0:
                batch = int(np.shape(candidate)[0])
                break
        metadata: dict = {}
        for name, value in (("filepath", filepath), ("source", source)):
            if value is None:
                continue
            if isinstance(value, (str, os.PathLike)):
                values = [os.fspath(value)] * (batch or 1)
            else:
                values = [os.fspath(v) for v in value]
                if batch is not None and len(values) != batch:
                    raise ValueError(f"{len(values)} {name} for a batch of {batch}.")
            metadata[name] = encode_strings(values)
        if offset is not None:
            off = np.asarray(offset, dtype=np.float64)
            if off.ndim == 0:
                off = np.full((batch or 1,), float(off))
            elif off.ndim != 1 or (batch is not None and off.shape[0] != batch):
                raise ValueError(f"offset must be a scalar or shaped ({batch},), got {off.shape}.")
            metadata["offset"] = off
        if lengths is not None:
            lengths = check_lengths(lengths, waveform)
        tree = cls(
            waveform=waveform,
            sample_rate=int(sample_rate),
            lufs=lufs,
            lufs_windows=lufs_windows,
            pitch=pitch,
            velocity=velocity,
            note_duration=note_duration,
            codes=codes,
            latents=latents,
            extras=extras,
            _metadata=metadata,
            lengths=lengths,
        )
        return tree._zero_padding() if lengths is not None else tree

    @classmethod
    def from_file(
        cls,
        audio_path: str | os.PathLike,
        *,
        sample_rate: int | None = None,
        offset: float = 0.0,
        duration: float | None = None,
        mono: bool = False,
        pad_mode: str | None = "constant",
        filepath: str | Sequence[str] | None = None,
        source: str | None = None,
        extras: dict | None = None,
        lufs: Any = None,
        lufs_windows: Any = None,
        pitch: Any = None,
        velocity: Any = None,
        note_duration: Any = None,
        codes: Any = None,
        latents: Any = None,
    ) -> "AudioTree":
        """Decodes ``duration`` seconds from ``offset`` seconds of a file, by seeking.

        Returns a ``(1, C, round(duration * rate))`` float32 tree at ``sample_rate``
        (native rate when None); ``mono`` averages channels. Short reads are
        right-padded with ``np.pad(mode=pad_mode)`` (``None`` leaves them short).
        Raises :class:`~audiotree.errors.AudioReadError` for undecodable files and
        ``ValueError`` for an offset at or past the end (naming the duration).
        """
        from audiotree.excerpt import read_excerpt

        path = os.fspath(audio_path)
        data, rate = read_excerpt(
            path, offset=offset, duration=duration, sample_rate=sample_rate, mono=mono, pad_mode=pad_mode
        )
        if filepath is None:
            filepath = path
        elif not isinstance(filepath, (str, os.PathLike)):
            filepath = list(filepath)
            if len(filepath) != 1:
                raise ValueError(f"{len(filepath)} filepath for a batch of 1.")
        if source is not None and not isinstance(source, str):
            raise ValueError("from_file() takes a single source string.")
        return cls.create(
            data[None],
            rate,
            lufs=_wrap_label(lufs, np.float32),
            lufs_windows=lufs_windows,
            pitch=_wrap_label(pitch, np.float32),
            velocity=_wrap_label(velocity, np.int16),
            note_duration=_wrap_label(note_duration, np.float32),
            codes=_wrap_label(codes, None),
            latents=_wrap_label(latents, None),
            extras=extras,
            filepath=filepath,
            source=source,
            offset=float(offset),
        )

    @classmethod
    def from_manifest(
        cls,
        manifest_path: str | os.PathLike,
        *,
        audio_dir: str | os.PathLike | None = None,
        filter_fn: Callable[[dict], bool] | None = None,
    ) -> "AudioTree":
        """Loads a whole :class:`~audiotree.AudioWriter` dataset as one batched tree.

        ``filter_fn`` receives each manifest entry (a dict) and keeps it when
        true. Items must share rate, channels and length. An empty selection
        raises ``ValueError``; a missing audio file raises ``AudioReadError``.
        """
        from audiotree.sources.audio import AudioDataSource

        source = AudioDataSource(manifest_path, audio_dir=audio_dir, filter_fn=filter_fn)
        if len(source) == 0:
            raise ValueError(f"No entries selected from {manifest_path}.")
        return cls.batch([source[i] for i in range(len(source))])

    @staticmethod
    def excerpt(
        audio_path: str | os.PathLike,
        rng: np.random.Generator,
        duration: float,
        offset: float = 0.0,
        excerpt: Any = None,
        **from_file_kwargs: Any,
    ) -> "AudioTree | None":
        """Reads one excerpt chosen by an :class:`~audiotree.excerpt.ExcerptConfig`.

        ``random`` (default) draws one offset with the config's search from ``rng``;
        ``start`` reads at ``offset``; ``loudest`` delegates to
        :meth:`loudest_excerpt`. Deterministic for a given ``rng`` state.
        """
        from audiotree.excerpt import select_excerpt

        return select_excerpt(audio_path, rng, duration=duration, offset=offset, excerpt=excerpt, **from_file_kwargs)

    @staticmethod
    def loudest_excerpt(
        audio_path: str | os.PathLike, rng: np.random.Generator, excerpt: Any, **from_file_kwargs: Any
    ) -> "AudioTree | None":
        """The ``loudest`` strategy: an excerpt that clears ``excerpt.lufs_cutoff``.

        Requires ``duration=`` in the keyword arguments; ``offset`` is refused. The
        result carries ``lufs`` and ``lufs_windows`` (0.4 s windows) of the excerpt.
        See :func:`audiotree.excerpt.loudest_excerpt` for the search and its cost.
        """
        from audiotree.excerpt import loudest_excerpt

        return loudest_excerpt(audio_path, rng, excerpt, **from_file_kwargs)

    def write(
        self,
        filepath: str | os.PathLike,
        *,
        subtype: str | None = None,
        format: str | None = None,
        endian: str | None = None,
    ) -> Path:
        """Writes the single item to an audio file (format from the extension).

        With no ``subtype``, soundfile's default for the container applies
        (PCM_16 for WAV). Requires ``batch_size == 1`` and a rank-3 waveform.
        """
        import soundfile

        if self.waveform is None:
            raise ValueError("write() needs a waveform; this tree is token-only.")
        if np.ndim(self.waveform) == 4:
            raise ValueError("write() does not take a rank 4 (mini-batched) tree.")
        if self.batch_size != 1:
            raise ValueError(f"write() needs batch_size == 1, got {self.batch_size}; iterate the batch.")
        path = Path(filepath)
        data = np.asarray(self.waveform[0])
        if self.lengths is not None:  # only the real samples, not the batch padding
            data = data[..., : int(np.asarray(self.lengths)[0])]
        data = data.T
        soundfile.write(path, data, self.sample_rate, subtype=subtype, endian=endian, format=format)
        return path

    # --------------------------------------------------------------- replacing
    def replace(self, **fields: Any) -> "AudioTree":
        """Returns a copy with ``fields`` replaced; an unknown name raises ``TypeError``."""
        return dataclasses.replace(self, **fields)

    def replace_extras(self, **extras: Any) -> "AudioTree":
        """Returns a copy whose ``extras`` is ``self.extras | extras``."""
        _check_extras(extras)
        return dataclasses.replace(self, extras={**self.extras, **extras})

    def _invalidate_derived(self, keep: Sequence[str] = (), **updates: Any) -> "AudioTree":
        """Applies ``updates`` and clears derived fields not in ``keep``."""
        unknown = set(keep) - set(DERIVED_FIELDS)
        if unknown:
            raise ValueError(f"keep may only name derived fields {DERIVED_FIELDS}, got {sorted(unknown)}.")
        cleared = {f: None for f in DERIVED_FIELDS if f not in keep and f not in updates}
        return dataclasses.replace(self, **cleared, **updates)

    def clear_lufs(self) -> "AudioTree":
        """Returns a copy with ``lufs`` and ``lufs_windows`` cleared."""
        return dataclasses.replace(self, lufs=None, lufs_windows=None)

    # ------------------------------------------------------------ properties
    @property
    def samples(self) -> int:
        """Samples per channel, ``waveform.shape[-1]``."""
        return int(np.shape(self.waveform)[-1])

    @property
    def num_channels(self) -> int:
        """Channels, ``waveform.shape[-2]``."""
        return int(np.shape(self.waveform)[-2])

    def mask(self) -> Any:
        """``(..., 1, T)`` bool: True on real samples, False on padding.

        Broadcasts against the waveform ``(..., C, T)``. All True when
        ``lengths`` is None. Stays in the array library of the waveform and
        works under ``jax.jit`` (shapes are static, lengths may be traced).

        >>> import numpy as np
        >>> AudioTree.create(np.zeros((1, 2, 3), np.float32), 8000, lengths=[1]).mask().shape
        (1, 1, 3)
        """
        if self.waveform is None:
            raise ValueError("mask() needs a waveform; this tree is token-only.")
        shape = tuple(np.shape(self.waveform))
        xp = _xp(self.waveform, self.lengths)
        if self.lengths is None:
            return xp.ones(shape[:-2] + (1, shape[-1]), dtype=bool)
        lengths = xp.asarray(self.lengths)
        return xp.arange(shape[-1])[None, :] < lengths[..., None, None]

    def full_lengths(self) -> Any:
        """``lengths``, or ``T`` for every item when it is None; int32 ``(...,)``."""
        if self.lengths is not None:
            return self.lengths
        shape = tuple(np.shape(self.waveform))
        return _xp(self.waveform).full(shape[:-2], shape[-1], dtype=np.int32)

    def _zero_padding(self) -> "AudioTree":
        """The same tree with every sample past its item's length set to zero."""
        if self.lengths is None or self.waveform is None:
            return self
        xp = _xp(self.waveform, self.lengths)
        waveform = xp.where(self.mask(), self.waveform, xp.zeros((), dtype=self.waveform.dtype))
        return dataclasses.replace(self, waveform=waveform)

    @property
    def batch_size(self) -> int:
        """Leading-axis length of waveform, else codes, else latents."""
        for candidate in (self.waveform, self.codes, self.latents):
            if candidate is not None:
                return int(np.shape(candidate)[0])
        raise ValueError("This AudioTree has no waveform, codes or latents to take a batch size from.")

    def __len__(self) -> int:
        return self.batch_size

    @property
    def filepath(self) -> list:
        """Source file path of each item (nested per mini-batch at rank 4); ``[]`` if absent."""
        rows = self._metadata.get("filepath")
        return [] if rows is None else decode_strings(rows)

    @property
    def source(self) -> list:
        """Group name of each item (nested per mini-batch at rank 4); ``[]`` if absent."""
        rows = self._metadata.get("source")
        return [] if rows is None else decode_strings(rows)

    @property
    def offset(self) -> Any:
        """Excerpt start in seconds within its file, ``(B,)``; ``None`` if unknown."""
        return self._metadata.get("offset")

    @property
    def backend(self) -> str:
        """``"numpy"``, ``"jax"`` or ``"mixed"``, judged over the array fields."""
        kinds = {_is_jax(v) for v in (getattr(self, f) for f in ARRAY_FIELDS) if v is not None}
        if kinds == {True}:
            return "jax"
        if kinds == {True, False}:
            return "mixed"
        return "numpy"

    @property
    def device(self) -> Any:
        """The single ``jax.Device`` holding the array fields, or ``None`` for NumPy."""
        leaves = [v for v in (getattr(self, f) for f in ARRAY_FIELDS) if v is not None]
        if not leaves or not any(_is_jax(v) for v in leaves):
            return None
        if not all(_is_jax(v) for v in leaves):
            raise ValueError("AudioTree mixes NumPy and JAX leaves; it has no single device.")
        devices = set()
        for leaf in leaves:
            devices |= set(leaf.devices())
        if len(devices) != 1:
            raise ValueError(f"AudioTree leaves are spread across {len(devices)} devices.")
        return devices.pop()

    def __repr__(self) -> str:
        parts = []
        if self.waveform is not None:
            parts.append(f"waveform={tuple(np.shape(self.waveform))}")
        parts.append(f"sample_rate={self.sample_rate}")
        for name in ARRAY_FIELDS[1:]:
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name}={tuple(np.shape(value))}")
        if self.extras:
            parts.append(f"extras={sorted(map(str, self.extras))}")
        if self._metadata:
            parts.append(f"provenance={sorted(self._metadata)}")
        parts.append(f"backend={self.backend!r}")
        return f"AudioTree({', '.join(parts)})"

    # -------------------------------------------------------------- indexing
    def _map_batch(self, on_array: Callable, on_strings: Callable) -> "AudioTree":
        updates = {f: _map_leaves(getattr(self, f), on_array, on_strings) for f in PYTREE_FIELDS}
        return dataclasses.replace(self, **updates)

    def __getitem__(self, key: Any) -> "AudioTree":
        key = _normalize_key(key, self.batch_size)
        return self._map_batch(lambda a: a[key], lambda s: _index_strings(s, key))

    def __iter__(self) -> Iterator["AudioTree"]:
        for i in range(self.batch_size):
            yield self[i]

    @staticmethod
    def batch(items: Sequence[Any], *, pad_to: int | None = None) -> Any:
        """Concatenates items along axis 0 (grain's ``batch_fn``).

        Works through dicts, lists and tuples: AudioTrees are concatenated field by
        field, arrays concatenated, strings collected into one list, other leaves
        gathered with ``list(...)``. Any JAX input gives JAX output.

        Items of different lengths (whole utterances, or short reads with
        ``pad_mode=None``) are right-padded with zeros to the longest item, or to
        ``pad_to`` samples, and the batch's ``lengths`` ``(B,)`` records each
        item's real samples (``lufs_windows`` are padded with ``-inf``, the
        loudness of padding). Batches of equal-length items without ``lengths``
        are concatenated as before (``lengths`` stays None) unless ``pad_to`` is
        given.

        >>> import numpy as np
        >>> a = AudioTree.create(np.ones(3, np.float32), 8000)
        >>> b = AudioTree.create(np.ones(5, np.float32), 8000)
        >>> batch = AudioTree.batch([a, b])
        >>> batch.waveform.shape, batch.lengths.tolist()
        ((2, 1, 5), [3, 5])
        """
        items = list(items)
        if not items:
            raise ValueError("AudioTree.batch needs at least one item.")
        if pad_to is not None:
            pad_to = _check_pad_to(pad_to)
        return _batch_nodes(items, pad_to)

    def split(self, n_splits: int) -> list["AudioTree"]:
        """Splits the batch into ``n_splits`` equal trees along axis 0."""
        size = self.batch_size
        if n_splits <= 0 or size % n_splits:
            raise ValueError(f"Cannot split a batch of {size} into {n_splits} equal parts.")
        step = size // n_splits
        return [self[i * step : (i + 1) * step] for i in range(n_splits)]

    def filter(self, predicate: Callable[["AudioTree"], bool]) -> "AudioTree":
        """Keeps the items (batch-of-1 trees) for which ``predicate`` is true."""
        if self.waveform is not None and np.ndim(self.waveform) == 4:
            raise ValueError("filter() does not take a rank 4 (mini-batched) tree.")
        mask = np.array([bool(predicate(item)) for item in self], dtype=bool)
        return self[mask]

    def reshape_mini_batches(self, mini_batch_size: int) -> "AudioTree":
        """``(B, ...)`` becomes ``(B // m, m, ...)`` on every array leaf."""
        if self.waveform is not None and np.ndim(self.waveform) == 4:
            raise ValueError("This tree is already rank 4 (mini-batched).")
        size, m = self.batch_size, int(mini_batch_size)
        if m <= 0 or size % m:
            raise ValueError(f"Cannot reshape a batch of {size} into mini-batches of {mini_batch_size}.")

        def strings(value):
            items = [value] if isinstance(value, str) else list(value)
            if len(items) != size:
                raise ValueError(f"A string leaf has {len(items)} items for a batch of {size}.")
            return [items[i : i + m] for i in range(0, size, m)]

        return self._map_batch(lambda a: a.reshape((size // m, m) + tuple(a.shape[1:])), strings)

    def flatten_mini_batches(self) -> "AudioTree":
        """Inverse of :meth:`reshape_mini_batches`."""
        rank = None
        for f in ARRAY_FIELDS:
            value = getattr(self, f)
            if value is not None:
                rank = np.ndim(value)
                break
        if rank is None or (self.waveform is not None and rank < 4) or rank < 2:
            raise ValueError("flatten_mini_batches() needs a mini-batched (rank 4) tree.")
        return self._map_batch(
            lambda a: a.reshape((-1,) + tuple(a.shape[2:])),
            lambda s: [v for chunk in s for v in chunk],
        )

    # ----------------------------------------------------------- audio edits
    def to_mono(self, strategy: str = "average") -> "AudioTree":
        """Mixes down to one channel: ``average`` (mean), ``left`` or ``right``."""
        if strategy not in ("average", "left", "right"):
            raise ValueError(f"Unknown to_mono strategy {strategy!r}; use 'average', 'left' or 'right'.")
        if self.num_channels == 1:
            return self
        if strategy == "average":
            mono = self.waveform.mean(axis=-2, keepdims=True).astype(self.waveform.dtype)
        else:
            if self.num_channels != 2:
                raise ValueError(f"to_mono({strategy!r}) needs stereo, got {self.num_channels} channels.")
            ch = 0 if strategy == "left" else 1
            mono = self.waveform[..., ch : ch + 1, :]
        return self._invalidate_derived(waveform=mono)

    def to_stereo(self) -> "AudioTree":
        """Duplicates mono to two channels; stereo is returned unchanged."""
        channels = self.num_channels
        if channels == 2:
            return self
        if channels != 1:
            raise ValueError(f"to_stereo() takes mono or stereo, got {channels} channels.")
        xp = _xp(self.waveform)
        return self._invalidate_derived(waveform=xp.concatenate([self.waveform, self.waveform], axis=-2))

    def resample(
        self,
        sample_rate: int,
        *,
        zeros: int = 24,
        rolloff: float = 0.945,
        output_length: int | None = None,
        full: bool = False,
    ) -> "AudioTree":
        """Resamples to ``sample_rate`` (soxr for NumPy, a jittable sinc for JAX).

        Output length is ``floor(T * new / old)`` unless ``output_length`` is given
        (``full=True`` rounds up; JAX only). Derived fields are cleared.
        """
        sample_rate = int(sample_rate)
        if sample_rate == self.sample_rate:
            return self
        if _is_jax(self.waveform):
            from audiotree.dsp.resample_jax import resample_jax

            out = resample_jax(
                self.waveform, self.sample_rate, sample_rate, zeros=zeros, rolloff=rolloff,
                output_length=output_length, full=full,
            )
        else:
            from audiotree.dsp.resample import resample

            out = resample(np.asarray(self.waveform), self.sample_rate, sample_rate, output_length=output_length)
        tree = dataclasses.replace(self._invalidate_derived(waveform=out), sample_rate=sample_rate)
        if self.lengths is not None:
            # Each item's real samples scale like the whole axis; the resampler's
            # ringing past them is cleared so padding stays silent.
            # floor(n * new / old) in int32 without overflow: reduce the ratio first.
            xp = _xp(self.waveform, self.lengths)
            g = math.gcd(sample_rate, self.sample_rate)
            up, down = sample_rate // g, self.sample_rate // g
            n = xp.asarray(self.lengths)
            scaled = (n // down) * up + ((n % down) * up) // down
            new = xp.minimum(scaled, np.shape(out)[-1]).astype(xp.int32)
            tree = dataclasses.replace(tree, lengths=new)._zero_padding()
        return tree

    # --------------------------------------------------------------- loudness
    def replace_lufs(
        self,
        lufs_window_sec: float = 0.4,
        lufs_hop_sec: float | None = None,
        *,
        device: Any = None,
        engine: str | None = None,
    ) -> "AudioTree":
        """Measures BS.1770-4 loudness: gated ``lufs`` ``(...,)`` and ungated
        ``lufs_windows`` ``(..., W)`` in LUFS, float32, from one K-weighting pass.

        With ``lengths``, only each item's real samples are metered: a padded
        item measures what it measures alone, and windows past its end read
        ``-inf``.

        ``engine`` is ``"numpy"`` (exact IIR, CPU) or ``"jax"`` (jittable); by
        default it follows the waveform's library, and a non-CPU ``device`` forces
        JAX. Results come back in the waveform's array library.
        """
        if self.waveform is None:
            raise ValueError("replace_lufs() needs a waveform.")
        dev = _resolve_device(device)
        if engine not in (None, "numpy", "jax"):
            raise ValueError(f"Unknown loudness engine {engine!r}; use 'numpy' or 'jax'.")
        non_cpu = dev is not None and dev.platform != "cpu"
        if engine == "numpy" and non_cpu:
            raise ValueError("engine='numpy' runs on the CPU only; use engine='jax' for an accelerator.")
        if engine is None:
            engine = "jax" if (non_cpu or _is_jax(self.waveform)) else "numpy"
        if engine == "numpy":
            from audiotree.dsp.loudness import measure

            lengths = None if self.lengths is None else np.asarray(self.lengths)
            lufs, windows = measure(
                np.asarray(self.waveform), self.sample_rate, window_sec=lufs_window_sec, hop_sec=lufs_hop_sec,
                lengths=lengths,
            )
        else:
            from audiotree.dsp.loudness_jax import measure_jax

            x = self.waveform if dev is None else jax.device_put(self.waveform, dev)
            lufs, windows = measure_jax(
                x, self.sample_rate, window_sec=lufs_window_sec, hop_sec=lufs_hop_sec, lengths=self.lengths
            )
        if _is_jax(self.waveform):
            import jax.numpy as jnp

            lufs, windows = jnp.asarray(lufs), jnp.asarray(windows)
        else:
            lufs, windows = np.asarray(lufs, dtype=np.float32), np.asarray(windows, dtype=np.float32)
        return dataclasses.replace(self, lufs=lufs, lufs_windows=windows)

    def normalize_lufs(
        self,
        target_lufs: float,
        *,
        max_gain_db: float | None = None,
        device: Any = None,
        engine: str | None = None,
    ) -> "AudioTree":
        """Scales each item to ``target_lufs`` (measuring first if needed).

        Items whose loudness is not finite (silence) are left unscaled.
        ``max_gain_db`` caps the boost. ``lufs``/``lufs_windows`` shift by the
        applied gain; ``codes``/``latents`` are cleared.
        """
        if self.waveform is None:
            raise ValueError("normalize_lufs() needs a waveform.")
        tree = self if self.lufs is not None else self.replace_lufs(device=device, engine=engine)
        xp = _xp(tree.waveform, tree.lufs)
        lufs = xp.asarray(tree.lufs)
        finite = xp.isfinite(lufs)
        gain_db = xp.where(finite, target_lufs - xp.where(finite, lufs, 0.0), 0.0)
        if max_gain_db is not None:
            gain_db = xp.minimum(gain_db, max_gain_db)
        gain = (10.0 ** (gain_db / 20.0))[..., None, None]
        waveform = (tree.waveform * gain).astype(tree.waveform.dtype)
        new_lufs = (lufs + gain_db).astype(xp.float32)
        windows = tree.lufs_windows
        if windows is not None:
            windows = (windows + gain_db[..., None]).astype(xp.float32)
        return tree._invalidate_derived(keep=("lufs", "lufs_windows"), waveform=waveform, lufs=new_lufs, lufs_windows=windows)


def _wrap_label(value: Any, dtype: Any) -> Any:
    if value is None:
        return None
    if np.ndim(value) == 0:
        return np.asarray([value], dtype=dtype)
    return value


def _resolve_device(device: Any) -> Any:
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


PYTREE_FIELDS = tuple(f.name for f in dataclasses.fields(AudioTree) if f.name != "sample_rate")
ARRAY_FIELDS = tuple(f for f in PYTREE_FIELDS if f not in ("extras", "_metadata"))
# ``lengths`` describes the batch's padding, not the audio: it is not a label.
LABEL_FIELDS = tuple(f for f in ARRAY_FIELDS if f not in ("waveform", "lengths"))

jax.tree_util.register_dataclass(AudioTree, data_fields=list(PYTREE_FIELDS), meta_fields=["sample_rate"])

