"""The pure sync rule: what a store holding some documents does with an incoming set."""

import pytest

from llama_index_mhop.stores.sync import (
    IncomingDocument,
    StoredDocument,
    UnknownDocumentError,
    match_doc_ids,
    plan_sync,
    source_doc_ids,
)


def stored(doc_id, versions, expected, source=None):
    return StoredDocument(doc_id, dict(versions), expected, source)


def test_plan_adds_replaces_and_keeps():
    held = {
        "same.txt": stored("same.txt", {"h1": 2}, 2, "/c"),
        "edited.txt": stored("edited.txt", {"old": 1}, 1, "/c"),
        "gone.txt": stored("gone.txt", {"h3": 1}, 1, "/c"),
        "other.txt": stored("other.txt", {"h4": 1}, 1, "/elsewhere"),
    }
    incoming = [IncomingDocument("same.txt", "h1"), IncomingDocument("edited.txt", "new"),
                IncomingDocument("new.txt", "h5")]
    plan = plan_sync(incoming, held, mirror_source="/c")
    assert (plan.added, plan.updated, plan.removed, plan.unchanged) == (
        ("new.txt",), ("edited.txt",), ("gone.txt",), ("same.txt",))
    assert plan.counts() == {"added": 1, "updated": 1, "removed": 1, "unchanged": 1}
    assert plan_sync(incoming, held).removed == ()  # no mirroring: nothing removed


def test_interrupted_writes_are_replaced_not_trusted():
    incoming = [IncomingDocument("a", "h2"), IncomingDocument("b", "h1")]
    held = {
        "a": stored("a", {"h1": 1, "h2": 1}, 1),  # two versions: an update cut short
        "b": stored("b", {"h1": 1}, 3),  # one of three passages written
    }
    plan = plan_sync(incoming, held)
    assert plan.updated == ("a", "b") and plan.unchanged == ()


def test_duplicate_incoming_ids_are_refused():
    with pytest.raises(ValueError, match="share the doc id 'x'"):
        plan_sync([IncomingDocument("x", "1"), IncomingDocument("x", "2")], {})


def test_doc_ids_resolve_by_full_id_or_unambiguous_file_name():
    known = ["people/Pat Hingle.txt", "films/Marty.txt", "a/notes.md", "b/notes.md"]
    assert match_doc_ids(["films/Marty.txt", "Pat Hingle.txt"], known) == ["films/Marty.txt", "people/Pat Hingle.txt"]
    with pytest.raises(UnknownDocumentError, match="names 2 documents: a/notes.md, b/notes.md"):
        match_doc_ids(["notes.md"], known)
    with pytest.raises(UnknownDocumentError, match="close matches: films/Marty.txt"):
        match_doc_ids(["films/Marty.md"], known)
    with pytest.raises(UnknownDocumentError, match="^no passage or document with id 'zzz'; the index holds 4 documents$"):
        match_doc_ids(["zzz"], known)


def test_a_folder_file_another_source_holds_is_stored_under_its_full_path():
    held = {"notes.txt": StoredDocument("notes.txt", {"h": 1}, 1, "/A"),
            "/B/old.txt": StoredDocument("/B/old.txt", {"h": 1}, 1, "/B"),
            "api-1": StoredDocument("api-1", {"h": 1}, 1, None)}
    assert source_doc_ids(["notes.txt", "old.txt", "api-1", "new.txt"], held, "/B") == {
        "notes.txt": "/B/notes.txt", "old.txt": "/B/old.txt", "api-1": "/B/api-1", "new.txt": "new.txt"}
    assert source_doc_ids(["notes.txt"], held, "/A") == {"notes.txt": "notes.txt"}  # its own id, kept
    held["/C/notes.txt"] = StoredDocument("/C/notes.txt", {"h": 1}, 1, "/D")
    with pytest.raises(ValueError, match="'notes.txt' of /C clashes with '/C/notes.txt' indexed from /D"):
        source_doc_ids(["notes.txt"], held, "/C")
