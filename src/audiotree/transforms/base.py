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

import dataclasses
import difflib
import functools
import inspect
import numbers
import textwrap
import types
from typing import Any, Callable, Iterable

import grain.transforms as _grain_transforms
import jax
import numpy as np

from audiotree.core import ARRAY_FIELDS, AudioTree

__all__ = [
    "MapTransform",
    "RandomTransform",
    "TransformFactory",
    "map_transform",
    "merge_pytree",
    "normalize_scope",
    "random_transform",
]

SCOPE_SENTINEL = "scope"
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


# ==================================================================== scope
def _path_entry(entry: Any) -> tuple:
    if isinstance(entry, str):
        parts = tuple(entry.split(".")) if entry else ()
    elif isinstance(entry, tuple):
        parts = tuple(str(p) for p in entry)
    else:
        raise TypeError(
            f"scope entries must be dotted strings or tuples of keys, got {type(entry).__name__} {entry!r}."
        )
    if not parts or any(p == "" for p in parts):
        raise ValueError(f"scope entry {entry!r} is an empty path.")
    return parts


def _scope_dict(node: dict, prefix: tuple, out: list) -> None:
    for key, value in node.items():
        if key == SCOPE_SENTINEL:
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(
                    f"The scope sentinel at {'.'.join(prefix) or '<root>'} takes True or False, got {value!r}."
                )
            out.append((prefix, bool(value)))
        elif isinstance(value, dict):
            _scope_dict(value, prefix + (str(key),), out)
        elif isinstance(value, (bool, np.bool_)):
            raise ValueError(
                f"scope shorthand {{{key!r}: {value!r}}} is not supported (it would match everything); "
                f"write {{{key!r}: {{'scope': {bool(value)!r}}}}}."
            )
        else:
            raise ValueError(
                f"scope dict key {key!r} at {'.'.join(prefix) or '<root>'} holds {value!r}; only nested dicts "
                "and the 'scope' sentinel are allowed (per-key parameter overrides are not supported: "
                "use one transform per key)."
            )


def normalize_scope(scope: Any) -> tuple | None:
    """Parses ``scope`` into ``((path, include), ...)`` (``None`` = every leaf).

    Accepted: ``None``; a list or tuple of dotted strings / key tuples (each
    selects the leaves under that path); a single dotted string; or the nested
    dict form with the sentinel key ``"scope"`` (``True`` includes the subtree,
    ``False`` excludes it, the longest matching path wins). Raises
    ``ValueError`` for empty paths, the ``{key: True}`` shorthand and unknown
    dict keys, ``TypeError`` for other types.
    """
    if scope is None:
        return None
    if isinstance(scope, str):
        return ((_path_entry(scope), True),)
    if isinstance(scope, (list, tuple)):
        return tuple((_path_entry(entry), True) for entry in scope)
    if isinstance(scope, dict):
        out: list = []
        _scope_dict(scope, (), out)
        return tuple(out)
    raise TypeError(
        f"scope must be None, a list of paths or a scope dict, got {type(scope).__name__} {scope!r}."
    )


def in_scope(entries: tuple | None, path: tuple) -> bool:
    """Whether a leaf at ``path`` is selected (longest matching entry wins)."""
    if entries is None:
        return True
    spath = tuple(str(p) for p in path)
    best, best_len = False, -1
    for prefix, include in entries:
        if len(prefix) > best_len and spath[: len(prefix)] == prefix:
            best, best_len = include, len(prefix)
    return best


# ================================================================== pytrees
def _collect(node: Any, path: tuple, parent_is_dict: bool, out: list) -> None:
    if isinstance(node, AudioTree):
        out.append((path, node, parent_is_dict))
    elif isinstance(node, dict):
        for key, value in node.items():
            _collect(value, path + (key,), True, out)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            _collect(value, path + (i,), False, out)


def _sequence_like(node: Any, items: list) -> Any:
    if isinstance(node, list):
        return items
    if hasattr(node, "_fields"):  # namedtuple
        return type(node)(*items)
    return tuple(items)


