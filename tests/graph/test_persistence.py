"""Hand-edited or corrupt graph index files: a one-line error naming the file and the field, nothing written."""

from __future__ import annotations

import json

import chromadb
import pytest

from llama_index_mhop.graph.index import CHECKPOINT_FILE, CONFIG_FILE, GRAPH_FILE, HippoGraphIndex
from llama_index_mhop.stores import make_document
from tests.word_bag import WordBagEmbedding

DOCS = [
    ("Lover Come Back (1961 film)", "Lover Come Back is a 1961 comedy film directed by Delbert Mann."),
    ("Delbert Mann", "Delbert Mann was an American director. He directed Marty in 1955."),
    ("Marty (film)", "Marty is a 1955 drama film written by Paddy Chayefsky."),
    ("Paddy Chayefsky", "Paddy Chayefsky was an American playwright born in the Bronx."),
]
DEEP = "[" * 100_000 + "]" * 100_000


def documents():
    return [make_document(title, text) for title, text in DOCS]


@pytest.fixture
def saved(tmp_path):
    """An index saved in tmp_path/index with its Chroma data in tmp_path/index/chroma."""
    root = tmp_path / "index"
    HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), persist_dir=root, name="saved",
                                   show_progress=False)
    return root


@pytest.fixture
def checkpoint(tmp_path):
    """The directory of a build killed after its first batch (its checkpoint lists two passages)."""

    def stop(batch: int, done: int) -> None:
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), persist_dir=tmp_path,
                                       name="killed", insert_batch_size=2, show_progress=False, on_batch_end=stop)
    assert (tmp_path / CHECKPOINT_FILE).is_file()
    return tmp_path


def reopen(root):
    return HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding())


def resume(root):
    return HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), persist_dir=root,
                                          name="killed", insert_batch_size=2, show_progress=False)


def edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", [CONFIG_FILE, GRAPH_FILE])
def test_deeply_nested_file_is_a_clear_error(saved, name):
    (saved / name).write_text(DEEP)
    with pytest.raises(ValueError, match=f"{name}: nested too deeply") as exc:
        reopen(saved)
    one_line(exc)


def test_deeply_nested_checkpoint_line_is_a_clear_error(checkpoint):
    lines = (checkpoint / CHECKPOINT_FILE).read_text().splitlines()
    (checkpoint / CHECKPOINT_FILE).write_text("\n".join([lines[0], DEEP, lines[1]]) + "\n")
    with pytest.raises(ValueError, match=f"{CHECKPOINT_FILE}: line 2: nested too deeply"):
        resume(checkpoint)


def test_list_where_an_object_belongs_in_the_config(saved):
    edit(saved / CONFIG_FILE, lambda config: config.update(embed_model=[]))
    with pytest.raises(ValueError, match=f"{CONFIG_FILE}: embed_model: expected an object or null, got a list"):
        reopen(saved)


def test_list_where_an_object_belongs_in_the_graph(saved):
    edit(saved / GRAPH_FILE, lambda graph: graph.update(entities=[]))
    with pytest.raises(ValueError, match=f"{GRAPH_FILE}: entities: expected an object, got a list"):
        reopen(saved)


def edit_first_record(root, change) -> str:
    """Apply ``change(passages, first_id)`` to the first batch line of the checkpoint in ``root``."""
    path = root / CHECKPOINT_FILE
    lines = path.read_text().splitlines()
    record = json.loads(lines[1])
    first = next(iter(record["passages"]))
    change(record["passages"], first)
    path.write_text("\n".join([lines[0], json.dumps(record)]) + "\n")
    return first


def test_list_where_an_object_belongs_in_the_checkpoint(checkpoint):
    first = edit_first_record(checkpoint, lambda passages, pid: passages.update({pid: []}))
    with pytest.raises(ValueError, match=f"{CHECKPOINT_FILE}: line 2: passages.{first}: expected an object"):
        resume(checkpoint)


def test_huge_version_number_is_a_clear_error(saved):
    (saved / GRAPH_FILE).write_text((saved / GRAPH_FILE).read_text().replace('"version": ', '"version": 1e400, "_": ', 1))
    with pytest.raises(ValueError, match=f"{GRAPH_FILE}: version: expected an integer, got inf"):
        reopen(saved)


def test_fact_naming_an_unknown_entity_is_refused_at_load(saved):
    def unknown_subject(graph):
        fact = next(iter(graph["facts"]))
        graph["facts"][fact][0] = "nope"

    edit(saved / GRAPH_FILE, unknown_subject)
    with pytest.raises(ValueError, match=rf"{GRAPH_FILE}: facts\.\w+: names entity 'nope', which is not"):
        reopen(saved)


def test_checkpoint_record_without_entities_is_a_clear_error(checkpoint):
    first = edit_first_record(checkpoint, lambda passages, pid: passages[pid].pop("entities"))
    with pytest.raises(ValueError, match=rf"{CHECKPOINT_FILE}: line 2: passages\.{first}\.entities: missing"):
        resume(checkpoint)


def test_config_naming_another_index_writes_nothing_to_the_users_store(tmp_path):
    client = chromadb.EphemeralClient()
    HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), chroma_client=client, name="mine",
                                   persist_dir=tmp_path, show_progress=False)
    before = sorted(c.name for c in client.list_collections())
    edit(tmp_path / CONFIG_FILE, lambda config: config.update(
        name="other", collections={kind: f"other_{kind}" for kind in ("passages", "entities", "facts")}))
    with pytest.raises(ValueError, match=f"{CONFIG_FILE}: name: .*no collection 'other_passages'"):
        HippoGraphIndex.from_persist_dir(tmp_path, chroma_client=client, embed_model=WordBagEmbedding())
    assert sorted(c.name for c in client.list_collections()) == before


def test_docstore_hash_of_the_wrong_type_is_a_clear_error(saved):
    path = saved / "hippo_docstore.json"
    edit(path, lambda data: data["docstore/metadata"][next(iter(data["docstore/metadata"]))].update(doc_hash=[]))
    with pytest.raises(ValueError, match=r"hippo_docstore.json: docstore/metadata\..+\.doc_hash: expected a string"):
        reopen(saved)
