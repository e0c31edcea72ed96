"""Teacher-forced fidelity metrics (benchmarks.fidelity) on a tiny random float32 Llama."""

from __future__ import annotations

import pytest
import torch

from benchmarks.fidelity import (
    forced_logits,
    greedy_answer,
    kl_rows,
    teacher_forced_fidelity,
)
from ragcache.engine import kv as kvb


def prefill(lm, ids):
    c = kvb.new_cache(lm.model)
    return c, kvb.forward(lm.model, ids, c, start=0)[-1]


def clone(lm, cache):
    k, v = kvb.cache_tensors(cache)
    return kvb.cache_from_tensors(lm.model, [t.clone() for t in k], [t.clone() for t in v])


IDS = list(range(5, 45))


def test_identical_caches_give_zero_kl_and_full_agreement(tiny):
    full, logits = prefill(tiny, IDS)
    other = clone(tiny, full)
    f = teacher_forced_fidelity(tiny.model, full, logits, other, logits.clone(), len(IDS), max_new_tokens=8)
    assert f.answer_len == 8
    assert f.mean_kl == pytest.approx(0.0, abs=1e-6) and f.first_token_kl == pytest.approx(0.0, abs=1e-6)
    assert f.top1_agreement == 1.0 and f.first_token_equal and f.greedy_match_len == 8
    assert kvb.cache_len(full) == len(IDS) and kvb.cache_len(other) == len(IDS)  # not modified


def test_forced_logits_match_step_by_step_decode(tiny):
    full, logits = prefill(tiny, IDS)
    answer = greedy_answer(tiny.model, full, logits, len(IDS), max_new_tokens=6)
    assert len(answer) == 6 and kvb.cache_len(full) == len(IDS)
    forced = forced_logits(tiny.model, full, logits, len(IDS), answer)
    assert forced.shape == (6, logits.shape[-1])
    assert forced.argmax(-1).tolist() == answer  # greedy answer is its own argmax under teacher forcing
    _, direct = prefill(tiny, IDS + answer[:3])  # prediction after 3 answer tokens, from scratch
    assert torch.allclose(forced[3], direct, atol=1e-4)


def test_perturbed_cache_has_positive_kl(tiny):
    full, logits = prefill(tiny, IDS)
    noisy = clone(tiny, full)
    _, v = kvb.cache_tensors(noisy)
    g = torch.Generator().manual_seed(0)
    for t in v:
        t.add_(torch.randn(t.shape, generator=g) * 2.0)
    answer = greedy_answer(tiny.model, full, logits, len(IDS), max_new_tokens=8)
    f = teacher_forced_fidelity(tiny.model, full, logits, noisy, logits, len(IDS), answer)
    assert f.first_token_kl == pytest.approx(0.0, abs=1e-6)  # same last logits given
    assert f.mean_kl > 1e-4 and max(f.kl_per_position[1:]) > 1e-3
    assert 0 <= f.greedy_match_len <= f.answer_len and 0.0 <= f.top1_agreement <= 1.0


def test_greedy_match_len_counts_leading_agreement(tiny):
    full, logits = prefill(tiny, IDS)
    answer = greedy_answer(tiny.model, full, logits, len(IDS), max_new_tokens=5)
    wrong = logits.clone()
    wrong[answer[0]] = -1e9  # approximate cache disagrees at position 0
    f = teacher_forced_fidelity(tiny.model, full, logits, clone(tiny, full), wrong, len(IDS), answer)
    assert not f.first_token_equal and f.greedy_match_len == 0 and f.first_token_kl > 1.0
    assert f.top1_agreement == pytest.approx(4 / 5)


def test_bad_input_raises(tiny):
    full, logits = prefill(tiny, IDS)
    with pytest.raises(ValueError, match="at least one token"):
        forced_logits(tiny.model, full, logits, len(IDS), [])
    with pytest.raises(ValueError, match="n_prompt"):
        forced_logits(tiny.model, full, logits, len(IDS) + 1, [1])


def test_kl_rows():
    a = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    b = torch.tensor([[3.0, 2.0, 1.0], [0.0, 0.0, 0.0]])
    p, q = torch.softmax(a[0], 0), torch.softmax(b[0], 0)
    kl = kl_rows(a, b)
    assert kl[0] == pytest.approx(float((p * (p / q).log()).sum()), rel=1e-5) and kl[1] == pytest.approx(0.0, abs=1e-7)
