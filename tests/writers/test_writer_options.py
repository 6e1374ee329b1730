"""The writers' shared keywords have one home (issue 38): ``exist_ok`` and the progress bar,
in :mod:`audiotree.writers.writer_options`.

Every writer refuses a folder that already holds its kind of dataset with one message,
and no writer builds its own refusal or progress bar.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from audiotree.writers import ArrayRecordWriter, AudioWriter, TreeWriter
from audiotree.writers.webdataset import WebDatasetWriter
from audiotree.writers.writer_options import progress_bar

WRITERS = Path(__file__).resolve().parents[2] / "src" / "audiotree" / "writers"
# A refusal that is not exist_ok's, with its reason.
OTHER_REFUSALS = {"render_run.py": "a folder of files that are no render: overwrite= never deletes them"}
REFUSAL = r"already holds {what} \({files}\); pass exist_ok=True to replace it, or choose another folder\."


@pytest.mark.parametrize("make, marker, what", [
    (lambda d, **kw: AudioWriter(d, **kw), "manifest.npz", "a dataset"),
    (lambda d, **kw: TreeWriter(d, **kw).open(), "manifest.json", "a dataset"),
    (lambda d, **kw: ArrayRecordWriter(d, **kw), "arrayrecord.json", "an ArrayRecord dataset"),
    (lambda d, **kw: WebDatasetWriter(d, **kw), "shard-000000.tar", "tar shards"),
])
def test_every_writer_refuses_an_occupied_folder_alike(tmp_path, make, marker, what):
    (tmp_path / marker).write_bytes(b"")
    with pytest.raises(FileExistsError, match=REFUSAL.format(what=what, files=marker)) as caught:
        make(tmp_path)
    assert str(tmp_path) in str(caught.value)
    writer = make(tmp_path, exist_ok=True)  # replaces it
    writer.close()


def test_a_bar_is_made_only_when_asked_and_closed_by_the_writer():
    class Bar:
        pass

    given = Bar()
    assert progress_bar(given, False, True, None, default_desc="Writing", unit="item") == (given, False)
    assert progress_bar(given, True, False, None, default_desc="Writing", unit="item") == (given, True)
    bar, close = progress_bar(None, False, True, "Tones", default_desc="Writing", unit="item", total=3)
    assert close and bar.desc == "Tones" and bar.total == 3
    bar.close()


def test_no_writer_builds_its_own_refusal_or_bar():
    found = []
    for path in sorted(WRITERS.glob("*.py")):
        if path.name == "writer_options.py" or path.name in OTHER_REFUSALS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                    "FileExistsError", "tqdm"):
                found.append(f"{path.name}:{node.lineno} {node.func.id}")
    assert found == []
