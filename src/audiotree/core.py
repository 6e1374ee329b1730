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

``sample_rate`` is static pytree metadata: trees at different rates have
different tree definitions. Every method returns a new tree; nothing mutates.
NumPy and JAX leaves are both supported; operations stay in the leaf's library.

The container knows nothing of files. The published API puts five readers and
writers on the class (``from_file``, ``excerpt``, ``loudest_excerpt``,
``from_manifest``, ``write``); they are thin wrappers over :mod:`audiotree.io`,
which returns plain arrays and never imports this module, so dependencies point
one way (``tests/test_architecture.py`` checks the whole graph).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import jax
import numpy as np

from audiotree.provenance import decode_strings, encode_provenance
from audiotree.dsp.edits import apply_gain_db, downmix, gain_to_target, shift_loudness
from audiotree.dsp.meter import measure_loudness
from audiotree.leaves import (
    array_module,
    batch_nodes,
    check_extras,
    index_strings,
    is_jax,
    map_leaves,
    normalize_key,
    resolve_device,
)
from audiotree.schema import ARRAY_FIELDS, DERIVED_FIELDS, LABEL_FIELDS, METADATA_KEYS, PYTREE_FIELDS, wrap_label

__all__ = [
    "AudioTree",
    "PYTREE_FIELDS",
    "ARRAY_FIELDS",
    "LABEL_FIELDS",
    "DERIVED_FIELDS",
    "METADATA_KEYS",
]



def _batch_trees(trees: Sequence["AudioTree"]) -> "AudioTree":
    """Concatenates AudioTrees field by field (the container half of :meth:`AudioTree.batch`)."""
    first = trees[0]
    rates = {n.sample_rate for n in trees}
    if len(rates) != 1:
        raise ValueError(f"Cannot batch AudioTrees with different sample rates: {sorted(rates)}.")
    for field in ARRAY_FIELDS:
        present = [getattr(n, field) is not None for n in trees]
        if any(present) and not all(present):
            raise ValueError(
                f"Cannot batch AudioTrees where {field!r} is set for {sum(present)} of {len(trees)} items; "
                f"compute it for all items (e.g. replace_lufs()) or clear it (replace({field}=None))."
            )
    updates = {f: batch_nodes([getattr(n, f) for n in trees], _batch_tree_or_none) for f in PYTREE_FIELDS}
    return dataclasses.replace(first, **updates)


def _batch_tree_or_none(nodes: Sequence[Any]) -> Any:
    return _batch_trees(nodes) if isinstance(nodes[0], AudioTree) else None


