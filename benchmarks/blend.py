"""CacheBlend benchmark on MuSiQue: TTFT and fidelity of chunk KV reuse against full prefill.

Setup (as in CacheBlend, Yao et al., EuroSys 2025, arXiv 2405.16444, §7): for each question
the top-6 of its 10 passages by the embedder form the context; the prompt is a system text,
the six passages as documents, then the question, through the model's chat template (every
method sees the same token ids). Greedy decoding, up to 32 new tokens (stopped early at EOS
or at the end of the first answer line, the only line that is scored).

Methods: full prefill; prefix cache only (the system text's KV reused); full KV reuse
(r = 0); CacheBlend at each recompute ratio r. Chunk KVs are precomputed before timing and
served from an in-memory chunk store (float16), so TTFT measures the blend at query time, as
in the paper. Methods run back to back on each item so a busy machine slows all of them.

Metrics per method: mean TTFT and speed-up over full prefill; first-token agreement with
full prefill; token F1 between the method's answer and the full-prefill answer; KL divergence
KL(full || method) of the first-token distribution; F1 against the gold answers
(normalisation: lower-case, no punctuation, no a/an/the, single spaces; first line kept;
best gold answer); and teacher-forced fidelity (:mod:`benchmarks.fidelity`): the
full-prefill answer tokens forced through each method's cache, mean KL(full || method) over
those positions, top-1 agreement at them, and greedy match length (leading answer tokens the
method reproduces). Answer F1 hardly moves with r on a small model (one flipped token changes
the whole continuation); the teacher-forced metrics do.

Items 0-49 are the development split, 50-149 the evaluation split (report on those only).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from ragcache.atomic import atomic_write_json
from ragcache.engine.blend.license import best_f1, normalize_answer, token_f1  # noqa: F401 (re-exported)
from ragcache.engine.blend.rules import serving_rules
from benchmarks.blend_plot import plot as plot_summary
from benchmarks.plotting import draw
from ragcache.config import Config, env_setting

SYSTEM = ("You will be asked a question after reading several passages. Please directly answer the question "
          "based on the given passages. Do NOT repeat the question. The answer should be within 5 words.")
QUESTION = ("Answer the question directly based on the given passages. Do NOT repeat the question. "
            "The answer should be within 5 words.\nQuestion: {question}")
TOP_K = 6
MAX_NEW_TOKENS = 32
RATIOS = [0.05, 0.10, 0.15, 0.30, 0.50, 1.0]  # r = 0 (full reuse) always runs too
# KV selection rules run at every ratio: name -> blend_prefill options (over the CacheBlend defaults); every serving
# rule of the table (ragcache.engine.blend.rules), CacheBlend's "deviation" under its historical name "cacheblend"
RULES: dict[str, dict] = {"cacheblend": {}} | {
    name: {"rank_by": name} | ({"seed": 0} if name == "random" else {}) for name in serving_rules() if name != "deviation"}
DEFAULT_DATA = "/work/shared/data/musique_s.json"


# -- scoring (CacheBlend / SQuAD-style): the license rule's own, one definition


def kl_divergence(p_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    """KL(P || Q) in nats between the softmax distributions of two float logit vectors."""
    lp = torch.log_softmax(p_logits.float(), -1)
    lq = torch.log_softmax(q_logits.float(), -1)
    return max(0.0, float((lp.exp() * (lp - lq)).sum()))  # float noise below 0 on equal inputs


def machine() -> str:
    return (f"{platform.machine()} CPU, {os.cpu_count()} cores, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), no GPU")


# -- one item ----------------------------------------------------------------------------
def retrieve_passages(embedder: Any, item: dict) -> list[str]:
    passages = [c["text"] for c in item["ctxs"]]
    vecs = embedder.encode([item["question"]] + passages)
    scores = vecs[1:] @ vecs[0]
    order = sorted(range(len(passages)), key=lambda i: -float(scores[i]))[:TOP_K]
    return [passages[i] for i in order]


def rag_messages(question: str, docs: list[str]) -> list[dict]:
    blocks = [{"type": "text", "text": d, "ragcache_kind": "document"} for d in docs]
    blocks.append({"type": "text", "text": QUESTION.format(question=question), "ragcache_kind": "question"})
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": blocks}]


def _decode(model: Any, cache: Any, first_logits: torch.Tensor, n_prompt: int, eos: set[int], tokenizer: Any
            ) -> list[int]:
    """Greedy answer ids, EOS kept when produced (stop at EOS, the first newline or MAX_NEW_TOKENS).

    Decodes on a fork of ``cache`` (``copy=False``: appends allocate), so ``cache`` keeps its length.
    """
    from ragcache.engine import kv as kvb

    work = kvb.cache_from_tensors(model, *kvb.cache_tensors(cache), copy=False)
    out = [int(first_logits.argmax())]
    while len(out) < MAX_NEW_TOKENS and out[-1] not in eos:
        if "\n" in tokenizer.decode(out).strip():
            break  # only the first answer line is scored
        logits = kvb.forward(model, [out[-1]], work, start=n_prompt + len(out) - 1)[-1]
        out.append(int(logits.argmax()))
    return out


def _blend_options(options: dict | None) -> dict:
    """The selection options in effect: blend_prefill's defaults updated with ``options``."""
    from ragcache.engine.blend.prefill import blend_prefill

    sig = inspect.signature(blend_prefill)
    names = ("check_layer", "deviation", "gradual_layers", "gradual_start", "doc_head_tokens", "doc_tail_tokens", "rank_by",
             "seed", "query_layers")
    out = {n: sig.parameters[n].default for n in names if n in sig.parameters}
    unknown = set(options or {}) - set(out)
    if unknown:
        raise ValueError(f"unknown blend option(s) {sorted(unknown)}; known: {sorted(out)}")
    return {**out, **(options or {})}


