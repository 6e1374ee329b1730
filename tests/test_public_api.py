"""The published 1.0 surface keeps resolving after internal moves (names, kinds, positional budgets)."""

from __future__ import annotations

import importlib
import inspect

import pytest

import audiotree

SOURCES = [
    "ExcerptConfig", "AudioReadError", "OnReadError", "create_audio_dataset", "create_balanced_audio_dataset",
    "create_windowed_audio_dataset", "find_audio_files", "build_window_lufs_cache", "load_window_lufs",
    "save_window_lufs", "precompute_window_lufs", "scan_durations", "WindowLufsCache", "WindowConfig",
    "AudioDataSource", "TreeDataSource", "open_render", "shard_dataset",
]
INTERNAL = {
    "audiotree.core": ["AudioTree", "PYTREE_FIELDS", "ARRAY_FIELDS", "LABEL_FIELDS", "DERIVED_FIELDS"],
    "audiotree.transforms.base": ["normalize_scope", "merge_pytree", "map_transform", "random_transform"],
    "audiotree.dsp": ["measure", "resample", "shift_lufs", "integrated_loudness"],
}
BUDGET = {  # positional parameters allowed before keyword-only ones
    "AudioTree.from_file": 1, "AudioTree.from_manifest": 1, "AudioTree.write": 1, "AudioTree.resample": 1,
    "AudioTree.create": 2, "create_audio_dataset": 2, "create_windowed_audio_dataset": 2, "find_audio_files": 2,
    "create_balanced_audio_dataset": 2,  # (sources, weights): ready datasets are groups of sources now
}


def test_top_level_names():
    assert set(audiotree.__all__) == {"AudioTree", "ExcerptConfig", "Output", "Order", "Corpus", "AudioWriter",
                                      "TreeWriter", "render", "sources", "transforms"}
    assert audiotree.render.__module__ == "audiotree.writers.render_run"
    for name in audiotree.__all__:
        assert getattr(audiotree, name) is not None
    assert audiotree.ExcerptConfig is audiotree.sources.ExcerptConfig


@pytest.mark.parametrize("name", SOURCES)
def test_sources_names_resolve(name):
    assert name in audiotree.sources.__all__
    assert getattr(audiotree.sources, name) is not None


@pytest.mark.parametrize("module,names", INTERNAL.items())
def test_internal_names_the_behaviour_depends_on(module, names):
    mod = importlib.import_module(module)
    for name in names:
        assert hasattr(mod, name), f"{module}.{name}"


@pytest.mark.parametrize("qualname,budget", BUDGET.items())
def test_positional_budget(qualname, budget):
    owner, _, attr = qualname.rpartition(".")
    fn = getattr(audiotree.AudioTree, attr) if owner == "AudioTree" else getattr(audiotree.sources, qualname)
    params = [p for p in inspect.signature(fn).parameters.values() if p.name not in ("self", "cls")]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert len(positional) == budget, (qualname, [p.name for p in positional])


def test_reader_methods_keep_their_published_signatures():
    excerpt = inspect.signature(audiotree.AudioTree.excerpt)
    assert list(excerpt.parameters)[:5] == ["audio_path", "rng", "duration", "offset", "excerpt"]
    loudest = inspect.signature(audiotree.AudioTree.loudest_excerpt)
    assert list(loudest.parameters)[:3] == ["audio_path", "rng", "excerpt"]
