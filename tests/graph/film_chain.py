"""A four-passage film chain (film, director, film, writer) that the persistence tests save and reopen."""

from llama_index.core import Document

from llama_index_mhop.stores.corpus import make_document

DOCS = [
    ("Lover Come Back (1961 film)", "Lover Come Back is a 1961 comedy film directed by Delbert Mann."),
    ("Delbert Mann", "Delbert Mann was an American director. He directed Marty in 1955."),
    ("Marty (film)", "Marty is a 1955 drama film written by Paddy Chayefsky."),
    ("Paddy Chayefsky", "Paddy Chayefsky was an American playwright born in the Bronx."),
]


def documents() -> list[Document]:
    return [make_document(title, text) for title, text in DOCS]
