"""The transform machinery shared by the NumPy and JAX namespaces.

* :func:`random_transform` / :func:`map_transform` turn ``fn(audio_tree, rng,
  **params)`` / ``fn(audio_tree, **params)`` into a constructor (a
  :class:`TransformFactory`) with a real ``inspect.signature``. Calling it
  returns a :class:`RandomTransform` (a Grain ``RandomMap``) or a
  :class:`MapTransform` (a Grain ``Map``).
* The transform objects are instances of those two module-level classes and
  hold the decorated function itself. The decorator gives that function the
  qualified name ``<name>.__wrapped__``, which resolves through the module-level
  constructor, so the standard :mod:`pickle` stores it by reference (spawn and
  forkserver workers re-import it) while cloudpickle (Grain's workers) still
  serialises ``__main__`` functions by value. No lambda or closure is stored.
* An element is any nesting of dicts, lists and tuples whose leaves may be
  :class:`~audiotree.core.AudioTree` objects; ``None`` passes through.
  ``scope`` selects the AudioTree leaves, ``output_key`` writes results beside
  the originals, and every other leaf passes through untouched.
* Randomness. A NumPy ``np.random.Generator`` is split into one child
  generator per selected leaf (``split_seed=True``) or one shared child
  (``False``); a JAX key is split with ``jax.random.split`` the same way. The
  ``prob`` mask comes from a second, independent stream, so changing ``prob``
  never changes the parameter draws.
* ``prob < 1`` draws a Bernoulli mask over the items (``waveform.shape[:-2]``)
  and keeps the transformed value only where it is True, field by field
  (derived fields included). A field that exists on only one side (for
  example ``codes`` cleared by a gain) is dropped for the whole batch, because
  a batch cannot hold "array for some items, None for others". A ``pre``
  hook (see :func:`random_transform`) runs before the mask on every selected
  leaf, so fields it adds (``volume_norm`` measures ``lufs``) survive.

The functions passed to the decorators receive a single AudioTree leaf (never
``None``) and, for random transforms, that leaf's own generator or key.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import textwrap
import types
from typing import Any, Callable, Iterable

import grain.transforms as _grain_transforms
import numpy as np

from audiotree.core import AudioTree
from audiotree.transforms.masks import draw_mask, mask_shape, select_items, split_rng
from audiotree.transforms.paths import (
    collect_trees,
    in_scope,
    merge_pytree,
    normalize_scope,
    output_names,
    replace_leaves,
)
from audiotree.validation import is_real

__all__ = [
    "MapTransform",
    "RandomTransform",
    "TransformFactory",
    "map_transform",
    "merge_pytree",
    "normalize_scope",
    "random_transform",
]

RANDOM_RESERVED = {"prob": 1.0, "split_seed": True, "scope": None, "output_key": None}
MAP_RESERVED = {"scope": None, "output_key": None}
_ALL_RESERVED = tuple(RANDOM_RESERVED)

_RESERVED_DOCS = {
    "prob": "Probability in [0, 1] that each batch item is transformed (one Bernoulli draw "
    "per item); items not selected pass through unchanged. Default 1.0.",
    "split_seed": "If True (default) every AudioTree leaf of the element gets its own random "
    "stream; if False all selected leaves share one stream (same draws, same prob mask), "
    "which keeps paired leaves such as dry/wet in lockstep.",
    "scope": "Which AudioTree leaves to transform: None (all, default), a list of dotted "
    "paths (\"input.dry\") or tuples, or a nested dict with the sentinel key \"scope\" "
    "({\"wet\": {\"scope\": True}}). An empty list or dict selects nothing.",
    "output_key": "Write each result beside its original instead of replacing it: a str "
    "(the new key in the same dict) or a module-level callable mapping the leaf's path "
    "list to the new key. The element must be a dict.",
}


def check_prob(prob: Any) -> float:
    if not is_real(prob):
        raise TypeError(f"prob must be a real number in [0, 1], got {type(prob).__name__} {prob!r}.")
    value = float(prob)
    if not (0.0 <= value <= 1.0):  # NaN fails too
        raise ValueError(f"prob={prob!r} not in [0, 1].")
    return value


def _check_split_seed(split_seed: Any) -> bool:
    if not isinstance(split_seed, (bool, np.bool_)):
        raise TypeError(f"split_seed must be a bool, got {split_seed!r}.")
    return bool(split_seed)


def _check_output_key(output_key: Any) -> Any:
    if output_key is None or callable(output_key):
        return output_key
    if isinstance(output_key, str):
        if not output_key:
            raise ValueError("output_key must not be an empty string.")
        return output_key
    raise TypeError(f"output_key must be None, a str or a callable, got {type(output_key).__name__}.")


# ============================================================ transforms
class _Transform:
    """Shared state and the element walk of both transform kinds."""

    _kind = "transform"

    def __init__(
        self,
        fn: Callable,
        params: dict | None = None,
        *,
        name: str | None = None,
        explicit: Iterable[str] | None = None,
        scope: Any = None,
        output_key: Any = None,
        pre: Callable | None = None,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}.")
        if pre is not None and not callable(pre):
            raise TypeError(f"pre must be callable, got {pre!r}.")
        self.fn = fn
        self.pre = pre
        self.name = name or getattr(fn, "__name__", type(self).__name__)
        self.params = dict(params or {})
        self._explicit = tuple(self.params if explicit is None else explicit)
        self.scope = scope
        self._scope = normalize_scope(scope)
        self.output_key = _check_output_key(output_key)

    # -------------------------------------------------------------- repr
    def _reserved_items(self) -> list:
        return [("scope", self.scope), ("output_key", self.output_key)]

    def __repr__(self) -> str:
        parts = [f"{k}={self.params[k]!r}" for k in self._explicit if k in self.params]
        reserved = RANDOM_RESERVED
        parts += [f"{k}={v!r}" for k, v in self._reserved_items() if v != reserved[k]]
        return f"{self.name}({', '.join(parts)})"

    # -------------------------------------------------------------- walk
    def _call_fn(self, tree: AudioTree, stream: Any) -> AudioTree:  # pragma: no cover
        raise NotImplementedError

    def _prepare(self, tree: AudioTree) -> AudioTree:
        if self.pre is None:
            return tree
        out = self.pre(tree, **self.params)
        if not isinstance(out, AudioTree):
            raise TypeError(f"{self.name}: pre returned {type(out).__name__}, expected an AudioTree.")
        return out

    def _call_checked(self, tree: AudioTree, stream: Any) -> AudioTree:
        out = self._call_fn(tree, stream)
        if not isinstance(out, AudioTree):
            raise TypeError(f"{self.name} returned {type(out).__name__}, expected an AudioTree.")
        # Padding of a variable-length batch is silence whatever a transform did
        # to it (an STFT or a resampler rings into it): clear it again.
        return out.zero_padding() if out.lengths is not None and out is not tree else out

    def _apply_leaf(self, tree: AudioTree, stream: Any, mask_stream: Any) -> AudioTree:
        return self._call_checked(self._prepare(tree), stream)

    def _streams(self, rng: Any, count: int) -> tuple[list, list]:
        return [None] * count, [None] * count

    def _run(self, element: Any, rng: Any) -> Any:
        if element is None:
            return None
        if self.output_key is not None and not isinstance(element, dict):
            raise TypeError(
                f"{self.name}: output_key={self.output_key!r} needs a dict element; "
                f"the element is a {type(element).__name__}, not a dict."
            )
        found: list = []
        collect_trees(element, (), False, found)
        targets = [t for t in found if in_scope(self._scope, t[0])]
        names = output_names(self.output_key, targets) if self.output_key is not None else None
        if not targets:
            return element
        streams, mask_streams = self._streams(rng, len(targets))
        results = {
            path: self._apply_leaf(tree, stream, mask_stream)
            for (path, tree, _), stream, mask_stream in zip(targets, streams, mask_streams)
        }
        if names is None:
            return replace_leaves(element, (), results)
        return merge_pytree(element, (), results, names)


class RandomTransform(_Transform, _grain_transforms.RandomMap):
    """A random transform: a Grain ``RandomMap`` that also takes JAX keys.

    ``random_map(element, rng)`` (or calling the object) with an
    ``np.random.Generator`` (Grain workers) or a JAX PRNG key (inside
    ``jax.jit``/``jax.vmap``). See the module docstring for the element,
    ``prob``, ``split_seed``, ``scope`` and ``output_key`` semantics.
    """

    _kind = "random"

    def __init__(self, fn: Callable, params: dict | None = None, *, prob: float = 1.0, split_seed: bool = True,
                 **options: Any) -> None:
        """``options``: ``name``, ``explicit``, ``scope``, ``output_key`` and ``pre``, as for every transform."""
        super().__init__(fn, params, **options)
        self.prob = check_prob(prob)
        self.split_seed = _check_split_seed(split_seed)

    def _reserved_items(self) -> list:
        return [("prob", self.prob), ("split_seed", self.split_seed)] + super()._reserved_items()

    def _streams(self, rng: Any, count: int) -> tuple[list, list]:
        return split_rng(rng, count, self.split_seed, with_mask=0.0 < self.prob < 1.0)

    def _call_fn(self, tree: AudioTree, stream: Any) -> AudioTree:
        return self.fn(tree, stream, **self.params)

    def _apply_leaf(self, tree: AudioTree, stream: Any, mask_stream: Any) -> AudioTree:
        # ``pre`` (e.g. measuring loudness) runs on every selected leaf whatever
        # the draw, so both sides of the prob mask carry the same fields.
        tree = self._prepare(tree)
        if self.prob == 0.0:
            return tree
        out = self._call_checked(tree, stream)
        if self.prob < 1.0:
            mask = draw_mask(mask_stream, self.prob, mask_shape(tree))
            out = select_items(mask, out, tree)
        return out

    def random_map(self, element: Any, rng: Any) -> Any:
        """Transforms ``element`` (``None`` passes through) with ``rng`` (Generator or JAX key)."""
        return self._run(element, rng)

    def __call__(self, element: Any, rng: Any) -> Any:
        """Same as :meth:`random_map`."""
        return self.random_map(element, rng)


class MapTransform(_Transform, _grain_transforms.Map):
    """A deterministic transform: a Grain ``Map`` (``map(element)`` or call the object)."""

    _kind = "map"

    def _call_fn(self, tree: AudioTree, stream: Any) -> AudioTree:
        return self.fn(tree, **self.params)

    def map(self, element: Any) -> Any:
        """Transforms ``element``; ``None`` passes through."""
        return self._run(element, None)

    def __call__(self, element: Any) -> Any:
        """Same as :meth:`map`."""
        return self.map(element)


# ============================================================ decorators
def _splice_doc(doc: str | None, reserved: Iterable[str]) -> str:
    """Adds the reserved parameters to the end of the docstring's ``Args:`` section."""
    lines = inspect.cleandoc(doc or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Args:")
    except StopIteration:
        start = None
    end = indent = None
    if start is not None:
        end = start + 1
        while end < len(lines) and (not lines[end].strip() or lines[end].startswith((" ", "\t"))):
            if indent is None and lines[end].strip():
                indent = lines[end][: len(lines[end]) - len(lines[end].lstrip())]
            end += 1
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1
    indent = indent or "  "
    entries = []
    for name in reserved:
        entries += textwrap.wrap(
            f"{name}: {_RESERVED_DOCS[name]}", width=88, initial_indent=indent, subsequent_indent=indent * 2
        )
    if start is None:
        return "\n".join(lines + ([""] if lines else []) + ["Args:"] + entries)
    return "\n".join(lines[:end] + entries + lines[end:])


class TransformFactory:
    """The constructor returned by :func:`random_transform` / :func:`map_transform`.

    Calling it validates the arguments (unknown names raise ``TypeError``
    with a did-you-mean hint) and returns a :class:`RandomTransform` or
    :class:`MapTransform`. ``__signature__`` lists the function's own
    parameters, then the keyword-only reserved ones; ``__wrapped__`` is the
    decorated function. Pickles by reference to its module-level name.
    """

    def __init__(self, fn: Callable, kind: str, validate: Callable | None = None,
                 pre: Callable | None = None) -> None:
        if not callable(fn) or isinstance(fn, (type, TransformFactory)):
            raise TypeError(f"@{kind}_transform decorates a function, got {fn!r}.")
        if validate is not None and not callable(validate):
            raise TypeError(f"validate must be callable, got {validate!r}.")
        if pre is not None and not callable(pre):
            raise TypeError(f"pre must be callable, got {pre!r}.")
        n_lead = 2 if kind == "random" else 1
        lead_names = "(audio_tree, rng, ...)" if kind == "random" else "(audio_tree, ...)"
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"@{kind}_transform cannot read the signature of {fn!r}: {exc}") from None
        params = list(sig.parameters.values())
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"@{kind}_transform: {fn.__name__} must not take *args or **kwargs ({p}).")
        lead = params[:n_lead]
        if len(lead) < n_lead or any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in lead):
            raise TypeError(f"@{kind}_transform: {fn.__name__} must have the form {fn.__name__}{lead_names}.")
        own = params[n_lead:]
        for p in own:
            if p.name in _ALL_RESERVED:
                raise TypeError(f"@{kind}_transform: {fn.__name__} uses the reserved parameter name {p.name!r}.")
            if p.kind == p.POSITIONAL_ONLY:
                raise TypeError(f"@{kind}_transform: parameter {p.name!r} of {fn.__name__} must not be positional-only.")
        self.kind = kind
        self._own = tuple(own)
        self._reserved = dict(RANDOM_RESERVED if kind == "random" else MAP_RESERVED)
        self._validate = validate
        self._pre = pre
        self.__wrapped__ = fn
        self.__name__ = fn.__name__
        self.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        self.__module__ = fn.__module__
        self.__doc__ = _splice_doc(fn.__doc__, self._reserved)
        self.__signature__ = inspect.Signature(
            list(own) + [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v) for k, v in self._reserved.items()],
        )
        self.Transform = RandomTransform if kind == "random" else MapTransform
        # Make the function picklable by reference: ``module.<name>.__wrapped__``
        # resolves through this factory once it is bound to ``<name>``.
        if isinstance(fn, types.FunctionType) and "<locals>" not in fn.__qualname__:
            fn.__qualname__ = f"{fn.__qualname__}.__wrapped__"

    def __reduce__(self) -> str:
        return self.__qualname__

    def __repr__(self) -> str:
        return f"<{self.kind} transform {self.__module__}.{self.__qualname__}{self.__signature__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> RandomTransform | MapTransform:
        name = self.__name__
        positional = [p for p in self._own if p.kind == p.POSITIONAL_OR_KEYWORD]
        if len(args) > len(positional):
            raise TypeError(
                f"{name}() takes at most {len(positional)} positional argument(s) ({len(args)} given); "
                "the reserved parameters are keyword-only."
            )
        values = {p.name: a for p, a in zip(positional, args)}
        reserved = dict(self._reserved)
        own_names = [p.name for p in self._own]
        for key, value in kwargs.items():
            if key in reserved:
                reserved[key] = value
            elif key in own_names:
                if key in values:
                    raise TypeError(f"{name}() got multiple values for parameter {key!r}.")
                values[key] = value
            elif key in RANDOM_RESERVED:
                raise TypeError(
                    f"{name}() is a map transform and takes no {key!r}; only random transforms do."
                )
            else:
                close = difflib.get_close_matches(key, own_names + list(reserved), n=1, cutoff=0.6)
                if not close:
                    lowered = {n.lower(): n for n in own_names + list(reserved)}
                    close = [lowered[key.lower()]] if key.lower() in lowered else []
                hint = f" Did you mean {close[0]!r}?" if close else ""
                valid = ", ".join(own_names + list(reserved))
                raise TypeError(f"{name}() got an unexpected parameter {key!r}.{hint} Valid parameters: {valid}.")
        missing = [p.name for p in self._own if p.default is p.empty and p.name not in values]
        if missing:
            raise TypeError(f"{name}() missing required parameter(s): {', '.join(map(repr, missing))}.")
        params = {p.name: values.get(p.name, p.default) for p in self._own}
        if self._validate is not None:
            self._validate(**params)
        return self.Transform(
            self.__wrapped__, params, name=name, explicit=[n for n in own_names if n in values],
            pre=self._pre, **reserved,
        )


