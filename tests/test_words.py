"""One meaning per word across the public API (issue 26), checked over the public signatures.

The vocabulary below is the contract: a word that names a parameter anywhere
in the public API means the same thing everywhere. Signatures are collected
from every public package's ``__all__`` (functions, classes and their public
methods), so a new function that reuses a word with another meaning, or an
old spelling that comes back, fails here.
"""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest

from factories import tone_file

PACKAGES = ("audiotree", "audiotree.sources", "audiotree.index", "audiotree.io", "audiotree.dsp",
            "audiotree.parallel", "audiotree.torch", "audiotree.jax", "audiotree.writers", "audiotree.formats",
            "audiotree.transforms", "audiotree.scan")

#: Each word and its one meaning.
WORDS = {
    "duration": "the seconds of each item; None reads whole files (or whole segments)",
    "max_duration": "rows of a corpus index longer than this are left out (a filter, never a crop)",
    "crop_to": "whole files longer than this keep their first seconds (ExcerptConfig, strategy='full')",
    "executor": "where corpus jobs run; None runs them in this process, 'process' is a pool, 'ray' a cluster",
    "shuffle_seed": "the seed of every shuffle (item order, batch order); the only seed word besides excerpt_seed",
    "excerpt_seed": "the seed of the excerpt offsets",
    "on_*": "a policy: 'raise' | 'warn' | 'skip', plus 'reprobe' or 'trust' where those apply",
}

#: Settings of the windows: passed as a WindowConfig, never loose to a builder.
WINDOW_KNOBS = ("hop", "alpha", "jitter", "lufs_cache", "lufs_cutoff", "lufs_window_sec")
BUILDERS = ("create_audio_dataset", "create_balanced_audio_dataset", "create_windowed_audio_dataset")


def _public_signatures() -> dict[str, inspect.Signature]:
    found: dict[str, inspect.Signature] = {}
    for name in PACKAGES:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr, None)
            targets = []
            if inspect.isclass(obj):
                targets.append((attr, obj))
                targets += [(f"{attr}.{k}", v) for k, v in vars(obj).items()
                            if not k.startswith("_") and inspect.isfunction(v)]
            elif callable(obj):
                targets.append((attr, obj))
            for label, target in targets:
                try:
                    found.setdefault(label, inspect.signature(target))
                except (TypeError, ValueError):  # builtins without a signature
                    continue
    return found


SIGNATURES = _public_signatures()


def _uses(word: str) -> dict[str, inspect.Parameter]:
    return {label: sig.parameters[word] for label, sig in SIGNATURES.items() if word in sig.parameters}


def test_the_signatures_were_collected():
    assert len(SIGNATURES) > 150 and set(BUILDERS) <= set(SIGNATURES)
    assert len(_uses("duration")) >= 5 and len(_uses("executor")) >= 5


def test_one_seed_word():
    assert _uses("seed") == {}, f"'seed' is spelled shuffle_seed: {sorted(_uses('seed'))}"
    assert {"batch_by_duration", "plan_buckets", "AudioDataLoader", "EpochSampler"} <= set(_uses("shuffle_seed"))


@pytest.mark.parametrize("label", ["batch_by_duration", "plan_buckets", "AudioDataLoader", "EpochSampler"])
def test_the_old_seed_word_is_refused_naming_the_new_one(label):
    import audiotree.sources as sources
    import audiotree.torch as torch_api

    target = getattr(sources, label, None) or getattr(torch_api, label)
    with pytest.raises(TypeError, match=rf"{label}\(\) takes shuffle_seed= now, not seed="):
        target([1.0, 2.0], seed=1)


def test_executor_none_is_this_process_everywhere(tmp_path):
    from audiotree.index import build_index
    from audiotree.parallel import open_executor

    assert all(p.default is None for p in _uses("executor").values()), _uses("executor")
    with open_executor(None) as runner:
        assert runner.name == "serial"
    (tmp_path / "a").mkdir()
    path = tone_file(tmp_path / "a" / "x.wav", seconds=0.5)
    with pytest.raises(ValueError, match="sizes a process pool.*executor='process'"):
        build_index([str(tmp_path / "a")], str(tmp_path / "x.parquet"), max_workers=2, loudness=False,
                    show_progress=False)
    report = build_index([str(tmp_path / "a")], str(tmp_path / "ok.parquet"), loudness=False, show_progress=False)
    assert report.rows == 1 and path.endswith("x.wav")


