"""Partition isolation of RagCacheSemanticCache through LangChain chains.

The chain is ``RagPrompt | ChatRagCache(cache=...)`` on ragcache's tiny random model: a
miss runs the engine (``layer`` chunk/prefix/model), a hit comes from the semantic
cache (``layer == "semantic"``, with the similarity).
"""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.globals import set_llm_cache
from langchain_core.load import dumps
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration
from langchain_ragcache import ChatRagCache, RagCacheSemanticCache, RagPrompt

from ragcache.engine.engine import LocalEngine
from ragcache.testing import tiny_llama

DOCS = [
    Document(id="refunds", metadata={"source": "refunds.md"},
             page_content="Refunds are issued within 14 days of a return being received at the warehouse."),
    Document(page_content="Passwords can be reset from the account settings page under Security.",
             metadata={"source": "account.md"}),
]
OTHER_DOCS = [Document(page_content="Shipping to Canada takes five to seven business days.",
                       metadata={"source": "shipping.md"})]
SYSTEM = "Answer from the documents only."
Q = "How long do refunds take?"
REWORDED = "how long does a refund take"


def layer(msg: AIMessage) -> str:
    return msg.response_metadata["ragcache"]["layer"]


@pytest.fixture
def sem(embedder) -> RagCacheSemanticCache:
    return RagCacheSemanticCache(embedder=embedder, cache_truncated=True)  # tiny model: answers hit the budget


def ask(llm, question=Q, docs=DOCS, system=SYSTEM):
    return (RagPrompt(system=system) | llm).invoke({"question": question, "context": docs})


def test_same_question_reworded_hits(tiny_engine_plain, sem) -> None:
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=4, cache=sem)
    first = ask(llm)
    assert layer(first) != "semantic"
    again = ask(llm, REWORDED)
    assert layer(again) == "semantic"
    assert again.content == first.content
    assert 0.75 <= again.response_metadata["ragcache"]["similarity"] < 1.0
    assert again.response_metadata["ragcache"]["matched_question"] == Q


@pytest.mark.parametrize("change", ["temperature", "max_tokens", "model", "system", "documents", "history", "tenant",
                                    "tenant-call-option"])
def test_anything_but_the_question_changed_misses(tiny_engine_plain, sem, change) -> None:
    base = ChatRagCache(engine=tiny_engine_plain, max_tokens=4, cache=sem)
    ask(base)
    assert layer(ask(base, REWORDED)) == "semantic"  # the partition works at all
    llm, docs, system, extra = base, DOCS, SYSTEM, {}
    if change == "temperature":
        llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=4, temperature=0.7, seed=1, cache=sem)
    elif change == "max_tokens":
        llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=5, cache=sem)
    elif change == "model":
        other = LocalEngine(tiny_llama(seed=1), chunk_cache=None)
        llm = ChatRagCache(engine=other, max_tokens=4, cache=sem)
        assert llm.model_name == base.model_name  # same name; the weights fingerprint differs
    elif change == "system":
        system = SYSTEM + " Be brief."
    elif change == "documents":
        docs = OTHER_DOCS
    elif change == "history":
        extra = {"history": [("human", "hi"), ("ai", "hello")]}
    elif change == "tenant":  # answers stay per tenant, as the KV does
        llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=4, cache=sem, tenant="globex")
    elif change == "tenant-call-option":
        llm = base.bind(tenant="globex")
    out = (RagPrompt(system=system) | llm).invoke({"question": Q, "context": docs, **extra})
    assert layer(out) != "semantic"


@pytest.mark.parametrize("how", ["field", "call-option"])
def test_the_default_tenant_is_no_tenant(tiny_engine_plain, sem, how) -> None:
    base = ChatRagCache(engine=tiny_engine_plain, max_tokens=4, cache=sem)
    ask(base)
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=4, cache=sem, tenant="default") if how == "field" \
        else base.bind(tenant="default")
    assert layer(ask(llm, REWORDED)) == "semantic"


