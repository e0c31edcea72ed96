"""Quantized decode cache against exact decoding, per setting: what :meth:`LocalEngine.check_decode` records.

MuSiQue development items (the prompt of ``bench blend``: system text, the top passages as
documents, the question). For each decode setting (default: 4-bit quanto, residual 128, with 0
and with 4 full-precision attention-sink tokens, Xiao et al., ICLR 2024, §3), the exact greedy
answer (up to ``answer_tokens``) is fed one token per step to the quantized cache
(:func:`ragcache.engine.decode_cache.check_decode`): pooled teacher-forced top-1 agreement with
exact decoding, its one-sided Wilson lower bound (confidence 0.95) and the mean KL (nats).
Settings run back to back on the same prompts. Nothing is saved under the ragcache home.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ragcache.config import Config
from ragcache.atomic import atomic_write_json

DEFAULT_SETTINGS = "4:128:0,4:128:4"
"""``bits:residual:sink`` per setting, comma-separated."""


def _settings(text: str) -> list[tuple[int, int, int]]:
    out = []
    for part in text.split(","):
        bits, residual, sink = (int(x) for x in part.strip().split(":"))
        out.append((bits, residual, sink))
    return out


def main(*, data: str, start: int = 0, end: int = 6, top_k: int = 3, answer_tokens: int = 32,
         settings: str = DEFAULT_SETTINGS, json_path: str, plot_path: str, console: Console | None = None) -> dict:
    """Run the comparison; returns (and writes to ``json_path``) the rows.

    Raises:
        ValueError: development items only (``end`` <= 50), or a malformed ``settings``.
    """
    import json

    from benchmarks.blend import rag_messages, retrieve_passages
    from ragcache.engine.decode_cache import DecodeCacheSpec, check_decode
    from ragcache.engine.engine import LocalEngine
    from ragcache.models import load_embedder, load_model

    if end > 50 or start < 0 or start >= end:
        raise ValueError(f"use development items within 0-49 (start < end <= 50); got {start}-{end}")
    console = console or Console()
    items = json.loads(Path(data).read_text())[start:end]
    embedder = load_embedder(None)
    home = Config.from_env().paths  # the settings home, as the CLI
    engine = LocalEngine(load_model(None, home=home), calibration=False, home=home)
    prompts = [rag_messages(it["question"], retrieve_passages(embedder, it)[:top_k]) for it in items]
    rows = []
    for bits, residual, sink in _settings(settings):
        spec = DecodeCacheSpec("quantized", "quanto", bits, residual, sink)
        t = time.perf_counter()
        rec = check_decode(engine, prompts, spec=spec, answer_tokens=answer_tokens, save=False)
        rows.append({"decode": spec.tag, "bits": bits, "residual_length": residual, "sink_tokens": sink,
                     "top1_agreement": rec.top1_agreement, "agreement_lower_bound": rec.agreement_lower_bound,
                     "mean_kl": rec.mean_kl, "answer_tokens": rec.answer_tokens, "seconds": time.perf_counter() - t,
                     "load_avg": [round(x, 2) for x in os.getloadavg()], "per_prompt": rec.per_prompt})
    table = Table(title=f"quantized decode vs exact, items {start}-{end - 1}, top-{top_k} passages")
    for col in ("decode", "top-1 agreement", "lower bound (95%)", "mean KL", "answer tokens"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["decode"], f"{r['top1_agreement']:.3f}", f"{r['agreement_lower_bound']:.3f}",
                      f"{r['mean_kl']:.4f}", str(r["answer_tokens"]))
    console.print(table)
    result = {"items": [start, end], "top_k": top_k, "model": str(engine.fingerprint), "rows": rows}
    atomic_write_json(json_path, result)
    _plot(rows, plot_path)
    return result


def _plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = [r["decode"].replace("quantized-", "") for r in rows]
    ax.bar(names, [r["top1_agreement"] for r in rows], label="top-1 agreement")
    ax.plot(names, [r["agreement_lower_bound"] for r in rows], "k_", markersize=30, label="Wilson lower bound")
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("teacher-forced agreement")
    ax.legend(loc="lower right")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)