def _run_item(ctx: dict, item: dict, ratios: list[float]) -> dict:
    from benchmarks.fidelity import forced_logits, teacher_forced_fidelity
    from ragcache.engine import kv as kvb
    from ragcache.engine.blend.prefill import blend_prefill
    from ragcache.engine.prompt import render_messages

    model, tok, fp, chunks = ctx["model"], ctx["tokenizer"], ctx["fingerprint"], ctx["chunks"]
    docs = retrieve_passages(ctx["embedder"], item)
    prompt = render_messages(tok, rag_messages(item["question"], docs))
    ids = prompt.input_ids
    spans = [(s, e) for s, e, _ in prompt.document_spans()]
    p = spans[0][0]  # system text + template head: the stable prefix
    # precompute (not timed): the prefix KV once per prefix, every passage's chunk KV
    key = tuple(ids[:p])
    if ctx.get("prefix_key") != key:
        c = kvb.new_cache(model)
        kvb.forward(model, ids[:p], c, start=0)
        ctx["prefix_key"], ctx["prefix_tensors"] = key, kvb.cache_tensors(c)
    for _, _, piece in prompt.document_spans():
        chunks.lookup_or_compute(model, fp, piece.ids)
    eos = ctx["eos"]
    out: dict[str, dict] = {}
    forced: dict[str, Any] = {}  # the full-prefill cache, answer ids and forced logits

    def record(name: str, clock: tuple[float, float], logits: torch.Tensor, cache: Any, **extra: Any) -> None:
        ttft, cpu = time.perf_counter() - clock[0], time.process_time() - clock[1]  # wall and CPU seconds
        toks = _decode(model, cache, logits, len(ids), eos, tok)
        if not forced:  # full prefill runs first: its answer is the one forced through every method
            forced.update(cache=cache, logits=logits, answer=toks,
                          rows=forced_logits(model, cache, logits, len(ids), toks))
        fid = teacher_forced_fidelity(model, forced["cache"], forced["logits"], cache, logits, len(ids),
                                      forced["answer"], full_forced=forced["rows"])
        out[name] = {"ttft_s": ttft, "cpu_s": cpu, "first_token": int(logits.argmax()),
                     "answer": tok.decode([t for t in toks if t not in eos]), "_logits": logits,
                     "tf_mean_kl": fid.mean_kl, "tf_top1_agreement": fid.top1_agreement,
                     "greedy_match_len": fid.greedy_match_len, "answer_tokens": fid.answer_len, **extra}

    t0 = (time.perf_counter(), time.process_time())
    cache = kvb.new_cache(model)
    logits = kvb.forward(model, ids, cache, start=0)[-1]
    record("full prefill", t0, logits, cache, tokens_computed=len(ids))

    t0 = (time.perf_counter(), time.process_time())
    cache = kvb.cache_from_tensors(model, *ctx["prefix_tensors"])
    logits = kvb.forward(model, ids[p:], cache, start=p)[-1]
    record("prefix cache", t0, logits, cache, tokens_computed=len(ids) - p)

    runs = [("full reuse (r=0)", "full reuse", 0.0, {})]
    runs += [(f"{rule} r={r:.2f}", rule, r, opts) for r in ratios for rule, opts in ctx["rules"].items()]
    runs += [(name, name.split(" r=")[0], r, opts) for name, r, opts in ctx["extras"]]
    for name, rule, r, opts in runs:
        t0 = (time.perf_counter(), time.process_time())
        pc = kvb.cache_from_tensors(model, *ctx["prefix_tensors"])
        kvs = [chunks.lookup_or_compute(model, fp, ids[s:e]) for s, e in spans]
        assert all(hit for _, hit in kvs), "chunk KVs must be precomputed before timing"
        res = blend_prefill(model, ids, prefix_len=p, prefix_cache=pc, doc_spans=spans,
                            chunk_kvs=[kv for kv, _ in kvs], recompute_ratio=r, **{**ctx["blend_options"], **opts})
        record(name, t0, res.last_logits, res.cache, recompute_ratio=r, rule=rule,
               tokens_computed=len(res.selected), tokens_recomputed=res.tokens_recomputed)

    full = out["full prefill"]
    full_logits = full["_logits"]
    row = {"question": item["question"], "gold": item["answers"], "prompt_tokens": len(ids),
           "doc_tokens": sum(e - s for s, e in spans), "prefix_tokens": p,
           "load_avg": [round(x, 2) for x in os.getloadavg()], "methods": {}}
    for name, m in out.items():
        logits = m.pop("_logits")
        m["first_token_equal"] = m["first_token"] == full["first_token"]
        m["f1_vs_full"] = token_f1(m["answer"], full["answer"])
        m["kl_first_token"] = kl_divergence(full_logits, logits)
        m["f1_gold"] = best_f1(m["answer"], item["answers"])
        row["methods"][name] = m
    return row


