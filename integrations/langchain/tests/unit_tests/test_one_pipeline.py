"""Issue 10 through LangChain: one partition, one record, one document identity.

The same request sent through :class:`ragcache.RagCache` and through
``RagPrompt | ChatRagCache(cache=RagCacheSemanticCache(...))`` gets the same partition key
(the digests are computed both ways and compared), shares the stored answer, is invalidated
by the same document, and reports the same :class:`ragcache.backend.CacheUsage`.
"""

from __future__ import annotations

import pytest
import torch
from langchain_core.documents import Document
from langchain_core.load import dumps
from langchain_ragcache import ChatRagCache, RagCacheSemanticCache, RagPrompt

from ragcache import CacheUsage, ChunkCache, LocalBackend, LocalEngine, MemoryChunkStore, RagCache, SemanticCache
from ragcache.hashing import content_hash
from ragcache.testing import tiny_llama

SYSTEM = "Answer from the documents only, in one sentence."
DOCS = [
    {"id": "refund-policy", "text": "Refunds are issued within 30 days of purchase when the receipt is shown. " * 3},
    {"id": "shipping", "text": "Orders ship from the Leeds warehouse on weekdays before noon, by courier. " * 3},
    {"id": "warranty", "text": "Bikes carry a two-year warranty on the frame and six months on parts. " * 3},
    {"id": "returns", "text": "Return a bike in its original box; the buyer pays return shipping costs. " * 3},
]
LC_DOCS = [Document(id=d["id"], page_content=d["text"], metadata={"source": f"{d['id']}.md"}) for d in DOCS]
RC_DOCS = [{"id": d["id"], "text": d["text"], "metadata": {"source": f"{d['id']}.md"}} for d in DOCS]


@pytest.fixture(scope="module")
def lm():
    return tiny_llama(seed=3, initializer_range=0.2)


@pytest.fixture
def shared(lm, embedder):
    """One engine and one SemanticCache behind both entry points."""
    engine = LocalEngine(lm)
    sem = SemanticCache(None, embedder=embedder)
    # the tiny random model always fills its budget: store truncated answers on both sides
    rag = RagCache(LocalBackend(engine), semantic=sem, system=SYSTEM, max_new_tokens=4, cache_truncated=True)
    cache = RagCacheSemanticCache(sem, cache_truncated=True)
    llm = ChatRagCache(engine=engine, max_tokens=4, cache=cache)
    return rag, cache, llm


def _lc_partition(cache: RagCacheSemanticCache, llm: ChatRagCache, inputs: dict, **prompt_kw):
    messages = RagPrompt(system=SYSTEM, **prompt_kw).invoke(inputs).to_messages()
    return cache.key_for(dumps(messages), llm._get_llm_string())


