"""Sliding-window attention (issue 11, item 10): a Mistral-style model with sliding_window=32
never raises, has prefix and chunk reuse switched off with one warning, and every output is
what the model computes with no cache at all."""

import logging

import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM

from ragcache.engine.windowed import kv_reuse_blocker
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.engine import LocalEngine
from ragcache.engine.prompt import Prompt, PromptPiece
from ragcache.models import LoadedModel, ModelFingerprint

WINDOW = 32
LENGTHS = (20, 31, 32, 33, 40)


def _mistral(tokenizer, sliding_window=WINDOW, seed=0):
    torch.manual_seed(seed)
    cfg = MistralConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=sliding_window,
                        max_position_embeddings=512, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)
    return MistralForCausalLM(cfg).to(torch.float32).eval()


@pytest.fixture(scope="module")
def mistral(tiny):
    model = _mistral(tiny.tokenizer)
    return LoadedModel(model, tiny.tokenizer, ModelFingerprint("tiny-mistral-sw32", "seed0", "float32"))


@torch.inference_mode()
def reference(model, ids, new_tokens):
    """Greedy decode with no KV cache: every step runs the whole sequence again."""
    seq, out, first = list(ids), [], None
    for _ in range(new_tokens):
        logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].float()
        first = logits if first is None else first
        tok = int(torch.argmax(logits))
        out.append(tok)
        seq.append(tok)
    return out, first


def _ids(n, offset=0):
    return [1000 + (37 * i + offset) % 40000 for i in range(n)]


def test_blocker_names_the_window(mistral, tiny):
    assert "sliding_window=32" in kv_reuse_blocker(mistral.model)
    assert kv_reuse_blocker(tiny.model) is None
    assert kv_reuse_blocker(_mistral(tiny.tokenizer, sliding_window=None)) is None
    assert kv_reuse_blocker(_mistral(tiny.tokenizer, sliding_window=4096)) is None  # longer than the context


def test_one_warning_per_engine(mistral, caplog):
    with caplog.at_level(logging.WARNING, logger="ragcache.engine.engine"):
        engine = LocalEngine(mistral, chunk_cache=ChunkCache(dtype=torch.float32))
        for n in LENGTHS:
            engine.generate(_ids(n), max_new_tokens=2)
    warnings = [r for r in caplog.records if "switched off" in r.getMessage()]
    assert len(warnings) == 1 and "sliding_window=32" in warnings[0].getMessage()


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("new_tokens", [1, 4])
def test_token_prompts_equal_cache_off(mistral, n, new_tokens):
    engine = LocalEngine(mistral, block_size=16)
    ids = _ids(n)
    want, want_first = reference(mistral.model, ids, new_tokens)
    for _ in range(2):  # the second request would be a prefix hit on a full-attention model
        got = engine.generate(ids, max_new_tokens=new_tokens)
        assert got.token_ids == want
        assert (got.first_logits - want_first).abs().max() < 1e-4
        assert got.stats.prefix_tokens_reused == 0 and got.stats.prefill_tokens_computed == n
    longer = engine.generate(ids + _ids(8, 5), max_new_tokens=new_tokens)  # extends a prefix seen before
    assert longer.token_ids == reference(mistral.model, ids + _ids(8, 5), new_tokens)[0]


def _doc_prompt(n):
    """Exactly ``n`` tokens: 4 template tokens, two documents, a 3-token question."""
    d = (n - 7) // 2
    sizes = [("raw", 4), ("document", d), ("document", n - 7 - d), ("question", 3)]
    pieces, off = [], 0
    for kind, size in sizes:
        pieces.append(PromptPiece(kind, "", _ids(size, off)))
        off += 11
    prompt = Prompt(pieces)
    assert len(prompt) == n and len(prompt.document_spans()) == 2
    return prompt


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("new_tokens", [1, 4])
def test_document_prompts_equal_cache_off_with_chunk_cache(mistral, n, new_tokens):
    chunks = ChunkCache(dtype=torch.float32)
    engine = LocalEngine(mistral, chunk_cache=chunks, block_size=16)
    prompt = _doc_prompt(n)
    want, want_first = reference(mistral.model, prompt.input_ids, new_tokens)
    for use_chunk in (None, True, True):  # later requests would be chunk hits on a full-attention model
        got = engine.generate(prompt, max_new_tokens=new_tokens, use_chunk_cache=use_chunk)
        assert got.token_ids == want
        assert (got.first_logits - want_first).abs().max() < 1e-4
        assert got.stats.docs_hit == 0 and got.stats.chunk_tokens_reused == 0
    assert chunks.hits == chunks.misses == 0  # the chunk cache was never consulted


def test_chat_messages_with_documents_equal_cache_off(mistral):
    engine = LocalEngine(mistral, chunk_cache=ChunkCache(dtype=torch.float32), block_size=16)
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "alpha beta gamma delta " * 8},
                                         {"type": "text", "text": "zeta eta theta " * 8},
                                         {"type": "text", "text": "Which word comes first?"}]}]
    ids = engine.build_prompt(msgs).input_ids
    assert len(ids) > 2 * WINDOW
    want, _ = reference(mistral.model, ids, 4)
    assert [engine.generate(msgs, max_new_tokens=4).token_ids for _ in range(2)] == [want, want]


def test_window_changes_the_answer(mistral, tiny):
    """The reference really is windowed: the same weights with full attention give other logits
    once the prompt is longer than the window (so the tests above can tell the two apart)."""
    full = _mistral(tiny.tokenizer, sliding_window=None)
    full.load_state_dict(mistral.model.state_dict())
    short, long = _ids(20), _ids(40)
    assert torch.allclose(reference(full, short, 1)[1], reference(mistral.model, short, 1)[1], atol=1e-5)
    assert (reference(full, long, 1)[1] - reference(mistral.model, long, 1)[1]).abs().max() > 1e-3


def test_full_attention_llama_keeps_reuse(tiny):
    engine = LocalEngine(tiny, block_size=16)
    assert engine.kv_reuse_blocker is None
    ids = _ids(40)
    engine.generate(ids, max_new_tokens=1)
    assert engine.generate(ids, max_new_tokens=1).stats.prefix_tokens_reused == 32
