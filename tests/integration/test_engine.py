import pytest
import torch

from ragcache.engine.engine import ContextWindowError, LocalEngine
from ragcache.engine.prompt import document_token_ids

SYSTEM = "You answer questions about the Python standard library. Be brief and cite the module. " * 4


def msgs(question, system=SYSTEM):
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


pytestmark = pytest.mark.engine("tiny", block_size=16)  # each test gets its own engine: `fresh_engine`


def snapshot(engine):
    return {h: ([k.clone() for k in b.keys], [v.clone() for v in b.values])
            for h, b in engine.prefix_cache._blocks.items()}


def assert_same_blocks(before, engine):
    for h, (ks, vs) in before.items():
        blk = engine.prefix_cache._blocks[h]
        assert all(torch.equal(a, b) for a, b in zip(ks, blk.keys))
        assert all(torch.equal(a, b) for a, b in zip(vs, blk.values))


def test_prefix_hit_matches_full_prefill(fresh_engine):
    ref = fresh_engine.generate(msgs("How do I parse a date?"), max_new_tokens=12, use_prefix_cache=False)
    fresh_engine.generate(msgs("How do I read a CSV file?"), max_new_tokens=4)  # warms the system-prefix blocks
    before = snapshot(fresh_engine)
    hit = fresh_engine.generate(msgs("How do I parse a date?"), max_new_tokens=12)
    assert hit.stats.prefix_tokens_reused > 0
    assert hit.stats.prefix_tokens_reused % 16 == 0
    assert (hit.first_logits - ref.first_logits).abs().max() < 1e-4
    assert hit.token_ids == ref.token_ids
    assert_same_blocks(before, fresh_engine)


