"""json_files.json_object reading a member entry by entry: the same object as a whole parse, the same errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_mhop.graph.json_files import DamagedFileError, json_object, read_json_object, write_json

WHERE = Path("tables.json")
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                          max_size=4), max_leaves=12)
documents = st.dictionaries(st.sampled_from(["table", "other", "x"]) | st.text(max_size=6), values, max_size=5)


def tagged(key: str, value):
    return ("converted", key, value)


@settings(max_examples=200, deadline=None)
@given(documents, st.sampled_from([None, 0, 2]))
def test_entry_by_entry_equals_a_whole_parse_then_converted(document, indent):
    text = json.dumps(document, indent=indent)
    expected = dict(document)
    if isinstance(expected.get("table"), dict):
        expected["table"] = {k: tagged(k, v) for k, v in expected["table"].items()}
    assert json_object(text, WHERE, entries={"table": tagged}) == expected
    assert json_object(text.encode(), WHERE) == document


@pytest.mark.parametrize("text", [
    '{"table": {"a": 1}} x', '{"table": {"a" 1}}', '{"table": {"a": 1 "b": 2}}', '{"table": {a: 1}}',
    '{"table": {"a": 1}', '{"table": {"a": }}', '{"other": [1, 2}', '{"table": {"a": 1},}',
])
def test_malformed_json_is_named_as_a_whole_parse_names_it(text):
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(ValueError, match="tables.json: not valid JSON"):
        json_object(text, WHERE, entries={"table": tagged})


def test_a_refused_entry_is_named_by_its_member_and_key():
    def numbers_only(key, value):
        return float(value)

    assert json_object('{"table": {"a": 1, "b": "2.5"}}', WHERE, entries={"table": numbers_only}) == {
        "table": {"a": 1.0, "b": 2.5}}
    with pytest.raises(ValueError, match=r"tables.json: table.b: malformed entry"):
        json_object('{"table": {"a": 1, "b": [2]}}', WHERE, entries={"table": numbers_only})


def test_a_top_level_that_is_not_an_object_is_named():
    with pytest.raises(ValueError, match="top level: expected an object, got a list"):
        json_object("[1, 2]", WHERE, entries={"table": tagged})
    with pytest.raises(ValueError, match="nested too deeply"):
        json_object('{"table": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}", WHERE, entries={"table": tagged})


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
