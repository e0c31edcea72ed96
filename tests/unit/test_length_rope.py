"""Position encodings that depend on the prompt's length (issue 39, section 2): a Phi-3 style LongRoPE
model (``rope_type="longrope"``, ``original_max_position_embeddings=32``) switches RoPE tables when a
forward's positions end past 32 tokens. The prefix cache keys the regime, so KV computed on one side of
the switch is never spliced into a prompt on the other; chunk reuse is off. Dynamic NTK scaling
(Llama ``rope_type="dynamic"``) is asked of the installed transformers: where it rescales inside the
context window, reuse is off; where it does not, reuse stays on. Every output equals the uncached
model's (float32, one forward for the prompt then one per token, no cache of ours)."""

import logging

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM

from ragcache.engine import kv
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.engine import LocalEngine
from ragcache.engine.prompt import Prompt, PromptPiece
from ragcache.engine.windowed import kv_reuse_blocker, rope_switch
from ragcache.models import LoadedModel, ModelFingerprint

ORIG = 32  # LongRoPE's original_max_position_embeddings: the switch
HEAD_DIM = 16


def _phi3(tokenizer, seed=0, longrope=True):
    torch.manual_seed(seed)
    scaling = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": ORIG,
               "short_factor": [1.0 + 0.1 * i for i in range(HEAD_DIM // 2)],
               "long_factor": [2.0 + 3.0 * i for i in range(HEAD_DIM // 2)]}
    cfg = Phi3Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                     original_max_position_embeddings=ORIG, rope_parameters=scaling if longrope else None,
                     bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                     pad_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)
    return Phi3ForCausalLM(cfg).to(torch.float32).eval()


def _llama_dynamic(tokenizer, seed=0, original=None):
    torch.manual_seed(seed)
    params = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}
    if original is not None:
        params["original_max_position_embeddings"] = original
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      rope_parameters=params, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).to(torch.float32).eval()


def _loaded(model, tokenizer, name):
    return LoadedModel(model, tokenizer, ModelFingerprint(name, "seed0", "float32"))


@pytest.fixture(scope="module")
def phi3(tiny):
    return _loaded(_phi3(tiny.tokenizer), tiny.tokenizer, "tiny-phi3-longrope32")


@torch.inference_mode()
def reference(model, ids, new_tokens):
    """The uncached model: one forward over the prompt (its length picks the table), then greedy decode one
    token at a time with transformers' own cache (each step's last position picks that step's table)."""
    cache = kv.new_cache(model)
    logits = model(input_ids=torch.tensor([list(ids)]), cache=cache, use_cache=True).logits[0, -1].float()
    first, out = logits, []
    for _ in range(new_tokens):
        tok = int(torch.argmax(logits))
        out.append(tok)
        if len(out) == new_tokens:
            break
        pos = torch.tensor([[len(ids) + len(out) - 1]])
        logits = model(input_ids=torch.tensor([[tok]]), cache=cache, position_ids=pos,
                       use_cache=True).logits[0, -1].float()
    return out, first


def _ids(n, offset=0):
    return [1000 + (37 * i + offset) % 40000 for i in range(n)]


def test_longrope_is_a_keyed_switch(phi3, tiny):
    switch = rope_switch(phi3.model)
    assert switch is not None and switch.keyed and switch.threshold == ORIG
    assert switch.regime(ORIG) != switch.regime(ORIG + 1) and switch.regime(1) == switch.regime(ORIG)
    assert kv_reuse_blocker(phi3.model) is None
    assert rope_switch(tiny.model) is None  # plain RoPE: one table
    assert rope_switch(_phi3(tiny.tokenizer, longrope=False)) is None


def test_the_switch_changes_the_answer(phi3):
    """The reference really switches: KV of the first 20 tokens computed in a 20-token forward (short table)
    differs from the same positions inside a 40-token forward (long table), so a splice would show."""
    short = kv.new_cache(phi3.model)
    kv.forward(phi3.model, _ids(20), short, 0)
    long = kv.new_cache(phi3.model)
    kv.forward(phi3.model, _ids(40), long, 0)
    k_short, k_long = kv.cache_tensors(short)[0][0], kv.cache_tensors(long)[0][0][:, :, :20]
    assert (k_short - k_long).abs().max() > 1e-3


# prompts that extend each other across the switch, both ways, and repeats (prefix hits on one side)
SEQUENCES = [
    [20, 40, 20, 40, 48],    # short then long: the long prompt must not reuse the short one's KV
    [40, 20, 40, 31, 33],    # long then short
    [30, 30, 32, 33, 33],    # at the threshold: 32 is short, 33 long
]


@pytest.mark.parametrize("lengths", SEQUENCES)
@pytest.mark.parametrize("new_tokens", [1, 6])  # 6: a 30-token prompt's decode crosses the switch
def test_longrope_prompts_equal_the_uncached_model(phi3, lengths, new_tokens):
    engine = LocalEngine(phi3, block_size=16)
    reused = 0
    for n in lengths:
        ids = _ids(n)
        want, want_first = reference(phi3.model, ids, new_tokens)
        got = engine.generate(ids, max_new_tokens=new_tokens)
        assert got.token_ids == want, n
        assert (got.first_logits - want_first).abs().max() < 1e-4, n
        reused += got.stats.prefix_tokens_reused
    assert reused > 0  # the prefix cache still works within one regime


def test_longrope_follow_up_turn_after_a_decode_across_the_switch(phi3):
    """An answer whose decode crossed the switch is not stored for multi-turn reuse (its KV mixes tables);
    one that stayed on one side is, and is reused."""
    engine = LocalEngine(phi3, block_size=16)
    for n, new in ((28, 8), (40, 8)):
        ids = _ids(n)
        first = engine.generate(ids, max_new_tokens=new)
        follow = ids + first.token_ids + _ids(5, 3)
        want, want_first = reference(phi3.model, follow, 3)
        got = engine.generate(follow, max_new_tokens=3)
        assert got.token_ids == want and (got.first_logits - want_first).abs().max() < 1e-4
        assert got.stats.prefix_tokens_reused == (0 if n == 28 else 32)  # 47 stored tokens: two 16-token blocks


def _doc_prompt(n):
    d = (n - 7) // 2
    pieces, off = [], 0
    for kind, size in [("raw", 4), ("document", d), ("document", n - 7 - d), ("question", 3)]:
        pieces.append(PromptPiece(kind, "", _ids(size, off)))
        off += 11
    return Prompt(pieces)


def test_longrope_chunk_reuse_is_off_with_one_warning(phi3, caplog):
    chunks = ChunkCache(dtype=torch.float32)
    with caplog.at_level(logging.WARNING, logger="ragcache.engine.engine"):
        engine = LocalEngine(phi3, chunk_cache=chunks, block_size=16)
        for n in (26, 40, 40):
            prompt = _doc_prompt(n)
            want, want_first = reference(phi3.model, prompt.input_ids, 3)
            got = engine.generate(prompt, max_new_tokens=3, use_chunk_cache=True, recompute_ratio=0.0)
            assert got.token_ids == want and (got.first_logits - want_first).abs().max() < 1e-4
            assert got.stats.chunk_tokens_reused == 0 and not got.stats.approximate
    warnings = [r.getMessage() for r in caplog.records if "switched off" in r.getMessage()]
    assert len(warnings) == 1 and "longrope" in warnings[0] and "32 tokens" in warnings[0]
    assert chunks.hits == 0


def test_longrope_through_chat_messages(phi3):
    engine = LocalEngine(phi3, block_size=16)
    short = [{"role": "user", "content": "alpha beta"}]
    long = [{"role": "user", "content": "alpha beta " + "gamma delta " * 20}]
    for msgs in (short, long, short, long):
        ids = engine.build_prompt(msgs).input_ids
        assert engine.generate(msgs, max_new_tokens=3).token_ids == reference(phi3.model, ids, 3)[0]


def test_dynamic_ntk_within_the_window_keeps_reuse(tiny):
    """transformers rescales dynamic NTK only past ``max_position_embeddings`` (the context window the engine
    enforces), so inside the window it is one table: no switch, prefix reuse on, outputs exact."""
    for original in (None, 32):
        model = _llama_dynamic(tiny.tokenizer, original=original)
        assert rope_switch(model) is None and kv_reuse_blocker(model) is None
        engine = LocalEngine(_loaded(model, tiny.tokenizer, f"tiny-llama-dynamic-{original}"), block_size=16)
        for n in (20, 40, 20, 40, 48):
            ids = _ids(n)
            want, want_first = reference(model, ids, 4)
            got = engine.generate(ids, max_new_tokens=4)
            assert got.token_ids == want and (got.first_logits - want_first).abs().max() < 1e-4
        assert got.stats.prefix_tokens_reused == 32


def test_a_rope_that_rescales_inside_the_window_blocks_reuse(tiny, monkeypatch, caplog):
    """A transformers whose dynamic NTK rescales from ``original_max_position_embeddings`` (as vLLM's does)
    changes the table with every length: no two regimes to key, so prefix and chunk reuse are off."""
    model = _llama_dynamic(tiny.tokenizer, original=32)

    def rescaling(config, seq_len):
        base = 10000.0 * max(1.0, seq_len / 32) ** (HEAD_DIM / (HEAD_DIM - 2))
        return 1.0 / base ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)
    monkeypatch.setattr(kv, "rope_inv_freq", rescaling)
    switch = rope_switch(model)
    assert switch is not None and not switch.keyed and switch.rope_type == "dynamic"
    assert "'dynamic'" in kv_reuse_blocker(model)
    with caplog.at_level(logging.WARNING, logger="ragcache.engine.engine"):
        engine = LocalEngine(_loaded(model, tiny.tokenizer, "tiny-llama-dynamic-rescaling"), block_size=16)
    assert any("switched off" in r.getMessage() for r in caplog.records)
    ids = _ids(40)
    for _ in range(2):
        got = engine.generate(ids, max_new_tokens=2)
        assert got.stats.prefix_tokens_reused == 0 and got.token_ids == reference(model, ids, 2)[0]