def _decorator(kind: str, fn: Callable | None, validate: Callable | None, pre: Callable | None) -> Any:
    if fn is None:
        return functools.partial(_decorator, kind, validate=validate, pre=pre)
    return TransformFactory(fn, kind, validate, pre)


def random_transform(fn: Callable | None = None, *, validate: Callable | None = None,
                     pre: Callable | None = None) -> Any:
    """Decorates ``fn(audio_tree, rng, **params) -> AudioTree`` into a random transform constructor.

    ``fn`` receives one AudioTree leaf and that leaf's random stream: an
    ``np.random.Generator`` under Grain, a JAX key inside jitted code. The
    constructor accepts ``fn``'s parameters plus the keyword-only ``prob``,
    ``split_seed``, ``scope`` and ``output_key`` and returns a
    :class:`RandomTransform`. ``validate(**params)``, if given, runs at
    construction (raise ``ValueError`` for bad parameters).
    ``pre(audio_tree, **params) -> AudioTree``, if given, runs on every
    selected leaf before the draw and regardless of ``prob`` (for example to
    measure loudness, so selected and unselected items both carry it).
    Decorate module-level functions (and pass module-level ``validate``/``pre``)
    so the transforms pickle.
    """
    return _decorator("random", fn, validate, pre)


def map_transform(fn: Callable | None = None, *, validate: Callable | None = None,
                  pre: Callable | None = None) -> Any:
    """Decorates ``fn(audio_tree, **params) -> AudioTree`` into a map transform constructor.

    The constructor accepts ``fn``'s parameters plus the keyword-only ``scope``
    and ``output_key`` and returns a :class:`MapTransform`. See
    :func:`random_transform`.
    """
    return _decorator("map", fn, validate, pre)
