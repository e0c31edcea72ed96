"""The decode loop of :class:`~ragcache.engine.engine.LocalEngine`: sampling, stop strings, streaming.

One token per step from the request's own KV cache (``kv.forward`` of the last token at its
position); greedy when ``temperature == 0``, else temperature + nucleus (top-p) sampling
(Holtzman et al., "The Curious Case of Neural Text Degeneration", ICLR 2020, §3.1). Text is
streamed as UTF-8-complete deltas; a stop string ends generation before it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ragcache.engine import kv
from ragcache.engine.records import StreamEvent


@dataclass(slots=True)
class DecodeResult:
    """What :func:`decode` produced, filled in as it runs.

    Attributes:
        tokens: generated token ids (EOS excluded; stop strings are cut from ``text`` only).
        text: the final text (stop string and what follows removed).
        finish_reason: ``"stop"`` (EOS or a stop string) or ``"length"`` (the budget).
        t_first: ``time.perf_counter()`` when the first token was chosen (None before).
        t_end: ``time.perf_counter()`` after the last step.
    """

    tokens: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "length"
    t_first: float | None = None
    t_end: float = 0.0


def sample_token(logits: torch.Tensor, temperature: float, top_p: float, rng: torch.Generator | None) -> int:
    """Next token from logits ``[vocab]``: argmax when ``temperature == 0``, else a sample from
    ``softmax(logits / temperature)`` restricted to the smallest set of mass >= ``top_p``."""
    if temperature == 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sp, si = torch.sort(probs, descending=True)
        keep = torch.cumsum(sp, 0) - sp < top_p
        sp = sp * keep
        probs = torch.zeros_like(probs).scatter_(0, si, sp)
        probs /= probs.sum()
    return int(torch.multinomial(probs, 1, generator=rng))


def find_stop(text: str, stops: Sequence[str]) -> int | None:
    """Index of the earliest stop string in ``text`` (None when there is none)."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


def stop_overhang(text: str, stops: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that begins a stop string (0 when none does): text a
    stream must hold back, since the next token may complete the stop string."""
    best = 0
    for s in stops:
        tail = text[len(text) - min(len(s) - 1, len(text)):]
        for j in range(len(tail) - best):  # the earliest start is the longest overhang
            if s.startswith(tail[j:]):
                best = len(tail) - j
                break
    return best


def check_sampling(max_new_tokens: Any, temperature: Any, top_p: Any) -> int:
    """Check a request's decode settings; returns ``max_new_tokens`` as int.

    Raises:
        ValueError: ``max_new_tokens`` not an integer >= 1 (int or NumPy int; not 1.5, "3", None,
            NaN), ``temperature`` not >= 0 or ``top_p`` not in (0, 1] (NaN refused).
    """
    if isinstance(max_new_tokens, bool) or not hasattr(type(max_new_tokens), "__index__"):
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if int(max_new_tokens) < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not temperature >= 0 or not 0 < top_p <= 1:  # `not >=`: NaN is refused too
        raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
    return int(max_new_tokens)


def check_stops(stop: str | Sequence[str] | None) -> list[str]:
    """The stop strings of a request: ``None`` -> none, a str -> that one string (as in the OpenAI
    API), else a sequence of str; empty strings are dropped.

    Raises:
        TypeError: an entry that is not a str, or a value that is not a str or a sequence.
    """
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    if not isinstance(stop, Sequence | set | frozenset) or any(not isinstance(s, str) for s in stop):
        raise TypeError(f"stop must be a str or a list of str, got {stop!r:.80}")
    return [s for s in stop if s]


def decode(model: Any, tokenizer: Any, cache: Any, logits: torch.Tensor, n_prompt: int, *, max_new_tokens: int,
           temperature: float, top_p: float, stops: Sequence[str], eos: set[int], rng: torch.Generator | None,
           result: DecodeResult) -> Iterator[StreamEvent]:
    """Decode up to ``max_new_tokens`` tokens after a prefill, yielding text deltas.

    Args:
        cache: the request's KV cache over ``n_prompt`` prompt tokens (appended to in place).
        logits: float ``[vocab]`` logits of the last prompt token.
        stops: non-empty stop strings (:func:`check_stops`); eos: token ids that end generation.
        result: filled with tokens, final text, finish reason and timings.

    Yields:
        :class:`StreamEvent` deltas (never a partial UTF-8 character, never the start of a stop
        string the next token might complete); a last delta when the final text extends what was
        streamed. The deltas always join to ``result.text``.
    """
    out, emitted = result.tokens, ""
    for step in range(max_new_tokens):
        tok = sample_token(logits, temperature, top_p, rng)
        if result.t_first is None:
            result.t_first = time.perf_counter()
        if tok in eos:
            result.finish_reason = "stop"
            break
        out.append(tok)
        text = tokenizer.decode(out, skip_special_tokens=True)
        cut = find_stop(text, stops)
        if cut is not None:
            text, result.finish_reason = text[:cut], "stop"
        safe = text if cut is not None else text[:len(text) - stop_overhang(text, stops)]
        if not safe.endswith("\ufffd") and len(safe) > len(emitted):
            delta, emitted = safe[len(emitted):], safe
            yield StreamEvent(delta, tok)
        if result.finish_reason == "stop" or step == max_new_tokens - 1:
            break
        logits = kv.forward(model, [tok], cache, n_prompt + len(out) - 1)[-1]
    result.t_end = time.perf_counter()
    final = tokenizer.decode(out, skip_special_tokens=True)
    cut = find_stop(final, stops)
    if cut is not None:
        final, result.finish_reason = final[:cut], "stop"
    result.text = final
    if len(final) > len(emitted) and final.startswith(emitted):
        yield StreamEvent(final[len(emitted):], None)


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """Every token id that ends an answer: the generation config's, the model config's and the tokenizer's EOS."""
    ids = set()
    for src in (getattr(model, "generation_config", None), model.config):
        e = getattr(src, "eos_token_id", None) if src is not None else None
        if isinstance(e, int):
            ids.add(e)
        elif isinstance(e, list | tuple):
            ids.update(int(x) for x in e)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids
