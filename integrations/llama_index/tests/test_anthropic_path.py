"""RagCacheQueryEngine with llama_index.llms.anthropic.Anthropic pointed at ragcache's local
Anthropic-compatible server (real SDK, real HTTP, the documented prompt-caching rules)."""

import pytest

pytest.importorskip("llama_index.llms.anthropic")
pytest.importorskip("starlette")

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import CachePoint
from llama_index.core.schema import QueryBundle
from llama_index.llms.anthropic import Anthropic
from llama_index.llms.anthropic.utils import messages_to_anthropic_messages
from llama_index.query_engine.ragcache import RagCacheQueryEngine

from ragcache.engine.engine import LocalEngine
from ragcache.server.app import running_server

MODEL = "claude-sonnet-4-6"
MIN_TOKENS = 64  # the server's minimum cacheable prefix (the real API's is 1024 for this model)


@pytest.fixture(scope="module")
def engine(tiny):
    return LocalEngine(tiny)


@pytest.fixture(scope="module")
def base_url(engine):
    with running_server(engine, min_tokens=MIN_TOKENS) as url:
        yield url


def _engine(retriever_or_index, base_url, engine, **kw):
    llm = Anthropic(model=MODEL, base_url=base_url, api_key="local", max_tokens=4, temperature=0.0, max_retries=0)
    return RagCacheQueryEngine.from_index(retriever_or_index, llm=llm, semantic_cache=False,
                                          anthropic_min_tokens=MIN_TOKENS, token_counter=engine.count_tokens, **kw)


def _markers(messages):
    sent, _ = messages_to_anthropic_messages(messages, None, MODEL)
    return sum(1 for m in sent for b in m["content"] if isinstance(b, dict) and b.get("cache_control"))


@pytest.mark.parametrize("streaming", [False, True])
def test_second_query_reads_the_cache(index, base_url, engine, streaming):
    # all four documents are retrieved (in score order, which differs per question); the
    # stable order makes the prefix bytes equal, so the follow-up question reads the cache
    qe = _engine(index, base_url, engine, similarity_top_k=4, streaming=streaming,
                 system_prompt=f"Answer from the documents ({'stream' if streaming else 'plain'} run).")
    q1, q2 = "How long do I have to get a refund on an annual plan?", "Which tier allows 600 requests per minute?"
    assert [n.node.node_id for n in qe.retriever.retrieve(q1)] != [n.node.node_id for n in qe.retriever.retrieve(q2)]
    r1 = qe.query(q1)
    r2 = qe.query(q2)
    if streaming:
        r1, r2 = r1.get_response(), r2.get_response()
    m1, m2 = r1.metadata, r2.metadata
    assert [n.node.node_id for n in r1.source_nodes] == [n.node.node_id for n in r2.source_nodes]
    assert m1["cache_write_tokens"] >= MIN_TOKENS and m1["cache_read_tokens"] == 0 and m1["layer"] == "provider"
    assert m2["cache_read_tokens"] == m1["cache_write_tokens"] and m2["cache_write_tokens"] == 0
    assert m2["layer"] == "provider-cache" and m2["tokens_reused"] == m2["cache_read_tokens"]
    assert 1 <= m2["cache_markers"] <= 4 and m2["ttft_s"] > 0


def test_never_more_than_four_markers_with_25_nodes(base_url, engine, embed_model):
    docs = [Document(text=f"Note {i}: the heron was seen near marker {i * 7} feeding for {i % 5 + 2} minutes.",
                     id_=f"note-{i:02d}") for i in range(25)]
    index = VectorStoreIndex.from_documents(docs, embed_model=embed_model)
    qe = _engine(index, base_url, engine, similarity_top_k=25)
    q = QueryBundle("Where was the heron seen feeding longest?")
    prep = qe.prepare(q, qe.retriever.retrieve(q))
    assert len(prep.nodes) == 25
    points = [b for m in prep.laid.messages for b in m.blocks if isinstance(b, CachePoint)]
    assert 1 <= len(points) <= 4 and prep.laid.markers == len(points)
    assert _markers(prep.laid.messages) == len(points)
    # documents one block each, question last, no marker after the question
    user = prep.laid.messages[-1]
    assert sum(1 for b in user.blocks if not isinstance(b, CachePoint)) == 25 + 1
    assert not isinstance(user.blocks[-1], CachePoint)
    r1 = qe.query(q.query_str)  # the server rejects more than 4 markers with a 400
    r2 = qe.query("Where was the heron seen feeding shortest?")
    assert r1.metadata["cache_markers"] <= 4 and r2.metadata["cache_read_tokens"] > 0


def test_below_minimum_places_no_marker(index, base_url, engine):
    llm = Anthropic(model=MODEL, base_url=base_url, api_key="local", max_tokens=2, temperature=0.0, max_retries=0)
    qe = RagCacheQueryEngine.from_index(index, llm=llm, semantic_cache=False, similarity_top_k=1, system_prompt=None,
                                        anthropic_min_tokens=4096, token_counter=engine.count_tokens)
    q = QueryBundle("Where is EU data stored?")
    prep = qe.prepare(q, qe.retriever.retrieve(q))
    assert prep.laid.markers == 0 and any("below the minimum" in n for n in prep.laid.notes)


def test_user_llm_works_unpatched(base_url):
    """The user's own llama_index Anthropic LLM works with the declared anthropic version: ragcache
    patches nothing in third-party modules (issue 15, item 8)."""
    import typing

    from llama_index.core.llms import ChatMessage
    from llama_index.llms.anthropic import utils

    assert typing.get_origin(utils.MessageParam) is not typing.Union  # a TypedDict, callable
    llm = Anthropic(model=MODEL, base_url=base_url, api_key="local", max_tokens=2, temperature=0.0, max_retries=0)
    r = llm.chat([ChatMessage(role="user", content="Where is EU data stored?")])
    assert isinstance(r.message.content, str)
