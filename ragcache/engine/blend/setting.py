"""A named blend setting (selection rule, budget, chunk context) and its calibration on real prompts.

A :class:`BlendSetting` is everything that decides what a blended prefill recomputes and which
chunk KV it reads: the query-aware rule and ratio of :func:`ragcache.engine.blend.blend_prefill`,
the leads of ragcache issue 31 (whole documents, a per-request budget with an exact-prefill
ceiling, a cheaper ranking pass over early layers) and the chunk context:

* ``chunk_context="sink"``: each document's KV is computed after the chunk cache's sink (BOS),
  CacheBlend's independent chunks (Yao et al., EuroSys 2025, arXiv 2405.16444, §5).
* ``chunk_context="prefix"``: computed after the request's *stable prefix* (every token before
  the first document: system text, tools, template head). In a RAG application that prefix is
  the same for every request, so the cached tokens get the attention context (sink, system
  text) they really have; only the other documents are missing. The chunk key hashes the prefix
  ids as the chunk's sink (:func:`ragcache.hashing.hash_chunk`), so a prefix-conditioned chunk
  is found only under the very same prefix, never under another one; a prompt with no token
  before its first document falls back to the BOS-sink chunk. (After the "prefix caching +
  chunk" layouts of CacheBlend §5 and EPIC, Hu et al., arXiv 2410.15332, §3, which place the
  shared system prompt before every cached chunk.)

:func:`calibrate_settings` measures the candidate settings of a :class:`SettingsPlan` against full
prefill (teacher-forced flips by the full prefill's margin, free-running answers against gold answers,
CPU time) and licenses the fastest one the plan's license rule passes
(:mod:`ragcache.engine.blend.license`); the :class:`~ragcache.engine.blend.calibration.Calibration`
record names it (``setting``) and carries the rule. :func:`candidate_settings` builds the usual
candidates (one per recompute ratio), as ``ragcache calibrate`` and ``LocalEngine.calibrate`` do.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

# torch and the KV boundary are imported where KV is computed: naming a setting (a stored blended
# answer's check on a semantic hit, :func:`licensed_setting`) imports no torch.

if TYPE_CHECKING:
    from ragcache.engine.interface import EngineView

CHUNK_CONTEXTS = ("sink", "prefix")


@dataclass(frozen=True, slots=True)
class BlendSetting:
    """What a blended prefill recomputes and which chunk KV it reads.

    Attributes:
        recompute_ratio: r in [0, 1] (the floor of the budget when ``mass_bound`` is set).
        rank_by: the KV selection rule's name (:data:`ragcache.engine.blend.rules.SELECTION_RULES`, a
            serving one; a rule ranking before layer 0 for the options below).
        chunk_context: ``"sink"`` or ``"prefix"`` (module doc).
        doc_top: whole documents recomputed (0: token selection only).
        mass_bound: per-request budget: recompute until the ranking's score mass left on reused
            tokens is <= this (``None``: the fixed ratio).
        max_share: past this share of document tokens, exact prefill (``None``: no ceiling).
        query_layers: the layers the ranking pass fuses (``None``: all; ``(0, ..., l)`` stops
            the pass after layer l).
        name: a label for tables and records (default: built from the fields).

    Raises:
        ValueError: a value out of range, naming the field.
    """

    recompute_ratio: float = 0.15
    rank_by: str = "infoflow"
    chunk_context: str = "sink"
    doc_top: int = 0
    mass_bound: float | None = None
    max_share: float | None = None
    query_layers: tuple[int, ...] | None = None
    name: str = ""

    def __post_init__(self) -> None:
        from ragcache.engine.blend.rules import check_serving_rule

        if not 0.0 <= self.recompute_ratio <= 1.0:
            raise ValueError(f"recompute_ratio must be in [0, 1]; got {self.recompute_ratio}")
        check_serving_rule(self.rank_by)
        if self.chunk_context not in CHUNK_CONTEXTS:
            raise ValueError(f"chunk_context must be one of {CHUNK_CONTEXTS}; got {self.chunk_context!r}")
        if isinstance(self.doc_top, bool) or not isinstance(self.doc_top, int) or self.doc_top < 0:
            raise ValueError(f"doc_top must be an integer >= 0; got {self.doc_top!r}")
        if self.mass_bound is not None and not 0.0 <= self.mass_bound < 1.0:
            raise ValueError(f"mass_bound must be in [0, 1); got {self.mass_bound}")
        if self.max_share is not None and not 0.0 <= self.max_share <= 1.0:
            raise ValueError(f"max_share must be in [0, 1]; got {self.max_share}")
        if self.query_layers is not None:
            object.__setattr__(self, "query_layers", tuple(int(i) for i in self.query_layers))
        if not self.name:
            object.__setattr__(self, "name", self.label())

    def label(self) -> str:
        """A short readable description, e.g. ``"infoflow r=0.15 doc_top=1 prefix-conditioned"``."""
        parts = [f"{self.rank_by} r={self.recompute_ratio:g}"]
        if self.doc_top:
            parts.append(f"doc_top={self.doc_top}")
        if self.mass_bound is not None:
            parts.append(f"mass<={self.mass_bound:g}")
        if self.max_share is not None:
            parts.append(f"ceiling={self.max_share:g}")
        if self.query_layers is not None:
            parts.append(f"rank layers {min(self.query_layers)}-{max(self.query_layers)}")
        if self.chunk_context == "prefix":
            parts.append("prefix-conditioned")
        return " ".join(parts)

    def blend_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`ragcache.engine.blend.blend_prefill` for this setting."""
        return {"recompute_ratio": self.recompute_ratio, "rank_by": self.rank_by, "doc_top": self.doc_top,
                "mass_bound": self.mass_bound, "max_share": self.max_share, "query_layers": self.query_layers}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["query_layers"] = None if self.query_layers is None else list(self.query_layers)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BlendSetting:
        """From :meth:`to_dict` output (unknown keys ignored).

        Raises:
            TypeError: ``d`` is not a dict. ValueError: as the constructor.
        """
        if not isinstance(d, dict):
            raise TypeError(f"a blend setting is a dict of BlendSetting fields; got {type(d).__name__}")
        return cls(**{k: (tuple(v) if k == "query_layers" and v is not None else v)
                      for k, v in d.items() if k in cls.__dataclass_fields__})