def test_full_hit_same_prompt_twice(fresh_engine):
    m = msgs("What does itertools.groupby do?")
    n = len(fresh_engine.build_prompt(m))
    a = fresh_engine.generate(m, max_new_tokens=10)
    before = snapshot(fresh_engine)
    b = fresh_engine.generate(m, max_new_tokens=10)
    assert b.stats.prefix_tokens_reused == 16 * ((n - 1) // 16)
    assert b.stats.prefill_tokens_computed >= 1
    assert (a.first_logits - b.first_logits).abs().max() < 1e-4
    assert a.token_ids == b.token_ids
    assert_same_blocks(before, fresh_engine)


def test_strict_prefix_hit(fresh_engine):
    long_ids = fresh_engine.build_prompt(msgs("Explain pathlib.Path.glob in detail with examples.")).input_ids
    short = long_ids[:64]  # exactly 4 blocks, all cached after the long request
    fresh_engine.generate(long_ids, max_new_tokens=2)
    ref = fresh_engine.generate(short, max_new_tokens=6, use_prefix_cache=False)
    hit = fresh_engine.generate(short, max_new_tokens=6)
    assert hit.stats.prefix_tokens_reused == 48  # the last token is always computed
    assert (hit.first_logits - ref.first_logits).abs().max() < 1e-4
    assert hit.token_ids == ref.token_ids


def test_multi_turn_reuses_answer(fresh_engine):
    turn1 = msgs("Name a module for JSON.")
    g1 = fresh_engine.generate(turn1, max_new_tokens=20)
    turn2 = turn1 + [{"role": "assistant", "content": g1.text}, {"role": "user", "content": "And for CSV?"}]
    p1 = len(fresh_engine.build_prompt(turn1))
    g2 = fresh_engine.generate(turn2, max_new_tokens=4)
    assert g2.stats.prefix_tokens_reused >= 16 * (p1 // 16)


def test_streaming_equals_generate(fresh_engine):
    m = msgs("What is functools.lru_cache?")
    g = fresh_engine.generate(m, max_new_tokens=10, use_prefix_cache=False)
    events = list(fresh_engine.stream(m, max_new_tokens=10))
    assert "".join(e.text for e in events) == g.text
    assert events[-1].generation.token_ids == g.token_ids


def test_stop_strings_and_sampling(fresh_engine):
    g = fresh_engine.generate(msgs("hi"), max_new_tokens=20, temperature=0.8, top_p=0.9, seed=1)
    g2 = fresh_engine.generate(msgs("hi"), max_new_tokens=20, temperature=0.8, top_p=0.9, seed=1)
    assert g.token_ids == g2.token_ids
    if g.text:
        stop = g.text[len(g.text) // 2:][:3] or g.text
        s = fresh_engine.generate(msgs("hi"), max_new_tokens=20, temperature=0.8, top_p=0.9, seed=1, stop=[stop])
        assert stop not in s.text and s.stats.finish_reason == "stop"


def test_segments_tokenised_once_each(fresh_engine):
    m = [{"role": "system", "content": SYSTEM},
         {"role": "user", "content": [{"type": "text", "text": "Doc A text."}, {"type": "text", "text": "Doc B."},
                                      {"type": "text", "text": "Question?"}]}]
    p = fresh_engine.build_prompt(m)
    kinds = [pc.kind for pc in p.pieces]
    assert kinds.count("document") == 2 and "question" in kinds and "system" in kinds
    doc = [pc for pc in p.pieces if pc.kind == "document"][0]
    # an unmarked document block is rendered as every document is (render_document): the ids a
    # precomputed chunk has, so a chunk cache hit does not depend on how the document arrived
    assert doc.ids == document_token_ids(fresh_engine.tokenizer, "Doc A text.")
    assert doc.text == "<document>\nDoc A text.\n</document>"
    assert p.input_ids == [t for pc in p.pieces for t in pc.ids]


def test_bad_input(fresh_engine):
    with pytest.raises(ValueError, match="empty"):
        fresh_engine.generate("   ")
    with pytest.raises(ValueError, match="max_new_tokens"):
        fresh_engine.generate("hi", max_new_tokens=0)
    with pytest.raises(ValueError, match="role"):
        fresh_engine.generate([{"role": "robot", "content": "x"}])
    big = "word " * (fresh_engine.context_window + 10)
    with pytest.raises(ContextWindowError) as e:
        fresh_engine.generate(big, max_new_tokens=4)
    n = len(fresh_engine.build_prompt(big))
    assert str(n) in str(e.value) and str(fresh_engine.context_window) in str(e.value)
    # nothing cached was corrupted: a normal request still works
    assert fresh_engine.generate("hi", max_new_tokens=2).stats.prompt_tokens > 0


@pytest.mark.slow
def test_embedded_model_end_to_end(smol):
    engine = LocalEngine(smol)
    m = msgs("What is the capital of France? Answer in one word.", system="You are a helpful assistant.")
    a = engine.generate(m, max_new_tokens=8)
    b = engine.generate(m, max_new_tokens=8)
    assert "paris" in a.text.lower()
    assert a.token_ids == b.token_ids
    assert b.stats.prefix_tokens_reused > 0 and b.stats.ttft_s > 0


def _rag_msgs(docs, question="Which module parses CSV files?"):
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": [{"type": "text", "text": d, "ragcache_kind": "document"} for d in docs]
             + [{"type": "text", "text": question, "ragcache_kind": "question"}]}]


DOCS = ["The csv module reads and writes tabular data in CSV format. " * 3,
        "The datetime module supplies classes for manipulating dates and times. " * 3,
        "The json module encodes and decodes JSON documents. " * 3]


def test_chunk_cache_accounting_and_reorder(tiny):
    import torch

    from ragcache.engine.chunk.cache import ChunkCache

    # min_reuse_tokens=0: blend on any hit (the cost rule would take exact prefill for these short documents)
    engine = LocalEngine(tiny, chunk_cache=ChunkCache(dtype=torch.float32), recompute_ratio=0.15, min_reuse_tokens=0,
                         chunk_admission=1, chunk_queue=0)  # every miss stored before generate returns
    cold = engine.generate(_rag_msgs(DOCS), max_new_tokens=4)
    assert cold.stats.docs_missed == 3 and cold.stats.docs_hit == 0
    assert cold.stats.chunk_tokens_reused == 0  # computed in this request: never counted as reused
    warm = engine.generate(_rag_msgs(list(reversed(DOCS))), max_new_tokens=4)
    assert warm.stats.docs_hit == 3 and warm.stats.docs_missed == 0
    assert warm.stats.approximate and warm.stats.recompute_ratio == 0.15
    assert warm.stats.chunk_tokens_reused > 0 and warm.stats.prefix_tokens_reused > 0
    assert warm.stats.prefill_tokens_computed < warm.stats.prompt_tokens - warm.stats.prefix_tokens_reused
    same = engine.generate(_rag_msgs(list(reversed(DOCS))), max_new_tokens=4)  # 100% cached, same prompt twice
    assert same.stats.finish_reason in ("stop", "length")


def test_chunk_cache_r1_equals_full_prefill(tiny):
    import torch

    from ragcache.engine.chunk.cache import ChunkCache

    engine = LocalEngine(tiny, chunk_cache=ChunkCache(dtype=torch.float32), chunk_admission=1, chunk_queue=0)
    msgs_ = _rag_msgs(DOCS[:2])
    ref = engine.generate(msgs_, max_new_tokens=8, use_prefix_cache=False, use_chunk_cache=False)
    engine.generate(_rag_msgs(list(reversed(DOCS[:2]))), max_new_tokens=2)  # chunks cached, other order
    full = engine.generate(msgs_, max_new_tokens=8, use_prefix_cache=False, recompute_ratio=1.0)
    assert full.stats.docs_hit == 2
    assert (full.first_logits - ref.first_logits).abs().max() < 1e-4
    assert full.token_ids == ref.token_ids


def test_chunked_suffix_prefill_is_exact(fresh_engine):
    fresh_engine.PREFILL_CHUNK = 7  # force several chunks after the prefix hit
    m = msgs("Explain how heapq.merge works on several sorted inputs and what it returns.")
    ref = fresh_engine.generate(m, max_new_tokens=8, use_prefix_cache=False)
    fresh_engine.generate(msgs("warm the system prefix"), max_new_tokens=1)
    hit = fresh_engine.generate(m, max_new_tokens=8)
    assert hit.stats.prefix_tokens_reused > 0 and hit.stats.prefill_tokens_computed > 7
    assert (hit.first_logits - ref.first_logits).abs().max() < 1e-4
    assert hit.token_ids == ref.token_ids