REQUESTS = [
    # (LangChain RagPrompt input, RagCache.prepare keyword arguments)
    ({"question": "How long do refunds take?", "context": LC_DOCS[:2]},
     {"documents": RC_DOCS[:2]}),
    ({"question": "When do orders ship?", "context": LC_DOCS[::-1]},  # retriever order does not matter
     {"documents": RC_DOCS}),
    ({"question": "Is the frame covered?", "context": LC_DOCS[2:], "volatile": "User: user-a",
      "history": [("human", "hi"), ("ai", "Hello, how can I help?")]},
     {"documents": RC_DOCS[2:], "volatile": "User: user-a",
      "history": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello, how can I help?"}]}),
    ({"question": "Who pays return shipping?", "context": [d["text"] for d in DOCS[3:]]},
     {"documents": [d["text"] for d in DOCS[3:]]}),
]


@pytest.mark.parametrize("lc_input, rc_kwargs", REQUESTS)
def test_same_partition_through_ragcache_and_the_chain(shared, lc_input, rc_kwargs) -> None:
    rag, cache, llm = shared
    req = rag.prepare(lc_input["question"], **rc_kwargs)
    question, pk = _lc_partition(cache, llm, lc_input)
    assert question == req.question == lc_input["question"]
    assert pk.digest == req.partition.digest
    assert pk.documents == req.partition.documents  # content hashes: what invalidate() matches


def test_partition_differs_with_the_system_text_moved_out_of_it(shared) -> None:
    rag, cache, llm = shared
    inputs = {"question": "How long do refunds take?", "context": LC_DOCS[:1]}
    dated = {"system": SYSTEM + " Today is 2026-11-30."}
    req = rag.prepare(inputs["question"], RC_DOCS[:1], **dated)
    messages = RagPrompt(**dated).invoke(inputs).to_messages()  # lint="move", as RagCache
    _, pk = cache.key_for(dumps(messages), llm._get_llm_string())
    assert pk.digest == req.partition.digest
    assert pk.digest != rag.prepare(inputs["question"], RC_DOCS[:1]).partition.digest


def test_answers_are_shared_both_ways(shared) -> None:
    rag, cache, llm = shared
    chain = RagPrompt(system=SYSTEM) | llm
    first = chain.invoke({"question": "How long do refunds take?", "context": LC_DOCS[:2]})
    assert first.response_metadata["ragcache"]["layer"] != "semantic"
    hit = rag.answer("How long do refunds take?", RC_DOCS[:2])
    assert (hit.layer, hit.text) == ("semantic", first.content)
    # and the other way: RagCache stores, the chain is served
    a = rag.answer("When do orders ship?", RC_DOCS[1:3])
    assert a.layer != "semantic"
    served = chain.invoke({"question": "When do orders ship?", "context": LC_DOCS[1:3]})
    assert served.response_metadata["ragcache"]["layer"] == "semantic" and served.content == a.text


@pytest.mark.parametrize("name", ["id", "text", "text-crlf", "content-hash"])
def test_invalidate_through_langchain_removes_the_stale_answer(shared, name) -> None:
    rag, cache, llm = shared
    chain = RagPrompt(system=SYSTEM) | llm
    inputs = {"question": "How long do refunds take?", "context": LC_DOCS[:2]}
    chain.invoke(inputs)
    assert chain.invoke(inputs).response_metadata["ragcache"]["layer"] == "semantic"
    doc = DOCS[0]
    key = {"id": doc["id"], "text": doc["text"], "text-crlf": "  " + doc["text"].strip() + "\r\n",
           "content-hash": content_hash(doc["text"])}[name]
    assert cache.invalidate(key) == 1
    again = chain.invoke(inputs)
    assert again.response_metadata["ragcache"]["layer"] != "semantic"  # the model was called
    assert rag.answer(inputs["question"], RC_DOCS[:2]).layer == "semantic"  # the fresh answer is served


def _engine_with_two_precomputed(lm) -> LocalEngine:
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    # blend at r = 0.15 on any chunk hit (without a calibration record an engine blends only when told an r)
    engine = LocalEngine(lm, chunk_cache=cc, min_reuse_tokens=0, calibration=False, recompute_ratio=0.15)
    assert cc.precompute(engine, RC_DOCS[:2], progress=False) == 2
    return engine


def test_two_of_four_documents_hit_same_usage_everywhere(lm) -> None:
    q = "How long do refunds take?"
    answer = RagCache(LocalBackend(_engine_with_two_precomputed(lm)), system=SYSTEM, max_new_tokens=3).answer(q, RC_DOCS)
    llm = ChatRagCache(engine=_engine_with_two_precomputed(lm), max_tokens=3)
    msg = (RagPrompt(system=SYSTEM) | llm).invoke({"question": q, "context": LC_DOCS})

    meta = msg.response_metadata["ragcache"]
    usage = CacheUsage(**meta["usage"])
    assert usage == answer.usage
    assert usage.reused + usage.recomputed + usage.computed == usage.prompt_tokens > 0
    assert usage.chunk_reused > 0 and usage.recomputed > 0 and usage.cache_write == 0
    assert (meta["docs_hit"], meta["docs_missed"]) == (2, 2) == (answer.details["docs_hit"], answer.details["docs_missed"])
    assert meta["layer"] == answer.layer and "chunk" in meta["layer"]
    assert meta["approximate"] is True and meta["recompute_ratio"] == answer.recompute_ratio == 0.15
    # the one mapping CacheUsage -> UsageMetadata
    um = msg.usage_metadata
    assert um["input_tokens"] == usage.prompt_tokens and um["output_tokens"] == usage.completion_tokens == 3
    assert um["input_token_details"] == {"cache_read": usage.reused, "cache_creation": 0}
    assert msg.content == answer.text


async def test_streams_report_the_same_record(lm) -> None:
    q = "Who pays return shipping?"
    inputs = {"question": q, "context": LC_DOCS}
    invoked = (RagPrompt(system=SYSTEM) | ChatRagCache(engine=_engine_with_two_precomputed(lm), max_tokens=3)).invoke(inputs)
    chunks = [c async for c in (RagPrompt(system=SYSTEM)
                                | ChatRagCache(engine=_engine_with_two_precomputed(lm), max_tokens=3)).astream(inputs)]
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    assert full.content == invoked.content
    assert full.response_metadata["ragcache"]["usage"] == invoked.response_metadata["ragcache"]["usage"]
    assert full.usage_metadata == invoked.usage_metadata


def test_exact_prefix_only_request_is_layer_prefix(lm) -> None:
    llm = ChatRagCache(engine=LocalEngine(lm), max_tokens=2)
    chain = RagPrompt(system=SYSTEM * 4) | llm
    first = chain.invoke({"question": "How long do refunds take?", "context": []})
    second = chain.invoke({"question": "When do orders ship?", "context": []})
    assert first.response_metadata["ragcache"]["layer"] == "model"
    meta = second.response_metadata["ragcache"]
    assert meta["layer"] == "prefix" and meta["approximate"] is False and meta["recompute_ratio"] is None
    assert second.usage_metadata["input_token_details"]["cache_read"] == meta["usage"]["prefix_reused"] > 0


def test_semantic_hits_say_whether_the_stored_answer_was_approximate(lm, embedder) -> None:
    sem = SemanticCache(None, embedder=embedder)
    q = "How long do refunds take?"
    # stored by RagCache (blended prefill: two of four documents from the chunk cache), served to LangChain
    rag = RagCache(LocalBackend(_engine_with_two_precomputed(lm)), semantic=sem, system=SYSTEM, max_new_tokens=3,
                   cache_truncated=True)
    assert rag.answer(q, RC_DOCS).approximate
    llm = ChatRagCache(engine=_engine_with_two_precomputed(lm), max_tokens=3,
                       cache=RagCacheSemanticCache(sem, cache_truncated=True))
    chain = RagPrompt(system=SYSTEM) | llm
    hit = chain.invoke({"question": q, "context": LC_DOCS}).response_metadata["ragcache"]
    assert (hit["layer"], hit["approximate"], hit["recompute_ratio"]) == ("semantic", True, 0.15)
    # stored by the chain from an exact prefill, served again
    other = {"question": "When do orders ship?", "context": LC_DOCS[2:]}
    miss = chain.invoke(other, use_chunk_cache=False).response_metadata["ragcache"]
    again = chain.invoke(other, use_chunk_cache=False).response_metadata["ragcache"]
    assert miss["approximate"] is False and (again["layer"], again["approximate"]) == ("semantic", False)