def licensed_setting(cal: Any) -> BlendSetting | None:
    """The :class:`BlendSetting` a :class:`~ragcache.engine.blend.calibration.Calibration` record licenses
    (``None`` when blending is not allowed); a record without ``setting`` (written before settings
    existed) licenses its ``rank_by`` at ``recompute_ratio`` with sink-context chunks."""
    if cal is None or not cal.blend_allowed or cal.recompute_ratio is None:
        return None
    if cal.setting:
        return BlendSetting.from_dict(cal.setting)
    return BlendSetting(recompute_ratio=cal.recompute_ratio, rank_by=cal.rank_by)


def stable_prefix_len(doc_spans: Sequence[tuple[int, int]]) -> int:
    """Tokens before the first document (the stable prefix a prefix-conditioned chunk is computed after)."""
    return min((s for s, _ in doc_spans), default=0)


def context_view(bound: Any, ids: Sequence[int], doc_spans: Sequence[tuple[int, int]], chunk_context: str) -> Any:
    """The bound chunk cache whose chunks a request with these ``ids`` reads under ``chunk_context``.

    ``"sink"`` (or a prompt whose first document is its first token): ``bound`` itself. ``"prefix"``:
    a view of the same store whose sink is the request's stable prefix ``ids[:first document]``;
    every key it makes hashes those ids (:meth:`BoundChunkCache.key
    <ragcache.engine.chunk.BoundChunkCache.key>`), and a hit is re-checked against ``kv.start ==
    len(prefix)``, so its chunks are never served under another prefix.
    """
    if chunk_context not in CHUNK_CONTEXTS:
        raise ValueError(f"chunk_context must be one of {CHUNK_CONTEXTS}; got {chunk_context!r}")
    p = stable_prefix_len(doc_spans)
    if chunk_context == "sink" or p == 0:
        return bound
    view = copy.copy(bound)
    view.sink = [int(t) for t in ids[:p]]
    return view


