"""Issue 22, items 3 and 8 (LlamaIndex): the query engine defaults to the persistent answer store
under $RAGCACHE_HOME (None: in memory, False: no semantic layer) with the process's one embedder,
and works with an LLM that states no output budget (MockLLM: num_output -1)."""

import pytest
from llama_index.core.llms import MockLLM
from llama_index.query_engine.ragcache import RagCacheQueryEngine
from llama_index.query_engine.ragcache.backend import DEFAULT_MAX_NEW_TOKENS, LlamaIndexBackend

from ragcache.semantic import defaults
from ragcache.semantic.embedding import shared_embedder

Q = "How long do I have to get a refund on an annual plan?"


@pytest.mark.parametrize("llm,budget", [(MockLLM(), DEFAULT_MAX_NEW_TOKENS), (MockLLM(max_tokens=8), 8),
                                        (MockLLM(max_tokens=0), DEFAULT_MAX_NEW_TOKENS)])
def test_mock_llm_answers_and_hits_the_second_time(index, llm, budget, tmp_path):
    assert llm.metadata.num_output == (-1 if budget == DEFAULT_MAX_NEW_TOKENS else budget)
    assert LlamaIndexBackend(llm).max_new_tokens == budget
    qe = RagCacheQueryEngine.from_index(index, similarity_top_k=2, llm=llm)
    assert qe.semantic_cache.path == tmp_path / "answers"  # $RAGCACHE_ANSWERS_DIR (conftest) = $RAGCACHE_HOME/answers
    first = qe.query(Q)
    assert first.metadata["layer"] != "semantic" and str(first)
    again = qe.query(Q)
    assert again.metadata["layer"] == "semantic" and str(again) == str(first)


def test_default_store_is_shared_persistent_and_none_is_memory(index, tmp_path):
    llm = MockLLM(max_tokens=8)
    a = RagCacheQueryEngine.from_index(index, llm=llm)
    b = RagCacheQueryEngine.from_index(index, llm=llm, semantic_cache=True)
    assert a.semantic_cache is b.semantic_cache and a.semantic_cache.embedder is shared_embedder()
    first = a.query(Q)
    defaults._close_all()  # as at exit; a new process opens the folder again
    restarted = RagCacheQueryEngine.from_index(index, llm=llm)
    assert restarted.semantic_cache is not a.semantic_cache
    hit = restarted.query(Q)
    assert hit.metadata["layer"] == "semantic" and str(hit) == str(first)
    mem = RagCacheQueryEngine.from_index(index, llm=llm, semantic_cache=None)
    assert mem.semantic_cache.path is None and mem.query(Q).metadata["layer"] != "semantic"
    assert mem.semantic_cache.embedder is shared_embedder()
    off = RagCacheQueryEngine.from_index(index, llm=llm, semantic_cache=False)
    assert off.semantic_cache is None and off.query(Q).metadata["layer"] != "semantic"


@pytest.mark.parametrize("bad", ["yes", 3, object()])
def test_a_bad_semantic_cache_argument_names_the_choices(index, bad):
    with pytest.raises(ValueError if isinstance(bad, str) else TypeError, match="'default'"):
        RagCacheQueryEngine.from_index(index, llm=MockLLM(), semantic_cache=bad)


@pytest.mark.parametrize("bad", [None, "index", 3, object()])
def test_from_index_refuses_what_is_no_index_at_once(bad):
    with pytest.raises(TypeError, match="index must be a LlamaIndex index"):
        RagCacheQueryEngine.from_index(bad, llm=MockLLM())


@pytest.mark.parametrize("bad", [None, "retriever", object()])
def test_a_retriever_without_retrieve_is_refused_at_construction(bad):
    with pytest.raises(TypeError, match="retriever must be a LlamaIndex retriever"):
        RagCacheQueryEngine(bad, llm=MockLLM())