@pytest.mark.parametrize("bad,error", [(3, TypeError), ("", ValueError)])
def test_a_bad_tenant_is_refused(tiny_engine_plain, bad, error) -> None:
    with pytest.raises((error, ValueError), match="tenant"):
        ChatRagCache(engine=tiny_engine_plain, tenant=bad)
    with pytest.raises(error, match="tenant"):
        ChatRagCache(engine=tiny_engine_plain, max_tokens=2).invoke("Hi?", tenant=bad)


def test_other_model_name_misses(sem) -> None:
    prompt = dumps([HumanMessage("What is the refund window?")])
    sem.update(prompt, "[('model_name', 'model-a'), ('temperature', 0.0)]",
               [ChatGeneration(message=AIMessage("14 days", response_metadata={"finish_reason": "stop"}))])
    assert sem.lookup(prompt, "[('model_name', 'model-a'), ('temperature', 0.0)]") is not None
    assert sem.lookup(prompt, "[('model_name', 'model-b'), ('temperature', 0.0)]") is None


def test_different_question_same_long_context_misses(tiny_engine_plain, sem) -> None:
    # The bug this cache avoids: embedding the whole prompt makes these two look alike.
    long_docs = [Document(page_content=("The warehouse policy covers returns, refunds, exchanges, shipping "
                                        "and damaged goods in great detail. ") * 20)]
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=3, cache=sem)
    ask(llm, "How long do refunds take?", long_docs)
    assert layer(ask(llm, "Which carrier ships to Canada?", long_docs)) != "semantic"


def test_global_llm_cache(tiny_engine_plain, sem) -> None:
    set_llm_cache(sem)
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=4)
    ask(llm)
    assert layer(ask(llm, REWORDED)) == "semantic"


def test_key_embeds_only_the_question(sem) -> None:
    msgs = (RagPrompt(system=SYSTEM, provider="anthropic", min_tokens=1)
            .invoke({"question": Q, "context": DOCS, "volatile": "Customer tier: gold"}).to_messages())
    assert any("cache_control" in b for b in msgs[-1].content if isinstance(b, dict))
    question, pk = sem.key_for(dumps(msgs), "llm")
    assert question == Q
    plain = RagPrompt(system=SYSTEM).invoke({"question": Q, "context": DOCS[::-1],
                                             "volatile": "Customer tier: gold"}).to_messages()
    q2, pk2 = sem.key_for(dumps(plain), "llm")
    assert (q2, pk2.digest) == (question, pk.digest)  # markers and document order do not matter
    other = RagPrompt(system=SYSTEM).invoke({"question": Q, "context": DOCS,
                                             "volatile": "Customer tier: silver"}).to_messages()
    assert sem.key_for(dumps(other), "llm")[1].digest != pk2.digest


async def test_async_chain_hits(tiny_engine_plain, sem) -> None:
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=4, cache=sem)
    chain = RagPrompt(system=SYSTEM) | llm
    first = await chain.ainvoke({"question": Q, "context": DOCS})
    assert layer(first) != "semantic"
    hit = await chain.ainvoke({"question": REWORDED, "context": DOCS})
    assert layer(hit) == "semantic"


def test_plain_messages_and_system(tiny_engine_plain, sem) -> None:
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=3, cache=sem)
    llm.invoke([SystemMessage("Be terse."), HumanMessage("What is the capital of France?")])
    hit = llm.invoke([SystemMessage("Be terse."), HumanMessage("what's the capital of france")])
    assert layer(hit) == "semantic"
    miss = llm.invoke([SystemMessage("Be verbose."), HumanMessage("What is the capital of France?")])
    assert layer(miss) != "semantic"


def test_invalidate_by_document_id(tiny_engine_plain, sem) -> None:
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=3, cache=sem)
    ask(llm)
    assert layer(ask(llm, REWORDED)) == "semantic"
    assert sem.invalidate("refunds") == 1  # the document was edited: answers built on it go
    assert layer(ask(llm, REWORDED)) != "semantic"
    assert sem.stats["hits"] >= 1
