"""``AudioTree``'s file methods and label keywords (issue 38): each written once, the 1.0 signatures kept.

The labels (``lufs`` ... ``latents``) are typed once, by
``tree_fields.label_keywords``, for ``AudioTree.create`` and ``AudioTree.from_file``;
the file methods are functions of :mod:`audiotree.tree_io` that the class binds
in its body (the class does not inherit them), so ``core`` imports ``tree_io``
and never the other way round.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest
import soundfile

from audiotree import AudioTree, tree_io
from audiotree.tree_fields import LABEL_FIELDS

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "src" / "audiotree"
LABELS = ["lufs", "lufs_windows", "pitch", "velocity", "note_duration", "codes", "latents"]

# The 1.0 signatures (keyword-only parameters in their published order).
CREATE = ["waveform", "sample_rate", *LABELS, "extras", "filepath", "source", "offset", "lengths"]
FROM_FILE = ["audio_path", "sample_rate", "offset", "duration", "mono", "pad_mode", "filepath", "source", "extras",
             *LABELS]


def functions_spelling_the_labels(root: Path = PACKAGE_ROOT) -> list[str]:
    """``module:function`` for each function whose own parameters name every label."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
                if set(LABEL_FIELDS) <= names:
                    found.append(f"{path.relative_to(root)}:{node.name}")
    return found


def test_the_label_keywords_are_typed_once():
    assert tuple(LABELS) == LABEL_FIELDS
    assert functions_spelling_the_labels() == []


def test_the_scan_can_fail(tmp_path):
    (tmp_path / "m.py").write_text("def make(x, *, " + ", ".join(f"{n}=None" for n in LABELS) + "):\n    pass\n")
    assert functions_spelling_the_labels(tmp_path) == ["m.py:make"]


def test_the_published_signatures_are_unchanged():
    assert list(inspect.signature(AudioTree.create).parameters) == CREATE
    assert list(inspect.signature(AudioTree.from_file).parameters) == FROM_FILE
    for name in LABELS:
        for method in (AudioTree.create, AudioTree.from_file):
            parameter = inspect.signature(method).parameters[name]
            assert parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default is None


def test_labels_pass_through_and_other_names_are_refused(tmp_path):
    path = tmp_path / "tone.wav"
    soundfile.write(path, np.full(800, 0.25, np.float32), 8000)
    tree = AudioTree.from_file(path, pitch=60.0, velocity=100, codes=np.zeros((1, 4), np.int32))
    assert tree.pitch.tolist() == [60.0] and tree.velocity.dtype == np.int16 and tree.codes.shape == (1, 4)
    made = AudioTree.create(np.zeros((1, 1, 8), np.float32), 8000, note_duration=np.array([0.5]))
    assert made.note_duration.tolist() == [0.5] and made.pitch is None
    with pytest.raises(TypeError, match="create\\(\\) got an unexpected keyword argument 'loudness'"):
        AudioTree.create(np.zeros((1, 1, 8), np.float32), 8000, loudness=-20.0)
    with pytest.raises(TypeError, match="from_file\\(\\) got an unexpected keyword argument 'loudness'"):
        AudioTree.from_file(path, loudness=-20.0)


def test_the_file_methods_are_bound_not_inherited():
    assert AudioTree.__mro__ == (AudioTree, object)
    for name in ("from_file", "from_clip", "from_manifest", "excerpt", "loudest_excerpt"):
        assert getattr(AudioTree, name).__func__ is getattr(tree_io, name)
    assert AudioTree.write is tree_io.write