def test_policies_share_one_vocabulary():
    from audiotree.index import ON_STALE, LabelSource
    from audiotree.index.reader import check_on_stale
    from audiotree.io.read_errors import ON_READ_ERROR, check_on_read_error
    from audiotree.writers import TreeWriter

    assert set(ON_READ_ERROR) == {"raise", "warn", "skip"}
    assert set(ON_STALE) == {"raise", "skip", "reprobe", "trust"}
    policies = {label: p for label, sig in SIGNATURES.items() for name, p in sig.parameters.items()
                if name.startswith("on_") and isinstance(p.default, str)}
    assert policies and "error" not in {p.default for p in policies.values()}
    with pytest.raises(ValueError, match="on_stale='error' is now spelled on_stale='raise'"):
        check_on_stale("error")
    with pytest.raises(ValueError, match="on_read_error must be one of"):
        check_on_read_error("error")
    with pytest.raises(ValueError, match="'error' is now spelled .*'raise'"):
        LabelSource("labels.csv", missing="error")
    with pytest.raises(ValueError, match="on_overflow='error' is now spelled on_overflow='raise'"):
        TreeWriter("unused", 1, on_overflow="error")


def test_max_duration_only_filters_and_crop_to_only_crops():
    from audiotree import ExcerptConfig

    filters = set(_uses("max_duration"))
    assert filters == {"Corpus", "CorpusIndex.select"}, filters  # the builders take it in corpus=Corpus(...)
    assert "crop_to" in inspect.signature(ExcerptConfig).parameters
    with pytest.raises(TypeError, match=r"ExcerptConfig\(\) takes crop_to= now, not max_duration="):
        ExcerptConfig(strategy="full", max_duration=2.0)


@pytest.mark.parametrize("builder", BUILDERS)
def test_builders_take_at_most_ten_parameters(builder):
    assert len(SIGNATURES[builder].parameters) <= 10, list(SIGNATURES[builder].parameters)


@pytest.mark.parametrize("word,new", [("mono", r"output=Output\(mono=...\)"), ("index", r"corpus=Corpus\(index=...\)"),
                                      ("shard_options", r"order=Order\(shard_options=...\)"),
                                      ("on_read_error", r"corpus=Corpus\(on_read_error=...\)")])
def test_old_loose_options_are_refused_naming_their_option_object(word, new):
    import audiotree.sources as sources

    with pytest.raises(TypeError, match=rf"create_audio_dataset\(\) takes {new} now, not {word}="):
        sources.create_audio_dataset("unused", **{word: None})


def test_window_settings_go_only_through_a_window_config():
    for builder in BUILDERS:
        loose = set(WINDOW_KNOBS) & set(SIGNATURES[builder].parameters)
        assert not loose, f"{builder} takes {sorted(loose)} loose; they belong to WindowConfig"
    assert "duration" not in SIGNATURES["create_windowed_audio_dataset"].parameters  # WindowConfig.duration


@pytest.mark.parametrize("builder", ["create_audio_dataset", "create_balanced_audio_dataset"])
def test_duration_none_reads_whole_files_in_every_builder(tmp_path, builder):
    import audiotree.sources as sources

    folder = tmp_path / "g"
    folder.mkdir()
    lengths = {}
    for i, seconds in enumerate((0.3, 0.7)):
        lengths[tone_file(folder / f"f{i}.wav", rate=8000, seconds=seconds)] = round(seconds * 8000)
    kwargs = {"sources": str(folder)} if builder == "create_audio_dataset" else {"sources": {"g": str(folder)}}
    ds = getattr(sources, builder)(**kwargs, duration=None, sample_rate=8000, shuffle=False, num_epochs=1)
    items = [ds[i] for i in range(2)]
    assert sorted(int(np.asarray(item.lengths)[0]) for item in items) == sorted(lengths.values())
    assert SIGNATURES[builder].parameters["duration"].default == 1.0  # the default is an excerpt, in both
