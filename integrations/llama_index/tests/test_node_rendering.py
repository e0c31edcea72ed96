"""One LlamaIndex node, one rendering (issue 47, item 3): ``RagCache.answer(documents=nodes)``,
``ChunkCache.precompute(engine, nodes)``, the node postprocessor and the query engine all show the
model what LlamaIndex shows the LLM (``MetadataMode.LLM``: ``excluded_llm_metadata_keys`` removed),
so excluded keys never reach the model and chunks precomputed from nodes are found by the query engine."""

import datetime

import pytest
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode
from llama_index.llms.ragcache import RagCacheLLM
from llama_index.postprocessor.ragcache import node_segment
from llama_index.query_engine.ragcache import RagCacheQueryEngine

from ragcache import LocalBackend, RagCache
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.engine import LocalEngine
from ragcache.engine.prompt import document_token_ids
from ragcache.prompt.segments import as_document, render_document

SECRET = "owner.private@example.com"
Q = "How long do I have to get a refund on an annual plan?"


def _nodes():
    return [
        TextNode(text="Refunds: annual plans can be refunded within 30 days of purchase.", id_="n1",
                 metadata={"source": "billing.md", "owner_email": SECRET},
                 excluded_llm_metadata_keys=["owner_email"]),
        TextNode(text="Rate limits: the free tier allows 60 requests per minute.", id_="n2",
                 metadata={"file_name": "limits.md", "last_modified_date": "2026-12-01", "file_size": 812,
                           "page": 3},
                 excluded_llm_metadata_keys=["last_modified_date", "file_size"],
                 excluded_embed_metadata_keys=["page"]),  # embed exclusions do not matter to the LLM
        TextNode(text="Passwords: reset links expire after 15 minutes.", id_="n3",
                 metadata={"title": "Passwords", "reviewed": datetime.date(2026, 1, 2), "tags": ["auth", "web"]},
                 excluded_llm_metadata_keys=["title"]),  # a date is not JSON: dropped as before
        TextNode(text="Regions: EU data is stored in Frankfurt.", id_="n4", metadata={}),
    ]


class _Fixed(BaseRetriever):
    """A retriever that returns the same nodes for every query."""

    def __init__(self, nodes):
        self._nodes = nodes
        super().__init__()

    def _retrieve(self, query_bundle):
        return list(self._nodes)


class _Recording(LocalBackend):
    def __init__(self, engine):
        super().__init__(engine)
        self.layouts = []

    def generate(self, layout, **kw):
        self.layouts.append(layout)
        return super().generate(layout, **kw)


def _llm_keys(node):
    """The metadata keys LlamaIndex itself renders for the LLM."""
    shown = node.get_metadata_str(mode=MetadataMode.LLM)
    return {k for k in node.metadata if f"{k}: " in shown}


@pytest.mark.parametrize("i", range(4))
def test_every_entry_point_renders_a_node_as_llamaindex_shows_the_llm(i):
    node = _nodes()[i]
    seg = as_document(node)
    assert render_document(seg) == render_document(node_segment(node))  # one rendering
    assert render_document(as_document(NodeWithScore(node=node, score=0.3))) == render_document(seg)
    json_like = {k for k, v in node.metadata.items() if not isinstance(v, datetime.date)}
    assert set(seg.metadata) == _llm_keys(node) & json_like
    for k in set(node.excluded_llm_metadata_keys):
        assert f' {k}="' not in render_document(seg)
    assert seg.text == node.get_content(metadata_mode=MetadataMode.NONE) and seg.id == node.node_id


def test_re_read_files_with_a_new_modification_date_render_the_same():
    a, b = _nodes()[1], _nodes()[1]
    b.metadata["last_modified_date"] = "2026-12-06"
    b.id_ = "a-new-random-id"
    assert render_document(as_document(a)) == render_document(as_document(b))


def test_excluded_keys_never_reach_the_model_through_rag_cache_answer(tiny):
    backend = _Recording(LocalEngine(tiny, calibration=False))
    RagCache(backend, semantic=None, max_new_tokens=2).answer(Q, _nodes())
    prompt = backend.engine.build_prompt(backend.layouts[-1])
    assert SECRET not in prompt.text and "2026-12-01" not in prompt.text and "812" not in prompt.text
    assert 'source="billing.md"' in prompt.text and 'page="3"' in prompt.text


def test_chunks_precomputed_from_nodes_are_found_by_the_query_engine(tiny):
    nodes = _nodes()[:3]
    engine = LocalEngine(tiny, chunk_cache=ChunkCache(), min_reuse_tokens=0, calibration=False, recompute_ratio=0.15)
    assert engine.chunk_cache.precompute(engine, nodes, progress=False) == 3
    for n in nodes:  # the chunk key's ids: the node's one rendering, excluded keys absent
        assert SECRET not in engine.tokenizer.decode(document_token_ids(engine.tokenizer, n))
    llm = RagCacheLLM(engine, max_new_tokens=2, use_prefix_cache=False)
    qe = RagCacheQueryEngine(_Fixed([NodeWithScore(node=n, score=1.0 - i / 10) for i, n in enumerate(nodes)]),
                             llm=llm, semantic_cache=False)
    r = qe.query(Q)
    assert r.metadata["docs_hit"] == 3 and r.metadata["docs_missed"] == 0 and r.metadata["chunk_tokens_reused"] > 0