def compute_after(view: Any, sink_tensors: tuple | None, doc_ids: Sequence[int]) -> Any:
    """The chunk KV of ``doc_ids`` after ``view``'s sink, reusing that sink's KV when given.

    ``sink_tensors``: the ``(keys, values)`` per layer of ``view.sink`` (e.g. the stable prefix,
    already in the prefix cache), so only the document's tokens are computed; ``None``: the
    view computes sink and document from position 0. Same KV either way (exact prefix KV).
    """
    if sink_tensors is None:
        return view.compute(doc_ids)
    import torch

    from ragcache.engine import kv

    model = view.model
    cache = kv.cache_from_tensors(model, *sink_tensors)
    n0 = len(view.sink)
    kv.forward(model, [int(t) for t in doc_ids], cache, n0)
    keys, values = kv.cache_tensors(cache)
    k = torch.stack([layer[0, :, n0:, :] for layer in keys]).cpu()
    v = torch.stack([layer[0, :, n0:, :] for layer in values]).cpu()
    return view.encode(doc_ids, k, v)


def _prefix_cache(model: Any, ids: Sequence[int], p: int) -> Any:
    from ragcache.engine import kv

    cache = kv.new_cache(model)
    if p:
        kv.forward(model, list(ids[:p]), cache, 0)
    return cache


