"""An approximate answer is labelled with its blend setting on every surface (issue 40): the one record
(BackendResult -> Provenance -> Answer, stored and read back), ``ragcache ask`` plain and ``--json``,
LangChain ``response_metadata["ragcache"]`` and LlamaIndex metadata; and the answer path's rule that
serves a blended answer only at its setting (:func:`ragcache.provenance.may_serve`)."""

from __future__ import annotations

import pytest
from rich.console import Console

from ragcache.backend import BackendResult, CacheUsage
from ragcache.engine.records import Generation, RequestStats
from ragcache.provenance import PROVENANCE_KEY, Answer, Provenance, approximation, blend_of, may_serve
from ragcache.request import CacheRequest

SETTING = "infoflow r=0.15"


def _blended_generation() -> Generation:
    stats = RequestStats(prompt_tokens=100, prefix_tokens_reused=20, chunk_tokens_reused=60, tokens_recomputed=9,
                         prefill_tokens_computed=29, docs_hit=2, recompute_ratio=0.15, approximate=True,
                         blend_setting=SETTING, decode_tokens=3, finish_reason="stop")
    return Generation("Rotate the keys in Settings.", [1, 2, 3], stats)


def test_the_engine_result_carries_the_setting_into_the_answer_and_the_stored_provenance():
    from ragcache.engine.backend import result_of

    r = result_of(_blended_generation())
    assert (r.layer, r.approximate, r.recompute_ratio, r.blend_setting) == ("prefix+chunk", True, 0.15, SETTING)
    a = Answer.of("How?", r)
    assert a.blend_setting == SETTING and a.approximation == f"approximate (blended at {SETTING})"
    stored = Provenance.from_metadata({PROVENANCE_KEY: a.provenance.to_json()})
    assert stored == a.provenance and stored.blend_setting == SETTING


@pytest.mark.parametrize(("approximate", "ratio", "name", "want"), [
    (True, 0.15, SETTING, SETTING),
    (True, 0.15, None, "r=0.15"),  # a backend that reports only its ratio, an entry stored before settings were
    (True, None, None, None),  # a quantized KV decode: its format is in the partition already
    (False, None, None, None),
])
def test_blend_of(approximate, ratio, name, want):
    assert blend_of(approximate, ratio, name) == want


def test_a_blended_answer_is_served_only_at_its_setting():
    blended, exact = Provenance("chunk", approximate=True, recompute_ratio=0.15, blend_setting=SETTING), \
        Provenance("model")
    assert may_serve(blended, SETTING) and not may_serve(blended, None) and not may_serve(blended, "infoflow r=0.3")
    assert may_serve(exact, None) and may_serve(exact, SETTING)
    legacy = Provenance.from_metadata({PROVENANCE_KEY: {"v": 1, "layer": "chunk", "approximate": True,
                                                        "recompute_ratio": 0.15}})
    assert legacy.blend_setting == "r=0.15" and not may_serve(legacy, None) and not may_serve(legacy, SETTING)
    assert approximation(True, None) == "approximate" and approximation(False, None) is None


def test_the_answer_path_misses_a_blended_answer_for_an_exact_request_and_reads_the_setting_lazily():
    from ragcache.answering import AnswerPath
    from ragcache.prompt.layout import PromptLayout
    from ragcache.request import request_partition
    from ragcache.semantic import SemanticCache
    from ragcache.testing import HashingEmbedder

    path = AnswerPath(SemanticCache(None, embedder=HashingEmbedder()))
    pk = request_partition(PromptLayout.build(question="How do I rotate the keys?", documents=["Settings > Keys."]),
                           namespace="default", model="local:abc", params={"max_tokens": 8})
    blended = BackendResult("Settings > Keys.", "chunk", CacheUsage.local(prompt_tokens=5, chunk_reused=3),
                            approximate=True, recompute_ratio=0.15, blend_setting=SETTING)
    req = CacheRequest("How do I rotate the keys?", None, pk, max_tokens=8)
    path.record(req, blended)
    reads: list = []

    def blend_setting():
        reads.append(1)
        return None

    assert path.lookup(req, blend_setting=blend_setting) is None
    assert reads == [1]
    hit = path.lookup(req, blend_setting=SETTING)
    assert hit is not None and hit.blend_setting == SETTING and hit.approximate
    exact = BackendResult("Open Settings.", "model", CacheUsage.local(prompt_tokens=5))
    path.record(req, exact)
    reads.clear()
    assert path.lookup(req, blend_setting=blend_setting).text == "Open Settings."
    assert reads == []  # an exact answer is served without asking which setting the request blends at