def summarize_methods(rows: list[dict]) -> dict[str, dict]:
    names = list(rows[0]["methods"]) if rows else []
    full_ttft = statistics.fmean(r["methods"]["full prefill"]["ttft_s"] for r in rows) if rows else math.nan
    out = {}
    for name in names:
        ms = [r["methods"][name] for r in rows]
        ttft = statistics.fmean(m["ttft_s"] for m in ms)
        out[name] = {
            "recompute_ratio": ms[0].get("recompute_ratio"), "rule": ms[0].get("rule"),
            "mean_ttft_s": ttft,
            "ttft_speedup_vs_full": full_ttft / ttft,
            # per item, back to back: robust to an item slowed by another job on a shared machine
            "median_item_speedup": statistics.median(r["methods"]["full prefill"]["ttft_s"] / m["ttft_s"]
                                                     for r, m in zip(rows, ms)),
            "items_slower_than_full": sum(m["ttft_s"] > r["methods"]["full prefill"]["ttft_s"]
                                          for r, m in zip(rows, ms)),
            **_cpu_summary(rows, ms),
            "first_token_agreement": statistics.fmean(float(m["first_token_equal"]) for m in ms),
            "f1_vs_full": statistics.fmean(m["f1_vs_full"] for m in ms),
            "kl_first_token": statistics.fmean(m["kl_first_token"] for m in ms),
            "f1_gold": statistics.fmean(m["f1_gold"] for m in ms),
            "tf_mean_kl": statistics.fmean(m["tf_mean_kl"] for m in ms),
            "tf_top1_agreement": statistics.fmean(m["tf_top1_agreement"] for m in ms),
            "tf_top1_agreement_pooled": (sum(m["tf_top1_agreement"] * m["answer_tokens"] for m in ms)
                                         / sum(m["answer_tokens"] for m in ms)),
            "greedy_match_len": statistics.fmean(m["greedy_match_len"] for m in ms),
            "answer_tokens": statistics.fmean(m["answer_tokens"] for m in ms),
            "mean_tokens_computed": statistics.fmean(m["tokens_computed"] for m in ms),
        }
    return out


