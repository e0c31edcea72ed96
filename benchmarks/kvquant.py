"""Quantized KV benchmark: chunk storage formats (fp16 / int8 / int4) and the quantized decode cache.

Chunk storage (MuSiQue development items, the prompt of ``bench blend``: system text, the
top-6 passages as documents, the question, through the chat template). For each format the
passages' chunk KVs are computed once into a :class:`~ragcache.engine.chunk.stores.DiskChunkStore`,
then read back through a freshly opened store. Measured per chunk: stored bytes (codes, scales
and zero points; :attr:`ChunkKV.nbytes`, which the byte budget counts) and file bytes, chunks
per GiB, load time (``DiskChunkStore.get``: read, digest and shape checks; the files are in the
OS page cache, as for a hot disk cache) and dequantization time. Fidelity: CacheBlend
(r = 0.15, and r = 0 = full reuse, which reads every stored value) from the loaded chunks
against full prefill, teacher-forced along the full-prefill greedy answer (up to 32 tokens):
mean KL and top-1 agreement (:mod:`benchmarks.fidelity`).

Decode: one item's question (system text + question, no passages, so the generated tokens
dominate the KV) is prefilled, then ``decode_tokens`` tokens are generated greedily (EOS
masked, so every run has the same length) into a ``DynamicCache`` and into a 4-bit quanto
``QuantizedCache`` (:func:`ragcache.engine.quant.quantized_decode_cache`), each run in its own
process, the two side by side (while the chunk part runs), so they share the machine's load.
Reported: decode tokens/s, the KV cache's bytes (sampled every 50 tokens), the rise of resident
memory during decode over its value at the start of decode (sampled every 10 tokens),
the share of generated tokens equal (position by position) to the DynamicCache run and the
first position where they differ; and, in a third run, the DynamicCache tokens forced through
the quantized cache: the share of steps whose argmax is the DynamicCache token (teacher-forced
top-1 agreement, which does not collapse after the first difference as free-running does).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from ragcache.atomic import atomic_write_json
from benchmarks.plotting import draw
from ragcache.config import Config, env_setting

GIB = 1 << 30


def _load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _threads() -> None:
    if env_setting("bench_threads"):  # e.g. 1 on a machine shared with other jobs
        torch.set_num_threads(env_setting("bench_threads"))


def _prompt(loaded: Any, embedder: Any, item: dict) -> Any:
    from benchmarks.blend import rag_messages, retrieve_passages
    from ragcache.engine.prompt import render_messages

    return render_messages(loaded.tokenizer, rag_messages(item["question"], retrieve_passages(embedder, item)))


# -- chunk storage formats ---------------------------------------------------------------
def _chunk_item(ctx: dict, item: dict, formats: list[tuple[str, int]], ratios: list[float]) -> dict:
    from benchmarks.fidelity import forced_logits, greedy_answer, teacher_forced_fidelity
    from ragcache.engine import kv as kvb
    from ragcache.engine.blend.prefill import blend_prefill
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.chunk.stores import DiskChunkStore

    loaded, root = ctx["loaded"], ctx["root"]
    model, fp = loaded.model, loaded.fingerprint.digest
    prompt = _prompt(loaded, ctx["embedder"], item)
    ids = prompt.input_ids
    pieces = prompt.document_spans()
    spans = [(s, e) for s, e, _ in pieces]
    p = spans[0][0]
    full = kvb.new_cache(model)
    full_logits = kvb.forward(model, ids, full, start=0)[-1]
    answer = greedy_answer(model, full, full_logits, len(ids), max_new_tokens=32, eos=ctx["eos"])
    full_forced = forced_logits(model, full, full_logits, len(ids), answer)
    prefix = kvb.new_cache(model)
    kvb.forward(model, ids[:p], prefix, start=0)
    row: dict[str, Any] = {"question": item["question"], "prompt_tokens": len(ids), "answer_tokens": len(answer),
                           "doc_tokens": [e - s for s, e in spans], "formats": {}}
    dense_cc = ChunkCache(kv_format="fp16", dtype=torch.float32)
    dense = [dense_cc.compute(model, fp, piece.ids) for _, _, piece in pieces]  # one prefill per passage
    for name, group in formats:
        cc = ChunkCache(DiskChunkStore(root / f"{name}-g{group}"), kv_format=name, group_size=group)
        keys = []
        for (_, _, piece), d in zip(pieces, dense):
            cc.store.put(cc.encode(model, fp, piece.ids, d.keys, d.values))
            keys.append(cc.key(model, fp, piece.ids))
        store = DiskChunkStore(root / f"{name}-g{group}")  # reopened: every read comes from its file
        t0 = time.perf_counter()
        kvs = [store.get(k, fingerprint=fp) for k in keys]
        load_s = time.perf_counter() - t0
        assert all(kv is not None for kv in kvs), "every chunk was just written"
        t0 = time.perf_counter()
        for kv in kvs:
            kv.keys, kv.values  # noqa: B018 - dequantize (a no-op for dense chunks)
        dequant_s = time.perf_counter() - t0
        rec: dict[str, Any] = {
            "tag": cc.kv_format.tag, "chunk_bytes": [kv.nbytes for kv in kvs],
            "file_bytes": [(store.root / f"{k}.safetensors").stat().st_size for k in keys],
            "load_s_per_chunk": load_s / len(kvs), "dequant_s_per_chunk": dequant_s / len(kvs), "blend": {}}
        for r in ratios:
            pc = kvb.cache_from_tensors(model, *kvb.cache_tensors(prefix))
            res = blend_prefill(model, ids, prefix_len=p, prefix_cache=pc, doc_spans=spans, chunk_kvs=kvs,
                                recompute_ratio=r)
            f = teacher_forced_fidelity(model, full, full_logits, res.cache, res.last_logits, len(ids), answer,
                                        full_forced=full_forced)
            rec["blend"][f"{r:.2f}"] = {"mean_kl": f.mean_kl, "top1_agreement": f.top1_agreement,
                                        "first_token_equal": f.first_token_equal,
                                        "greedy_match_len": f.greedy_match_len}
        row["formats"][cc.kv_format.tag] = rec
    return row


def _chunk_summary(rows: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    tags = list(rows[0]["formats"]) if rows else []
    for tag in tags:
        recs = [r["formats"][tag] for r in rows]
        nbytes = [b for rec in recs for b in rec["chunk_bytes"]]
        files = [b for rec in recs for b in rec["file_bytes"]]
        tokens = sum(t for r in rows for t in r["doc_tokens"])
        s = {"chunks": len(nbytes), "mean_chunk_tokens": tokens / len(nbytes),
             "bytes_per_chunk": statistics.fmean(nbytes), "file_bytes_per_chunk": statistics.fmean(files),
             "bytes_per_token": sum(nbytes) / tokens, "chunks_per_gib": GIB / statistics.fmean(nbytes),
             "load_ms_per_chunk": 1e3 * statistics.fmean(rec["load_s_per_chunk"] for rec in recs),
             "dequant_ms_per_chunk": 1e3 * statistics.fmean(rec["dequant_s_per_chunk"] for rec in recs), "blend": {}}
        for r in recs[0]["blend"]:
            ms = [rec["blend"][r] for rec in recs]
            s["blend"][r] = {"mean_kl": statistics.fmean(m["mean_kl"] for m in ms),
                             "top1_agreement": statistics.fmean(m["top1_agreement"] for m in ms),
                             "first_token_agreement": statistics.fmean(float(m["first_token_equal"]) for m in ms)}
        out[tag] = s
    if tags:
        base = out[tags[0]]
        for s in out.values():
            s["size_vs_first"] = base["bytes_per_chunk"] / s["bytes_per_chunk"]
            s["top1_delta_vs_first"] = {r: s["blend"][r]["top1_agreement"] - base["blend"][r]["top1_agreement"]
                                        for r in s["blend"]}
    return out


# -- decode cache ---------------------------------------------------------------------------
def _rss() -> int:
    """Current resident set size of this process, bytes (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _decode_prompt(loaded: Any, item: dict) -> list[int]:
    """System text + the item's question (no passages): the generated tokens dominate the KV."""
    from benchmarks.blend import SYSTEM
    from ragcache.engine.prompt import render_messages

    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": item["question"]}]
    return render_messages(loaded.tokenizer, msgs).input_ids


def _decode_worker(data: str, item_index: int, cache_kind: str, n_tokens: int, residual_length: int,
                   forced: list[int] | None, out: Any) -> None:
    """One decode run in its own process; puts a result dict on ``out``.

    ``forced``: teacher forcing, the given tokens (the DynamicCache run's) are fed instead of
    the run's own, and the share of steps whose argmax equals them is reported.
    """
    from ragcache.engine import kv as kvb
    from ragcache.engine.quant import decode_cache_nbytes, quantized_decode_cache
    from ragcache.models import load_model

    _threads()
    loaded = load_model(home=Config.from_env().paths)  # the settings home, as the CLI
    ids = _decode_prompt(loaded, json.loads(Path(data).read_text())[item_index])
    model = loaded.model
    eos = [int(t) for t in {loaded.tokenizer.eos_token_id, getattr(model.config, "eos_token_id", None)}
           if isinstance(t, int)]
    cache = kvb.new_cache(model)
    logits = kvb.forward(model, ids, cache, start=0)[-1]
    if cache_kind == "quantized":
        cache = quantized_decode_cache(model, cache, backend="quanto", nbits=4, residual_length=residual_length)
    rss0, rss_peak = _rss(), _rss()
    toks: list[int] = []
    agree = 0
    kv_bytes: list[tuple[int, int]] = [(0, decode_cache_nbytes(cache))]
    t0 = time.perf_counter()
    for step in range(n_tokens):
        logits = logits.clone()
        logits[eos] = float("-inf")  # fixed-length run: EOS never ends it
        tok = int(logits.argmax())
        if forced is not None:
            agree += tok == forced[step]
            tok = forced[step]
        toks.append(tok)
        if step == n_tokens - 1:
            break
        logits = kvb.forward(model, [tok], cache, start=len(ids) + step)[-1]
        if (step + 1) % 10 == 0:
            rss_peak = max(rss_peak, _rss())
        if (step + 1) % 50 == 0:
            kv_bytes.append((step + 1, decode_cache_nbytes(cache)))
    dt = time.perf_counter() - t0
    kv_bytes.append((n_tokens, decode_cache_nbytes(cache)))
    out.put({"cache": cache_kind, "prompt_tokens": len(ids), "tokens": toks, "decode_s": dt,
             "tokens_per_s": (n_tokens - 1) / dt, "kv_bytes_end": kv_bytes[-1][1],
             "kv_bytes_peak": max(b for _, b in kv_bytes), "kv_bytes_curve": kv_bytes,
             "rss_at_decode_start": rss0, "rss_peak_rise_during_decode": max(rss_peak, _rss()) - rss0,
             "process_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
             "forced_top1_agreement": agree / n_tokens if forced is not None else None,
             "torch_threads": torch.get_num_threads()})


class _Run:
    """One decode run in a fresh (spawned) process, so its memory is its own."""

    def __init__(self, *args: Any) -> None:
        ctx = mp.get_context("spawn")
        self.name = args[2]
        self.queue = ctx.Queue()
        self.proc = ctx.Process(target=_decode_worker, args=(*args, self.queue))
        self.proc.start()

    def done(self) -> bool:
        return not self.queue.empty()

    def result(self) -> dict:
        result = self.queue.get()
        self.proc.join()
        if self.proc.exitcode != 0:
            raise RuntimeError(f"decode run {self.name!r} exited with code {self.proc.exitcode}")
        return result


def start_decode(data: str, item_index: int, n_tokens: int, residual_length: int = 128) -> dict[str, _Run]:
    """Start the DynamicCache and the 4-bit quanto QuantizedCache runs side by side (same machine load)."""
    return {kind: _Run(data, item_index, kind, n_tokens, residual_length, None) for kind in ("dynamic", "quantized")}


def start_forced(runs: dict[str, Any], data: str, item_index: int, n_tokens: int, residual_length: int = 128) -> None:
    """Once the DynamicCache run is done, start the run that forces its tokens through the
    quantized cache (teacher forcing); a no-op before that or when already started."""
    forced = "quantized, teacher-forced"
    if forced in runs or not (isinstance(runs["dynamic"], dict) or runs["dynamic"].done()):
        return
    if not isinstance(runs["dynamic"], dict):
        runs["dynamic"] = runs["dynamic"].result()
    runs[forced] = _Run(data, item_index, "quantized", n_tokens, residual_length, runs["dynamic"]["tokens"])


def finish_decode(runs: dict[str, Any], data: str, item_index: int, n_tokens: int,
                  residual_length: int = 128) -> dict[str, dict]:
    """Collect every run (starting the teacher-forced one if it has not started yet)."""
    if not isinstance(runs["dynamic"], dict):
        runs["dynamic"] = runs["dynamic"].result()
    start_forced(runs, data, item_index, n_tokens, residual_length)
    results = {kind: run if isinstance(run, dict) else run.result() for kind, run in runs.items()}
    ref = results["dynamic"]["tokens"]
    for r in results.values():
        same = [a == b for a, b in zip(r["tokens"], ref)]
        r["share_equal_to_dynamic"] = sum(same) / len(ref)
        r["first_divergence"] = same.index(False) if False in same else len(ref)
    return results


# -- report ------------------------------------------------------------------------------
def _plot(payload: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chunks, decode = payload["chunk_summary"], payload.get("decode") or {}
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    tags = list(chunks)
    a1.bar(tags, [chunks[t]["bytes_per_chunk"] / 1024 for t in tags], color="tab:blue")
    a1.set_ylabel("KiB per chunk (scales included)")
    a1b = a1.twinx()
    for r, marker in (("0.15", "o"), ("0.00", "s")):
        if r in chunks[tags[0]]["blend"]:
            a1b.plot(tags, [chunks[t]["blend"][r]["top1_agreement"] for t in tags], marker + "-", color="tab:red",
                     label=f"top-1 agreement, r={r}")
    a1b.set_ylim(0, 1.02)
    a1b.legend(loc="lower left", fontsize=8)
    a1.set_title("chunk storage: size and teacher-forced fidelity")
    for kind, r in decode.items():
        if r.get("forced_top1_agreement") is not None:
            continue
        xs, ys = zip(*r["kv_bytes_curve"])
        a2.plot(xs, [y / 2**20 for y in ys], label=f"{kind}: {r['tokens_per_s']:.1f} tok/s")
    a2.set_xlabel("generated tokens")
    a2.set_ylabel("decode KV cache (MiB)")
    if decode:
        a2.legend(fontsize=8)
    else:
        a2.text(0.5, 0.5, "decode part not run", ha="center", transform=a2.transAxes)
    a2.set_title("decode cache: DynamicCache vs 4-bit QuantizedCache")
    fig.suptitle(f"SmolLM2-135M-Instruct, MuSiQue {payload['items'][0]}-{payload['items'][1] - 1}; "
                 f"{payload['machine']}", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(payload: dict | str, *, plot_path: str | None = None, console: Console | None = None) -> dict:
    """Print the chunk-format and decode tables of a run (dict or JSON path) and draw its PNG."""
    if isinstance(payload, str | os.PathLike):
        payload = json.loads(Path(payload).read_text())
    console = console or Console()
    chunks = payload["chunk_summary"]
    t = Table(title=f"Chunk KV formats, MuSiQue items {payload['items'][0]}-{payload['items'][1] - 1} "
                    f"({len(payload['per_item'])} questions, {payload['machine']}, load {payload['load_avg']})")
    for col in ("format", "bytes/chunk", "vs first", "chunks/GiB", "load ms", "dequant ms",
                "KL r=.15", "top-1 r=.15", "KL r=0", "top-1 r=0"):
        t.add_column(col, justify="left" if col == "format" else "right")
    for tag, s in chunks.items():
        b15, b0 = s["blend"].get("0.15", {}), s["blend"].get("0.00", {})
        t.add_row(tag, f"{s['bytes_per_chunk']:,.0f}", f"{s['size_vs_first']:.2f}x", f"{s['chunks_per_gib']:,.0f}",
                  f"{s['load_ms_per_chunk']:.2f}", f"{s['dequant_ms_per_chunk']:.2f}",
                  f"{b15.get('mean_kl', float('nan')):.4f}", f"{b15.get('top1_agreement', float('nan')):.3f}",
                  f"{b0.get('mean_kl', float('nan')):.4f}", f"{b0.get('top1_agreement', float('nan')):.3f}")
    console.print(t)
    decode = payload.get("decode")
    if decode:
        d = Table(title=f"Decode, {payload['decode_tokens']} tokens (EOS masked) after a "
                        f"{decode['dynamic']['prompt_tokens']}-token prompt (item {payload['decode_item']}'s question); "
                        f"4-bit quanto, residual {payload.get('residual_length')}; load {payload.get('load_avg_end')}")
        for col in ("cache", "tok/s", "KV MiB end", "RSS rise MiB", "tokens = dynamic", "first divergence",
                    "forced top-1"):
            d.add_column(col, justify="left" if col == "cache" else "right")
        for kind, r in decode.items():
            forced = r.get("forced_top1_agreement")
            d.add_row(kind, f"{r['tokens_per_s']:.1f}", f"{r['kv_bytes_end'] / 2**20:.1f}",
                      f"{r['rss_peak_rise_during_decode'] / 2**20:.1f}",
                      "-" if forced is not None else f"{r['share_equal_to_dynamic']:.3f}",
                      "-" if forced is not None else str(r["first_divergence"]),
                      "-" if forced is None else f"{forced:.3f}")
        console.print(d)
    draw(lambda: _plot(payload, Path(plot_path)), plot_path)
    return payload


def _parse_formats(spec: str) -> list[tuple[str, int]]:
    """``"fp16,int8,int4,int4:128"`` -> ``[("fp16", 64), ("int8", 64), ("int4", 64), ("int4", 128)]``."""
    out = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        name, _, g = part.partition(":")
        if name not in ("fp16", "int8", "int4") or (g and not g.isdigit()):
            raise ValueError(f"formats are fp16, int8, int4 with an optional :GROUP_SIZE (e.g. int4:128); got {part!r}")
        out.append((name, int(g) if g else 64))
    if not out:
        raise ValueError("give at least one format, e.g. --formats fp16,int8,int4")
    return out


def main(data: str, start: int = 0, end: int = 10, formats: str = "fp16,int8,int4", decode_tokens: int = 2000,
         decode_item: int = 0, residual_length: int = 128, json_path: str = "bench/results/kvquant.json",
         plot_path: str = "bench/results/kvquant.png", console: Console | None = None) -> dict:
    """Run the benchmark on development items ``[start, end)`` (within 0-49) of ``data``.

    ``decode_tokens = 0`` skips the decode part. The JSON is written after every item.

    Raises:
        FileNotFoundError: ``data`` does not exist.
        ValueError: a range outside the development items 0-49, or a bad format list.
    """
    from ragcache.models import load_embedder, load_model

    console = console or Console()
    _threads()
    fmts = _parse_formats(formats)
    path = Path(data).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: pass --data ../shared/data/musique_s.json")
    if not 0 <= start < end <= 50 or not 0 <= decode_item < 50:
        raise ValueError(f"items [{start}, {end}) and decode item {decode_item} must be development items 0-49")
    items = json.loads(path.read_text())[start:end]
    loaded = load_model(home=Config.from_env().paths)  # the settings home, as the CLI
    eos = {int(t) for t in [loaded.tokenizer.eos_token_id] if t is not None}
    payload: dict[str, Any] = {
        "benchmark": "kvquant-musique", "data": str(path), "items": [start, start], "machine": "",
        "model": str(loaded.fingerprint), "formats": [f"{n}:{g}" for n, g in fmts], "ratios": [0.15, 0.0],
        "load_avg": _load_avg(), "per_item": [], "chunk_summary": {}, "decode": None,
        "decode_tokens": decode_tokens, "decode_item": decode_item, "residual_length": residual_length}
    from benchmarks.blend import machine

    payload["machine"] = machine()
    jpath = Path(json_path)
    runs: dict[str, Any] | None = (start_decode(str(path), decode_item, decode_tokens, residual_length)
                                   if decode_tokens > 0 else None)
    if runs:
        console.print(f"decode: {decode_tokens} tokens, DynamicCache and 4-bit QuantizedCache started in two processes")
    with tempfile.TemporaryDirectory(prefix="kvquant-") as tmp:
        ctx = {"loaded": loaded, "embedder": load_embedder(), "root": Path(tmp), "eos": eos}
        for i, item in enumerate(items):
            row = _chunk_item(ctx, item, fmts, [0.15, 0.0])
            payload["per_item"].append(row)
            payload["chunk_summary"] = _chunk_summary(payload["per_item"])
            payload["items"] = [start, start + len(payload["per_item"])]
            atomic_write_json(jpath, payload, indent=1)
            if runs:
                start_forced(runs, str(path), decode_item, decode_tokens, residual_length)
            console.print(f"[{start + i}] {row['prompt_tokens']} tokens, answer {row['answer_tokens']} tokens: " +
                          ", ".join(f"{t} top-1 {f['blend']['0.15']['top1_agreement']:.2f}"
                                    for t, f in row["formats"].items()))
    if runs:
        console.print("chunk formats done; waiting for the decode runs, then the teacher-forced one")
        payload["decode"] = finish_decode(runs, str(path), decode_item, decode_tokens, residual_length)
        for r in payload["decode"].values():
            r["tokens"] = r["tokens"][:64]  # the JSON keeps the first 64 ids of each run
    payload["load_avg_end"] = _load_avg()
    atomic_write_json(jpath, payload, indent=1)
    return report(payload, plot_path=plot_path, console=console)
