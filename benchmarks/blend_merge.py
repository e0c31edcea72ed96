"""Merge ``bench blend`` runs over disjoint item ranges (e.g. two processes) into one result.

Usage: ``python -m benchmarks.blend_merge OUT.json OUT.png RUN1.json RUN2.json ...``.
The merged JSON lists the item ids it holds (``item_ids``; ``items`` is their [min, max + 1)
range, which may have gaps: read ``item_ids``), keeps each run's machine / load / threads
under ``runs``, and recomputes the summary over all items.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.blend import summarize_methods, write_json, report


def merge(paths: list[str], json_path: str, plot_path: str | None = None) -> dict:
    """Merge the runs at ``paths``; raises ValueError on overlapping items or differing settings."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    if not runs:
        raise ValueError("give at least one run to merge")
    rows, ids = [], []
    for run in runs:
        a = run["items"][0]
        for i, row in enumerate(run["per_item"]):
            if a + i in ids:
                raise ValueError(f"item {a + i} appears in more than one run")
            ids.append(a + i)
            rows.append(row)
        for key in ("ratios", "blend_options", "model", "data", "chunk_dtype"):
            if run.get(key) != runs[0].get(key):
                raise ValueError(f"runs differ in {key}: {run.get(key)!r} vs {runs[0].get(key)!r}")
    order = sorted(range(len(ids)), key=ids.__getitem__)
    rows, ids = [rows[i] for i in order], [ids[i] for i in order]
    payload = {**{k: v for k, v in runs[0].items() if k not in ("per_item", "summary", "items")},
               "items": [ids[0], ids[-1] + 1], "item_ids": ids, "complete": False,
               "load_avg_start": runs[0]["load_avg_start"],  # first and last run in the order given
               "load_avg_end": runs[-1].get("load_avg_end", runs[-1]["load_avg_start"]),
               "runs": [{"path": p, "items": [r["items"][0], r["items"][0] + len(r["per_item"])],
                         "torch_threads": r.get("torch_threads"), "machine": r.get("machine"),
                         "load_avg_start": r.get("load_avg_start"), "load_avg_end": r.get("load_avg_end")}
                        for p, r in zip(paths, runs)],
               "summary": summarize_methods(rows), "per_item": rows}
    write_json(Path(json_path), payload)
    report(payload, plot_path=plot_path)
    return payload


if __name__ == "__main__":
    merge(sys.argv[3:], sys.argv[1], sys.argv[2])
