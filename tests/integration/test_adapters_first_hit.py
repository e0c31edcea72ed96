"""A new replica's LangChain chat model and LlamaIndex entry points, at their defaults, answer semantic hits
without converting or loading the embedded model: they key by its predicted fingerprint and blend
setting (:class:`ragcache.engine.predicted.PredictedEngine`), load it only on a miss, and refuse to
answer when the loaded model is not the predicted one (the answer would be stored for another model)."""

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_core.messages import HumanMessage, SystemMessage

from ragcache.config import DEFAULT_MODEL, Config
from ragcache.models import model_fingerprint
from ragcache.semantic import SemanticCache

SYSTEM = "Answer from the documents. Be brief."
DOCS = ["Backups run nightly at 02:30 UTC and are kept for 30 days.",
        "Deploys go out on Tuesdays after the change review meeting."]


_LOADERS = ("ragcache.models.load_model", "ragcache.engine.engine.load_model")  # LocalEngine.from_pretrained's


def _tiny_carrying(loaded, fp):
    """The tiny test model ``loaded`` carrying ``fp``: what a load of the embedded model gives, without converting it
    (the wide-init ``tiny_wide``: varied text, and a blank answer is never stored)."""
    from ragcache.identity import LoadedModel

    return LoadedModel(loaded.model, loaded.tokenizer, fp)


