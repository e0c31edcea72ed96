"""Issue 50, item 5: the same notes read from another folder keep their answers. SimpleDirectoryReader
puts the absolute ``file_path`` in each node's metadata, shown to the LLM; an absolute path is not
rendered (``LOCATION_KEYS``), so the prompt, the partition and the answer survive a moved folder, while an
edited note still misses."""

from __future__ import annotations

import shutil

import pytest
from llama_index.core import SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.schema import TextNode
from llama_index.llms.ragcache import RagCacheLLM
from llama_index.postprocessor.ragcache import node_segment
from llama_index.query_engine.ragcache import RagCacheQueryEngine

from ragcache.engine.engine import LocalEngine
from ragcache.semantic import SemanticCache

NOTES = {"refunds.md": "Refunds: annual plans can be refunded within 30 days of purchase.",
         "backups.md": "Backups run nightly at 02:30 UTC and are kept for 30 days."}
Q = "How long do I have to get a refund on an annual plan?"


def _folder(path, notes=NOTES):
    path.mkdir(parents=True)
    for name, text in notes.items():
        (path / name).write_text(text + "\n")
    return path


def _engine(folder, embed_model, llm, semantic):
    docs = SimpleDirectoryReader(str(folder)).load_data()
    index = VectorStoreIndex.from_documents(docs, embed_model=embed_model)
    return RagCacheQueryEngine.from_index(index, similarity_top_k=2, llm=llm, semantic_cache=semantic)


def test_a_moved_folder_of_unchanged_notes_keeps_its_answers(tmp_path, tiny, embed_model):
    semantic = SemanticCache(embedder=embed_model.embedder)
    llm = RagCacheLLM(LocalEngine(tiny, chunk_cache=None), max_new_tokens=4)
    first = _engine(_folder(tmp_path / "a" / "notes"), embed_model, llm, semantic).query(Q)
    assert first.metadata["layer"] != "semantic"
    moved = tmp_path / "elsewhere" / "deeper" / "notes"
    shutil.copytree(tmp_path / "a" / "notes", moved)
    again = _engine(moved, embed_model, llm, semantic).query(Q)
    assert again.metadata["layer"] == "semantic" and str(again) == str(first)
    assert again.metadata["partition"] == first.metadata["partition"]
    edited = _folder(tmp_path / "b" / "notes", {**NOTES, "refunds.md": NOTES["refunds.md"].replace("30", "14")})
    assert _engine(edited, embed_model, llm, semantic).query(Q).metadata["layer"] != "semantic"


@pytest.mark.parametrize(("key", "value", "rendered"), [
    ("file_path", "/home/ana/notes/refunds.md", False),
    ("file_path", "C:\\Users\\ana\\notes\\refunds.md", False),
    ("file_path", "C:/Users/ana/notes/refunds.md", False),
    ("file_path", "notes/refunds.md", True),  # relative: names the file within the collection
    ("file_dir", "/home/ana/notes", False),
    ("source", "/home/ana/notes/refunds.md", True),  # not a location key: the user chose to show it
    ("title", "Refunds", True),
])
def test_only_an_absolute_location_is_left_out(key, value, rendered):
    seg = node_segment(TextNode(text="Refunds within 30 days.", metadata={key: value}))
    assert (key in seg.metadata) is rendered
