"""A peer side by side: kvboost's chunk KV reuse against ragcache's chunk cache on the same MuSiQue items.

kvboost (PyPI ``kvboost``, MIT; "a practical KV-cache toolkit for Hugging Face causal LMs":
content-addressed chunk KV reuse with CacheBlend-style recompute) is what a transformers user
would reach for instead. It is optional: ``pip install 'ragcache[bench]'`` installs it (with
``--no-deps`` semantics not needed: its dependencies are torch / transformers / accelerate).

Per item, same prompt, same model weights (a second copy of the embedded model, float32), same
threads, methods back to back:

1. both caches are warmed with the prompt in canonical order (not timed);
2. the same documents come back **in another order** (reversed): full prefill of that prompt,
   ragcache (chunk cache hits re-rotated, ``rank_by`` rule at r) and kvboost
   (``recompute_strategy="cacheblend"`` at the same r) are timed (CPU seconds of the whole call:
   kvboost's own ``ttft_ms`` starts after its assembly and recompute, so it is not used);
3. kvboost again **in the same order** (its best case).

Fidelity is teacher-forced against the full prefill of exactly the ids each method saw
(:mod:`benchmarks.fidelity`): kvboost re-encodes the prompt text itself, so its
reference is the full prefill of its own ids. ``reused`` is kvboost's ``cached_tokens`` /
``kv_reuse_ratio``: what it says it served from cache. ``last_forward_cache_tokens`` is the length of
the cache the model's last forward in the call returned (a forward hook): when it is shorter than the
prompt (kvboost ran that prompt in pieces, e.g. with nothing reused) the hook's cache cannot be
teacher-forced, so only first-token KL / agreement are scored for that row.
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


def _kvboost_engine(model: Any, tokenizer: Any, ratio: float) -> Any:
    try:
        from kvboost.engine import InferenceEngine
    except ImportError as e:  # optional peer
        raise ImportError("the peer comparison needs kvboost: pip install 'ragcache[bench]' (or pip install kvboost)"
                          ) from e
    return InferenceEngine(model, tokenizer, max_cache_bytes=2 << 30, recompute_strategy="cacheblend",
                           recompute_ratio=ratio, device="cpu")


def _timed(fn: Any) -> tuple[Any, float]:
    t = time.process_time()
    out = fn()
    return out, time.process_time() - t


def _reference(model: Any, ids: list[int], ctx: dict) -> dict:
    from benchmarks.blend_variants import greedy_answer_ids
    from benchmarks.fidelity import forced_logits
    from ragcache.engine import kv as kvb

    cache = kvb.new_cache(model)
    (logits, cpu) = _timed(lambda: kvb.forward(model, ids, cache, start=0)[-1])
    answer = greedy_answer_ids(ctx, cache, logits, len(ids), 32)
    return {"cache": cache, "logits": logits, "answer": answer, "cpu_s": cpu,
            "rows": forced_logits(model, cache, logits, len(ids), answer)}


def _fid(model: Any, ref: dict, cache: Any, logits: torch.Tensor, n: int) -> dict:
    from benchmarks.fidelity import teacher_forced_fidelity

    f = teacher_forced_fidelity(model, ref["cache"], ref["logits"], cache, logits, n, ref["answer"],
                                full_forced=ref["rows"])
    return {"tf_top1_agreement": f.top1_agreement, "tf_mean_kl": f.mean_kl, "answer_tokens": f.answer_len,
            "first_token_kl": f.first_token_kl, "first_token_equal": bool(f.first_token_equal)}


def _kvboost_call(eng: Any, peer_model: Any, text: str) -> dict:
    """One kvboost ``generate`` (1 new token) timed whole; the prompt cache captured from its last forward."""
    seen: dict[str, Any] = {}
    hook = peer_model.register_forward_hook(lambda _m, _a, out: seen.update(cache=out.past_key_values))
    try:
        res, cpu = _timed(lambda: eng.generate(text, max_new_tokens=1))
    finally:
        hook.remove()
    return {"res": res, "cpu_s": cpu, "cache": seen.get("cache"),
            "logits": torch.as_tensor(res.first_token_logits).float()}


def run_item(ctx: dict, item: dict, ratio: float, rule: str) -> dict:
    """Warm both caches with the canonical order, then time and score the reversed order (and kvboost's same order)."""
    from benchmarks.blend import rag_messages, retrieve_passages, kl_divergence
    from ragcache.engine import kv as kvb
    from ragcache.engine.blend.prefill import blend_prefill
    from ragcache.engine.prompt import render_messages

    model, peer, tok, eng = ctx["model"], ctx["peer_model"], ctx["tokenizer"], ctx["kvboost"]
    docs = retrieve_passages(ctx["embedder"], item)
    canon = render_messages(tok, rag_messages(item["question"], docs))
    other = render_messages(tok, rag_messages(item["question"], docs[::-1]))
    row: dict[str, Any] = {"question": item["question"], "prompt_tokens": len(canon.input_ids)}
    # warm (not timed): ragcache's chunk cache and prefix, kvboost's chunk store
    for _, _, piece in canon.document_spans():
        ctx["chunks"].lookup_or_compute(model, ctx["fingerprint"], piece.ids)
    ids = other.input_ids
    spans = [(s, e) for s, e, _ in other.document_spans()]
    p = spans[0][0]
    pre = kvb.new_cache(model)
    kvb.forward(model, ids[:p], pre, start=0)
    pre_t = kvb.cache_tensors(pre)
    canon_text, other_text = tok.decode(canon.input_ids), tok.decode(ids)
    eng.warm(canon_text)
    eng.generate(canon_text, max_new_tokens=1)
    ref = _reference(model, ids, ctx)
    row["full prefill (other order)"] = {"cpu_s": ref["cpu_s"], "reused_tokens": 0}

    def ours() -> Any:
        kvs = [ctx["chunks"].lookup_or_compute(model, ctx["fingerprint"], ids[s:e])[0] for s, e in spans]
        return blend_prefill(model, ids, prefix_len=p, prefix_cache=kvb.cache_from_tensors(model, *pre_t),
                             doc_spans=spans, chunk_kvs=kvs, recompute_ratio=ratio, rank_by=rule)

    res, cpu = _timed(ours)
    row[f"ragcache {rule} r={ratio:.2f} (other order)"] = {
        "cpu_s": cpu, "reused_tokens": res.prefix_tokens_reused + res.chunk_tokens_reused,
        **_fid(model, ref, res.cache, res.last_logits, len(ids))}
    for label, text in (("other order", other_text), ("same order", canon_text)):
        k_ids = eng._encode(text)
        k_ref = ref if list(k_ids) == list(ids) else _reference(model, list(k_ids), ctx)
        call = _kvboost_call(eng, peer, text)
        r = call["res"]
        seen = kvb.cache_len(call["cache"]) if call["cache"] is not None else 0
        if seen == len(k_ids):
            fid = _fid(model, k_ref, call["cache"], call["logits"], len(k_ids))
        else:  # the hook's cache is not the whole prompt's: first-token metrics only
            fid = {"first_token_kl": kl_divergence(k_ref["logits"], call["logits"]),
                   "first_token_equal": int(call["logits"].argmax()) == int(k_ref["logits"].argmax())}
        row[f"kvboost cacheblend r={ratio:.2f} ({label})"] = {
            "cpu_s": call["cpu_s"], "reused_tokens": int(r.cached_tokens), "kv_reuse_ratio": float(r.kv_reuse_ratio),
            "kvboost_ttft_ms": float(r.ttft_ms), "full_prefill_cpu_s": k_ref["cpu_s"], "last_forward_cache_tokens": seen,
            "same_ids_as_ragcache": list(k_ids) == list(ids if label == "other order" else canon.input_ids), **fid}
    return row


def summarize(rows: list[dict]) -> dict[str, dict]:
    names = [k for k in rows[0] if isinstance(rows[0][k], dict)] if rows else []
    out = {}
    for name in names:
        ms = [r[name] for r in rows]
        full = [r["full prefill (other order)"]["cpu_s"] for r in rows]
        own_full = [m.get("full_prefill_cpu_s", f) for m, f in zip(ms, full)]
        out[name] = {"items": len(ms), "mean_cpu_s": statistics.fmean(m["cpu_s"] for m in ms),
                     "median_item_cpu_speedup": statistics.median(f / m["cpu_s"] for m, f in zip(ms, own_full)),
                     "mean_reused_tokens": statistics.fmean(m["reused_tokens"] for m in ms),
                     "prompt_tokens": statistics.fmean(r["prompt_tokens"] for r in rows)}
        if all("first_token_kl" in m for m in ms):
            out[name].update(first_token_kl=statistics.fmean(m["first_token_kl"] for m in ms),
                             first_token_agreement=statistics.fmean(float(m["first_token_equal"]) for m in ms),
                             last_forward_cache_tokens=statistics.fmean(m.get("last_forward_cache_tokens", 0) for m in ms))
        if all("tf_top1_agreement" in m for m in ms):
            out[name].update(tf_top1_agreement=statistics.fmean(m["tf_top1_agreement"] for m in ms),
                             tf_mean_kl=statistics.fmean(m["tf_mean_kl"] for m in ms))
    return out


def report(payload: dict, console: Console | None = None) -> None:
    console = console or Console()
    a, b = payload["items"]
    t = Table(title=f"kvboost vs ragcache, MuSiQue items {a}-{b - 1}, documents reversed after a warm-up; "
                    f"{payload['torch_threads']} thread(s), CPU s")
    for c in ("method", "items", "CPU s", "median speed-up", "reused tokens", "TF agree", "TF KL", "1st =", "1st KL"):
        t.add_column(c, justify="left" if c == "method" else "right")
    for name, s in payload["summary"].items():
        t.add_row(name, str(s["items"]), f"{s['mean_cpu_s']:.2f}", f"{s['median_item_cpu_speedup']:.2f}x",
                  f"{s['mean_reused_tokens']:.0f}/{s['prompt_tokens']:.0f}",
                  f"{s['tf_top1_agreement']:.3f}" if "tf_top1_agreement" in s else "-",
                  f"{s['tf_mean_kl']:.4f}" if "tf_mean_kl" in s else "-",
                  f"{s['first_token_agreement']:.2f}" if "first_token_agreement" in s else "-",
                  f"{s['first_token_kl']:.4f}" if "first_token_kl" in s else "-")
    console.print(t)
    console.print(f"load {payload['load_start']} -> {payload.get('load_end')}; {payload['machine']}")


def main(data: str, start: int = 50, end: int = 55, json_path: str = "bench/results/blend_peer.json",
         ratio: float = 0.15, rule: str = "infoflow", threads: int = 1, console: Console | None = None) -> dict:
    """Run the peer comparison on items ``[start, end)``; writes the JSON after every item.

    Raises:
        ImportError: kvboost is not installed (the message names the extra).
        FileNotFoundError: ``data`` missing.
    """
    from benchmarks.blend import machine
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.chunk.stores import MemoryChunkStore
    from ragcache.models import load_embedder, load_model

    console = console or Console()
    torch.set_num_threads(int(threads))
    path = Path(data).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: pass the MuSiQue sample (musique_s.json)")
    items = json.loads(path.read_text())[start:end]
    home = Config.from_env().paths  # the settings home, as the CLI
    loaded, peer = load_model(home=home), load_model(home=home)
    ctx = {"model": loaded.model, "peer_model": peer.model, "tokenizer": loaded.tokenizer,
           "fingerprint": loaded.fingerprint.digest, "embedder": load_embedder(),
           "chunks": ChunkCache(MemoryChunkStore(max_bytes=2 << 30)),
           "eos": {int(t) for t in [loaded.tokenizer.eos_token_id] if t is not None}}
    ctx["kvboost"] = _kvboost_engine(peer.model, peer.tokenizer, ratio)
    import kvboost

    payload: dict[str, Any] = {"benchmark": "chunk-reuse-peer-kvboost", "data": str(path), "items": [start, start],
                               "kvboost_version": getattr(kvboost, "__version__", "?"), "ratio": ratio, "rule": rule,
                               "machine": machine(), "torch_threads": torch.get_num_threads(),
                               "load_start": [round(x, 2) for x in os.getloadavg()], "summary": {}, "per_item": []}
    rows: list[dict] = []
    for item in items:
        rows.append(run_item(ctx, item, ratio, rule))
        payload.update(per_item=rows, items=[start, start + len(rows)], summary=summarize(rows),
                       load_end=[round(x, 2) for x in os.getloadavg()])
        atomic_write_json(Path(json_path), payload, indent=1)
        console.print(f"[{start + len(rows) - 1}] done")
    report(payload, console)
    return payload