def _inference_mode(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.inference_mode()`` around ``fn``, with torch imported at the call, not at this module's import."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        import torch

        with torch.inference_mode():
            return fn(*args, **kwargs)

    return run


@_inference_mode
def measure_settings(engine: EngineView, prompts: Sequence[Any], settings: Sequence[BlendSetting], *,
                     answer_tokens: int = 32, progress: Callable[[str], None] | None = None,
                     checkpoint: Callable[[list[dict]], None] | None = None, first_index: int = 0,
                     token_detail: bool = False, golds: Sequence[Sequence[str]] | None = None,
                     yardstick_every: int = 0) -> list[dict]:
    """Teacher-forced fidelity, recomputed share and CPU time of each setting on each prompt.

    For each prompt: a full prefill (CPU seconds timed) gives the reference greedy answer (up to
    ``answer_tokens``, stopping at EOS); the stable prefix's KV is computed once (untimed, as a
    prefix-cache hit would serve it) and every document's chunk KV in each context the settings
    use (untimed, as a chunk-cache hit would serve it); then each setting's blend is timed (CPU
    seconds, ranking pass included) and its forced logits compared with the reference.

    ``checkpoint`` is called with the results so far after every prompt (a long run keeps what it
    measured); ``first_index`` numbers the prompts (e.g. the first data item). ``token_detail``
    adds, per prompt, ``ref_margin`` (the full prefill's top-1 minus top-2 logit at each answer
    position; a small margin is a near tie that any change to the KV can flip) and ``mismatch`` (the
    answer positions where the setting's top-1 differs from the reference token).

    Returns:
        One dict per setting: ``{"setting", "per_prompt": [{"prompt", "prompt_tokens",
        "doc_tokens", "answer_tokens", "top1_agreement", "mean_kl", "share", "exact", "cpu_s",
        "full_cpu_s"}]}``; ``share`` counts an exact fallback as 1.

    Raises:
        ValueError: a prompt without documents, or ``golds`` not one list per prompt.

    Why one function: one loop over prompts, whose per-prompt reference (answer, margins, stable prefix and
    chunk KV in each context) every setting's measurement reads; the per-setting steps are apart
    (:func:`_free_run`, :func:`_precision_flips`).
    """
    import torch

    from ragcache.engine import kv
    from ragcache.engine.blend.calibration import (
        fidelity,
        reference_answer,
        teacher_forced_logits,
    )
    from ragcache.engine.blend.license import best_f1
    from ragcache.engine.blend.prefill import blend_prefill
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.decode import eos_ids

    model, say = engine.model, progress or (lambda _m: None)
    if golds is not None and len(golds) != len(prompts):
        raise ValueError(f"golds has {len(golds)} entries for {len(prompts)} prompts: one list of gold answers each")
    token_detail = token_detail or golds is not None
    eos = eos_ids(model, engine.tokenizer)
    low = copy.deepcopy(model).to(torch.bfloat16) if yardstick_every else None
    cc = engine.chunk_cache if engine.chunk_cache is not None else ChunkCache()
    bound = cc.bind(model, engine.fingerprint, engine.kv_salt(None))
    out = [{"setting": s.to_dict(), "per_prompt": []} for s in settings]
    for i, source in enumerate(prompts):
        prompt = engine.build_prompt(source)
        ids = prompt.input_ids
        n = len(ids)
        spans = [(s, e) for s, e, _ in prompt.document_spans()]
        if not spans:
            raise ValueError(f"prompt {i} has no document piece: the blend needs RAG prompts with documents")
        answer, reference, full_cpu, _ = reference_answer(engine, ids, answer_tokens)
        if token_detail:
            top2 = reference.float().topk(2, dim=-1).values
            margins = [round(float(m), 4) for m in (top2[:, 0] - top2[:, 1])]
        extra: dict[str, Any] = {}
        if golds is not None:
            ref_text = engine.tokenizer.decode(answer, skip_special_tokens=True)
            extra = {"ref_text": ref_text, "ref_f1": best_f1(ref_text, golds[i]), "golds": list(golds[i])}
        if low is not None and i % yardstick_every == 0:
            extra["bf16_mismatch"] = _precision_flips(low, ids, answer)
        p = stable_prefix_len(spans)
        prefix_tensors = kv.cache_tensors(_prefix_cache(model, ids, p)) if p else None
        chunks: dict[str, list] = {}
        for ctx in sorted({s.chunk_context for s in settings}):
            view = context_view(bound, ids, spans, ctx)
            chunks[ctx] = [view.lookup(ids[s:e]) or compute_after(view, prefix_tensors if view is not bound else None,
                                                                   ids[s:e]) for s, e in spans]
        n_doc = sum(e - s for s, e in spans)
        for j, setting in enumerate(settings):
            c0 = time.process_time()
            pc = kv.cache_from_tensors(model, *prefix_tensors) if p else None
            res = blend_prefill(model, ids, prefix_len=p, prefix_cache=pc, doc_spans=spans,
                                chunk_kvs=chunks[setting.chunk_context], **setting.blend_kwargs())
            cpu = time.process_time() - c0
            blended = teacher_forced_logits(model, res.cache, res.last_logits, answer, n)
            agree, kl = fidelity(reference, blended, answer)
            share = 1.0 if res.exact else res.tokens_recomputed / max(n_doc, 1)
            free = {} if golds is None else _free_run(engine, res, answer, n, answer_tokens, eos, golds[i])
            row = {"prompt": first_index + i, "prompt_tokens": n, "doc_tokens": n_doc, "answer_tokens": len(answer),
                   "top1_agreement": agree, "mean_kl": kl, "share": share, "exact": bool(res.exact), "cpu_s": cpu,
                   "full_cpu_s": full_cpu}
            if token_detail:
                got = blended.argmax(-1).tolist()
                row |= {"ref_margin": margins, "mismatch": [t for t, a in enumerate(answer) if int(got[t]) != int(a)]}
            row |= extra | free
            out[j]["per_prompt"].append(row)
            say(f"prompt {first_index + i} ({n} tokens) {setting.name}: agreement {agree:.3f}, KL {kl:.4f}, share {share:.3f}, "
                f"CPU {cpu:.2f}s vs full {full_cpu:.2f}s")
        if checkpoint is not None:
            checkpoint(out)
    return out


def _precision_flips(low: Any, ids: Sequence[int], answer: Sequence[int]) -> list[int]:
    """Answer positions where ``low`` (a bfloat16 copy of the model), teacher-forced along ``answer`` after a
    full prefill of ``ids``, picks another top-1 token (the yardstick of :func:`measure_settings`)."""
    from ragcache.engine import kv
    from ragcache.engine.blend.calibration import teacher_forced_logits

    cache = kv.new_cache(low)
    first = kv.forward(low, list(ids), cache, 0)[-1]
    logits = teacher_forced_logits(low, cache, first, answer, len(ids))
    return [t for t, a in enumerate(answer) if int(logits[t].argmax()) != int(a)]


def _free_run(engine: EngineView, res: Any, answer: list[int], n: int, answer_tokens: int, eos: set[int],
              golds: Sequence[str]) -> dict[str, Any]:
    """The blend's own greedy answer from its cache cut back to the prompt (``res.cache`` holds the forced
    ``answer[:-1]`` after the ``n`` prompt tokens): ``{"answer_text", "f1", "answer_match"}``."""
    from ragcache.engine.blend.calibration import greedy_answer
    from ragcache.engine.blend.license import best_f1

    if len(answer) > 1:
        res.cache.crop(-(len(answer) - 1))  # drop the forced answer's KV (transformers: negative = remove)
    own, _ = greedy_answer(engine.model, res.cache, res.last_logits, n, answer_tokens, eos)
    text = engine.tokenizer.decode(own, skip_special_tokens=True)
    return {"answer_text": text, "f1": best_f1(text, golds), "answer_match": own == answer}


def setting_row(measured: dict, confidence: float) -> dict:
    """Pooled agreement, its Wilson lower bound, mean KL, mean share and median CPU speed-up of one setting."""
    import statistics

    from ragcache.engine.blend.calibration import agreement_lower_bound

    pp = measured["per_prompt"]
    tokens = sum(x["answer_tokens"] for x in pp)
    pooled = sum(x["top1_agreement"] * x["answer_tokens"] for x in pp) / tokens if tokens else 0.0
    return {"setting": measured["setting"], "name": measured["setting"]["name"], "prompts": len(pp),
            "answer_tokens": tokens, "pooled_top1_agreement": pooled,
            "agreement_lower_bound": agreement_lower_bound(pooled, tokens, confidence),
            "mean_kl": statistics.fmean(x["mean_kl"] for x in pp) if pp else 0.0,
            "mean_share": statistics.fmean(x["share"] for x in pp) if pp else 0.0,
            "exact_fallbacks": sum(x["exact"] for x in pp),
            "median_cpu_speedup": statistics.median(x["full_cpu_s"] / x["cpu_s"] for x in pp) if pp else 0.0,
            "per_prompt": pp}


def choose_setting(rows: Sequence[dict], min_agreement: float, max_mean_share: float) -> dict | None:
    """The licensed row: lower bound >= ``min_agreement`` and mean share <= ``max_mean_share``; among
    those the smallest mean share, then the largest median CPU speed-up. ``None`` when none qualifies."""
    ok = [r for r in rows if r["agreement_lower_bound"] >= min_agreement and r["mean_share"] <= max_mean_share]
    return min(ok, key=lambda r: (round(r["mean_share"], 6), -r["median_cpu_speedup"])) if ok else None


@dataclass(slots=True)
class SettingsPlan:
    """What a settings calibration measures and how it decides (written down before it runs).

    Attributes:
        settings: the candidates (``k = len(settings)`` is the license rule's Bonferroni divisor).
        rule: the license rule (:class:`~ragcache.engine.blend.license.LicenseRule`); ``None`` only for plans
            written under the retired pooled-agreement rule, whose records license nothing.
        prompts: the calibration prompt procedure (:func:`ragcache.app.calibrate.calibration_variants`
            arguments: ``variants``, ``seed``, ``docs``); empty: the items' first passages, one prompt each.
        yardstick_every: run the bfloat16 full-prefill yardstick on every e-th prompt (0: never).
        min_agreement / confidence / max_mean_share: the retired rule's thresholds (read, never applied).
    """

    settings: list[BlendSetting]
    min_agreement: float = 0.95
    confidence: float = 0.95
    max_mean_share: float = 0.30
    answer_tokens: int = 32
    note: str = ""
    extra: dict = field(default_factory=dict)
    rule: Any = None
    prompts: dict = field(default_factory=dict)
    yardstick_every: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The plan as the JSON object :func:`ragcache.app.calibrate_settings.read_plan` reads back to an equal
        plan (``note``, ``answer_tokens``, ``yardstick_every``, ``prompts``, ``rule``, ``settings``; the retired
        rule's thresholds only for a plan without the rule)."""
        d: dict[str, Any] = {"note": self.note, "answer_tokens": self.answer_tokens,
                             "yardstick_every": self.yardstick_every}
        if self.prompts:
            d["prompts"] = dict(self.prompts)
        if self.rule is not None:
            d["rule"] = self.rule.to_dict()
        else:
            d |= {"min_agreement": self.min_agreement, "confidence": self.confidence,
                  "max_mean_share": self.max_mean_share}
        d["settings"] = [s.to_dict() for s in self.settings]
        return d


DEFAULT_CANDIDATE_RATIOS = (0.15, 0.20, 0.30)
"""The recompute ratios ``ragcache calibrate`` and :meth:`LocalEngine.calibrate
<ragcache.engine.engine.LocalEngine.calibrate>` try when given none (three candidates: each one more
tightens every candidate's Bonferroni bound)."""


def candidate_settings(ratios: Sequence[float] = DEFAULT_CANDIDATE_RATIOS, *, rank_by: str = "infoflow",
                       chunk_context: str = "prefix") -> list[BlendSetting]:
    """One :class:`BlendSetting` per recompute ratio, with one selection rule and chunk context (default:
    query-aware ``infoflow`` selection over chunks computed after the request's stable prefix).

    Raises:
        ValueError: no ratio, a ratio that is not a number in [0, 1] or given twice, or a bad rule / context.
    """
    try:
        rs = [float(r) for r in ratios]
    except (TypeError, ValueError):
        raise ValueError(f"ratios must be numbers in [0, 1]; got {list(ratios)!r}") from None
    if not rs:
        raise ValueError("at least one recompute ratio is needed")
    if len(set(rs)) != len(rs):
        raise ValueError(f"ratios must differ; got {rs}")
    return [BlendSetting(recompute_ratio=r, rank_by=rank_by, chunk_context=chunk_context) for r in sorted(rs)]


def calibrate_settings(engine: EngineView, prompts: Sequence[Any], plan: SettingsPlan, *, save: bool = True,
                       home: Any = None, progress: Callable[[str], None] | None = None,
                       checkpoint: Callable[[list[dict]], None] | None = None, first_index: int = 0,
                       golds: Sequence[Sequence[str]] | None = None) -> Any:
    """Measure ``plan.settings`` on ``prompts`` and record the setting the plan's license rule licenses.

    ``golds``: each prompt's gold answers (the license rule scores free-running answers; required
    when ``plan.rule`` is set).

    Returns a :class:`~ragcache.engine.blend.calibration.Calibration` whose ``setting`` is the licensed
    :class:`BlendSetting` as a dict (``None`` and ``blend_allowed=False`` when none qualifies),
    ``settings`` the table of every candidate (:func:`setting_row`), ``recompute_ratio`` /
    ``rank_by`` the licensed setting's.

    Raises:
        ValueError: no prompts or no settings, a prompt without documents, a bad ``confidence``.
    """

    from ragcache.engine.blend.calibration import (
        check_confidence,
    )

    if not prompts or not plan.settings:
        raise ValueError("calibrate_settings needs at least one prompt with documents and one setting")
    check_confidence(plan.confidence)
    if plan.rule is not None and golds is None:
        raise ValueError("the license rule scores free-running answers: pass golds (one list of gold answers per prompt)")
    with engine.lock:
        measured = measure_settings(engine, prompts, plan.settings, answer_tokens=plan.answer_tokens,
                                    progress=progress, checkpoint=checkpoint, first_index=first_index, golds=golds,
                                    yardstick_every=plan.yardstick_every)
    return record_settings(engine, measured, plan, n_prompts=len(prompts), save=save, home=home)


def record_settings(engine: EngineView, measured: Sequence[dict], plan: SettingsPlan, *, n_prompts: int, save: bool = True,
                    home: Any = None) -> Any:
    """The :class:`~ragcache.engine.blend.calibration.Calibration` of measured settings (:func:`measure_settings`
    output, possibly merged from several runs over disjoint prompts), saved when ``save``."""
    from datetime import datetime, timezone

    from ragcache.engine.blend.calibration import (
        Calibration,
        record_digest,
        save_calibration,
    )
    from ragcache.engine.chunk.cache import ChunkCache

    from ragcache.engine.blend.license import choose, judge

    rows = [setting_row(m, plan.confidence) for m in measured]
    if plan.rule is not None:
        for row in rows:
            row["license"] = judge(row, plan.rule, k=len(rows))
        chosen = choose(rows)
    else:  # a plan of the retired rule: measured and reported, licenses nothing
        chosen = None
    cc = engine.chunk_cache if engine.chunk_cache is not None else ChunkCache()
    setting = None if chosen is None else chosen["setting"]
    cal = Calibration(
        fingerprint=record_digest(engine.fingerprint), model=str(engine.fingerprint),
        recompute_ratio=None if setting is None else setting["recompute_ratio"], blend_allowed=setting is not None,
        min_agreement=plan.min_agreement, max_ratio=plan.max_mean_share, ratios=[], prompts=n_prompts,
        answer_tokens=plan.answer_tokens, chunk_dtype=str(cc.dtype).replace("torch.", ""),
        sink_ids=cc.sink_for(engine.model), check_layer=engine.reuse_policy.check_layer,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"), confidence=plan.confidence,
        rank_by=setting["rank_by"] if setting else "infoflow", setting=setting, settings=rows,
        max_mean_share=plan.max_mean_share, note=plan.note,
        rule=None if plan.rule is None else plan.rule.to_dict(), yardstick=precision_yardstick(rows))
    if save:
        save_calibration(cal, home)
    return cal


def precision_yardstick(rows: Sequence[dict], decisive_margin: float = 1.0) -> dict | None:
    """The bfloat16-vs-float32 full-prefill flip rates over the prompts that ran the yardstick.

    Returns ``{"prompts", "tokens", "flips", "flip_rate", "decisive_tokens", "decisive_flips",
    "decisive_flip_rate"}`` (teacher-forced along the float32 answer), or ``None`` when none ran it.
    """
    pp = [p for p in (rows[0]["per_prompt"] if rows else []) if "bf16_mismatch" in p]
    if not pp:
        return None
    tokens = sum(p["answer_tokens"] for p in pp)
    flips = sum(len(p["bf16_mismatch"]) for p in pp)
    dec = sum(sum(1 for m in p["ref_margin"] if m >= decisive_margin) for p in pp)
    dflips = sum(sum(1 for t in p["bf16_mismatch"] if p["ref_margin"][t] >= decisive_margin) for p in pp)
    return {"prompts": len(pp), "tokens": tokens, "flips": flips, "flip_rate": flips / max(tokens, 1),
            "decisive_tokens": dec, "decisive_flips": dflips, "decisive_flip_rate": dflips / max(dec, 1)}


__all__ = ["CHUNK_CONTEXTS", "DEFAULT_CANDIDATE_RATIOS", "BlendSetting", "SettingsPlan", "calibrate_settings",
           "candidate_settings", "choose_setting", "compute_after",
           "context_view",
           "licensed_setting", "measure_settings", "precision_yardstick", "setting_row", "stable_prefix_len"]
