"""json_files: a saved JSON object read back checked against its digest, every problem named in one line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_mhop.graph.json_files import DamagedFileError, read_json_object, write_json

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                          max_size=4), max_leaves=12)
documents = st.dictionaries(st.sampled_from(["table", "other", "x"]) | st.text(max_size=6), values, max_size=5)


@pytest.mark.parametrize("text", ["[1, 2]", '{"table": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}", "{x"])
def test_a_file_that_is_not_a_json_object_is_named_in_one_line(tmp_path, text):
    path = tmp_path / "tables.json"
    path.write_text(text)
    with pytest.raises(DamagedFileError, match="tables.json: (top level: expected an object|nested too deeply|not "
                                               "valid JSON)") as exc:
        read_json_object(path)
    assert "\n" not in str(exc.value)


@settings(max_examples=100, deadline=None)
@given(documents.filter(bool), st.data())
def test_a_written_file_reads_back_and_any_changed_byte_is_refused_by_its_digest(tmp_path_factory, document, data):
    path = tmp_path_factory.mktemp("digest") / "saved.json"
    write_json(path, document)
    assert read_json_object(path) == document  # the digest checked, then taken off
    raw = path.read_bytes()
    at = data.draw(st.integers(0, len(raw) - 1))
    changed = raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1 :]
    path.write_bytes(changed)
    try:
        read = read_json_object(path)
    except DamagedFileError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
    else:  # only a change inside the digest's own member leaves the file readable: what it holds is unchanged
        assert at >= raw.rindex(b',"digest":')
        assert {key: value for key, value in read.items() if key in document} == document


def test_a_file_written_before_digests_reads_and_one_parsed_and_written_again_is_refused(tmp_path):
    path = tmp_path / "saved.json"
    path.write_text(json.dumps({"name": "older"}))
    assert read_json_object(path) == {"name": "older"}
    write_json(path, {"name": "saved", "n": 1})
    edited = json.loads(path.read_text())
    edited["n"] = 2
    path.write_text(json.dumps(edited, indent=1))  # the digest kept, spaced: what it covers changed
    with pytest.raises(DamagedFileError, match="do not match the digest recorded"):
        read_json_object(path)
    path.write_bytes(bytes(40))
    with pytest.raises(DamagedFileError, match="saved.json: not valid JSON"):
        read_json_object(path)
