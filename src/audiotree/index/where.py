"""``Corpus(where=...)``: keep the index rows whose columns satisfy an expression.

The syntax is a small subset of Python's expression grammar, parsed with
:mod:`ast` (never evaluated by Python):

* comparisons ``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=`` between a column and
  a number, or two columns, chained as in Python (``0.1 < dc_offset <= 0.5``);
* ``and``, ``or``, ``not`` and parentheses;
* numbers (``16000``, ``1e-4``, ``-3.5``) and column names.

A column is a quality column (``bandwidth_hz``, ``clip_share``,
``clip_longest``, ``dc_offset``, ``channel_corr``, ``silence_share``,
``snr_db``), ``sample_rate``, ``duration``, ``channels``, ``size``, or a
numeric label column of the index. A comparison with a missing value (null in
the index: e.g. ``channel_corr`` of a mono file) is false, so
``channel_corr < 0.99`` drops mono files and ``not channel_corr >= 0.99``
keeps them. The expression is checked when the dataset is built (an unknown
column, a text or category column, or any other syntax is a ``ValueError``
naming it) and evaluated once, vectorised over the index's column store: the
rows kept are fixed before any worker starts, so items stay a function of
``(seed, index)`` whatever the worker count.

>>> expr = parse_where("bandwidth_hz >= 16000 and clip_share < 1e-4")
>>> sorted(columns_of(expr))
['bandwidth_hz', 'clip_share']
>>> import numpy as np
>>> cols = {"bandwidth_hz": np.array([8000.0, 20000, 20000]), "clip_share": np.array([0, 0, 0.01])}
>>> evaluate(expr, cols.__getitem__).tolist()
[False, True, False]
"""

from __future__ import annotations

import ast
import operator
from typing import Any, Callable

import numpy as np

from audiotree.validation import is_real

__all__ = ["parse_where", "columns_of", "evaluate", "where_mask", "index_columns", "WHERE_BASE_COLUMNS"]

#: Base columns of the column store that ``where=`` can name, besides the quality columns and ``sample_rate``.
WHERE_BASE_COLUMNS = ("duration", "channels", "size")
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}
_MAX_LENGTH = 2000


def _refuse(text: str, node: ast.AST, what: str) -> ValueError:
    token = ast.get_source_segment(text, node) or type(node).__name__
    return ValueError(f"where={text!r}: {what} {token!r} is not allowed; use comparisons of column names and "
                      "numbers joined by and/or/not (e.g. 'bandwidth_hz >= 16000 and clip_share < 1e-4').")


def _number(text: str, node: ast.AST) -> float | None:
    """The value of a number literal (``-`` signs included), else ``None``."""
    sign = 1.0
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -sign if isinstance(node.op, ast.USub) else sign
        node = node.operand
    if isinstance(node, ast.Constant):
        if not is_real(node.value):
            raise _refuse(text, node, "the value")
        return sign * float(node.value)
    return None


def _check(text: str, node: ast.AST) -> None:
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            _check(text, value)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        _check(text, node.operand)
    elif isinstance(node, ast.Compare):
        for op in node.ops:
            if type(op) not in _COMPARE:
                raise _refuse(text, node, "the comparison")
        for side in (node.left, *node.comparators):
            if isinstance(side, ast.Name):
                continue
            if _number(text, side) is None:
                raise _refuse(text, side, "the operand")
        if all(not isinstance(side, ast.Name) for side in (node.left, *node.comparators)):
            raise _refuse(text, node, "a comparison without a column,")
    else:
        raise _refuse(text, node, "the expression")


def parse_where(text: str) -> ast.Expression:
    """The checked syntax tree of ``text`` (see the module); ``ValueError`` naming the bad token."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"where= must be a non-empty expression string, got {text!r}.")
    if len(text) > _MAX_LENGTH:
        raise ValueError(f"where= is {len(text)} characters long; at most {_MAX_LENGTH}.")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"where={text!r} is not a valid expression ({exc.msg}); use comparisons of column names and "
                         "numbers joined by and/or/not.") from None
    _check(text.strip(), tree.body)
    return tree


def columns_of(tree: ast.Expression) -> set[str]:
    """The column names ``tree`` reads."""
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


def evaluate(tree: ast.Expression, column: Callable[[str], np.ndarray]) -> np.ndarray:
    """The bool mask of ``tree`` over columns given by ``column(name)`` (float arrays, NaN for missing)."""

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Name):
            return np.asarray(column(node.id), dtype=np.float64)
        return _number("", node)

    def run(node: ast.AST) -> np.ndarray:
        if isinstance(node, ast.BoolOp):
            parts = [run(v) for v in node.values]
            join = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
            out = parts[0]
            for part in parts[1:]:
                out = join(out, part)
            return out
        if isinstance(node, ast.UnaryOp):  # (only `not` passes the check)
            return np.logical_not(run(node.operand))
        out = None
        left = value(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            right = value(right_node)
            with np.errstate(invalid="ignore"):
                part = np.asarray(_COMPARE[type(op)](left, right), dtype=bool)
            # A comparison with NaN (a missing value) is false, != included.
            for side in (left, right):
                if isinstance(side, np.ndarray):
                    part = part & ~np.isnan(side)
            out = part if out is None else out & part
            left = right
        return out

    return np.asarray(run(tree.body), dtype=bool)


def where_mask(text: str, store: Any, index_path: str, meta: dict) -> np.ndarray:
    """The rows of an index's column store (``store``) that ``text`` keeps, as a bool mask.

    ``meta`` is the index's metadata: a quality column of an index without
    them is an error saying how to get them (:func:`audiotree.index.quality.require_quality`).
    """
    from audiotree.index.quality import QUALITY_COLUMNS, require_quality, store_key

    tree = parse_where(text)
    return evaluate(tree, index_columns(store, index_path, meta, columns_of(tree), f"where={text!r}"))


def index_columns(store: Any, index_path: str, meta: dict, names: Any, what: str) -> Callable[[str], np.ndarray]:
    """Checks ``names`` (see the module) and returns ``column(name)``: its float64 values per store row.

    ``what`` names the option in errors (``"where='...'"``, ``"weight_by='snr_db'"``).
    """
    from audiotree.index.quality import QUALITY_COLUMNS, require_quality, store_key

    labels = meta.get("labels") or {}
    known = [*QUALITY_COLUMNS, "sample_rate", *WHERE_BASE_COLUMNS,
             *(n for n, spec in labels.items() if spec.get("kind") == "numeric")]
    for name in sorted(names):
        if name in labels and labels[name].get("kind") != "numeric":
            raise ValueError(f"{what}: {name!r} is a {labels[name].get('kind')} label of {index_path}; only numeric "
                             "columns can be compared or weighted.")
        if name not in known:
            raise ValueError(f"{what}: unknown column {name!r}; {index_path} has {', '.join(known)}.")
    if set(names) & set(QUALITY_COLUMNS):
        require_quality(index_path, meta, what)

    def column(name: str) -> np.ndarray:
        if name not in known:
            raise ValueError(f"{what}: unknown column {name!r}; {index_path} has {', '.join(known)}.")
        if name in QUALITY_COLUMNS:
            require_quality(index_path, meta, what)
        if name in QUALITY_COLUMNS or name == "sample_rate":
            return np.asarray(store.column(store_key(name)), dtype=np.float64)
        if name in WHERE_BASE_COLUMNS:
            return np.asarray(store.column(name), dtype=np.float64)
        return np.asarray(store.column(store.label_key(name)), dtype=np.float64)

    return column
