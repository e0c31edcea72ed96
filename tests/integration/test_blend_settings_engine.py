"""LocalEngine under a blend setting (issue 31) on a tiny random float32 Llama: the setting licensed by a
calibration record is the default, its chunk context decides which chunk KV is read and stored, every
blended answer is labelled with the setting, a ceiling fallback is exact; and (slow) the real embedded
model end to end at the packaged record's setting."""

from __future__ import annotations

import pytest

from ragcache.engine import kv as kvb
from ragcache.engine.blend.setting import BlendSetting, licensed_setting
from ragcache.engine.blend.calibration import Calibration
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.engine import LocalEngine
from engine_doubles import chunk_engine  # requests below skip the prefix cache: it would serve the repeated documents exactly

DOCS = ["The cat sat on the mat and looked at the garden for a long while.",
        "Paris is the capital of France; the Seine flows through it to the sea.",
        "Rivers carry water from mountains to the ocean, shaping valleys on the way."]


def messages(system="Answer from the passages.", question="Where is Paris?"):
    blocks = [{"type": "text", "text": d, "ragcache_kind": "document"} for d in DOCS]
    blocks.append({"type": "text", "text": question, "ragcache_kind": "question"})
    return [{"role": "system", "content": system}, {"role": "user", "content": blocks}]


def record(lm, setting):
    return Calibration(fingerprint=lm.fingerprint.digest, model="tiny", recompute_ratio=setting.recompute_ratio,
                       blend_allowed=True, rule={"name": "decisive-flips-v1"}, min_agreement=0.95, max_ratio=0.3, rank_by=setting.rank_by,
                       setting=setting.to_dict())


PREFIX_SETTING = BlendSetting(recompute_ratio=0.2, chunk_context="prefix", doc_top=1)


@pytest.mark.parametrize("how", ["record", "config"])
def test_the_licensed_setting_blends_by_default_and_labels_every_answer(tiny, how):
    kw = {"calibration": record(tiny, PREFIX_SETTING)} if how == "record" else \
        {"calibration": False, "blend_setting": PREFIX_SETTING}
    eng = chunk_engine(tiny, **kw)
    first = eng.generate(messages(), max_new_tokens=3, use_prefix_cache=False).stats
    assert first.docs_missed == 3 and not first.approximate and first.blend_setting is None
    for question in ("Where is Paris?", "What flows through Paris?", "Where did the cat sit?"):
        st = eng.generate(messages(question=question), max_new_tokens=3, use_prefix_cache=False).stats
        assert st.docs_hit == 3 and st.approximate and st.blend_setting == PREFIX_SETTING.name
        assert st.recompute_ratio == 0.2 and st.chunk_tokens_reused > 0


@pytest.mark.parametrize("other", ["Answer briefly.", "Answer from the passages!", "You are a helpful assistant."])
def test_prefix_conditioned_chunks_are_not_read_under_another_system_prompt(tiny, other):
    eng = chunk_engine(tiny, calibration=record(tiny, PREFIX_SETTING))
    eng.generate(messages(), max_new_tokens=2, use_prefix_cache=False)
    st = eng.generate(messages(system=other), max_new_tokens=2, use_prefix_cache=False).stats
    assert st.docs_hit == 0 and st.docs_missed == 3 and not st.approximate
    again = eng.generate(messages(), max_new_tokens=2, use_prefix_cache=False).stats  # the first prefix still finds its own chunks
    assert again.docs_hit == 3 and again.approximate


@pytest.mark.parametrize("setting", [PREFIX_SETTING, BlendSetting(recompute_ratio=0.2)], ids=["prefix", "sink"])
def test_chunks_of_either_context_stay_with_their_tenant(tiny, setting):
    """The setting's chunk view is taken under the request's KV salt: another tenant with the same
    system text and documents finds none of them (and finds them with share_kv_across_namespaces)."""
    eng = chunk_engine(tiny, calibration=False, blend_setting=setting)
    eng.generate(messages(), max_new_tokens=2, use_prefix_cache=False, namespace="acme")
    assert eng.generate(messages(), max_new_tokens=2, use_prefix_cache=False, namespace="acme").stats.docs_hit == 3
    other = eng.generate(messages(), max_new_tokens=2, use_prefix_cache=False, namespace="globex").stats
    assert other.docs_hit == 0 and not other.approximate
    shared = chunk_engine(tiny, calibration=False, blend_setting=setting, share_kv_across_namespaces=True)
    shared.generate(messages(), max_new_tokens=2, use_prefix_cache=False, namespace="acme")
    assert shared.generate(messages(), max_new_tokens=2, use_prefix_cache=False, namespace="globex").stats.docs_hit == 3


