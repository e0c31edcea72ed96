"""Issue 22, items 3 and 8 (LangChain): the adapters default to the persistent answer store under
$RAGCACHE_HOME with one embedder per process (None: in memory); RagPromptLayoutMiddleware keeps a
local model's layer; with_cache_info() keeps the layer past the output parser."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.globals import set_llm_cache
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import RunnableLambda
from langchain_ragcache import ChatRagCache, RagCacheSemanticCache, RagPrompt, cache_info, with_cache_info
from langchain_ragcache.middleware import RagCacheMiddleware, RagPromptLayoutMiddleware

from ragcache.semantic import defaults
from ragcache.semantic.embedding import shared_embedder

DOCS = [Document(id="backups", page_content="Backups run nightly at 02:30 UTC and are kept for 30 days.")]
SYSTEM = ("You are the ops assistant. Today is 2026-12-01. Answer from the runbook only, in one short "
          "sentence, and name the runbook section you used. If the runbook does not say, answer that it does not.")
QUESTIONS = ["When do backups run?", "How long are backups kept?", "What time is the nightly backup?"]


def _chain(engine, tail=None):
    llm = ChatRagCache(engine=engine, max_tokens=4)
    return RagPrompt(system="Answer from the documents.") | llm | (tail or with_cache_info())


def test_defaults_share_one_persistent_store_and_one_embedder(tmp_path) -> None:
    a, b = RagCacheSemanticCache(), RagCacheMiddleware()
    assert a.semantic_cache is b.cache.semantic_cache
    assert a.semantic_cache.path == tmp_path / "answers"  # RAGCACHE_ANSWERS_DIR (the conftest), i.e. $RAGCACHE_HOME/answers
    mem = RagCacheSemanticCache(path=None)
    assert mem.semantic_cache.path is None and mem.semantic_cache is not a.semantic_cache
    own = RagCacheSemanticCache(path=tmp_path / "elsewhere")
    assert own.semantic_cache.path == tmp_path / "elsewhere"
    emb = shared_embedder()
    assert {id(c.semantic_cache.embedder) for c in (a, mem, own)} == {id(emb)}  # one embedder per process


@pytest.mark.parametrize("question", QUESTIONS)
def test_default_cache_survives_a_restart_and_memory_does_not(tiny_engine_plain, question) -> None:
    set_llm_cache(RagCacheSemanticCache(cache_truncated=True))
    first = _chain(tiny_engine_plain).invoke({"question": question, "context": DOCS})
    assert first["cache"]["layer"] != "semantic"
    defaults._close_all()  # what exit does; a new process opens the folder again
    set_llm_cache(RagCacheSemanticCache(cache_truncated=True))
    again = _chain(tiny_engine_plain).invoke({"question": question, "context": DOCS})
    assert again["cache"]["layer"] == "semantic" and again["answer"] == first["answer"]
    set_llm_cache(RagCacheSemanticCache(path=None, cache_truncated=True))  # in memory: nothing stored yet
    fresh = _chain(tiny_engine_plain).invoke({"question": question, "context": DOCS})
    assert fresh["cache"]["layer"] != "semantic"


@pytest.mark.parametrize("parser,expect", [(None, str), (RunnableLambda(lambda m: m.content.upper()), str),
                                           (RunnableLambda(lambda m: len(m.content)), int)])
def test_with_cache_info_keeps_the_layer_past_the_parser(tiny_engine_plain, parser, expect) -> None:
    set_llm_cache(RagCacheSemanticCache(path=None, cache_truncated=True))
    outs = [_chain(tiny_engine_plain, with_cache_info(parser)).invoke({"question": QUESTIONS[0], "context": DOCS})
            for _ in range(2)]
    assert [o["cache"]["layer"] == "semantic" for o in outs] == [False, True]
    assert all(isinstance(o["answer"], expect) for o in outs)
    assert outs[1]["cache"]["similarity"] == pytest.approx(1.0)
    # why the answer ended, on the miss and on the hit (the stored answer's): the tiny model hits its budget
    assert [o["cache"]["finish_reason"] for o in outs] == ["length", "length"]
    assert outs[1]["cache"]["usage"]["prompt_tokens"] == 0 < outs[0]["cache"]["usage"]["prompt_tokens"]


def test_cache_info_placed_after_the_parser_says_where_it_goes(tiny_engine_plain) -> None:
    chain = _chain(tiny_engine_plain, StrOutputParser() | RunnableLambda(cache_info))
    with pytest.raises(TypeError, match="right after the chat model"):
        chain.invoke({"question": QUESTIONS[0], "context": DOCS})


def test_layout_middleware_keeps_a_local_models_layer(tiny_engine_plain) -> None:
    from langchain.agents import create_agent

    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=4)
    agent = create_agent(llm, tools=[], system_prompt=SYSTEM,
                         middleware=[RagPromptLayoutMiddleware(), RagCacheMiddleware(path=None, cache_truncated=True)])
    layers, reads = [], []
    for q in ("When do backups run?", "How long are backups kept?", "When do backups run?"):
        msg = agent.invoke({"messages": [{"role": "user", "content": q}]})["messages"][-1]
        layers.append(msg.response_metadata["ragcache"]["layer"])
        reads.append(msg.usage_metadata["input_token_details"]["cache_read"] if msg.usage_metadata else 0)
    assert reads[1] > 0  # the local prefix cache read the system prompt ...
    assert layers[1] in ("prefix", "prefix+chunk") and layers[2] == "semantic"  # ... and is not "provider-cache"
    assert not any(x.startswith("provider") for x in layers), layers


@pytest.mark.parametrize(("option", "hint"), [("max_new_tokens", "max_tokens"), ("temprature", "temperature"),
                                              ("recompute", "recompute_ratio"), ("zzz", None)])
def test_chat_model_refuses_an_unknown_option_and_names_the_close_one(option, hint) -> None:
    with pytest.raises(ValueError, match=f"unknown option\\(s\\) '{option}'") as e:
        ChatRagCache(**{option: 5})
    assert (f"did you mean '{hint}'" in str(e.value)) == (hint is not None)
    assert ChatRagCache(model="smollm2-135m-instruct", max_tokens=4, stop_sequences=["x"]).max_tokens == 4


@pytest.mark.parametrize("path", [123, 2.5, b"answers", ""])
def test_semantic_cache_refuses_a_path_of_the_wrong_kind(tmp_path, monkeypatch, path) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError if isinstance(path, str) else TypeError, match="path must be a folder path"):
        RagCacheSemanticCache(path=path)
    assert list(tmp_path.iterdir()) == []
