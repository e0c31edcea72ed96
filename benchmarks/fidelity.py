"""Teacher-forced fidelity of an approximate KV cache (CacheBlend, quantised KV, ...) against full prefill.

Why teacher forcing: comparing free-running greedy answers (answer F1) cannot see small
changes on a small model, because one flipped token changes the whole continuation. Here the
full-prefill greedy answer ``a_0 .. a_{T-1}`` is forced through both caches, so every answer
position is scored under the same history:

- position 0 is predicted by the prompt's last logits (``full_logits`` / ``approx_logits``);
- positions 1..T-1 by one forward of ``a_0 .. a_{T-2}`` at positions ``n .. n+T-2`` on each cache.

Metrics (natural log, nats):

- ``mean_kl``: mean over the T answer positions of KL(P_full || P_approx) of the next-token
  distributions;
- ``top1_agreement``: fraction of the T positions where the approximate cache's argmax equals
  the forced full-prefill token ``a_t``;
- ``first_token_kl`` / ``first_token_equal``: the same at position 0 only;
- ``greedy_match_len``: number of leading answer tokens the approximate cache's own greedy
  decode reproduces (the first disagreeing position under teacher forcing: while all previous
  tokens agree, greedy decoding from the approximate cache follows the forced history exactly),
  between 0 and T.

The given caches are never modified (each is forked with
:func:`ragcache.engine.kv.cache_from_tensors` ``copy=False``; the forward appends by
concatenation into new storage).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ragcache.engine import kv as kvb


@dataclass(slots=True)
class Fidelity:
    """Teacher-forced fidelity of one approximate cache against full prefill (see module doc).

    Attributes:
        answer_len: T, the number of forced answer positions (>= 1).
        mean_kl: mean KL(full || approx) over the T positions, nats (>= 0).
        top1_agreement: fraction in [0, 1] of positions whose approx argmax is the full token.
        first_token_kl: KL(full || approx) at position 0, nats.
        first_token_equal: approx argmax at position 0 equals the full first token.
        greedy_match_len: leading positions that agree, in [0, T].
        kl_per_position: the T per-position KLs, nats.
    """

    answer_len: int
    mean_kl: float
    top1_agreement: float
    first_token_kl: float
    first_token_equal: bool
    greedy_match_len: int
    kl_per_position: list[float]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def kl_rows(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """Row-wise KL(softmax(p) || softmax(q)) in nats: float ``[T, vocab]`` x2 -> float32 ``[T]``."""
    lp = torch.log_softmax(p_logits.float(), -1)
    lq = torch.log_softmax(q_logits.float(), -1)
    return (lp.exp() * (lp - lq)).sum(-1).clamp_min(0.0)


def greedy_answer(model: Any, cache: Any, first_logits: torch.Tensor, n_prompt: int, *, max_new_tokens: int = 32,
                  eos: Iterable[int] = ()) -> list[int]:
    """Greedy continuation (token ids) from a prompt cache, stopping after an EOS id (kept) or at
    ``max_new_tokens``. ``cache`` covers ``n_prompt`` positions; it is not modified."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1; got {max_new_tokens}")
    stop = {int(t) for t in eos}
    work = kvb.cache_from_tensors(model, *kvb.cache_tensors(cache), copy=False)
    out = [int(first_logits.argmax())]
    while len(out) < max_new_tokens and out[-1] not in stop:
        out.append(int(kvb.forward(model, [out[-1]], work, start=n_prompt + len(out) - 1)[-1].argmax()))
    return out


@torch.inference_mode()
def forced_logits(model: Any, cache: Any, last_logits: torch.Tensor, n_prompt: int, answer_ids: Sequence[int]
                  ) -> torch.Tensor:
    """Next-token logits at each of the T answer positions with ``answer_ids`` forced.

    Args:
        model: causal LM.
        cache: KV cache of the ``n_prompt`` prompt tokens (not modified).
        last_logits: float ``[vocab]`` logits of the prompt's last position.
        n_prompt: prompt length in tokens (= positions the cache covers).
        answer_ids: the T >= 1 forced token ids.

    Returns:
        float32 ``[T, vocab]``: row 0 is ``last_logits``, row t the prediction after ``answer_ids[:t]``.

    Raises:
        ValueError: empty ``answer_ids`` or a cache whose length is not ``n_prompt``.
    """
    if len(answer_ids) == 0:
        raise ValueError("answer_ids must hold at least one token (the full-prefill greedy answer)")
    if kvb.cache_len(cache) != n_prompt:
        raise ValueError(f"cache covers {kvb.cache_len(cache)} positions but n_prompt={n_prompt}")
    rows = [last_logits.float().reshape(1, -1)]
    if len(answer_ids) > 1:
        work = kvb.cache_from_tensors(model, *kvb.cache_tensors(cache), copy=False)
        rows.append(kvb.forward(model, list(answer_ids[:-1]), work, start=n_prompt,
                                logits_to_keep=len(answer_ids) - 1).float())
    return torch.cat(rows, 0)


def teacher_forced_fidelity(model: Any, full_cache: Any, full_logits: torch.Tensor, approx_cache: Any,
                            approx_logits: torch.Tensor, n_prompt: int, answer_ids: Sequence[int] | None = None, *,
                            full_forced: torch.Tensor | None = None, max_new_tokens: int = 32,
                            eos: Iterable[int] = ()) -> Fidelity:
    """Fidelity of ``approx_cache`` against ``full_cache`` for the same prompt (see module doc).

    Args:
        model: the causal LM both caches belong to.
        full_cache / full_logits: full-prefill cache over ``n_prompt`` positions and float
            ``[vocab]`` logits of the last prompt position.
        approx_cache / approx_logits: the same for the approximate (blended, quantised) cache.
        n_prompt: prompt length in tokens.
        answer_ids: the full-prefill greedy answer to force (T >= 1 ids). ``None``: decoded here
            greedily from ``full_cache`` (``max_new_tokens``, stop after an ``eos`` id).
        full_forced: optional precomputed :func:`forced_logits` of the full cache for these
            ``answer_ids`` (float ``[T, vocab]``), to score many approximate caches against one
            full prefill without recomputing it.

    Returns:
        :class:`Fidelity`. Neither cache is modified.

    Raises:
        ValueError: empty answer, cache length != ``n_prompt``, or ``full_forced`` of the wrong shape.
    """
    if answer_ids is None:
        answer_ids = greedy_answer(model, full_cache, full_logits, n_prompt, max_new_tokens=max_new_tokens, eos=eos)
    answer = [int(t) for t in answer_ids]
    p = forced_logits(model, full_cache, full_logits, n_prompt, answer) if full_forced is None else full_forced
    if p.shape[0] != len(answer):
        raise ValueError(f"full_forced has {p.shape[0]} rows for an answer of {len(answer)} tokens")
    q = forced_logits(model, approx_cache, approx_logits, n_prompt, answer)
    kl = kl_rows(p, q)
    agree = q.argmax(-1).cpu() == torch.tensor(answer)
    match = int(agree.long().cumprod(0).sum())
    return Fidelity(answer_len=len(answer), mean_kl=float(kl.mean()), top1_agreement=float(agree.float().mean()),
                    first_token_kl=float(kl[0]), first_token_equal=bool(agree[0]), greedy_match_len=match,
                    kl_per_position=[float(x) for x in kl])
