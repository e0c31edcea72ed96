"""RoPE re-rotation of cached keys (CacheBlend §4.2): exactness and supported variants."""

from __future__ import annotations

import pytest
import torch

from ragcache.engine import kv as kvb
from ragcache.engine.rope import RopeSpec, apply_rope, rerotate_keys
from ragcache.testing import tiny_llama

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64, "rope_theta": 10000.0}


@pytest.fixture(scope="module")
def tiny_llama3():
    return tiny_llama(1, rope_parameters=LLAMA3)


def layer0_keys(model, ids, start):
    cache = kvb.new_cache(model)
    kvb.forward(model, ids, cache, start=start)
    return kvb.cache_tensors(cache)[0][0]  # layer 0, [1, kv_heads, n, head_dim]


@pytest.mark.parametrize("fixture", ["tiny", "tiny_llama3"])
@pytest.mark.parametrize(("p", "q"), [(1, 57), (300, 41), (5, 1500)])
def test_rotated_layer0_keys_equal_direct_keys(request, fixture, p, q):
    lm = request.getfixturevalue(fixture)
    ids = lm.tokenizer("The cat sat on the mat, then it rained on Paris.", add_special_tokens=False)["input_ids"]
    at_p = layer0_keys(lm.model, ids, p)
    at_q = layer0_keys(lm.model, ids, q)
    spec = RopeSpec.from_config(lm.model.config)
    moved = rerotate_keys(at_p, q - p, spec)
    assert (moved - at_q).abs().max().item() < 1e-5
    # and from float16 storage the error is the float16 rounding, not a position error
    moved16 = rerotate_keys(at_p.half(), q - p, spec, out_dtype=torch.float32)
    assert (moved16 - at_q).abs().max().item() < 5e-3 * at_q.abs().max().item()
    assert not torch.allclose(at_p, at_q, atol=1e-3)  # the test would notice a missing rotation


@pytest.mark.parametrize("fixture", ["tiny", "tiny_llama3"])
def test_inv_freq_matches_the_model(request, fixture):
    lm = request.getfixturevalue(fixture)
    spec = RopeSpec.from_config(lm.model.config)
    assert torch.allclose(spec.inv_freq, lm.model.model.rotary_emb.inv_freq.float(), rtol=1e-6, atol=0)


def test_llama3_scaling_changes_low_frequencies(tiny, tiny_llama3):
    a = RopeSpec.from_config(tiny.model.config).inv_freq
    b = RopeSpec.from_config(tiny_llama3.model.config).inv_freq
    assert b.shape == a.shape and torch.equal(a[0], b[0]) and b[-1] < a[-1]


def test_per_token_delta_and_roundtrip():
    spec = RopeSpec(rope_type="default", inv_freq=1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)), head_dim=8)
    x = torch.randn(3, 5, 8)
    pos = torch.tensor([0, 3, 7, 100, 2048])
    cos, sin = spec.cos_sin(pos)
    rotated = apply_rope(x, cos, sin)
    back = rerotate_keys(rotated, -pos, spec)
    assert torch.allclose(back, x, atol=1e-5)
    with pytest.raises(ValueError, match="delta"):
        rerotate_keys(rotated, torch.tensor([1, 2]), spec)


@pytest.mark.parametrize("variant", [
    {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
    {"rope_type": "yarn", "factor": 2.0, "rope_theta": 10000.0, "original_max_position_embeddings": 64},
])
def test_unsupported_variants_raise_naming_them(variant):
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=32, num_attention_heads=2, rope_parameters=variant)
    with pytest.raises(NotImplementedError, match=variant["rope_type"]):
        RopeSpec.from_config(cfg)
