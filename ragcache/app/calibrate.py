"""``ragcache calibrate``: the per-model CacheBlend fidelity check on MuSiQue development items.

Prompts are built as in ``ragcache bench blend`` (a system text, passages as documents, the
question through the chat template), with the item's first ``docs`` passages; the check itself
is :func:`ragcache.engine.blend.calibration.calibrate` (teacher-forced top-1 agreement and KL against
full prefill at each r). The record goes to ``$RAGCACHE_HOME/calibration/<fingerprint>.json``
and every later :class:`~ragcache.engine.engine.LocalEngine` on that model uses it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ragcache.app.output import err_console

SYSTEM = ("You will be asked a question after reading several passages. Please directly answer the question "
          "based on the given passages. Do NOT repeat the question. The answer should be within 5 words.")
QUESTION = ("Answer the question directly based on the given passages. Do NOT repeat the question. "
            "The answer should be within 5 words.\nQuestion: {question}")


def musique_prompts(data: str | Path, start: int, end: int, docs: int) -> list[list[dict]]:
    """Messages lists for items ``[start, end)`` of a MuSiQue sample, ``docs`` passages each.

    Raises:
        ValueError: missing file, or an empty item range.
    """
    path = Path(data)
    if not path.exists():
        raise ValueError(f"{path} not found: pass --data with the MuSiQue sample (shared/data/musique_s.json)")
    items = json.loads(path.read_text())[start:end]
    if not items:
        raise ValueError(f"no items in [{start}, {end}) of {path}")
    out = []
    for item in items:
        blocks = [{"type": "text", "text": c["text"], "ragcache_kind": "document"} for c in item["ctxs"][:docs]]
        blocks.append({"type": "text", "text": QUESTION.format(question=item["question"]), "ragcache_kind": "question"})
        out.append([{"role": "system", "content": SYSTEM}, {"role": "user", "content": blocks}])
    return out


def calibration_variants(data: str | Path, start: int, end: int, *, variants: int = 2, docs: int = 6,
                         seed: int = 40, first_variant: int = 0) -> tuple[list[list[dict]], list[list[str]], list[str]]:
    """Fresh calibration prompts from MuSiQue items ``[start, end)``: ``variants`` prompts per question.

    The procedure of the blend license plan (ragcache issue 40), fixed before any run:

    * supporting passages: those whose normalised text (:func:`ragcache.engine.blend.license.normalize_answer`)
      contains a normalised gold answer; all are kept (a seeded choice of ``docs`` when more);
    * the prompt's other passages: a seeded choice of the remaining ones, up to ``docs`` in all;
    * a seeded order of the ``docs`` passages;
    * a variant equal to the item's old calibration prompt (its first ``docs`` passages in order) or to an
      earlier variant of the same question is drawn again (next draw of the same generator).

    The generator of item i, variant v is ``random.Random(f"{seed}:{i}:{v}")`` (string seeds are hashed
    deterministically by SHA-512), so a prompt depends on its item, variant and seed only.

    Returns:
        ``(prompts, golds, names)``: message lists as :func:`musique_prompts` builds them, each item's gold
        answers, and names ``"item 7 variant 1"``.

    Raises:
        ValueError: missing file, an empty range, ``variants < 1`` or an item with fewer than ``docs`` passages.
    """
    import random

    from ragcache.engine.blend.license import normalize_answer

    path = Path(data)
    if not path.exists():
        raise ValueError(f"{path} not found: pass --data with the MuSiQue sample (shared/data/musique_s.json)")
    if variants < 1:
        raise ValueError(f"variants must be >= 1; got {variants}")
    items = json.loads(path.read_text())[start:end]
    if not items:
        raise ValueError(f"no items in [{start}, {end}) of {path}")
    prompts, golds, names = [], [], []
    for offset, item in enumerate(items):
        i = start + offset
        ctxs = item["ctxs"]
        if len(ctxs) < docs:
            raise ValueError(f"item {i} has {len(ctxs)} passages, fewer than docs={docs}")
        answers = [normalize_answer(a) for a in item["answers"] if normalize_answer(a)]
        support = [j for j, c in enumerate(ctxs) if any(a in normalize_answer(c["text"]) for a in answers)]
        old = list(range(docs))
        seen = [old]
        for v in range(first_variant, first_variant + variants):
            rng = random.Random(f"{seed}:{i}:{v}")
            while True:
                keep = sorted(rng.sample(support, docs)) if len(support) > docs else list(support)
                rest = [j for j in range(len(ctxs)) if j not in keep]
                chosen = keep + rng.sample(rest, docs - len(keep))
                rng.shuffle(chosen)
                if chosen not in seen:
                    break
            seen.append(chosen)
            blocks = [{"type": "text", "text": ctxs[j]["text"], "ragcache_kind": "document"} for j in chosen]
            blocks.append({"type": "text", "text": QUESTION.format(question=item["question"]),
                           "ragcache_kind": "question"})
            prompts.append([{"role": "system", "content": SYSTEM}, {"role": "user", "content": blocks}])
            golds.append(list(item["answers"]))
            names.append(f"item {i} variant {v}")
    return prompts, golds, names


def main(model: str | None = None, data: str | Path = "", start: int = 0, end: int = 4, docs: int = 6,
         ratios: list[float] | list[str] | None = None, min_agreement: float = 0.95, confidence: float = 0.95,
         max_ratio: float = 0.5,
         answer_tokens: int = 32, threads: int | None = None, save: bool = True, home: str | None = None,
         selection: str | None = None, console: Console | None = None) -> Any:
    """Run the check and print the table; returns the :class:`Calibration`. ``home``: where the
    record goes (default ``$RAGCACHE_HOME``); the chunk format and decode cache are the
    ``RAGCACHE_*`` settings the engines of the CLI use."""
    import torch

    from ragcache.config import Config
    from ragcache.engine.blend.calibration import DEFAULT_RATIOS, calibration_path, check_options
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.engine import LocalEngine

    ratios = check_options(ratios=ratios or DEFAULT_RATIOS, min_agreement=min_agreement,
                           max_ratio=max_ratio, answer_tokens=answer_tokens,
                           confidence=confidence)  # before the data and the model load
    console = console or Console()
    cfg = Config.from_env()
    home = home or cfg.paths
    if threads:
        torch.set_num_threads(threads)
    prompts = musique_prompts(data, start, end, docs)
    chunks = ChunkCache(kv_format=cfg.kv_format, group_size=cfg.kv_group_size)
    engine = LocalEngine.from_pretrained(model, chunk_cache=chunks, calibration=False, decode_cache=cfg.decode_cache,
                                         home=cfg.paths)
    cal = engine.calibrate(prompts, ratios=ratios, min_agreement=min_agreement,
                           confidence=confidence, max_ratio=max_ratio, answer_tokens=answer_tokens, save=save, home=home,
                           rank_by=selection, progress=lambda line: err_console().print(line))  # progress is a diagnostic: stderr
    t = Table(title=f"blend fidelity ({cal.rank_by} selection) vs full prefill, {cal.model}: items {start}-{end - 1}, "
                    f"{answer_tokens} teacher-forced tokens, chunk KV {cal.chunk_dtype}")
    for c in ("r", "top-1 agreement (mean)", "top-1 agreement (min)", "pooled (tokens)",
              f"lower bound ({confidence:g})", "mean KL (nats)"):
        t.add_column(c, justify="right")
    for row in cal.ratios:
        t.add_row(f"{row['r']:g}", f"{row['top1_agreement']:.3f}", f"{row['min_top1_agreement']:.3f}",
                  f"{row['pooled_top1_agreement']:.3f} ({row['answer_tokens']})",
                  f"{row['agreement_lower_bound']:.3f}", f"{row['mean_kl']:.4f}")
    console.print(t)
    if cal.blend_allowed:
        console.print(f"r = {cal.recompute_ratio:g} is the smallest ratio whose agreement is >= {min_agreement:g} "
                      f"with confidence {confidence:g}")
    else:
        console.print(f"no r <= {max_ratio:g} reaches agreement {min_agreement:g} with confidence {confidence:g}: "
                      "this model gets exact prefill (more prompts, --end, tighten the bound)")
    if save:
        console.print(f"recorded in {calibration_path(cal.fingerprint, home)}")
    return cal


def semantic_main(pairs: str | Path, precision: float = 0.97, confidence: float = 0.95, embedder: str | None = None,
                  save: bool = True, home: str | None = None, console: Console | None = None) -> Any:
    """``ragcache calibrate semantic``: fit the learned verifier's threshold to labelled pairs
    (:func:`ragcache.semantic.decision.calibration.calibrate_pairs`), print it and record it for the embedder.

    Raises:
        ValueError: bad pairs file, too few pairs for the confidence rule (the message says how
            many), no threshold reaching the target, or an embedder the verifier was not fitted for.
    """
    from ragcache.app.verifier_data import read_pairs
    from ragcache.config import Config
    from ragcache.semantic.decision.calibration import calibrate_pairs, check_enough, record_path, save_record, z_of
    from ragcache.semantic.decision.verifier import LearnedVerifier, load_head
    from ragcache.semantic.embedding import resolve_embedder

    if not 0.0 < precision < 1.0:
        raise ValueError(f"--precision must be in (0, 1), got {precision}")
    z_of(confidence)
    console = console or Console()
    home = home or Config.from_env().paths
    rows = read_pairs(pairs)
    check_enough(rows, precision=precision, confidence=confidence)  # before the embedder loads
    emb = resolve_embedder(embedder)
    head = load_head()
    if not emb.has_tokens or not str(emb.name).lower().endswith(head.embedder.lower()):
        raise ValueError(f"the learned verifier was fitted for {head.embedder}, not {emb.name!r}; calibrate with the "
                         f"packaged embedder (omit --embedder)")
    cal = calibrate_pairs(LearnedVerifier(emb, head), rows, precision=precision, confidence=confidence)
    t = Table(title=f"semantic hit decision on {Path(pairs).name}: {cal.pairs} pairs, {cal.same} labelled same")
    for c in ("verifier threshold", "served", "correct", "precision", f"lower bound ({confidence:g})", "recall"):
        t.add_column(c, justify="right")
    t.add_row(f"{cal.threshold:.4f}", str(cal.hits), str(cal.correct), f"{cal.observed:.3f}", f"{cal.lower_bound:.3f}",
              f"{cal.recall:.3f}")
    console.print(t)
    if save:
        console.print(f"recorded in {save_record(cal, home)}; caches on {emb.name} now use threshold {cal.threshold:.4f}")
    else:
        console.print(f"not recorded (--no-save); it would go to {record_path(cal.fingerprint, home)}")
    return cal
