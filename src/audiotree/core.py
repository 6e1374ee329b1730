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

The container knows nothing of files. The published API puts readers and a
writer on the class (``from_file``, ``from_clip``, ``excerpt``,
``loudest_excerpt``, ``from_manifest``, ``write``); the class body binds them
from :mod:`audiotree.tree_io`, which reads through :mod:`audiotree.io` and
:mod:`audiotree.excerpts` and never imports this module, so dependencies point
one way (``tests/test_architecture.py`` checks the whole graph).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Iterator, Sequence

import jax
import numpy as np

from audiotree.provenance import decode_strings, encode_provenance
from audiotree.dsp.edits import apply_gain_db, downmix, gain_to_target, shift_loudness
from audiotree.dsp.meter import measure_loudness
from audiotree.lengths import check_lengths, check_pad_to, pad_items, scale_lengths
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
from audiotree import tree_io
from audiotree.tree_fields import (
    ARRAY_FIELDS, DERIVED_FIELDS, LABEL_FIELDS, METADATA_KEYS, PYTREE_FIELDS, check_label_names, label_keywords,
)

__all__ = [
    "AudioTree",
    "PYTREE_FIELDS",
    "ARRAY_FIELDS",
    "LABEL_FIELDS",
    "DERIVED_FIELDS",
    "METADATA_KEYS",
]



def _batch_trees(trees: Sequence["AudioTree"], pad_to: int | None = None) -> "AudioTree":
    """Concatenates AudioTrees field by field (the container half of :meth:`AudioTree.batch`).

    Items of different lengths (or any ``pad_to``) are padded first, see :func:`audiotree.lengths.pad_items`.
    """
    rates = {n.sample_rate for n in trees}
    if len(rates) != 1:
        raise ValueError(f"Cannot batch AudioTrees with different sample rates: {sorted(rates)}.")
    padded = pad_items(trees, pad_to)
    if padded is not None:
        trees = padded
    first = trees[0]
    for field in ARRAY_FIELDS:
        present = [getattr(n, field) is not None for n in trees]
        if any(present) and not all(present):
            raise ValueError(
                f"Cannot batch AudioTrees where {field!r} is set for {sum(present)} of {len(trees)} items; "
                f"compute it for all items (e.g. replace_lufs()) or clear it (replace({field}=None))."
            )
    container = functools.partial(_batch_tree_or_none, pad_to=pad_to)
    updates = {f: batch_nodes([getattr(n, f) for n in trees], container) for f in PYTREE_FIELDS}
    return dataclasses.replace(first, **updates)