def _no_model(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the embedded model was converted or loaded for a semantic hit")

    monkeypatch.setattr("ragcache.models._convert_embedded_gguf", boom)
    for where in _LOADERS:
        monkeypatch.setattr(where, boom)


def _loads_as(monkeypatch, loaded, fp, loads):
    """The model load gives the tiny model ``loaded`` carrying ``fp`` (counted in ``loads``); conversion stays
    forbidden."""
    def load(*a, **k):
        loads.append(1)
        return _tiny_carrying(loaded, fp)

    for where in _LOADERS:
        monkeypatch.setattr(where, load)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A new replica: an empty RAGCACHE_HOME (nothing converted), no engine loaded in this process."""
    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path / "replica"))
    monkeypatch.delenv("RAGCACHE_MODELS_DIR", raising=False)
    monkeypatch.setattr("langchain_ragcache._engine._ENGINES", {})
    paths = Config.from_env().paths
    assert not paths.model_dir(DEFAULT_MODEL).exists()
    return paths


@pytest.fixture
def answers(tmp_path):
    cache = SemanticCache(tmp_path / "answers")  # the answer store both replicas share
    yield cache
    cache.close()


# ------------------------------------------------------------------------------------------ LangChain
def test_chat_model_serves_a_hit_in_a_fresh_home_without_loading(fresh, answers, monkeypatch, tiny_wide):
    from langchain_ragcache import ChatRagCache, RagCacheSemanticCache
    from langchain_ragcache._engine import loaded_engine

    from ragcache.engine.engine import LocalEngine

    fp = model_fingerprint(None, home=fresh)
    messages = [SystemMessage(SYSTEM), HumanMessage("How long are backups kept?")]
    other = ChatRagCache(engine=LocalEngine(_tiny_carrying(tiny_wide, fp), chunk_cache=None), max_tokens=8,
                         cache=RagCacheSemanticCache(answers))  # another replica, its model loaded
    stored = other.invoke(messages)
    assert stored.response_metadata["ragcache"]["layer"] == "model" and stored.content

    _no_model(monkeypatch)
    chat = ChatRagCache(max_tokens=8, cache=RagCacheSemanticCache(answers))  # the defaults: embedded model
    hit = chat.invoke(messages)
    assert (hit.response_metadata["ragcache"]["layer"], hit.content) == ("semantic", stored.content)
    chunks = list(chat.stream(messages))  # streaming goes through the same answer path
    assert "".join(c.content for c in chunks) == stored.content
    assert chunks[-1].response_metadata["ragcache"]["layer"] == "semantic"
    assert chat.engine is None and loaded_engine(DEFAULT_MODEL) is None
    assert not fresh.model_dir(DEFAULT_MODEL).exists()

    loads: list[int] = []
    _loads_as(monkeypatch, tiny_wide, fp, loads)
    miss = chat.invoke([SystemMessage(SYSTEM), HumanMessage("When do deploys go out?")])
    assert miss.response_metadata["ragcache"]["layer"] == "model" and loads == [1]
    assert chat.engine.fingerprint.digest == fp.digest
    again = chat.invoke([SystemMessage(SYSTEM), HumanMessage("When do deploys go out?")])
    assert again.response_metadata["ragcache"]["layer"] == "semantic" and loads == [1]


def test_chat_model_refuses_to_store_for_a_model_it_did_not_predict(fresh, answers, monkeypatch, tiny_wide):
    from dataclasses import replace

    from langchain_ragcache import ChatRagCache, RagCacheSemanticCache

    fp = model_fingerprint(None, home=fresh)
    loads: list[int] = []
    _loads_as(monkeypatch, tiny_wide, replace(fp, revision="edited"), loads)  # the folder changed since the lookup
    chat = ChatRagCache(max_tokens=8, cache=RagCacheSemanticCache(answers))
    messages = [SystemMessage(SYSTEM), HumanMessage("How long are backups kept?")]
    with pytest.raises(RuntimeError, match="not the predicted"):
        chat.invoke(messages)
    assert len(answers) == 0  # nothing stored under the predicted identity
    retry = chat.invoke(messages)  # keyed by the loaded model now
    assert retry.response_metadata["ragcache"]["layer"] == "model" and loads == [1]
    assert chat._identifying_params["model_fingerprint"] == replace(fp, revision="edited").digest


def test_chat_model_keys_as_before_when_its_engine_is_loaded(fresh, monkeypatch, tiny_wide):
    from langchain_ragcache import ChatRagCache

    fp = model_fingerprint(None, home=fresh)
    _loads_as(monkeypatch, tiny_wide, fp, [])
    first = ChatRagCache()
    first.get_engine()  # loaded in this process: a later model reads it, predicting nothing
    monkeypatch.setattr("ragcache.engine.predicted.PredictedEngine.of",
                        lambda *a, **k: pytest.fail("predicted with the model loaded"))
    second = ChatRagCache(recompute_ratio=0.2)
    params = second._identifying_params
    assert second.engine is first.engine
    assert params["model_fingerprint"] == first.engine.fingerprint.digest
    assert params["blend_setting"] == first.engine.blend_setting_name(0.2)


# ------------------------------------------------------------------------------------------ LlamaIndex
def _query_engine(answers, llm=None):
    from contract_entries import fixed_nodes, fixed_retriever
    from llama_index.query_engine.ragcache import RagCacheQueryEngine

    return RagCacheQueryEngine(fixed_retriever(fixed_nodes(DOCS)), llm, semantic_cache=answers, system_prompt=SYSTEM)


def test_query_engine_serves_a_hit_in_a_fresh_home_without_loading(fresh, answers, monkeypatch, tiny_wide):
    from llama_index.core import Settings
    from llama_index.llms.ragcache import RagCacheLLM

    from ragcache.engine.engine import LocalEngine

    monkeypatch.setattr(Settings, "_llm", None)  # the query engine's default LLM: RagCacheLLM()
    fp = model_fingerprint(None, home=fresh)
    other = _query_engine(answers, RagCacheLLM(LocalEngine(_tiny_carrying(tiny_wide, fp), chunk_cache=None)))
    stored = other.query("How long are backups kept?")
    assert stored.metadata["layer"] != "semantic" and str(stored)

    _no_model(monkeypatch)
    qe = _query_engine(answers)
    hit = qe.query("How long are backups kept?")
    assert (hit.metadata["layer"], str(hit)) == ("semantic", str(stored))
    assert not qe.llm.loaded and not fresh.model_dir(DEFAULT_MODEL).exists()
    assert qe.llm.fingerprint == fp.digest

    loads: list[int] = []
    _loads_as(monkeypatch, tiny_wide, fp, loads)
    miss = qe.query("When do deploys go out?")
    assert miss.metadata["layer"] != "semantic" and loads == [1] and qe.llm.loaded
    assert qe.query("When do deploys go out?").metadata["layer"] == "semantic"


def test_llm_refuses_a_model_it_did_not_predict(fresh, monkeypatch, tiny_wide):
    from dataclasses import replace

    from llama_index.core.llms import ChatMessage
    from llama_index.llms.ragcache import RagCacheLLM

    fp = model_fingerprint(None, home=fresh)
    _no_model(monkeypatch)
    llm = RagCacheLLM(max_new_tokens=4)
    assert (llm.fingerprint, llm.loaded) == (fp.digest, False)
    assert llm.blend_setting is None  # a fresh home: no calibration record of this identity, exact prefill
    _loads_as(monkeypatch, tiny_wide, replace(fp, revision="edited"), [])
    with pytest.raises(RuntimeError, match="not the predicted"):
        llm.chat([ChatMessage(role="user", content="How long are backups kept?")])
    assert llm.fingerprint == replace(fp, revision="edited").digest  # keyed by the loaded model from now on


def test_llm_given_an_engine_or_another_model_loads_as_before(fresh, monkeypatch, tiny_wide):
    from llama_index.llms.ragcache import RagCacheLLM

    from ragcache.engine.engine import LocalEngine

    fp = model_fingerprint(None, home=fresh)
    engine = LocalEngine(_tiny_carrying(tiny_wide, fp), chunk_cache=None)
    given = RagCacheLLM(engine, recompute_ratio=0.2)
    assert given.loaded and given.engine is engine
    assert (given.fingerprint, given.blend_setting) == (fp.digest, None)  # no chunk cache: exact prefill
    loads: list[int] = []
    _loads_as(monkeypatch, tiny_wide, fp, loads)
    RagCacheLLM(model_name="some/local-model")
    assert loads == [1]  # another model is loaded when built, as before