def _cpu_summary(rows: list[dict], ms: list[dict]) -> dict:
    """Mean CPU seconds of a method and its speed-up over full prefill (runs without ``cpu_s``: empty)."""
    if not all("cpu_s" in m for m in ms):
        return {}
    cpu = statistics.fmean(m["cpu_s"] for m in ms)
    full = statistics.fmean(r["methods"]["full prefill"]["cpu_s"] for r in rows)
    return {"mean_cpu_s": cpu, "cpu_speedup_vs_full": full / cpu,
            "median_item_cpu_speedup": statistics.median(r["methods"]["full prefill"]["cpu_s"] / m["cpu_s"]
                                                         for r, m in zip(rows, ms))}


def write_json(path: Path, payload: dict) -> None:
    atomic_write_json(path, payload, indent=1)


def _load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(data: str = DEFAULT_DATA, start: int = 0, end: int = 50, json_path: str = "bench/results/blend.json",
         plot_path: str = "bench/results/blend.png", ratios: list[float] | None = None, threads: int | None = None,
         blend_options: dict | None = None, rules: list[str] | None = None,
         extras: list[tuple[str, float, dict]] | None = None, console: Console | None = None) -> dict:
    """Run the benchmark on items ``[start, end)`` of ``data`` (musique_s.json).

    Writes the JSON after every item (a partial run keeps what it measured) and the PNG at the
    end; Ctrl-C stops after the current item and still reports the items done. ``threads``
    pins torch's thread count (else ``RAGCACHE_BENCH_THREADS``, else torch's default); the
    JSON records it, the machine and its load average at start, per item and at the end.
    ``blend_options`` override :func:`~ragcache.engine.blend.blend_prefill`'s selection
    defaults (the options in effect are recorded). ``rules`` names the selection rules of
    :data:`RULES` run at every ratio (default ``["cacheblend"]``); ``extras`` adds single runs
    ``(name, r, options)`` (e.g. ``("random r=0.15 seed 1", 0.15, {"rank_by": "random", "seed": 1})``).

    Raises:
        FileNotFoundError: ``data`` does not exist (the message names the expected file).
        ValueError: an empty item range, a ratio outside (0, 1] or an unknown blend option.
    """
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.chunk.stores import MemoryChunkStore
    from ragcache.models import load_embedder, load_model

    console = console or Console()
    if threads is None and env_setting("bench_threads"):  # e.g. 1 on a shared machine
        threads = env_setting("bench_threads")
    if threads:
        torch.set_num_threads(int(threads))
    ratios = list(RATIOS) if ratios is None else [float(r) for r in ratios]
    if any(not 0.0 < r <= 1.0 for r in ratios):
        raise ValueError(f"ratios must be in (0, 1]; got {ratios} (r = 0, full reuse, always runs)")
    options = _blend_options(blend_options)
    rules = ["cacheblend"] if rules is None else list(rules)
    unknown = sorted(set(rules) - set(RULES))
    if unknown:
        raise ValueError(f"unknown rule(s) {unknown}; known: {sorted(RULES)}")
    for _, _, o in extras or []:
        _blend_options(o)
    path = Path(data).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: the MuSiQue sample is expected at {DEFAULT_DATA} "
                                "(see the README next to it); pass --data PATH")
    items = json.loads(path.read_text())[start:end]
    if not items:
        raise ValueError(f"no items in range [{start}, {end}) of {path}")
    loaded = load_model(home=Config.from_env().paths)  # the settings home, as the CLI
    ctx = {"model": loaded.model, "tokenizer": loaded.tokenizer, "fingerprint": loaded.fingerprint.digest,
           "embedder": load_embedder(), "chunks": ChunkCache(MemoryChunkStore(max_bytes=4 << 30)),
           "eos": {int(t) for t in [loaded.tokenizer.eos_token_id] if t is not None}, "blend_options": options,
           "rules": {r: RULES[r] for r in rules}, "extras": list(extras or [])}
    split = "development" if start + len(items) <= 50 else "evaluation" if start >= 50 else "mixed"
    payload: dict[str, Any] = {
        "benchmark": "cacheblend-musique", "data": str(path), "items": [start, start + len(items)], "split": split,
        "machine": machine(), "torch_threads": torch.get_num_threads(), "load_avg_start": _load_avg(),
        "model": str(loaded.fingerprint), "top_k": TOP_K, "max_new_tokens": MAX_NEW_TOKENS,
        "chunk_dtype": "float16", "ratios": ratios, "blend_options": options, "complete": False,
        "rules": {r: RULES[r] for r in rules}, "extras": [list(x) for x in extras or []],
        "summary": {}, "per_item": [],
    }
    jpath = Path(json_path)
    rows: list[dict] = []
    try:
        for i, item in enumerate(items):
            rows.append(_run_item(ctx, item, ratios))
            payload["per_item"], payload["summary"] = rows, summarize_methods(rows)
            payload["items"], payload["load_avg_end"] = [start, start + len(rows)], _load_avg()
            write_json(jpath, payload)
            full = rows[-1]["methods"]["full prefill"]
            blend = rows[-1]["methods"].get("cacheblend r=0.15") or rows[-1]["methods"]["full reuse (r=0)"]
            console.print(f"[{start + i}] {rows[-1]['prompt_tokens']} tokens, full {full['ttft_s']:.2f}s, "
                          f"blend {blend['ttft_s']:.2f}s (TF agreement {blend['tf_top1_agreement']:.2f}) | "
                          f"full: {full['answer']!r} | blend: {blend['answer']!r} | load {_load_avg()}")
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted after {len(rows)} of {len(items)} items; reporting those[/yellow]")
    payload["complete"] = len(rows) == len(items)
    if rows:
        write_json(jpath, payload)
        report(payload, plot_path=plot_path, console=console)
    return payload


