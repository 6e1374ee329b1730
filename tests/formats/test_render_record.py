"""The render record on disk (formats/render_record.py) and reading a render back (sources/readers/render_parts.py)."""

from __future__ import annotations

import json

import pytest

from audiotree.formats.render_record import RECORD, new_record, read_record, write_record
from audiotree.sources import open_render


def test_record_round_trip_and_atomic_replace(tmp_path):
    assert read_record(tmp_path) is None
    record = new_record({"format": "tree", "part_size": 4})
    write_record(tmp_path, record)
    record["parts"].append({"dir": "part-00000", "start": 0, "stop": 4, "count": 4})
    write_record(tmp_path, record)
    assert read_record(tmp_path) == record
    assert [p.name for p in tmp_path.iterdir()] == [RECORD]  # no temporary file left


@pytest.mark.parametrize("text,match", [("{not json", "not readable JSON"), (json.dumps({"version": 99}), "not an audiotree render")])
def test_a_bad_record_is_named(tmp_path, text, match):
    (tmp_path / RECORD).write_text(text)
    with pytest.raises(ValueError, match=match):
        read_record(tmp_path)


def test_open_render_refuses_what_is_not_a_finished_render(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an audiotree render"):
        open_render(tmp_path)
    write_record(tmp_path, new_record({"format": "tree"}))
    with pytest.raises(RuntimeError, match="no finished part"):
        open_render(tmp_path)
