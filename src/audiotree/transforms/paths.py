"""Where a transform applies inside an element: scopes, leaf paths and output keys.

An element is any nesting of dicts, lists and tuples whose leaves may be
AudioTrees. A leaf's *path* is the tuple of keys and indices leading to it;
``scope`` selects paths, ``output_key`` names where a result is written.

>>> scope = normalize_scope(["input.dry", ("wet",)])
>>> scope
((('input', 'dry'), True), (('wet',), True))
>>> in_scope(scope, ("input", "dry")), in_scope(scope, ("input", "wet")), in_scope(scope, ("wet", 0))
(True, False, True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from audiotree.core import AudioTree

__all__ = [
    "SCOPE_SENTINEL",
    "normalize_scope",
    "in_scope",
    "collect_trees",
    "replace_leaves",
    "merge_pytree",
    "output_names",
]

SCOPE_SENTINEL = "scope"


def path_entry(entry: Any) -> tuple:
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


def scope_dict(node: dict, prefix: tuple, out: list) -> None:
    for key, value in node.items():
        if key == SCOPE_SENTINEL:
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(
                    f"The scope sentinel at {'.'.join(prefix) or '<root>'} takes True or False, got {value!r}."
                )
            out.append((prefix, bool(value)))
        elif isinstance(value, dict):
            scope_dict(value, prefix + (str(key),), out)
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
        return ((path_entry(scope), True),)
    if isinstance(scope, (list, tuple)):
        return tuple((path_entry(entry), True) for entry in scope)
    if isinstance(scope, dict):
        out: list = []
        scope_dict(scope, (), out)
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
def collect_trees(node: Any, path: tuple, parent_is_dict: bool, out: list) -> None:
    if isinstance(node, AudioTree):
        out.append((path, node, parent_is_dict))
    elif isinstance(node, dict):
        for key, value in node.items():
            collect_trees(value, path + (key,), True, out)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            collect_trees(value, path + (i,), False, out)


def sequence_like(node: Any, items: list) -> Any:
    if isinstance(node, list):
        return items
    if hasattr(node, "_fields"):  # namedtuple
        return type(node)(*items)
    return tuple(items)


def replace_leaves(node: Any, path: tuple, results: dict) -> Any:
    if isinstance(node, AudioTree):
        return results.get(path, node)
    if isinstance(node, dict):
        return {k: replace_leaves(v, path + (k,), results) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return sequence_like(node, [replace_leaves(v, path + (i,), results) for i, v in enumerate(node)])
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
        return sequence_like(node, [merge_pytree(v, path + (i,), results, names) for i, v in enumerate(node)])
    return node


def output_names(output_key: Any, targets: list) -> dict:
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