def report(payload: dict | str, *, plot_path: str | None = None, console: Console | None = None) -> dict:
    """Print the summary table of a (possibly partial) run and draw its PNG.

    Args:
        payload: the results dict of :func:`main` or the path of its JSON file.
        plot_path: where to write the PNG (``None``: no plot).
    """
    if isinstance(payload, str | os.PathLike):
        payload = json.loads(Path(payload).read_text())
    console = console or Console()
    rows, summary = payload["per_item"], payload["summary"]
    ids = payload.get("item_ids") or [payload["items"][0] + i for i in range(len(rows))]  # merged runs list them
    first, last = ids[0], ids[-1]
    title = (f"CacheBlend on MuSiQue items {first}-{last} ({len(rows)} questions, mean prompt "
             f"{statistics.fmean(r['prompt_tokens'] for r in rows):.0f} tokens; {payload['machine']}; "
             f"load {payload.get('load_avg_start')} -> {payload.get('load_avg_end')})")
    table = Table(title=title)
    cpu = all("mean_cpu_s" in m for m in summary.values())
    for col in ("method", "TTFT (s)", "speed-up", "median item speed-up",
                *(("CPU (s)", "CPU speed-up") if cpu else ()), "1st token =", "KL 1st token", "TF agree", "TF KL",
                "match len", "F1 vs full", "F1 gold"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for name, m in summary.items():
        table.add_row(name, f"{m['mean_ttft_s']:.2f}", f"{m['ttft_speedup_vs_full']:.2f}x",
                      f"{m['median_item_speedup']:.2f}x" if "median_item_speedup" in m else "-",
                      *((f"{m['mean_cpu_s']:.2f}", f"{m['cpu_speedup_vs_full']:.2f}x") if cpu else ()),
                      f"{m['first_token_agreement']:.2f}", f"{m['kl_first_token']:.3f}",
                      f"{m['tf_top1_agreement']:.3f}", f"{m['tf_mean_kl']:.4f}",
                      f"{m['greedy_match_len']:.1f}/{m['answer_tokens']:.1f}", f"{m['f1_vs_full']:.2f}",
                      f"{m['f1_gold']:.3f}")
    console.print(table)
    draw(lambda: plot_summary(summary, Path(plot_path), f"SmolLM2-135M-Instruct, MuSiQue {first}-{last} ({len(rows)} "
                                                 f"questions, {payload.get('split', '')} split), top-{TOP_K} "
                                                 f"passages; {payload['machine']}"), plot_path)
    return payload


if __name__ == "__main__":  # python -m benchmarks.blend DATA [START END]
    import sys

    a = sys.argv[1:]
    main(a[0], *(int(x) for x in a[1:3]))
