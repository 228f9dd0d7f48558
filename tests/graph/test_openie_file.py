"""HippoRAG OpenIE results files: importing one builds exactly the graph an LM returning those triples builds,
exporting then importing round-trips, and a malformed file is an error naming the file and the record."""

from __future__ import annotations

import json
from pathlib import Path

import chromadb
import pytest

from llama_index_mhop.graph import HippoGraphIndex, export_openie
from llama_index_mhop.graph.extraction import OpenIEExtractor
from llama_index_mhop.graph.openie_file import OpenIEFileError, StoredOpenIE, read_openie, write_openie
from llama_index_mhop.lm.clients import function_lm
from llama_index_mhop.stores.corpus import make_document

FIXTURE = Path(__file__).resolve().parents[2] / "examples" / "data" / "openie_results_ner_gpt-4o-mini.json"
EXTRA = ("Bread", "Bread is baked in Leland every morning.", ["Bread", "Leland"], [["Bread", "baked in", "Leland"]])


def fixture_passages() -> list[tuple[str, str, list[str], list[list[str]]]]:
    """(title, text, entities, well-formed triples) of every fixture record, plus one passage the file lacks."""
    records = json.loads(FIXTURE.read_text())["docs"]
    out = []
    for record in records:
        title, text = record["passage"].split("\n", 1)
        triples = [t for t in record["extracted_triples"] if len(t) == 3]
        out.append((title, text, record["extracted_entities"], triples))
    return [*out, EXTRA]


def scripted_openie_lm():
    """An LM that answers each passage's OpenIE with that passage's entities and triples."""
    answers = {text: (entities, triples) for _, text, entities, triples in fixture_passages()}

    def chat(messages):
        prompt = messages[-1][1]
        for text, (entities, triples) in answers.items():
            if text in prompt:
                return (f"[[ ## named_entities ## ]]\n{json.dumps(entities)}\n\n[[ ## triples ## ]]\n"
                        f"{json.dumps(triples)}\n\n[[ ## completed ## ]]")
        raise RuntimeError("a passage the script does not know")

    return function_lm(chat)


def documents():
    return [make_document(title, text) for title, text, _, _ in fixture_passages()]


def graph_snapshot(index: HippoGraphIndex) -> dict:
    state = index.retrieval_state()
    return {"counts": index.counts(), "facts": sorted(state.fact_triples), "entities": sorted(state.entity_names),
            "passages": sorted(state.passage_ids), "nodes": state.num_nodes}


def build(embed_model, extractor, name):
    return HippoGraphIndex.from_documents(documents(), embed_model=embed_model, chroma_client=chromadb.EphemeralClient(),
                                          name=name, extractor=extractor, show_progress=False)


def test_import_gives_the_graph_of_an_lm_returning_those_triples(embed_model):
    stored = StoredOpenIE(FIXTURE, fallback=OpenIEExtractor(lm=scripted_openie_lm(), backoff_seconds=0))
    imported = build(embed_model, stored, "openie_imported")
    extracted = build(embed_model, OpenIEExtractor(lm=scripted_openie_lm(), backoff_seconds=0), "openie_extracted")
    assert (stored.from_file, stored.extracted) == (4, 1)
    assert graph_snapshot(imported) == graph_snapshot(extracted)
    assert ("stephen king", "born in", "portland") in graph_snapshot(imported)["facts"]


def test_export_then_import_round_trips(tmp_path):
    stored = StoredOpenIE(FIXTURE, fallback=OpenIEExtractor(lm=scripted_openie_lm(), backoff_seconds=0))
    for title, text, _, _ in fixture_passages():
        stored.extract(text, title)
    exported = write_openie(tmp_path / "openie_results_ner_export.json", stored.served)
    again = read_openie(exported)
    fixture = read_openie(FIXTURE)
    assert len(again) == 5 and all(again[key] == extraction for key, extraction in fixture.items())
    data = json.loads(exported.read_text())
    original = json.loads(FIXTURE.read_text())
    assert [d["idx"] for d in data["docs"][:4]] == [d["idx"] for d in original["docs"]]  # HippoRAG's chunk ids
    assert set(data) == {"docs", "avg_ent_chars", "avg_ent_words"}
    reread = StoredOpenIE(exported, fallback=OpenIEExtractor(lm=scripted_openie_lm()))
    assert [reread.extract(text, title) for title, text, _, _ in fixture_passages()] == [e for _, e in stored.served]
    assert (reread.from_file, reread.extracted) == (5, 0)


def test_exported_index_rebuilds_the_same_graph(embed_model, tmp_path):
    stored = StoredOpenIE(FIXTURE, fallback=OpenIEExtractor(lm=scripted_openie_lm(), backoff_seconds=0))
    original = build(embed_model, stored, "openie_original")
    exported = export_openie(original, tmp_path / "openie_results_ner_mhop.json")
    again = StoredOpenIE(exported, fallback=OpenIEExtractor(lm=None))
    rebuilt = build(embed_model, again, "openie_rebuilt")
    assert (again.from_file, again.extracted) == (5, 0)
    assert graph_snapshot(rebuilt) == graph_snapshot(original)


def test_openie_results_keyword_on_build_and_refresh(embed_model, caplog):
    lm = scripted_openie_lm()
    docs = documents()
    with caplog.at_level("INFO", logger="llama_index_mhop.graph.openie_file"):
        keyword = HippoGraphIndex.from_documents(docs[:3], embed_model=embed_model, lm=lm, show_progress=False,
                                                 chroma_client=chromadb.EphemeralClient(), name="openie_keyword",
                                                 openie_results=FIXTURE)
        assert "OpenIE: 3 passages from" in caplog.text
        caplog.clear()
        assert keyword.refresh_ref_docs(docs, openie_results=FIXTURE) == [False, False, False, True, True]
        assert "OpenIE: 1 passages from" in caplog.text and ", 1 extracted" in caplog.text
    extracted = build(embed_model, OpenIEExtractor(lm=lm, backoff_seconds=0), "openie_keyword_reference")
    assert graph_snapshot(keyword) == graph_snapshot(extracted)


@pytest.mark.parametrize(("content", "message"), [
    ("not json", r"not a readable JSON file"),
    ('{"documents": []}', r"expected an object with a 'docs' list"),
    ('{"docs": [{"passage": "a", "extracted_entities": [], "extracted_triples": []}, 3]}', r"docs\[1\]: expected"),
    ('{"docs": [{"passage": "", "extracted_entities": []}]}', r"docs\[0\]: 'passage' must be a non-empty string"),
    ('{"docs": [{"passage": "a", "extracted_entities": "Alice"}]}', r"docs\[0\]: 'extracted_entities' must be"),
    ('{"docs": [{"passage": "a", "extracted_triples": [["a", 1, "b"]]}]}', r"docs\[0\]: triple 0 must be"),
    ("[" * 100_000, r"not a readable JSON file"),
])
def test_malformed_file_names_the_file_and_record(tmp_path, content, message):
    path = tmp_path / "openie_results_ner_bad.json"
    path.write_text(content)
    with pytest.raises(OpenIEFileError, match=rf"openie_results_ner_bad\.json.*{message}"):
        StoredOpenIE(path)