def test_sink_setting_shares_chunks_across_system_prompts(tiny):
    sink = BlendSetting(recompute_ratio=0.2)
    eng = chunk_engine(tiny, calibration=record(tiny, sink))
    eng.generate(messages(), max_new_tokens=2, use_prefix_cache=False)
    st = eng.generate(messages(system="Answer briefly."), max_new_tokens=2, use_prefix_cache=False).stats
    assert st.docs_hit == 3 and st.approximate and st.blend_setting == sink.name


def test_ceiling_fallback_is_exact_and_not_labelled(tiny):
    setting = BlendSetting(recompute_ratio=0.1, chunk_context="prefix", mass_bound=0.05, max_share=0.1)
    eng = chunk_engine(tiny, calibration=record(tiny, setting))
    eng.generate(messages(), max_new_tokens=2, use_prefix_cache=False)
    pre = eng.prefill(eng.build_prompt(messages()), use_prefix_cache=False)
    assert pre.stats.docs_hit == 3 and not pre.stats.approximate and "exact" in pre.stats.reuse_decision
    ids = eng.build_prompt(messages()).input_ids
    ref = kvb.forward(tiny.model, ids, kvb.new_cache(tiny.model), 0)[-1]
    assert (pre.last_logits - ref).abs().max().item() < 1e-4


def test_no_licensed_setting_means_exact_prefill(tiny):
    off = Calibration(fingerprint=tiny.fingerprint.digest, model="tiny", recompute_ratio=None, blend_allowed=False,
                      min_agreement=0.95, max_ratio=0.3)
    eng = chunk_engine(tiny, calibration=off)
    eng.generate(messages(), max_new_tokens=2, use_prefix_cache=False)
    st = eng.generate(messages(), max_new_tokens=2, use_prefix_cache=False).stats
    assert st.docs_hit == 3 and not st.approximate and st.blend_setting is None
    # a caller's ratio still blends, with sink-context chunks and the engine's rule, labelled
    st = eng.generate(messages(), max_new_tokens=2, recompute_ratio=0.3, use_prefix_cache=False).stats
    assert st.approximate and st.blend_setting == f"{eng.rank_by} r=0.3"


def test_blend_setting_config_is_type_checked(tiny):
    with pytest.raises(TypeError, match="BlendSetting"):
        LocalEngine(tiny, blend_setting={"recompute_ratio": 0.2})


@pytest.mark.slow
def test_embedded_model_end_to_end_at_the_packaged_setting():
    """The real SmolLM2-135M with the record in force (the packaged one unless the home has its own): a
    second request over the same documents blends at the licensed setting and says so, or (no setting
    licensed) is prefilled exactly and says why."""
    # min_reuse_tokens=0: blend whatever the machine's measured prefill rate (the cost rule skips a blend of
    # these 100 tokens on a fast or idle machine; the licence, not the rate, is what this test checks)
    eng = LocalEngine.from_pretrained(chunk_cache=ChunkCache(), min_reuse_tokens=0, chunk_admission=1, chunk_queue=0)
    setting = licensed_setting(eng.calibration)
    eng.generate(messages(), max_new_tokens=4, use_prefix_cache=False)
    st = eng.generate(messages(question="What flows through Paris?"), max_new_tokens=4, use_prefix_cache=False).stats
    assert st.docs_hit == 3
    if setting is None:
        assert not st.approximate and st.blend_setting is None and "calibration" in st.reuse_decision
    else:
        assert st.approximate and st.blend_setting == setting.name


def test_token_detail_names_the_reference_margins_and_the_flipped_positions(tiny):
    from ragcache.engine.blend.setting import measure_settings

    settings = [BlendSetting(recompute_ratio=1.0, chunk_context="prefix"),
                BlendSetting(recompute_ratio=0.0, chunk_context="sink")]
    prompts = [messages(question=q) for q in ("Where is Paris?", "Where did the cat sit?", "What do rivers carry?")]
    out = measure_settings(chunk_engine(tiny, calibration=False), prompts, settings, answer_tokens=6, token_detail=True)
    plain = measure_settings(chunk_engine(tiny, calibration=False), prompts[:1], settings[:1], answer_tokens=6)
    assert "ref_margin" not in plain[0]["per_prompt"][0] and "mismatch" not in plain[0]["per_prompt"][0]
    for full, reused in zip(out[0]["per_prompt"], out[1]["per_prompt"], strict=True):
        n = full["answer_tokens"]
        assert len(full["ref_margin"]) == n and all(m >= 0 for m in full["ref_margin"])
        assert full["ref_margin"] == reused["ref_margin"]  # one reference per prompt
        assert full["mismatch"] == [] and full["top1_agreement"] == 1.0  # full budget == full prefill
        assert all(0 <= t < n for t in reused["mismatch"])
        assert len(reused["mismatch"]) == round((1 - reused["top1_agreement"]) * n)
