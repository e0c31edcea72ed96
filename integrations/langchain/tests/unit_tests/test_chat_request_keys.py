"""ChatRagCache keys a stream from the messages and options it holds (``RagCacheSemanticCache.chat_request``),
without LangChain's ``dumps`` string parsed back or ``ast.literal_eval`` of its ``llm_string``; the key is the
one LangChain's own cache loop (``lookup`` / ``update`` on ``(dumps(messages), llm_string)``) gives the same
call, for every message list, option set and model below, so answers stored either way keep hitting."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from langchain_ragcache import RagPrompt

SYSTEM = "You are the support desk of a bike shop. Answer from the passages only."
DOCS = [Document(page_content="Refunds reach the card within 14 days.", metadata={"id": "refunds"}),
        Document(page_content="Bikes can be returned within 30 days.", metadata={"id": "returns"})]


def message_lists():
    rag = RagPrompt(system=SYSTEM).invoke({"question": "How long do refunds take?", "context": DOCS}).to_messages()
    rag2 = RagPrompt(system=SYSTEM).invoke({"question": "Can I return a bike?", "context": DOCS[::-1]}).to_messages()
    return {
        "one human": [HumanMessage("What is the refund window?")],
        "system + human": [SystemMessage(SYSTEM), HumanMessage("How long do refunds take?")],
        "ragprompt": rag,
        "ragprompt other order": rag2,
        "multi turn": [SystemMessage(SYSTEM), HumanMessage("Hi"), AIMessage("Hello! How can I help?"),
                       HumanMessage("How long do refunds take?")],
        "with ids and names": [SystemMessage(SYSTEM, id="s1"), HumanMessage("How long do refunds take?", id="h1",
                                                                             name="alice")],
        "text blocks": [HumanMessage([{"type": "text", "text": "Refunds reach the card within 14 days."},
                                      {"type": "text", "text": "How long do refunds take?"}])],
        "tool turn": [HumanMessage("What is 2 + 5?"),
                      AIMessage("", tool_calls=[{"name": "add", "args": {"a": 2, "b": 5}, "id": "c1"}]),
                      ToolMessage("7", tool_call_id="c1", name="add"),
                      HumanMessage("And what is that times 2?")],
        "tool artifact": [HumanMessage("Find the refund policy"),
                          AIMessage("", tool_calls=[{"name": "search", "args": {"q": "refund"}, "id": "c2"}]),
                          ToolMessage("Refunds reach the card within 14 days.", tool_call_id="c2", name="search",
                                      artifact=DOCS[:1]),
                          HumanMessage("How long do refunds take?")],
        "labelled question": [HumanMessage("Context: the shop opens at 9.\n\nQuestion: When does the shop open?")],
        "system blocks": [SystemMessage([{"type": "text", "text": SYSTEM}, {"type": "text", "text": " Be brief."}]),
                          HumanMessage("How long do refunds take?")],
    }


TOOL = {"type": "function", "function": {"name": "add", "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]}}}

OPTIONS = {
    "defaults": (None, {}),
    "sampled": (None, {"temperature": 0.5, "seed": 3}),
    "budget + tenant": (None, {"max_tokens": 7, "tenant": "acme"}),
    "default tenant": (None, {"tenant": "default"}),
    "blend + caches": (None, {"recompute_ratio": 0.2, "use_chunk_cache": False, "use_prefix_cache": True}),
    "stop": (["\n\n"], {}),
    "tools": (None, {"tools": [TOOL], "tool_choice": "auto"}),
    "top_p": (None, {"top_p": 0.9, "temperature": 0.7}),
}

MODELS = {"plain": {}, "tenant model": {"tenant": "globex"}, "tuned": {"temperature": 0.3, "max_tokens": 64,
                                                                       "stop": ["END"], "seed": 1}}


def _key(req):
    return (req.question, req.partition.digest, req.partition.namespace, req.max_tokens, req.sampling, req.tenant,
            req.threshold, req.model)


@pytest.mark.parametrize("namespace", ["default", "team-x"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_direct_key_is_langchains_key_of_the_same_call(tiny_engine, embedder, model, namespace):
    from langchain_ragcache import ChatRagCache, RagCacheSemanticCache

    cache = RagCacheSemanticCache(path=None, embedder=embedder, namespace=namespace)
    chat = ChatRagCache(engine=tiny_engine, **MODELS[model])
    digests = set()
    for name, msgs in message_lists().items():
        for option, (stop, kw) in OPTIONS.items():
            direct = chat._path_key(cache, msgs, stop, chat._options(stop, kw), kw)[0]
            prompt, llm_string = chat._cache_key(msgs, stop, kw)
            via_string = cache.request(prompt, llm_string, model=chat.model_name)
            assert _key(direct) == _key(via_string) and direct == via_string, (name, option)
            digests.add(direct.partition.digest)
    assert len(digests) > len(OPTIONS) * 4  # the cases are keyed apart, not all alike


def test_the_direct_key_reads_no_string_back(tiny_engine, embedder, monkeypatch):
    import langchain_ragcache._keys as keys
    import langchain_ragcache.cache as cache_module
    from langchain_ragcache import ChatRagCache, RagCacheSemanticCache

    def refuse(*_a, **_k):
        raise AssertionError("the direct key parsed a string back")

    cache = RagCacheSemanticCache(path=None, embedder=embedder)
    chat = ChatRagCache(engine=tiny_engine, tenant="acme")
    monkeypatch.setattr(cache_module, "parse_cache_prompt", refuse)
    monkeypatch.setattr(keys.ast, "literal_eval", refuse)
    for name, msgs in message_lists().items():
        if name != "tool artifact":  # keyed by its LangChain prompt string, as LangChain's loop keys it
            req = chat._path_key(cache, msgs, None, chat._options(None, {}), {})[0]
            assert req.partition.namespace == req.tenant == "acme" and req.max_tokens == 256


@pytest.mark.parametrize("name", ["one human", "ragprompt", "multi turn", "with ids and names", "tool turn"])
def test_an_answer_stored_by_invoke_is_a_hit_for_stream(tiny_engine_plain, embedder, name):
    from langchain_ragcache import ChatRagCache, RagCacheSemanticCache

    sem = RagCacheSemanticCache(path=None, embedder=embedder, cache_truncated=True)
    # seeded sampling: the tiny random model's greedy answer is blank, and a blank answer is never stored
    chat = ChatRagCache(engine=tiny_engine_plain, max_tokens=4, cache=sem, temperature=1.0, seed=3, tenant="acme")
    msgs = message_lists()[name]
    stored = chat.invoke(msgs)
    assert len(sem.semantic_cache) == 1
    chunks = list(chat.stream(msgs))
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    assert full.response_metadata["ragcache"]["layer"] == "semantic" and full.content == stored.content