@dataclasses.dataclass(frozen=True, eq=False)
class AudioTree:
    """A batch of audio excerpts with labels and provenance; an immutable pytree.

    Build one with :meth:`create`, :meth:`from_file` or :meth:`excerpt`; the raw
    constructor stores its arguments verbatim without validation. See the module
    docstring for shapes. All methods are pure and return new trees.

    >>> import numpy as np
    >>> item = AudioTree.create(np.zeros((2, 8000), np.float32), 16_000, filepath="a.wav")
    >>> batch = AudioTree.batch([item, item.to_mono().to_stereo()])
    >>> batch.waveform.shape, batch.filepath
    ((2, 2, 8000), ['a.wav', 'a.wav'])
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
    ) -> "AudioTree":
        """Builds a validated tree.

        ``waveform`` may be ``(T,)`` (becomes ``(1, 1, T)``), ``(C, T)`` (becomes
        ``(1, C, T)``), ``(B, C, T)``, or ``None``. ``filepath``/``source`` take one
        string (repeated for every item) or a list of exactly ``B``; ``offset``
        (seconds) a scalar or a ``(B,)`` array.
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
        check_extras(extras)
        batch = None
        for candidate in (waveform, codes, latents):
            if candidate is not None and np.ndim(candidate) > 0:
                batch = int(np.shape(candidate)[0])
                break
        metadata = encode_provenance(batch, filepath=filepath, source=source, offset=offset)
        return cls(
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
        )

    # ------------------------------------------------------------- reading
    # The published API has readers on the class. They stay thin: the reading
    # itself (io.excerpt, io.manifest, io.encode) returns plain arrays and never
    # imports this module, so every dependency points from the container down.
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
        from audiotree.io.excerpt import read_excerpt

        path = os.fspath(audio_path)
        data, rate = read_excerpt(
            path, offset=offset, duration=duration, sample_rate=sample_rate, mono=mono, pad_mode=pad_mode
        )
        if filepath is not None and not isinstance(filepath, (str, os.PathLike)):
            filepath = list(filepath)
            if len(filepath) != 1:
                raise ValueError(f"{len(filepath)} filepath for a batch of 1.")
        labels = dict(lufs=lufs, lufs_windows=lufs_windows, pitch=pitch, velocity=velocity, note_duration=note_duration)
        return cls._read_result(
            path, data, rate, float(offset),
            dict(filepath=filepath, source=source, extras=extras, codes=codes, latents=latents, **labels),
        )

    @classmethod
    def _read_result(cls, path: str, data: Any, rate: int, offset: float, tree_kwargs: dict) -> "AudioTree":
        """A batch-of-1 tree of ``(C, T)`` samples read from ``path`` at ``offset`` seconds."""
        kwargs = dict(tree_kwargs)
        filepath, source, extras = kwargs.pop("filepath", None) or path, kwargs.pop("source", None), kwargs.pop("extras", None)
        if source is not None and not isinstance(source, str):
            raise ValueError("from_file() takes a single source string.")
        unknown = sorted(set(kwargs) - set(LABEL_FIELDS))
        if unknown:
            raise TypeError(f"Unexpected keyword argument {unknown[0]!r} for reading an excerpt.")
        labels = {name: wrap_label(name, value) for name, value in kwargs.items()}
        return cls.create(data[None], rate, filepath=filepath, source=source, offset=offset, extras=extras, **labels)

    @classmethod
    def _from_clip(cls, clip: Any, tree_kwargs: dict) -> "AudioTree":
        """The tree of an :class:`audiotree.io.excerpt.Clip`; its loudness is measured, never given."""
        for name in ("lufs", "lufs_windows"):
            if name in tree_kwargs:
                raise TypeError(f"Unexpected keyword argument {name!r} for reading an excerpt.")
        if clip.lufs is not None:
            tree_kwargs = {**tree_kwargs, "lufs": np.asarray([clip.lufs], np.float32), "lufs_windows": clip.lufs_windows[None]}
        return cls._read_result(clip.path, clip.data, clip.sample_rate, clip.offset, tree_kwargs)

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
        from audiotree.io.manifest import ManifestReader

        reader = ManifestReader(manifest_path, audio_dir=audio_dir, filter_fn=filter_fn)
        if len(reader) == 0:
            raise ValueError(f"No entries selected from {manifest_path}.")
        return cls.batch([cls(**reader.read_fields(i)) for i in range(len(reader))])

    @classmethod
    def excerpt(
        cls,
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
        from audiotree.io.excerpt import select_clip

        read, tree_kwargs = _split_read_kwargs(from_file_kwargs)
        clip = select_clip(audio_path, rng, duration=duration, offset=offset, excerpt=excerpt, **read)
        return None if clip is None else cls._from_clip(clip, tree_kwargs)

    @classmethod
    def loudest_excerpt(
        cls, audio_path: str | os.PathLike, rng: np.random.Generator, excerpt: Any, **from_file_kwargs: Any
    ) -> "AudioTree | None":
        """The ``loudest`` strategy: an excerpt that clears ``excerpt.lufs_cutoff``.

        Requires ``duration=`` in the keyword arguments; ``offset`` is refused. The
        result carries ``lufs`` and ``lufs_windows`` (0.4 s windows) of the excerpt.
        See :mod:`audiotree.io.excerpt` for the search and its cost.
        """
        from audiotree.io.excerpt import loudest_clip

        read, tree_kwargs = _split_read_kwargs(from_file_kwargs, ("duration", "offset"))
        clip = loudest_clip(audio_path, rng, excerpt, **read)
        return None if clip is None else cls._from_clip(clip, tree_kwargs)

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
        from audiotree.io.encode import write_audio

        if self.waveform is None:
            raise ValueError("write() needs a waveform; this tree is token-only.")
        if np.ndim(self.waveform) == 4:
            raise ValueError("write() does not take a rank 4 (mini-batched) tree.")
        if self.batch_size != 1:
            raise ValueError(f"write() needs batch_size == 1, got {self.batch_size}; iterate the batch.")
        return write_audio(filepath, np.asarray(self.waveform[0]), self.sample_rate, subtype=subtype, format=format, endian=endian)

    # --------------------------------------------------------------- replacing
    def replace(self, **fields: Any) -> "AudioTree":
        """Returns a copy with ``fields`` replaced; an unknown name raises ``TypeError``."""
        return dataclasses.replace(self, **fields)

    def replace_extras(self, **extras: Any) -> "AudioTree":
        """Returns a copy whose ``extras`` is ``self.extras | extras``."""
        check_extras(extras)
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
        kinds = {is_jax(v) for v in (getattr(self, f) for f in ARRAY_FIELDS) if v is not None}
        if kinds == {True}:
            return "jax"
        if kinds == {True, False}:
            return "mixed"
        return "numpy"

    @property
    def device(self) -> Any:
        """The single ``jax.Device`` holding the array fields, or ``None`` for NumPy."""
        leaves = [v for v in (getattr(self, f) for f in ARRAY_FIELDS) if v is not None]
        if not leaves or not any(is_jax(v) for v in leaves):
            return None
        if not all(is_jax(v) for v in leaves):
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
        updates = {f: map_leaves(getattr(self, f), on_array, on_strings) for f in PYTREE_FIELDS}
        return dataclasses.replace(self, **updates)

    def __getitem__(self, key: Any) -> "AudioTree":
        key = normalize_key(key, self.batch_size)
        return self._map_batch(lambda a: a[key], lambda s: index_strings(s, key))

    def __iter__(self) -> Iterator["AudioTree"]:
        for i in range(self.batch_size):
            yield self[i]

    @staticmethod
    def batch(items: Sequence[Any]) -> Any:
        """Concatenates items along axis 0 (grain's ``batch_fn``).

        Works through dicts, lists and tuples: AudioTrees are concatenated field by
        field, arrays concatenated, strings collected into one list, other leaves
        gathered with ``list(...)``. Any JAX input gives JAX output.
        """
        items = list(items)
        if not items:
            raise ValueError("AudioTree.batch needs at least one item.")
        return batch_nodes(items, _batch_tree_or_none)

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
            mono = downmix(self.waveform, axis=-2)
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
        xp = array_module(self.waveform)
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
        if is_jax(self.waveform):
            from audiotree.dsp.resample_jax import resample_jax

            out = resample_jax(
                self.waveform, self.sample_rate, sample_rate, zeros=zeros, rolloff=rolloff,
                output_length=output_length, full=full,
            )
        else:
            from audiotree.dsp.resample import resample

            out = resample(np.asarray(self.waveform), self.sample_rate, sample_rate, output_length=output_length)
        return dataclasses.replace(self._invalidate_derived(waveform=out), sample_rate=sample_rate)

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

        ``engine`` is ``"numpy"`` (exact IIR, CPU) or ``"jax"`` (jittable); by
        default it follows the waveform's library, and a non-CPU ``device`` forces
        JAX. Results come back in the waveform's array library.
        """
        if self.waveform is None:
            raise ValueError("replace_lufs() needs a waveform.")
        lufs, windows = measure_loudness(
            self.waveform, self.sample_rate, window_sec=lufs_window_sec, hop_sec=lufs_hop_sec, engine=engine,
            device=resolve_device(device),
        )
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
        xp = array_module(tree.waveform, tree.lufs)
        gain_db = gain_to_target(xp, tree.lufs, target_lufs, max_gain_db=max_gain_db)
        waveform = apply_gain_db(xp, tree.waveform, gain_db)
        new_lufs, windows = shift_loudness(xp, tree.lufs, tree.lufs_windows, gain_db)
        return tree._invalidate_derived(keep=("lufs", "lufs_windows"), waveform=waveform, lufs=new_lufs, lufs_windows=windows)


def _split_read_kwargs(kwargs: dict, reads: Sequence[str] = ()) -> tuple[dict, dict]:
    """(arguments of the read, arguments of the tree) from ``from_file``-style keywords."""
    read = {k: kwargs[k] for k in ("sample_rate", "mono", "pad_mode", *reads) if k in kwargs}
    return read, {k: v for k, v in kwargs.items() if k not in read}



jax.tree_util.register_dataclass(AudioTree, data_fields=list(PYTREE_FIELDS), meta_fields=["sample_rate"])