def _ask_result(answer: Answer):
    from ragcache.app.ask import AskResult

    return AskResult(answer, [], [], 0, 0, True, timings={"command_s": 0.5})


@pytest.mark.parametrize("hit", [False, True], ids=["fresh", "semantic-hit"])
def test_ragcache_ask_says_approximate_with_the_setting_plain_and_json(hit):
    from ragcache.app.ask import print_answer

    a = Answer.of("How?", BackendResult("Rotate them.", "prefix+chunk", CacheUsage.local(prompt_tokens=50,
                                                                                          chunk_reused=30),
                                        approximate=True, recompute_ratio=0.15, blend_setting=SETTING))
    if hit:
        a = Answer("How?", a.text, "semantic", similarity=0.97, matched_question="How?", provenance=a.provenance)
    console = Console(width=400, record=True, force_terminal=False)
    print_answer(console, _ask_result(a))
    text = console.export_text()
    assert f"approximate (blended at {SETTING})" in text, text
    d = _ask_result(a).to_dict()
    assert (d["approximate"], d["recompute_ratio"], d["blend_setting"]) == (True, 0.15, SETTING)
    assert d["approximation"] == f"approximate (blended at {SETTING})"


def test_an_exact_ask_line_says_nothing_of_approximation():
    from ragcache.app.ask import print_answer

    a = Answer.of("How?", BackendResult("Rotate them.", "prefix", CacheUsage.local(prompt_tokens=50, prefix_reused=30)))
    console = Console(width=400, record=True, force_terminal=False)
    print_answer(console, _ask_result(a))
    assert "approximate" not in console.export_text()


def test_langchain_response_metadata_names_the_setting():
    pytest.importorskip("langchain_core")
    from langchain_ragcache._engine import ragcache_metadata
    from langchain_ragcache.results import answer_message, answer_record, message_result

    from ragcache.engine.backend import result_of

    r = result_of(_blended_generation())
    meta = ragcache_metadata(r)
    assert (meta["approximate"], meta["recompute_ratio"], meta["blend_setting"]) == (True, 0.15, SETTING)
    msg = answer_message(Answer.of("How?", r))
    assert msg.response_metadata["ragcache"]["blend_setting"] == SETTING
    assert answer_record(Answer.of("How?", r))["blend_setting"] == SETTING
    assert message_result(msg).blend_setting == SETTING  # read back when LangChain's loop stores it


def test_langchain_llm_string_carries_the_setting_outside_the_partition():
    pytest.importorskip("langchain_core")
    from langchain_ragcache._keys import blend_setting_of, call_identity

    llm = str(sorted({"_type": "ragcache-local", "model_fingerprint": "abc", "max_tokens": 8,
                      "blend_setting": SETTING}.items()))
    assert blend_setting_of(llm) == SETTING and "blend_setting" not in call_identity(llm)[1]
    assert blend_setting_of("not a list") is None


def test_llamaindex_metadata_names_the_setting():
    pytest.importorskip("llama_index.core")
    from llama_index.llms.ragcache.base import stats_kwargs

    kw = stats_kwargs(_blended_generation())
    assert (kw["approximate"], kw["recompute_ratio"], kw["blend_setting"]) == (True, 0.15, SETTING)
