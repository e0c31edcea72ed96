"""HKVD selection variants of CacheBlend, scored by teacher-forced fidelity (development split only).

For each MuSiQue item (same prompt as ``bench blend``: system text, top-6 passages, question)
the full-prefill greedy answer is forced through full prefill and through each blend variant
(:mod:`benchmarks.fidelity`); per variant the table gives mean KL(full || blend) over
the answer positions, top-1 agreement, first-token KL / agreement, greedy match length, and
the KL as a share of full reuse (r = 0) with the same chunk sink. Variants
(:func:`ragcache.engine.blend.blend_prefill` options and the chunk sink of
:class:`~ragcache.engine.chunk.cache.ChunkCache`):

- check layer (CacheBlend §4.2), K / V / KV deviation, gradual filtering (§4.3);
- always recomputing each document's first tokens (EPIC, arXiv 2410.15332) or last tokens
  (the tokens before each document boundary);
- chunks computed after BOS (default) or after the real system prefix (the prompt's tokens
  before the first document);
- query-aware rules ranked before layer 0 (:mod:`ragcache.engine.blend.selection`: ProphetKV-style
  attention, InfoFlow-style attention norm, fused over all or half the layers; InfoFlow's chunk
  reordering, scored against the canonical order's full prefill), random selection at the same r
  (seeds 0-2) and the oracle (tokens whose chunk KV differs most from the full prefill's, summed
  over all layers; it needs the full prefill, so it bounds what a per-token ranking of that kind can
  do rather than serving).

Per variant the summary adds its share of the full-reuse gap closed, on agreement
``(agree - agree_r0) / (1 - agree_r0)`` and on KL ``1 - KL / KL_r0``, and that share over the
mean share of the random seeds at the same r.

Tuning happens here, on items 0-49; never on the evaluation items 50-149 (``main`` refuses
them). Blend times are recorded but the study runs on a shared CPU: read them as indicative.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from ragcache.config import Config
from ragcache.atomic import atomic_write_json

DEV_END = 50  # items [0, 50) are the development split

# name -> (sink, recompute ratio, blend_prefill options); sink "bos" or "system"
V = {"deviation": "v"}  # the selection before the default became KV
VARIANTS: dict[str, tuple[str, float, dict[str, Any]]] = {
    "full reuse r=0 (bos sink)": ("bos", 0.0, {}),
    "full reuse r=0 (system sink)": ("system", 0.0, {}),
    "r=0.15 base (check 1, V)": ("bos", 0.15, V),
    "r=0.15 check 0": ("bos", 0.15, {**V, "check_layer": 0}),
    "r=0.15 check 2": ("bos", 0.15, {**V, "check_layer": 2}),
    "r=0.15 check 4": ("bos", 0.15, {**V, "check_layer": 4}),
    "r=0.15 dev K": ("bos", 0.15, {"deviation": "k"}),
    "r=0.15 dev KV": ("bos", 0.15, {"deviation": "kv"}),
    "r=0.15 gradual 2 (0.30->0.15)": ("bos", 0.15, {**V, "gradual_layers": 2}),
    "r=0.15 gradual 4 (0.30->0.15)": ("bos", 0.15, {**V, "gradual_layers": 4}),
    "r=0.15 heads 4 (EPIC)": ("bos", 0.15, {**V, "doc_head_tokens": 4}),
    "r=0.15 heads 16 (EPIC)": ("bos", 0.15, {**V, "doc_head_tokens": 16}),
    "r=0.15 tails 4": ("bos", 0.15, {**V, "doc_tail_tokens": 4}),
    "r=0.15 heads 4 + tails 4": ("bos", 0.15, {**V, "doc_head_tokens": 4, "doc_tail_tokens": 4}),
    "r=0.15 system sink": ("system", 0.15, V),
    "r=0.30 base": ("bos", 0.30, V),
    "r=0.15 system sink + dev KV": ("system", 0.15, {"deviation": "kv"}),
    "r=0.15 dev KV + gradual 4": ("bos", 0.15, {"deviation": "kv", "gradual_layers": 4}),
    "r=0.30 dev KV": ("bos", 0.30, {"deviation": "kv"}),
    "r=0.15 dev KV x question attention": ("bos", 0.15, {"deviation": "kv", "rank_by": "deviation*attention"}),
    "r=0.15 question attention": ("bos", 0.15, {"rank_by": "attention"}),
    "r=0.15 dev KV, check 4": ("bos", 0.15, {"deviation": "kv", "check_layer": 4}),
    "r=0.15 dev KV x question attention, check 4": ("bos", 0.15, {"deviation": "kv", "rank_by": "deviation*attention",
                                                                  "check_layer": 4}),
}
# issue 20: query-aware rules (ragcache.engine.blend.selection), random at the same r, and the oracle
for _r in (0.15, 0.30):
    VARIANTS.update({
        f"r={_r:.2f} CacheBlend (dev KV, check 1)": ("bos", _r, {}),
        f"r={_r:.2f} prophet (all layers)": ("bos", _r, {"rank_by": "prophet"}),
        f"r={_r:.2f} infoflow (all layers)": ("bos", _r, {"rank_by": "infoflow"}),
        **{f"r={_r:.2f} random seed {k}": ("bos", _r, {"rank_by": "random", "seed": k}) for k in range(3)},
        f"r={_r:.2f} oracle (full-prefill KV distance)": ("bos", _r, {"rank_by": "oracle"}),
    })
VARIANTS.update({
    "r=0.15 prophet (layers 0-14)": ("bos", 0.15, {"rank_by": "prophet", "query_layers": tuple(range(15))}),
    "r=0.15 prophet (layers 15-29)": ("bos", 0.15, {"rank_by": "prophet", "query_layers": tuple(range(15, 30))}),
    "r=0.15 infoflow (layers 15-29)": ("bos", 0.15, {"rank_by": "infoflow", "query_layers": tuple(range(15, 30))}),
    "r=0.15 prophet + heads 4": ("bos", 0.15, {"rank_by": "prophet", "doc_head_tokens": 4}),
    "r=0.15 infoflow reordered (InfoFlow chunk order)": ("bos", 0.15, {"rank_by": "infoflow", "reorder": True}),
})
ISSUE20 = ["full reuse r=0 (bos sink)"] + [k for k in VARIANTS if "CacheBlend (" in k or "prophet" in k
                                           or "infoflow" in k or "random seed" in k or "oracle" in k]


def _load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _load(machine_threads: int | None) -> dict:
    from benchmarks.blend import machine
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.chunk.stores import MemoryChunkStore
    from ragcache.models import load_embedder, load_model

    if machine_threads:
        torch.set_num_threads(machine_threads)
    loaded = load_model(home=Config.from_env().paths)  # the settings home, as the CLI
    return {"model": loaded.model, "tokenizer": loaded.tokenizer, "fingerprint": loaded.fingerprint.digest,
            "model_name": str(loaded.fingerprint), "embedder": load_embedder(), "machine": machine(),
            "bos_chunks": ChunkCache(MemoryChunkStore(max_bytes=2 << 30)),
            "eos": {int(t) for t in [loaded.tokenizer.eos_token_id] if t is not None}}


def greedy_answer_ids(ctx: dict, cache: Any, logits: torch.Tensor, n: int, max_new_tokens: int) -> list[int]:
    """Full-prefill greedy answer ids: up to ``max_new_tokens``, through EOS (kept) or the first newline."""
    from ragcache.engine import kv as kvb

    model, tok, eos = ctx["model"], ctx["tokenizer"], ctx["eos"]
    work = kvb.cache_from_tensors(model, *kvb.cache_tensors(cache), copy=False)
    out = [int(logits.argmax())]
    while len(out) < max_new_tokens and out[-1] not in eos and "\n" not in tok.decode(out).strip():
        out.append(int(kvb.forward(model, [out[-1]], work, start=n + len(out) - 1)[-1].argmax()))
    return out


def run_item(ctx: dict, item: dict, variants: dict[str, tuple[str, float, dict]], max_new_tokens: int = 32) -> dict:
    """Score every variant on one item; returns ``{"prompt_tokens", "answer", "variants": {name: metrics}}``."""
    from benchmarks.blend import rag_messages, retrieve_passages
    from benchmarks.fidelity import forced_logits, teacher_forced_fidelity
    from ragcache.engine import kv as kvb
    from ragcache.engine.blend.prefill import blend_prefill
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.prompt import render_messages
    from ragcache.engine.chunk.stores import MemoryChunkStore
    from ragcache.engine.blend.selection import chunk_order, oracle_scores

    model, tok, fp = ctx["model"], ctx["tokenizer"], ctx["fingerprint"]
    prompt = render_messages(tok, rag_messages(item["question"], retrieve_passages(ctx["embedder"], item)))
    ids = prompt.input_ids
    spans = [(s, e) for s, e, _ in prompt.document_spans()]
    p = spans[0][0]
    full = kvb.new_cache(model)
    full_logits = kvb.forward(model, ids, full, start=0)[-1]
    answer = greedy_answer_ids(ctx, full, full_logits, len(ids), max_new_tokens)
    full_forced = forced_logits(model, full, full_logits, len(ids), answer)
    prefix = kvb.new_cache(model)
    kvb.forward(model, ids[:p], prefix, start=0)
    prefix_kv = kvb.cache_tensors(prefix)
    caches = {"bos": ctx["bos_chunks"], "system": ChunkCache(MemoryChunkStore(max_bytes=1 << 30), sink_ids=ids[:p])}
    out: dict[str, dict] = {}
    docs = retrieve_passages(ctx["embedder"], item)
    for name, (sink, r, opts) in variants.items():
        kvs = [caches[sink].lookup_or_compute(model, fp, ids[s:e])[0] for s, e in spans]
        opts = dict(opts)
        if opts.get("rank_by") == "oracle":  # needs the full prefill: a bound, not a serving rule
            opts.update(rank_by="given", token_scores=oracle_scores(model, full, spans, kvs, len(ids)))
        t0 = time.perf_counter()
        use_ids, use_spans = ids, spans
        if opts.pop("reorder", False):  # InfoFlow chunk order: rank on the canonical prompt, reorder, blend again
            res = blend_prefill(model, ids, prefix_len=p, prefix_cache=kvb.cache_from_tensors(model, *prefix_kv),
                                doc_spans=spans, chunk_kvs=kvs, recompute_ratio=r, **opts)
            order = chunk_order(res.token_scores, spans)
            re = render_messages(tok, rag_messages(item["question"], [docs[i] for i in order]))
            use_ids, use_spans = re.input_ids, [(s, e) for s, e, _ in re.document_spans()]
            kvs = [kvs[i] for i in order]
            assert len(use_ids) == len(ids) and use_spans[0][0] == p, "reordered prompt must keep length and prefix"
        res = blend_prefill(model, use_ids, prefix_len=p, prefix_cache=kvb.cache_from_tensors(model, *prefix_kv),
                            doc_spans=use_spans, chunk_kvs=kvs, recompute_ratio=r, **opts)
        dt = time.perf_counter() - t0
        order_note = {"doc_order": order} if use_ids is not ids else {}
        f = teacher_forced_fidelity(model, full, full_logits, res.cache, res.last_logits, len(ids), answer,
                                    full_forced=full_forced)
        m = f.as_dict()
        m.pop("kl_per_position")
        out[name] = {**m, "blend_s": dt, "tokens_recomputed": res.tokens_recomputed, **order_note}
    return {"question": item["question"], "prompt_tokens": len(ids), "doc_tokens": sum(e - s for s, e in spans),
            "answer": tok.decode(answer), "answer_tokens": len(answer), "variants": out}


def summarize(rows: list[dict], variants: dict[str, tuple[str, float, dict]]) -> dict[str, dict]:
    """Per variant: item means of each metric, pooled (token-weighted) agreement, KL share of r=0 (same sink)."""
    out: dict[str, dict] = {}
    for name, (sink, r, opts) in variants.items():
        ms = [row["variants"][name] for row in rows if name in row["variants"]]
        if not ms:
            continue
        tokens = sum(m["answer_len"] for m in ms)
        out[name] = {"sink": sink, "recompute_ratio": r, "options": opts, "items": len(ms),
                     "mean_kl": statistics.fmean(m["mean_kl"] for m in ms),
                     "top1_agreement": statistics.fmean(m["top1_agreement"] for m in ms),
                     "top1_agreement_pooled": sum(m["top1_agreement"] * m["answer_len"] for m in ms) / tokens,
                     "first_token_kl": statistics.fmean(m["first_token_kl"] for m in ms),
                     "first_token_agreement": statistics.fmean(float(m["first_token_equal"]) for m in ms),
                     "greedy_match_len": statistics.fmean(m["greedy_match_len"] for m in ms),
                     "answer_len": statistics.fmean(m["answer_len"] for m in ms),
                     "blend_s": statistics.fmean(m["blend_s"] for m in ms),
                     "tokens_recomputed": statistics.fmean(m["tokens_recomputed"] for m in ms)}
    for name, s in out.items():  # KL share of full reuse with the same sink, over the items both ran on
        base = next((b for b, (sk, r, _) in variants.items() if r == 0.0 and sk == s["sink"] and b in out), None)
        pairs = [(row["variants"][name]["mean_kl"], row["variants"][base]["mean_kl"]) for row in rows
                 if base and name in row["variants"] and base in row["variants"]]
        den = sum(b for _, b in pairs)
        s["kl_share_of_r0"] = sum(a for a, _ in pairs) / den if den > 0 else None
        agree0 = [row["variants"][base]["top1_agreement"] for row in rows
                  if base and name in row["variants"] and base in row["variants"]]
        a0 = statistics.fmean(agree0) if agree0 else None
        # share of the full-reuse gap closed: 0 = no better than r = 0, 1 = full prefill
        s["gap_closed_agreement"] = (s["top1_agreement"] - a0) / (1.0 - a0) if a0 is not None and a0 < 1 else None
        s["gap_closed_kl"] = 1.0 - s["kl_share_of_r0"] if s["kl_share_of_r0"] is not None else None
        s["meets_target"] = bool(s["top1_agreement"] >= 0.95 and s["kl_share_of_r0"] is not None
                                 and s["kl_share_of_r0"] <= 0.5)
    _versus_random(out)
    return out


def _versus_random(out: dict[str, dict]) -> None:
    """Per variant: its gap share over the mean gap share of the random seeds at the same r (same sink)."""
    for s in out.values():
        rand = [o for o in out.values() if o["options"].get("rank_by") == "random" and o["sink"] == s["sink"]
                and o["recompute_ratio"] == s["recompute_ratio"]]
        for key in ("gap_closed_agreement", "gap_closed_kl"):
            vals = [o[key] for o in rand if o.get(key) is not None]
            r = statistics.fmean(vals) if vals else None
            s[f"random_{key}"] = r
            s[f"{key}_x_random"] = s[key] / r if r and s.get(key) is not None and r > 0 else None


def report(payload: dict | str, console: Console | None = None) -> None:
    """Print the per-variant table of a (possibly partial) run."""
    if isinstance(payload, str | os.PathLike):
        payload = json.loads(Path(payload).read_text())
    console = console or Console()
    a, b = payload["items"]
    table = Table(title=f"CacheBlend selection variants, MuSiQue dev items {a}-{b - 1} "
                        f"({len(payload['per_item'])} items); teacher-forced vs full prefill")
    for col in ("variant", "items", "mean KL", "KL / r=0", "top-1 agr", "pooled agr", "1st KL", "1st =", "greedy match",
                "recomputed", "blend s", "gap agr", "gap KL", "x rand agr", "x rand KL", "target"):
        table.add_column(col, justify="left" if col == "variant" else "right")
    for name, s in payload["summary"].items():
        share = "-" if s["kl_share_of_r0"] is None else f"{s['kl_share_of_r0']:.2f}"
        table.add_row(name, str(s["items"]), f"{s['mean_kl']:.4f}", share, f"{s['top1_agreement']:.3f}",
                      f"{s['top1_agreement_pooled']:.3f}", f"{s['first_token_kl']:.4f}",
                      f"{s['first_token_agreement']:.2f}", f"{s['greedy_match_len']:.1f}/{s['answer_len']:.1f}",
                      f"{s['tokens_recomputed']:.0f}", f"{s['blend_s']:.2f}", _fmt(s.get("gap_closed_agreement")),
                      _fmt(s.get("gap_closed_kl")), _fmt(s.get("gap_closed_agreement_x_random")),
                      _fmt(s.get("gap_closed_kl_x_random")), "met" if s["meets_target"] else "")
    console.print(table)
    console.print(f"load (1/5/15 min) at start {payload['load_start']}, at end {payload.get('load_end')}; "
                  f"{payload['machine']}")


def plot(payload: dict, path: str) -> None:
    """Bar chart of each variant's share of the full-reuse gap closed (agreement and KL); needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(k, s) for k, s in payload["summary"].items() if s["recompute_ratio"] > 0]
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) + 1.5))
    y = list(range(len(rows)))
    ax.barh([i - 0.2 for i in y], [s.get("gap_closed_agreement") or 0 for _, s in rows], height=0.4,
            label="gap closed, top-1 agreement")
    ax.barh([i + 0.2 for i in y], [s.get("gap_closed_kl") or 0 for _, s in rows], height=0.4,
            label="gap closed, mean KL")
    ax.set_yticks(y, [k for k, _ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="black", lw=0.8)
    a, b = payload["items"]
    ax.set_title(f"share of the full-reuse (r=0) gap to full prefill closed; dev items {a}-{b - 1}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main(data: str, start: int = 0, end: int = 8, json_path: str = "bench/results/blend_variants_dev.json",
         names: list[str] | None = None, threads: int = 1, resume: bool = False,
         console: Console | None = None) -> dict:
    """Run the variant study on development items ``[start, end)`` of ``data`` (musique_s.json).

    Writes the JSON after every item. ``names`` picks a subset of :data:`VARIANTS` (default all).
    ``resume=True`` keeps the items already in ``json_path`` when they end at ``start`` (a
    later run may score fewer variants; each variant's row says over how many items).

    Raises:
        FileNotFoundError: ``data`` missing (the message names the expected file).
        ValueError: a range reaching the evaluation items (>= 50), or an unknown variant name.
    """
    console = console or Console()
    if not 0 <= start < end <= DEV_END:
        raise ValueError(f"variant study runs on development items only: need 0 <= start < end <= {DEV_END}; "
                         f"got [{start}, {end})")
    variants = VARIANTS if not names else {n: VARIANTS[n] for n in names if n in VARIANTS}
    if names and len(variants) != len(names):
        raise ValueError(f"unknown variant(s) {sorted(set(names) - set(VARIANTS))}; known: {list(VARIANTS)}")
    path = Path(data).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the MuSiQue sample is expected at "
                                "/work/shared/data/musique_s.json (see the README there); pass --data PATH")
    items = json.loads(path.read_text())[start:end]
    ctx = _load(threads)
    payload: dict[str, Any] = {"benchmark": "cacheblend-selection-variants", "data": str(path), "items": [start, start],
                               "split": "development", "machine": ctx["machine"], "torch_threads": threads,
                               "model": ctx["model_name"], "chunk_dtype": "float16",
                               "load_start": _load_avg(),
                               "variants": {k: {"sink": v[0], "recompute_ratio": v[1], "options": v[2]}
                                            for k, v in variants.items()},
                               "summary": {}, "per_item": []}
    rows: list[dict] = []
    jpath = Path(json_path)
    if resume and jpath.is_file():
        old = json.loads(jpath.read_text())
        if old.get("data") != str(path) or old["items"][1] != start:
            raise ValueError(f"cannot resume {jpath}: it covers items {old['items']} of {old.get('data')}, "
                             f"not ending at {start}")
        rows = old["per_item"]
        variants = {**{k: VARIANTS[k] for k in old["variants"] if k in VARIANTS}, **variants}
        start = old["items"][0]
        payload.update(load_start=old["load_start"], variants={**old["variants"], **payload["variants"]})
        payload["resumed_with"] = {"variants": list(names or VARIANTS), "load_start": _load_avg()}
    for i, item in enumerate(items):
        t0 = time.perf_counter()
        rows.append(run_item(ctx, item, variants))
        payload.update(per_item=rows, items=[start, start + len(rows)], summary=summarize(rows, variants),
                       load_end=_load_avg())
        atomic_write_json(jpath, payload, indent=1)
        console.print(f"[{start + len(rows) - 1}] {rows[-1]['prompt_tokens']} tokens, answer {rows[-1]['answer']!r} "
                      f"({rows[-1]['answer_tokens']} tokens), {time.perf_counter() - t0:.0f}s")
    report(payload, console)
    from benchmarks.plotting import draw

    png = str(jpath.with_suffix(".png"))
    draw(lambda: plot(payload, png), png)
    return payload


if __name__ == "__main__":  # python -m benchmarks.blend_variants DATA [START END [NAME ...]]
    import sys

    a = sys.argv[1:]
    main(a[0], *(int(x) for x in a[1:3]), names=a[3:] or None)
