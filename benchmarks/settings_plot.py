"""The PNG of a blend-settings record (``ragcache calibrate --plan ...`` or its merge): for each setting,
pooled teacher-forced top-1 agreement (with its one-sided Wilson lower bound) against the median CPU
speed-up over full prefill, with the 0.95 bar.

    python -m benchmarks.settings_plot bench/results/eval_settings_110-131.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.plotting import draw, save_figure


def plot(record: dict[str, Any], path: str | Path, title: str) -> Path:
    """Draw ``path`` from a settings record (:meth:`ragcache.engine.blend.calibration.Calibration.to_dict`).

    A record under the license rule (rows with ``license``): decisive flip rate (point) and its bootstrap
    upper bound (bar) against the median CPU speed-up, with the rule's bound and speed-up floor; a record of
    the retired rule: pooled agreement and its Wilson lower bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    if record["settings"] and "license" in record["settings"][0]:
        rule = record.get("rule") or {}
        for row in record["settings"]:
            lic = row["license"]
            x, y, hi = lic["median_cpu_speedup"], 100 * lic["decisive_flip_rate"], 100 * lic["decisive_flip_upper"]
            verdict = "licensed" if lic["licensed"] else "refused: " + ", ".join(lic["failed"])
            ax.errorbar([x], [y], yerr=[[0], [hi - y]], fmt="o", capsize=4,
                        label=f"{row['name']} (F1 {lic['f1_diff']:+.3f}; {verdict})")
        ax.axhline(100 * rule.get("max_decisive_flip_rate", 0.01), color="grey", linestyle="--", linewidth=1)
        ax.axvline(rule.get("min_speedup", 1.5), color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("median CPU speed-up over full prefill")
        ax.set_ylabel("flips on decisive tokens, % (bar: upper bound)")
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
        return save_figure(fig, path)
    for row in record["settings"]:
        x, y, lo = row["median_cpu_speedup"], row["pooled_top1_agreement"], row["agreement_lower_bound"]
        ax.errorbar([x], [y], yerr=[[y - lo], [0]], fmt="o", capsize=4,
                    label=f"{row['name']} (share {row['mean_share']:.2f})")
    ax.axhline(record.get("min_agreement", 0.95), color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("median CPU speed-up over full prefill (log)")
    ax.set_ylabel("pooled top-1 agreement (bar: lower bound)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    return save_figure(fig, path)


def main(json_path: str) -> Path | None:
    """Draw ``<json_path without .json>.png`` from the record in ``json_path``."""
    record = json.loads(Path(json_path).read_text())
    items = sorted({p["prompt"] for row in record["settings"] for p in row["per_prompt"]})
    title = (f"{record['model']}\nprompts {items[0]}-{items[-1]} ({len(items)} prompts, "
             f"{record['settings'][0]['answer_tokens']} forced tokens)")
    png = Path(json_path).with_suffix(".png")
    return draw(lambda: plot(record, png, title), png)


if __name__ == "__main__":  # pragma: no cover
    print(main(sys.argv[1]))
