"""``ragcache calibrate``'s prompts (MuSiQue development items) and ``ragcache calibrate semantic``.

:func:`calibration_variants` builds the fresh calibration prompts of a plan, :func:`musique_prompts` the
items' first passages, as ``ragcache bench blend`` does (a system text, passages as documents, the
question through the chat template). The blend calibration itself (a plan built from the options and
written first, or a plan file, run under the license rule) is :mod:`ragcache.app.calibrate_settings`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


DEV_ITEMS = 50
"""Items ``[0, 50)`` of the MuSiQue sample are the development split: calibrations run on them only."""
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
