"""Decode loop edge cases (ragcache.engine.decode) on a tiny random float32 Llama: stop strings that
span tokens never leak into the stream, a str stop is one stop string, bad budgets are named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ragcache.engine.decode import check_stops, stop_overhang

SAMPLE = dict(temperature=0.9, top_p=0.95, seed=3)


def msgs(question):
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": question}]


pytestmark = pytest.mark.engine("tiny", calibration=False)  # each test gets its own engine: `fresh_engine`


def streamed(engine, **kw):
    events = list(engine.stream(msgs("Tell me about the sea."), **kw))
    return "".join(e.text for e in events), events[-1].generation


def spanning_stops(engine, gen):
    """Stop strings made of the last character of one generated token and the first of the next."""
    ends = [len(engine.tokenizer.decode(gen.token_ids[:i + 1], skip_special_tokens=True))
            for i in range(len(gen.token_ids))]
    text = gen.text
    return sorted({text[e - 1:e + 1] for e in ends[:-1] if 0 < e < len(text)})


@pytest.mark.parametrize("kw", [dict(max_new_tokens=12), dict(max_new_tokens=16, **SAMPLE)])
def test_a_stop_string_split_across_tokens_never_reaches_the_stream(fresh_engine, kw):
    _, full = streamed(fresh_engine, **kw)
    stops = spanning_stops(fresh_engine, full)
    assert stops, full.text
    for stop in stops:
        joined, gen = streamed(fresh_engine, stop=[stop], **kw)
        assert stop not in gen.text and gen.stats.finish_reason == "stop"
        assert joined == gen.text, (stop, joined, gen.text)
    # three newlines of greedy output, each one token: the first two were streamed, then cut
    joined, gen = streamed(fresh_engine, max_new_tokens=12, stop=["\n\n\n"])
    assert joined == gen.text


def test_stream_without_stop_is_unchanged_and_held_text_comes_at_the_end(fresh_engine):
    plain, gen = streamed(fresh_engine, max_new_tokens=10, **SAMPLE)
    assert plain == gen.text
    tail = gen.text[-1:] + "\x00never"  # begins with the last character: held back, then flushed at the budget
    joined, held = streamed(fresh_engine, max_new_tokens=10, stop=[tail], **SAMPLE)
    assert joined == held.text == gen.text and held.stats.finish_reason == "length"


def test_a_str_stop_is_one_stop_string(fresh_engine):
    _, full = streamed(fresh_engine, max_new_tokens=16, **SAMPLE)
    text = full.text
    # a 3-character stop whose later characters occur earlier on their own (read as 3 stops, it cuts there)
    stop = next(text[i:i + 3] for i in range(1, len(text) - 2)
                if text[i:i + 3] not in text[:i + 2] and set(text[i + 1:i + 3]) & set(text[:i]))
    as_str = fresh_engine.generate(msgs("Tell me about the sea."), max_new_tokens=16, stop=stop, **SAMPLE)
    as_list = fresh_engine.generate(msgs("Tell me about the sea."), max_new_tokens=16, stop=[stop], **SAMPLE)
    assert as_str.text == as_list.text == text[:text.index(stop)]


@pytest.mark.parametrize("stop", [[None], [3], ["ok", b"x"], 7, {"a": 1}.keys()])
def test_stops_that_are_not_strings_are_named(fresh_engine, stop):
    with pytest.raises(TypeError, match="stop must be a str or a list of str"):
        fresh_engine.generate(msgs("hi"), max_new_tokens=2, stop=stop)


@pytest.mark.parametrize("bad", [1.5, "3", None, float("nan"), 0, -2])
def test_max_new_tokens_that_is_not_a_positive_integer_is_named(fresh_engine, bad):
    with pytest.raises(ValueError, match="max_new_tokens must be"):
        fresh_engine.generate(msgs("hi"), max_new_tokens=bad)


def test_budget_of_one_and_eos_first(fresh_engine):
    one = fresh_engine.generate(msgs("hi"), max_new_tokens=np.int64(1))
    assert len(one.token_ids) == 1 and one.stats.finish_reason == "length"
    eos = fresh_engine.tokenizer.eos_token_id
    hook = fresh_engine.model.lm_head.register_forward_hook(lambda m, i, o: o.index_fill(-1, torch.tensor([eos]), 1e4))
    try:
        for n in (1, 5):
            joined, gen = streamed(fresh_engine, max_new_tokens=n, stop=["x"])
            assert joined == gen.text == "" and gen.token_ids == [] and gen.stats.finish_reason == "stop"
    finally:
        hook.remove()


def test_overhang_and_check_stops():
    assert stop_overhang("the en", ["END", "end!"]) == 2
    assert stop_overhang("abc", ["x"]) == 0 and stop_overhang("", ["abc"]) == 0
    assert stop_overhang("aab", ["aabx", "b"]) == 3
    assert check_stops(None) == [] and check_stops("") == [] and check_stops("END") == ["END"]
    assert check_stops(("a", "", "b")) == ["a", "b"]
