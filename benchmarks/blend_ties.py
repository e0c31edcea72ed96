"""Where a blend's teacher-forced top-1 disagreements fall: agreement by the full prefill's top-1 margin.

Why: the calibration rule licenses a blend when the pooled top-1 agreement with full prefill is high
with confidence (Wilson lower bound >= 0.95). A small model's reference has answer positions whose
two best next tokens are nearly tied (their logits a few hundredths apart); any change to the KV
can flip such a token, however well the blend keeps the rest. This study measures, on MuSiQue
development items, how much of each setting's disagreement lies on those near ties.

For each item (the prompt of ``ragcache calibrate``: system text, the first ``docs`` passages as
documents, the question), :func:`ragcache.engine.blend.setting.measure_settings` with
``token_detail=True`` gives the full-prefill greedy answer (up to ``answer_tokens``), the
reference's top-1 minus top-2 logit at each answer position (the margin), and the positions where
each setting's forced top-1 differs. The table pools answer tokens by margin bucket and gives each
setting's agreement in each bucket. CPU seconds are measured as in ``ragcache calibrate`` (ranking
pass included). Development items only (0-49); nothing is chosen or saved under the ragcache home.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ragcache.atomic import atomic_write_json
from benchmarks.plotting import draw, save_figure

EDGES: tuple[float, ...] = (0.0, 0.1, 0.3, 1.0, 3.0)
"""Lower edges of the margin buckets (logits): [0, 0.1), [0.1, 0.3), [0.3, 1), [1, 3), [3, inf)."""


def bucket_label(i: int) -> str:
    hi = f"{EDGES[i + 1]:g}" if i + 1 < len(EDGES) else "inf"
    return f"[{EDGES[i]:g}, {hi})"


def bucket_of(margin: float) -> int:
    """Index of the bucket of a margin (logits, >= 0)."""
    i = 0
    while i + 1 < len(EDGES) and margin >= EDGES[i + 1]:
        i += 1
    return i


def by_margin(measured: Sequence[dict]) -> list[dict]:
    """Per setting: tokens, agreement and disagreements in each margin bucket, pooled over prompts.

    Args:
        measured: :func:`~ragcache.engine.blend.setting.measure_settings` output with ``token_detail``.

    Returns:
        One dict per setting: ``name``, ``tokens``, ``mismatches``, ``pooled_top1_agreement``, and
        ``buckets``: ``[{"margin", "tokens", "mismatches", "agreement"}]`` (agreement ``None`` for
        an empty bucket), plus ``mismatch_margins`` (the reference margin at every disagreement).

    Raises:
        KeyError: a prompt row without ``ref_margin`` / ``mismatch`` (run with ``token_detail=True``).
    """
    out = []
    for m in measured:
        tokens = [0] * len(EDGES)
        wrong = [0] * len(EDGES)
        margins_wrong: list[float] = []
        for row in m["per_prompt"]:
            flipped = set(row["mismatch"])
            for t, margin in enumerate(row["ref_margin"]):
                b = bucket_of(margin)
                tokens[b] += 1
                if t in flipped:
                    wrong[b] += 1
                    margins_wrong.append(margin)
        n, w = sum(tokens), sum(wrong)
        out.append({"name": m["setting"]["name"], "setting": m["setting"], "tokens": n, "mismatches": w,
                    "pooled_top1_agreement": (n - w) / n if n else None,
                    "buckets": [{"margin": bucket_label(i), "tokens": tokens[i], "mismatches": wrong[i],
                                 "agreement": (tokens[i] - wrong[i]) / tokens[i] if tokens[i] else None}
                                for i in range(len(EDGES))],
                    "mismatch_margins": sorted(margins_wrong),
                    "median_cpu_speedup": statistics.median(r["full_cpu_s"] / r["cpu_s"] for r in m["per_prompt"])
                    if m["per_prompt"] else None})
    return out


def main(*, data: str, start: int = 0, end: int = 25, docs: int = 6, ratios: str = "0.3,0.5",
         answer_tokens: int = 32, threads: int | None = None, json_path: str, plot_path: str,
         console: Console | None = None) -> dict:
    """Measure infoflow blends with prefix-conditioned chunks at each ratio; print the table, write JSON and PNG.

    Raises:
        ValueError: items outside the development range 0-49, or a ratio outside [0, 1].
    """
    import torch

    from ragcache.app.calibrate import musique_prompts
    from ragcache.engine.blend.setting import BlendSetting, measure_settings
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.engine import LocalEngine

    if end > 50 or start < 0 or start >= end:
        raise ValueError(f"use development items within 0-49 (start < end <= 50); got {start}-{end}")
    if threads:
        torch.set_num_threads(threads)
    settings = [BlendSetting(recompute_ratio=float(r), rank_by="infoflow", chunk_context="prefix")
                for r in ratios.split(",")]
    console = console or Console()
    prompts = musique_prompts(data, start, end, docs)
    engine = LocalEngine.from_pretrained(None, chunk_cache=ChunkCache(), calibration=False)
    head = {"benchmark": "blend-ties", "data": str(data), "items": [start, end], "docs": docs,
            "answer_tokens": answer_tokens, "model": str(engine.fingerprint), "threads": torch.get_num_threads(),
            "machine": f"{os.uname().machine} CPU, {os.cpu_count()} cores, torch {torch.__version__}",
            "load_avg_start": [round(x, 2) for x in os.getloadavg()]}

    def keep(measured: list[dict]) -> None:
        atomic_write_json(Path(json_path), {**head, "complete": False, "measured": measured}, indent=1)

    measured = measure_settings(engine, prompts, settings, answer_tokens=answer_tokens, token_detail=True,
                                progress=lambda line: console.print(line, markup=False, highlight=False),
                                checkpoint=keep, first_index=start)
    rows = by_margin(measured)
    table = Table(title=f"teacher-forced top-1 agreement by the full prefill's top-1 margin, items {start}-{end - 1}")
    table.add_column("margin (logits)")
    table.add_column("tokens")
    for r in rows:
        table.add_column(r["name"])
    for i in range(len(EDGES)):
        cells = [f"{r['buckets'][i]['mismatches']} flipped" + (f" ({r['buckets'][i]['agreement']:.3f})"
                                                             if r["buckets"][i]["agreement"] is not None else "")
                 for r in rows]
        table.add_row(bucket_label(i), str(rows[0]["buckets"][i]["tokens"]), *cells)
    table.add_row("all", str(rows[0]["tokens"]), *[f"{r['mismatches']} flipped ({r['pooled_top1_agreement']:.4f})"
                                                   for r in rows])
    console.print(table)
    result = {**head, "complete": True, "load_avg_end": [round(x, 2) for x in os.getloadavg()], "rows": rows,
              "measured": measured}
    atomic_write_json(Path(json_path), result, indent=1)
    draw(lambda: _plot(rows, plot_path), plot_path)
    return result


def merge(parts: Sequence[str | Path], json_path: str | Path, plot_path: str | Path | None = None,
          console: Console | None = None) -> dict:
    """One study from runs over disjoint items (each a complete ``main`` JSON with the same settings).

    Raises:
        ValueError: an incomplete part, parts with other settings, or overlapping items.
    """
    import json

    runs = [json.loads(Path(p).read_text()) for p in parts]
    if not runs or not all(r.get("complete") for r in runs):
        raise ValueError("merge needs complete runs (a stopped run has complete: false)")
    names = [[m["setting"]["name"] for m in r["measured"]] for r in runs]
    if any(n != names[0] for n in names):
        raise ValueError(f"the parts measured other settings: {names}")
    seen: set[int] = set()
    for r in runs:
        items = {row["prompt"] for row in r["measured"][0]["per_prompt"]}
        if items & seen:
            raise ValueError(f"the parts overlap: items {sorted(items & seen)}")
        seen |= items
    measured = [{"setting": runs[0]["measured"][j]["setting"],
                 "per_prompt": [row for r in runs for row in r["measured"][j]["per_prompt"]]}
                for j in range(len(names[0]))]
    rows = by_margin(measured)
    head = {k: v for k, v in runs[0].items() if k not in ("measured", "rows", "items", "load_avg_start", "load_avg_end")}
    result = {**head, "items": sorted(seen), "parts": [{"items": r["items"], "load_avg_start": r.get("load_avg_start"),
                                                        "load_avg_end": r.get("load_avg_end")} for r in runs],
              "rows": rows, "measured": measured}
    atomic_write_json(Path(json_path), result, indent=1)
    if plot_path:
        draw(lambda: _plot(rows, str(plot_path)), plot_path)
    return result


def _plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [b["margin"] for b in rows[0]["buckets"]]
    width = 0.8 / max(len(rows), 1)
    for j, r in enumerate(rows):
        xs = [i + (j - (len(rows) - 1) / 2) * width for i in range(len(labels))]
        ax.bar(xs, [b["mismatches"] for b in r["buckets"]], width=width, label=r["name"])
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel("full prefill's top-1 minus top-2 logit at the answer position")
    ax.set_ylabel("teacher-forced top-1 disagreements")
    ax.set_title(f"where the blend's disagreements fall ({rows[0]['tokens']} answer tokens)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


__all__ = ["EDGES", "by_margin", "bucket_of", "main", "merge"]



if __name__ == "__main__":  # python -m benchmarks.blend_ties merge OUT.json PART.json PART.json ...
    import sys

    if len(sys.argv) < 4 or sys.argv[1] != "merge":
        raise SystemExit("usage: python -m benchmarks.blend_ties merge OUT.json PART.json [PART.json ...]")
    out = sys.argv[2]
    merge(sys.argv[3:], out, str(Path(out).with_suffix(".png")))
