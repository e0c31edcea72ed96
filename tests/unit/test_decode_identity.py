"""Issue 24 kind 5: quantized decode answers are labelled approximate, their decode format is part of
the answer identity (the semantic partition), and quantized decode is checked per model."""

from __future__ import annotations

import pytest
import torch

from ragcache.home import Home
from ragcache import RagCache
from ragcache.engine import kv as kvb
from ragcache.engine.backend import LocalBackend
from ragcache.engine.decode_cache import DecodeCacheSpec, check_decode, decode_check_path, load_decode_check
from ragcache.engine.engine import LocalEngine
from ragcache.engine.quant import decode_cache_nbytes, quantized_decode_cache
from ragcache.semantic import SemanticCache
from ragcache.testing import HashingEmbedder

pytest.importorskip("optimum.quanto")

DOCS = ["Doc one: csv.reader reads rows.", "Doc two: csv.DictReader maps rows to dicts."]
PROMPTS = [[{"role": "user", "content": q}] for q in
           ("How do I read a CSV file with a header row?", "What does json.loads return?",
            "How do I parse an ISO date in Python?")]


@pytest.fixture(scope="module")
def wide(tiny_wide):
    return tiny_wide  # varied, non-blank answers


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setattr(Home, "default", classmethod(lambda cls: cls(tmp_path / "home")))  # the library's default home
    return tmp_path / "home"


@pytest.mark.parametrize("kwargs", [{}, {"decode_nbits": 2}, {"decode_sink_tokens": 4},
                                    {"decode_backend": "fp8"}])
def test_quantized_decode_answers_are_labelled_approximate(wide, kwargs):
    exact = LocalEngine(wide)
    qnt = LocalEngine(wide, decode_cache="quantized", residual_length=2, **kwargs)
    a = LocalBackend(exact).generate(PROMPTS[0], max_new_tokens=4, temperature=0.0)
    b = LocalBackend(qnt).generate(PROMPTS[0], max_new_tokens=4, temperature=0.0)
    assert a.approximate is False and a.details["decode_cache"] == "dynamic"
    assert b.approximate is True and b.details["decode_cache"] == qnt.decode.tag != "dynamic"
    assert b.recompute_ratio is None  # nothing was blended


def test_decode_format_and_namespace_are_in_the_answer_identity(wide):
    ids = {LocalBackend(LocalEngine(wide, **kw)).model_id for kw in (
        {}, {"decode_cache": "quantized"}, {"decode_cache": "quantized", "decode_nbits": 2},
        {"decode_cache": "quantized", "residual_length": 16}, {"decode_cache": "quantized", "decode_sink_tokens": 4},
        {"decode_cache": "quantized", "decode_backend": "fp8"}, {"namespace": "weights-v2"},
        {"namespace": "weights-v2", "decode_cache": "quantized"}, {"namespace": "dynamic"}, {"namespace": ""})}
    assert len(ids) == 10
    assert LocalBackend(LocalEngine(wide)).model_id == wide.fingerprint.digest  # exact engines: unchanged


def test_quantized_answers_are_never_served_to_an_exact_engine(wide):
    semantic = SemanticCache(None, embedder=HashingEmbedder())
    question = "How do I read a CSV file with a header row?"
    q_rag = RagCache(LocalBackend(LocalEngine(wide, decode_cache="quantized", residual_length=2)),
                     semantic=semantic, max_new_tokens=6, cache_truncated=True)
    x_rag = RagCache(LocalBackend(LocalEngine(wide)), semantic=semantic, max_new_tokens=6, cache_truncated=True)
    q1 = q_rag.answer(question, DOCS)
    assert q1.approximate and q1.layer != "semantic"
    assert q_rag.answer(question, DOCS).layer == "semantic"  # the quantized engine hits its own answer
    x1 = x_rag.answer(question, DOCS)
    assert x1.layer != "semantic" and not x1.approximate  # not served the quantized answer
    x2 = x_rag.answer(question, DOCS)
    assert x2.layer == "semantic" and x2.text == x1.text and not x2.approximate
    assert q_rag.answer(question, DOCS).text == q1.text


