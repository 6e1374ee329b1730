"""One home per byte-layer concept, checked on the source with ``ast``.

- ``_call_s3`` (s3fs's private request method) appears in ``io/ranged_get.py`` only;
- exactly one ranged GET per backend, all in ``io/ranged_get.py``: one function
  passing ``Range=`` to S3, one setting a ``"Range"`` header for GCS, one for
  HTTP and one for S3's presigned URL (the same ``_s3``: its usual way is the
  ``Range=``), and one ``cat_file(..., start=, end=)`` for the other fsspec backends;
- bounded caches are :class:`audiotree.io.byte_cache.BoundedCache`: ``OrderedDict``,
  ``functools.lru_cache``/``functools.cache``, ``popitem`` and the hand-made
  eviction ``pop(next(iter(...)))`` appear in ``io/byte_cache.py`` only, apart from
  the memos listed in :data:`ALLOWED` with their reasons.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "src" / "audiotree"

BYTE_CACHE = "io/byte_cache.py"
RANGED_GET = "io/ranged_get.py"

#: Caches that are not per-process data caches, each with why it stays a plain memo.
ALLOWED = {
    ("io/extensions.py", "pyav_available"): "a constant of the installation (is PyAV importable), one entry",
    ("sources/workers/lifecycle.py", "_closed_variant"): "a subclass per iterator class: bounded by the code",
    ("sources/audio_datasets.py", "_prefetched_type"): "one class built once (a subclass of two lazily imported bases)",
    ("transforms/_math.py", "_jitted"): "a compiled function per transform (JAX jit), bounded by the code",
    ("transforms/_checks.py", "_window_cached"): "window coefficients of a pure function of (window, length)",
    ("dsp/biquads.py", "_block_operators"): "block operators of a filter: a pure function of its coefficients",
    ("dsp/loudness.py", "k_weighting_sos_cached"): "K-weighting filter coefficients: a pure function of the rate",
    ("dsp/loudness_jax.py", "_k_ir_cached"): "the K-weighting impulse response: a pure function of the rate",
    ("dsp/resample_jax.py", "_kernel_cached"): "resampling kernels: a pure function of the rate pair",
}


def _functions(tree: ast.AST):
    """``(function name or "<module>", node)`` for each node, attributed to its innermost function."""
    def walk(node, owner):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else owner
            yield inner, child
            yield from walk(child, inner)
    yield from walk(tree, "<module>")


def _is_cache_decorator(node: ast.AST) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Attribute) and target.attr in ("lru_cache", "cache") and \
        isinstance(target.value, ast.Name) and target.value.id == "functools" or \
        isinstance(target, ast.Name) and target.id in ("lru_cache", "cache")


def scan(root: Path = ROOT) -> dict[str, list]:
    """What the rules look at, found under ``root``: lists of ``(module, function)`` or ``(module, function, what)``."""
    found: dict[str, list] = {"call_s3": [], "s3_get": [], "range_header": [], "ranged_cat": [], "caches": []}
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for owner, node in _functions(tree):
            if isinstance(node, ast.Attribute) and node.attr == "_call_s3" or \
                    isinstance(node, ast.Constant) and node.value == "_call_s3":
                found["call_s3"].append((module, owner))
            if isinstance(node, ast.Call):
                if any(k.arg == "Range" for k in node.keywords):
                    found["s3_get"].append((module, owner))
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr in ("cat_file", "cat_ranges", "read_block") and \
                        (func.attr != "cat_file" or {"start", "end"} & {k.arg for k in node.keywords}
                         or len(node.args) > 1):
                    found["ranged_cat"].append((module, owner))
                if isinstance(func, ast.Attribute) and func.attr == "popitem":
                    found["caches"].append((module, owner, "popitem"))
                if isinstance(func, ast.Attribute) and func.attr == "pop" and node.args and \
                        isinstance(node.args[0], ast.Call) and getattr(node.args[0].func, "id", "") == "next":
                    found["caches"].append((module, owner, "pop(next(iter(...)))"))
                if getattr(func, "attr", getattr(func, "id", None)) == "OrderedDict":
                    found["caches"].append((module, owner, "OrderedDict"))
            if isinstance(node, ast.Constant) and node.value == "Range":
                found["range_header"].append((module, owner))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for deco in node.decorator_list:
                    if _is_cache_decorator(deco):
                        found["caches"].append((module, node.name, "functools cache"))
    return found


def violations(root: Path = ROOT) -> list[str]:
    found = scan(root)
    out = [f"{m}:{f} uses s3fs's _call_s3 outside {RANGED_GET}" for m, f in found["call_s3"] if m != RANGED_GET]
    for kind, want in (("s3_get", 1), ("range_header", 3), ("ranged_cat", 1)):
        homes = sorted(set(found[kind]))
        outside = [h for h in homes if h[0] != RANGED_GET]
        out += [f"{m}:{f} makes a ranged GET ({kind}) outside {RANGED_GET}" for m, f in outside]
        if len(homes) - len(outside) != want:
            out.append(f"{RANGED_GET} has {len(homes) - len(outside)} functions of kind {kind}, not {want}: {homes}")
    for module, owner, what in found["caches"]:
        if module != BYTE_CACHE and (module, owner) not in ALLOWED:
            out.append(f"{module}:{owner} builds its own cache ({what})")
    return out


def test_one_ranged_get_per_backend_and_one_cache_type():
    assert violations() == []


def test_every_allowed_memo_still_exists():
    found = {(m, f) for m, f, _ in scan()["caches"]}
    assert set(ALLOWED) <= found, set(ALLOWED) - found


def test_the_scan_finds_each_kind_of_violation(tmp_path):
    # What the tree held before the byte layer, in a made-up package: each line is found.
    (tmp_path / "io").mkdir()
    (tmp_path / "io" / "ranged_get.py").write_text((ROOT / RANGED_GET).read_text(encoding="utf-8"))
    (tmp_path / "io" / "remote_file.py").write_text(
        "def _s3_head(fs, url):\n    return callable(getattr(fs, '_call_s3', None))\n")
    (tmp_path / "io" / "flac_seek.py").write_text(
        "from collections import OrderedDict\n_HEADERS = OrderedDict()\n"
        "def _header(key):\n    while len(_HEADERS) > 4:\n        _HEADERS.popitem(last=False)\n")
    (tmp_path / "sources").mkdir()
    (tmp_path / "sources" / "epoch_order.py").write_text(
        "import functools\ndef evict_oldest(cache, keep):\n    cache.pop(next(iter(cache)), None)\n"
        "@functools.lru_cache(maxsize=8)\ndef plan(x):\n    return x\n")
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "seek_build.py").write_text(
        "def _read(fs, path, n):\n    return fs.cat_file(path, start=0, end=n)\n"
        "async def _get(session, url):\n    return await session.get(url, headers={'Range': 'bytes=0-9'})\n")
    assert violations(tmp_path) == [
        "io/remote_file.py:_s3_head uses s3fs's _call_s3 outside io/ranged_get.py",
        "index/seek_build.py:_get makes a ranged GET (range_header) outside io/ranged_get.py",
        "index/seek_build.py:_read makes a ranged GET (ranged_cat) outside io/ranged_get.py",
        "io/flac_seek.py:<module> builds its own cache (OrderedDict)",
        "io/flac_seek.py:_header builds its own cache (popitem)",
        "sources/epoch_order.py:evict_oldest builds its own cache (pop(next(iter(...))))",
        "sources/epoch_order.py:plan builds its own cache (functools cache)",
    ]