def _batch_tree_or_none(nodes: Sequence[Any], pad_to: int | None = None) -> Any:
    return _batch_trees(nodes, pad_to) if isinstance(nodes[0], AudioTree) else None


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
    # Last, so positional construction and the 1.0 leaf order are unchanged.
    lengths: Any = None

    # ------------------------------------------------------------------ building
    @classmethod
    @label_keywords(before="extras")
    def create(
        cls,
        waveform: Any,
        sample_rate: int,
        *,
        extras: dict | None = None,
        filepath: str | os.PathLike | Sequence[str] | None = None,
        source: str | Sequence[str] | None = None,
        offset: Any = None,
        lengths: Any = None,
        **labels: Any,
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
        check_label_names("create", labels)
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
        for candidate in (waveform, labels.get("codes"), labels.get("latents")):
            if candidate is not None and np.ndim(candidate) > 0:
                batch = int(np.shape(candidate)[0])
                break
        metadata = encode_provenance(batch, filepath=filepath, source=source, offset=offset)
        if lengths is not None:
            lengths = check_lengths(lengths, waveform)
        tree = cls(waveform=waveform, sample_rate=int(sample_rate), extras=extras, _metadata=metadata, lengths=lengths,
                   **labels)
        return tree.zero_padding() if lengths is not None else tree

    # ------------------------------------------------ files (the 1.0 API; the reading is audiotree.tree_io)
    from_file = classmethod(tree_io.from_file)
    from_clip = classmethod(tree_io.from_clip)
    from_manifest = classmethod(tree_io.from_manifest)
    excerpt = classmethod(tree_io.excerpt)
    loudest_excerpt = classmethod(tree_io.loudest_excerpt)
    write = tree_io.write

    # --------------------------------------------------------------- replacing
    def replace(self, **fields: Any) -> "AudioTree":
        """Returns a copy with ``fields`` replaced; an unknown name raises ``TypeError``."""
        return dataclasses.replace(self, **fields)

    def replace_extras(self, **extras: Any) -> "AudioTree":
        """Returns a copy whose ``extras`` is ``self.extras | extras``."""
        check_extras(extras)
        return dataclasses.replace(self, extras={**self.extras, **extras})

    def replace_audio(self, keep: Sequence[str] = (), **updates: Any) -> "AudioTree":
        """A copy with ``updates`` applied, as after a change of the audio: derived fields are cleared.

        ``lufs``, ``lufs_windows``, ``codes`` and ``latents`` describe one waveform;
        every one not named in ``keep`` (or given in ``updates``) becomes ``None``.
        ``keep`` may only name those fields (``ValueError`` otherwise). This is the
        call for a custom transform that changes length, rate, channels or level.

        >>> import numpy as np
        >>> tree = AudioTree.create(np.ones((1, 1, 4), np.float32), 8000, lufs=np.array([-20.0]))
        >>> tree.replace_audio(waveform=tree.waveform * 2).lufs is None
        True
        """
        unknown = set(keep) - set(DERIVED_FIELDS)
        if unknown:
            raise ValueError(f"keep may only name derived fields {DERIVED_FIELDS}, got {sorted(unknown)}.")
        cleared = {f: None for f in DERIVED_FIELDS if f not in keep and f not in updates}
        return dataclasses.replace(self, **cleared, **updates)

    _invalidate_derived = replace_audio  # the 1.x spelling, kept for code written against it

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
        xp = array_module(self.waveform, self.lengths)
        if self.lengths is None:
            return xp.ones(shape[:-2] + (1, shape[-1]), dtype=bool)
        lengths = xp.asarray(self.lengths)
        return xp.arange(shape[-1])[None, :] < lengths[..., None, None]

    def full_lengths(self) -> Any:
        """``lengths``, or ``T`` for every item when it is None; int32 ``(...,)``."""
        if self.lengths is not None:
            return self.lengths
        shape = tuple(np.shape(self.waveform))
        return array_module(self.waveform).full(shape[:-2], shape[-1], dtype=np.int32)

    def zero_padding(self) -> "AudioTree":
        """The same tree with every sample past its item's length set to zero.

        A transform that writes into padding calls this on its result; trees
        without ``lengths`` are returned as they are.

        >>> import numpy as np
        >>> tree = AudioTree(np.ones((1, 1, 3), np.float32), 8000, lengths=np.array([1]))
        >>> tree.zero_padding().waveform[0, 0].tolist()
        [1.0, 0.0, 0.0]
        """
        if self.lengths is None or self.waveform is None:
            return self
        if isinstance(self.lengths, np.ndarray) and isinstance(self.waveform, np.ndarray) and \
                bool(np.all(self.lengths >= self.waveform.shape[-1])):
            return self  # nothing is padding (a whole utterance as read): no pass over the samples
        xp = array_module(self.waveform, self.lengths)
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
    def provenance(self) -> dict:
        """A copy of the provenance dict: ``filepath``/``source`` code-point rows ``(B, 1024)`` and ``offset``.

        Only the keys the tree carries are present. The decoded forms are
        :attr:`filepath`, :attr:`source` and :attr:`offset`; writers and batching
        steps that carry provenance along read the stored rows here.

        >>> import numpy as np
        >>> sorted(AudioTree.create(np.zeros((1, 1, 2), np.float32), 8000, filepath="a.wav").provenance)
        ['filepath']
        """
        return dict(self._metadata or {})

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
            pad_to = check_pad_to(pad_to)
        return batch_nodes(items, functools.partial(_batch_tree_or_none, pad_to=pad_to))

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
        return self.replace_audio(waveform=mono)

    def to_stereo(self) -> "AudioTree":
        """Duplicates mono to two channels; stereo is returned unchanged."""
        channels = self.num_channels
        if channels == 2:
            return self
        if channels != 1:
            raise ValueError(f"to_stereo() takes mono or stereo, got {channels} channels.")
        xp = array_module(self.waveform)
        return self.replace_audio(waveform=xp.concatenate([self.waveform, self.waveform], axis=-2))

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
        tree = dataclasses.replace(self.replace_audio(waveform=out), sample_rate=sample_rate)
        if self.lengths is not None:
            # Each item's real samples scale like the whole axis; the resampler's
            # ringing past them is cleared so padding stays silent.
            lengths = array_module(self.waveform, self.lengths).asarray(self.lengths)
            new = scale_lengths(lengths, self.sample_rate, sample_rate, limit=np.shape(out)[-1])
            tree = dataclasses.replace(tree, lengths=new).zero_padding()
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
        lufs, windows = measure_loudness(
            self.waveform, self.sample_rate, window_sec=lufs_window_sec, hop_sec=lufs_hop_sec, engine=engine,
            device=resolve_device(device), lengths=self.lengths,
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
        return tree.replace_audio(keep=("lufs", "lufs_windows"), waveform=waveform, lufs=new_lufs, lufs_windows=windows)


jax.tree_util.register_dataclass(AudioTree, data_fields=list(PYTREE_FIELDS), meta_fields=["sample_rate"])

