"""``ragcache calibrate``: license a CacheBlend setting for a model on MuSiQue development items.

Without ``--plan`` the command builds a plan from its options (:func:`build_plan`: candidate settings,
the license rule of :mod:`ragcache.engine.blend.license` with its thresholds, the prompt procedure of
:func:`calibration_variants`), writes it to a JSON file *before* anything is measured
(:func:`write_plan`), and runs it exactly as ``ragcache calibrate --plan FILE`` does
(:func:`ragcache.app.calibrate_settings.main`). Prompts are built as in ``ragcache bench blend`` (a
system text, passages as documents, the question through the chat template). The record goes to
``$RAGCACHE_HOME/calibration/<fingerprint>.json`` and every later
:class:`~ragcache.engine.engine.LocalEngine` on that model uses it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ragcache.app.output import err_console
from ragcache.atomic import atomic_write_json

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


def build_plan(*, ratios: Sequence[float] | Sequence[str] | None = None, selection: str = "infoflow",
               chunk_context: str = "prefix", variants: int = 2, seed: int = 40, docs: int = 6,
               answer_tokens: int = 32, yardstick_every: int = 1, rule: dict[str, Any] | None = None,
               note: str = "") -> Any:
    """The :class:`~ragcache.engine.blend.setting.SettingsPlan` ``ragcache calibrate`` runs when given no
    ``--plan``: one candidate per ratio (:func:`~ragcache.engine.blend.setting.candidate_settings`), the
    license rule with ``rule``'s thresholds over the defaults, fresh prompts from
    :func:`calibration_variants` (``variants`` per question, ``seed``, ``docs`` passages), the bfloat16
    yardstick on every ``yardstick_every``-th prompt (0: never).

    Raises:
        ValueError: a bad ratio, selection rule, chunk context, threshold or count (the message names it).
    """
    from ragcache.engine.blend.license import LicenseRule
    from ragcache.engine.blend.setting import DEFAULT_CANDIDATE_RATIOS, SettingsPlan, candidate_settings

    for name, v, low in (("variants", variants, 1), ("docs", docs, 1), ("answer_tokens", answer_tokens, 1),
                         ("yardstick_every", yardstick_every, 0), ("seed", seed, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name} must be an integer >= {low}; got {v!r}")
    try:
        lic = LicenseRule(**(rule or {}))
    except TypeError as e:
        raise ValueError(f"license rule: {e}") from None
    settings = candidate_settings(DEFAULT_CANDIDATE_RATIOS if ratios is None else ratios, rank_by=selection,
                                  chunk_context=chunk_context)
    return SettingsPlan(settings=settings, rule=lic, answer_tokens=answer_tokens, yardstick_every=yardstick_every,
                        prompts={"variants": variants, "seed": seed, "docs": docs}, note=note)


def plan_path(home: Any, now: datetime | None = None) -> Path:
    """Where a plan goes by default: ``<home>/calibration/plans/plan-<UTC time>.json`` (``-2``, ``-3``, ...
    added when that name is taken, so an earlier plan is never overwritten)."""
    from ragcache.home import Home

    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    folder = Home.of(home).calibration / "plans"
    path, n = folder / f"plan-{stamp}.json", 1
    while path.exists():
        n += 1
        path = folder / f"plan-{stamp}-{n}.json"
    return path


def write_plan(plan: Any, path: str | Path) -> Path:
    """Write ``plan`` (a SettingsPlan) as JSON to ``path``, which must not exist yet (a plan is written once,
    before its run); returns the path.

    Raises:
        ValueError: ``path`` exists.
    """
    path = Path(path).expanduser()
    if path.exists():
        raise ValueError(f"{path} exists: a plan is written once, before its run. Pass another --plan-out, or run "
                         f"that plan with --plan {path}")
    atomic_write_json(path, plan.to_dict(), indent=1)
    return path


def main(model: str | None = None, data: str | Path = "", start: int = 0, end: int = 50, docs: int = 6,
         ratios: Sequence[float] | Sequence[str] | None = None, selection: str = "infoflow",
         chunk_context: str = "prefix", variants: int = 2, seed: int = 40, answer_tokens: int = 32,
         yardstick_every: int = 1, rule: dict[str, Any] | None = None, threads: int | None = None, save: bool = True,
         home: str | None = None, plan_out: str | Path | None = None, json_path: str | None = None,
         console: Console | None = None) -> Any:
    """``ragcache calibrate`` without ``--plan``: build the plan from the options (:func:`build_plan`), write it
    to ``plan_out`` (default :func:`plan_path` under ``home``, default ``$RAGCACHE_HOME``) *before* anything is
    measured, say where, then run it exactly as ``--plan`` does (:func:`ragcache.app.calibrate_settings.main`:
    the table, the verdict, the record). Returns the :class:`Calibration`.

    Raises:
        ValueError: a bad option (before the plan is written), an existing ``plan_out``, an empty item range;
            after the plan is written: a missing data file, a model that cannot load.
    """
    from ragcache.app.calibrate_settings import main as run_plan
    from ragcache.config import Config

    console = console or Console()
    if end <= start:
        raise ValueError(f"no items in [{start}, {end}): --end must be > --start")
    when = datetime.now(timezone.utc)
    plan = build_plan(ratios=ratios, selection=selection, chunk_context=chunk_context, variants=variants, seed=seed,
                      docs=docs, answer_tokens=answer_tokens, yardstick_every=yardstick_every, rule=rule,
                      note=f"ragcache calibrate --model {model or 'embedded'}: plan written "
                           f"{when.isoformat(timespec='seconds')} before the run.")
    home = home or Config.from_env().paths
    path = write_plan(plan, plan_out if plan_out else plan_path(home, when))
    console.print(f"plan written to {path} before the run ({len(plan.settings)} candidates, rule "
                  f"{plan.rule.to_dict()['name']}); to run it again: ragcache calibrate --plan {path}")
    if end > DEV_ITEMS:
        err_console().print(f"warning: items {DEV_ITEMS}-{end - 1} are past the development split (0-{DEV_ITEMS - 1}); "
                            "a calibration run on evaluation items makes them development items")
    return run_plan(plan=path, data=data, start=start, end=end, docs=docs, threads=threads, save=save, home=home,
                    json_path=json_path, model=model, console=console)


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