def _replace_leaves(node: Any, path: tuple, results: dict) -> Any:
    if isinstance(node, AudioTree):
        return results.get(path, node)
    if isinstance(node, dict):
        return {k: _replace_leaves(v, path + (k,), results) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return _sequence_like(node, [_replace_leaves(v, path + (i,), results) for i, v in enumerate(node)])
    return node


def merge_pytree(node: Any, path: tuple, results: dict, names: dict) -> Any:
    """Rebuilds ``node`` adding ``results[path]`` under ``names[path]`` beside each original."""
    if isinstance(node, dict):
        out, added = {}, {}
        for key, value in node.items():
            child = path + (key,)
            if isinstance(value, AudioTree):
                out[key] = value
                if child in results:
                    added[names[child]] = results[child]
            else:
                out[key] = merge_pytree(value, child, results, names)
        out.update(added)
        return out
    if isinstance(node, (list, tuple)):
        return _sequence_like(node, [merge_pytree(v, path + (i,), results, names) for i, v in enumerate(node)])
    return node


def _output_names(output_key: Any, targets: list) -> dict:
    names: dict = {}
    seen: dict = {}
    for path, _, parent_is_dict in targets:
        if not parent_is_dict:
            raise ValueError(
                f"output_key needs every selected AudioTree to sit directly in a dict; "
                f"{'.'.join(map(str, path)) or '<root>'} is inside a list or tuple."
            )
        name = output_key if isinstance(output_key, str) else output_key(list(path))
        where = (path[:-1], name)
        if where in seen:
            raise ValueError(
                f"output_key maps both {'.'.join(map(str, seen[where]))!r} and {'.'.join(map(str, path))!r} "
                f"to the key {name!r}; use a callable output_key or narrow the scope."
            )
        seen[where] = path
        names[path] = name
    return names


# ============================================================ randomness
def _is_generator(rng: Any) -> bool:
    return isinstance(rng, np.random.Generator)


def _split_rng(rng: Any, count: int, split: bool, with_mask: bool) -> tuple[list, list]:
    """Per-leaf parameter streams and prob-mask streams (``None`` when unused)."""
    if _is_generator(rng):
        n_draw = count if split else 1
        seeds = rng.integers(0, 2**63, size=n_draw, dtype=np.int64)
        mask_seeds = rng.integers(0, 2**63, size=n_draw, dtype=np.int64) if with_mask else None
        if not split:
            seeds = np.repeat(seeds, count)
            mask_seeds = None if mask_seeds is None else np.repeat(mask_seeds, count)
        streams = [np.random.Generator(np.random.PCG64(int(s))) for s in seeds]
        masks = (
            [np.random.Generator(np.random.PCG64(int(s))) for s in mask_seeds]
            if with_mask
            else [None] * count
        )
        return streams, masks
    if rng is None or not isinstance(rng, (jax.Array, np.ndarray)):
        raise TypeError(
            f"random_map needs an np.random.Generator or a JAX PRNG key, got {type(rng).__name__}."
        )
    key, mask_key = jax.random.split(rng)
    if split:
        keys = list(jax.random.split(key, count))
        mask_keys = list(jax.random.split(mask_key, count)) if with_mask else [None] * count
    else:
        keys = [key] * count
        mask_keys = [mask_key if with_mask else None] * count
    return keys, mask_keys


def _draw_mask(stream: Any, prob: float, shape: tuple) -> Any:
    if _is_generator(stream):
        return stream.random(shape) < prob
    return jax.random.bernoulli(stream, prob, shape)


# ============================================================== prob mask
def _mask_items(tree: AudioTree) -> tuple:
    if tree.waveform is not None:
        return tuple(np.shape(tree.waveform)[:-2])
    return (tree.batch_size,)


def _is_array(x: Any) -> bool:
    return isinstance(x, (np.ndarray, np.generic, jax.Array))


def _pick(mask: Any, new: Any, old: Any, name: str) -> Any:
    if new is None or old is None:
        return None
    if new is old:
        return new
    if isinstance(new, dict) and isinstance(old, dict):
        return {k: _pick(mask, v, old[k], f"{name}[{k!r}]") for k, v in new.items() if k in old}
    if _is_array(new) and _is_array(old):
        if np.shape(new) != np.shape(old):
            raise ValueError(
                f"This transform changes {name} from shape {tuple(np.shape(old))} to {tuple(np.shape(new))}; "
                "a shape-changing transform cannot use prob < 1 (use prob=1)."
            )
        extra = np.ndim(new) - np.ndim(mask)
        if extra < 0 or np.shape(new)[: np.ndim(mask)] != np.shape(mask):
            raise ValueError(f"{name} has no leading item axes {np.shape(mask)} to apply the prob mask to.")
        use_jax = any(isinstance(v, jax.Array) for v in (mask, new, old))
        xp = jax.numpy if use_jax else np
        m = xp.reshape(mask, tuple(np.shape(mask)) + (1,) * extra)
        return xp.where(m, new, old).astype(new.dtype)
    if isinstance(new, (list, str)) and isinstance(old, (list, str)):
        if new == old:
            return new
        try:
            flags = np.asarray(mask).reshape(-1)
        except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
            raise ValueError(f"Cannot select string leaf {name} per item under jit; use prob=1.") from None
        a = [new] if isinstance(new, str) else list(new)
        b = [old] if isinstance(old, str) else list(old)
        if len(a) != len(b) or len(a) != flags.size:
            raise ValueError(f"String leaf {name} does not have one entry per item; use prob=1.")
        return [x if f else y for x, y, f in zip(a, b, flags)]
    return new


def select_items(mask: Any, new: AudioTree, old: AudioTree) -> AudioTree:
    """Per item: the field of ``new`` where ``mask`` is True, else of ``old``."""
    if new.sample_rate != old.sample_rate:
        raise ValueError(
            f"This transform changes the sample rate ({old.sample_rate} -> {new.sample_rate}); "
            "a shape-changing transform cannot use prob < 1 (use prob=1)."
        )
    updates = {f: _pick(mask, getattr(new, f), getattr(old, f), f) for f in ARRAY_FIELDS}
    updates["extras"] = _pick(mask, new.extras, old.extras, "extras") or {}
    updates["_metadata"] = _pick(mask, new._metadata, old._metadata, "_metadata") or {}
    return dataclasses.replace(new, **updates)


# ============================================================ validation
def check_prob(prob: Any) -> float:
    if isinstance(prob, bool) or not isinstance(prob, numbers.Real):
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
        return out._zero_padding() if out.lengths is not None and out is not tree else out

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
        _collect(element, (), False, found)
        targets = [t for t in found if in_scope(self._scope, t[0])]
        names = _output_names(self.output_key, targets) if self.output_key is not None else None
        if not targets:
            return element
        streams, mask_streams = self._streams(rng, len(targets))
        results = {
            path: self._apply_leaf(tree, stream, mask_stream)
            for (path, tree, _), stream, mask_stream in zip(targets, streams, mask_streams)
        }
        if names is None:
            return _replace_leaves(element, (), results)
        return merge_pytree(element, (), results, names)


class RandomTransform(_Transform, _grain_transforms.RandomMap):
    """A random transform: a Grain ``RandomMap`` that also takes JAX keys.

    ``random_map(element, rng)`` (or calling the object) with an
    ``np.random.Generator`` (Grain workers) or a JAX PRNG key (inside
    ``jax.jit``/``jax.vmap``). See the module docstring for the element,
    ``prob``, ``split_seed``, ``scope`` and ``output_key`` semantics.
    """

    _kind = "random"

    def __init__(
        self,
        fn: Callable,
        params: dict | None = None,
        *,
        name: str | None = None,
        explicit: Iterable[str] | None = None,
        prob: float = 1.0,
        split_seed: bool = True,
        scope: Any = None,
        output_key: Any = None,
        pre: Callable | None = None,
    ) -> None:
        super().__init__(fn, params, name=name, explicit=explicit, scope=scope, output_key=output_key, pre=pre)
        self.prob = check_prob(prob)
        self.split_seed = _check_split_seed(split_seed)

    def _reserved_items(self) -> list:
        return [("prob", self.prob), ("split_seed", self.split_seed)] + super()._reserved_items()

    def _streams(self, rng: Any, count: int) -> tuple[list, list]:
        return _split_rng(rng, count, self.split_seed, with_mask=0.0 < self.prob < 1.0)

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
            mask = _draw_mask(mask_stream, self.prob, _mask_items(tree))
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