def test_sink_tokens_stay_in_full_precision(wide):
    model = wide.model
    cache = kvb.new_cache(model)
    kvb.forward(model, list(range(10, 40)), cache, 0)
    keys, values = kvb.cache_tensors(cache)
    plain = quantized_decode_cache(model, kvb.cache_from_tensors(model, keys, values), residual_length=0)
    sunk = quantized_decode_cache(model, kvb.cache_from_tensors(model, keys, values), residual_length=0,
                                  sink_tokens=4)
    new_k = torch.zeros_like(keys[0][..., :1, :])
    for i, layer in enumerate(sunk.layers):
        k, v = layer.update(new_k, new_k)
        assert torch.equal(k[..., :4, :], keys[i][..., :4, :]) and torch.equal(v[..., :4, :], values[i][..., :4, :])
        assert k.shape[-2] == 31 and layer.get_seq_length() == 31
        pk, _ = plain.layers[i].update(new_k, new_k)
        assert not torch.equal(pk[..., :4, :], keys[i][..., :4, :])  # quantized without the sink
    assert decode_cache_nbytes(sunk) > decode_cache_nbytes(plain)


def test_check_decode_records_agreement_and_the_engine_obeys_it(wide, home):
    strict = LocalEngine(wide, decode_cache="quantized", decode_nbits=2, residual_length=0)
    rec = strict.check_decode(PROMPTS, answer_tokens=8, min_agreement=0.999)
    assert 0.0 <= rec.agreement_lower_bound <= rec.top1_agreement <= 1.0 and rec.answer_tokens > 8
    assert decode_check_path(wide.fingerprint.digest, strict.decode.tag, home).is_file()
    assert load_decode_check(wide.fingerprint.digest, strict.decode.tag).top1_agreement == rec.top1_agreement
    if rec.allowed:  # the bound cannot fail on this model; nothing more to check against it
        pytest.skip("2-bit decode met a 0.999 bound on this model")
    again = LocalEngine(wide, decode_cache="quantized", decode_nbits=2, residual_length=0)  # reads the record
    assert again.decode_cache == "dynamic" and again.answer_identity == wide.fingerprint.digest
    g = again.generate(PROMPTS[0], max_new_tokens=3)
    assert not g.stats.approximate and g.stats.decode_cache == "dynamic"
    other = LocalEngine(wide, decode_cache="quantized", decode_nbits=4)  # another format: no record
    assert other.decode_cache == "quantized" and other.generate(PROMPTS[0], max_new_tokens=2).stats.approximate
    ignored = LocalEngine(wide, decode_cache="quantized", decode_nbits=2, residual_length=0, calibration=False)
    assert ignored.decode_cache == "quantized"
    other.check_decode(PROMPTS, spec=strict.decode, answer_tokens=4, save=False)  # a record of another format
    assert other.decode_cache == "quantized"


def test_check_decode_measures_what_quantization_changes(wide):
    eng = LocalEngine(wide)
    kw = dict(answer_tokens=12, save=False, min_agreement=0.5, confidence=0.0)
    coarse = check_decode(eng, PROMPTS, spec=DecodeCacheSpec("quantized", nbits=2, residual_length=0), **kw)
    # all but the last prompt token kept as sink, the answer in the full-precision residual
    kept = check_decode(eng, PROMPTS, spec=DecodeCacheSpec("quantized", nbits=2, residual_length=64,
                                                           sink_tokens=10_000), **kw)
    assert coarse.mean_kl > 0 and coarse.top1_agreement < 1.0
    assert kept.mean_kl < coarse.mean_kl / 10 and kept.top1_agreement >= coarse.top1_agreement
    with pytest.raises(ValueError, match="quantized"):
        check_decode(eng, PROMPTS, spec=DecodeCacheSpec())
    with pytest.raises(ValueError, match="at least one prompt"):
        check_decode(eng, [], spec=DecodeCacheSpec("quantized"))
    with pytest.raises(ValueError, match="confidence"):
        check_decode(eng, PROMPTS, spec=DecodeCacheSpec("quantized"), confidence=0.3)
    with pytest.raises(ValueError, match="decode_sink_tokens"):
        DecodeCacheSpec("quantized", sink_tokens=-1)
