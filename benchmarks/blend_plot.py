"""The PNG of ``bench blend``: TTFT, agreement and KL against the recompute ratio, one line per selection rule."""

from __future__ import annotations

from pathlib import Path


def _lines(summary: dict[str, dict]) -> dict[str, list[tuple[float, dict]]]:
    """rule -> [(r, summary row)] sorted by r; full reuse (r = 0) starts every rule's line."""
    r0 = next((m for m in summary.values() if m.get("recompute_ratio") == 0.0), None)
    out: dict[str, list[tuple[float, dict]]] = {}
    for name, m in summary.items():
        r = m.get("recompute_ratio")
        if r is None or r == 0.0:
            continue
        rule = m.get("rule") or name.split(" r=")[0]
        out.setdefault(rule, []).append((r, m))
    for rule, pts in out.items():
        pts.sort(key=lambda x: x[0])
        if r0 is not None:
            pts.insert(0, (0.0, r0))
    return out


def plot(summary: dict[str, dict], path: Path, title: str) -> None:
    """Draw the three panels (needs matplotlib; the caller wraps this in ``plotting.draw``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = _lines(summary)
    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4.4))
    marks = "os^vD<>"
    for j, (rule, pts) in enumerate(lines.items()):
        rs = [r for r, _ in pts]
        mk = marks[j % len(marks)] + ("-" if len(pts) > 2 else "")
        a1.plot(rs, [m["mean_cpu_s"] if "mean_cpu_s" in m else m["mean_ttft_s"] for _, m in pts], mk, label=rule)
        a2.plot(rs, [m["tf_top1_agreement"] for _, m in pts], mk, label=rule)
        a3.plot(rs, [m["tf_mean_kl"] for _, m in pts], mk, label=rule)
    full = summary.get("full prefill", {})
    cpu = "mean_cpu_s" in full
    a1.axhline(full.get("mean_cpu_s" if cpu else "mean_ttft_s", 0), color="red", ls="--", label="full prefill")
    if "prefix cache" in summary:
        a1.axhline(summary["prefix cache"].get("mean_cpu_s" if cpu else "mean_ttft_s", 0), color="gray", ls=":",
                   label="prefix cache only")
    a1.set_ylabel("mean TTFT, CPU s" if cpu else "mean TTFT (s)")
    a1.set_title("time to first token")
    a2.axhline(0.95, color="green", ls=":", lw=1, label="target 0.95 (r=0.15)")
    a2.axhline(0.97, color="olive", ls=":", lw=1, label="target 0.97 (r=0.30)")
    a2.set_title("teacher-forced top-1 agreement with full prefill")
    r0 = next((m for m in summary.values() if m.get("recompute_ratio") == 0.0), None)
    if r0 is not None:
        a3.axhline(0.5 * r0["tf_mean_kl"], color="green", ls=":", lw=1, label="target: 0.5 x KL at r=0")
    a3.set_ylabel("KL(full || method), nats")
    a3.set_title("teacher-forced mean KL")
    for ax in (a1, a2, a3):
        ax.set_xlabel("recompute ratio r")
        ax.legend(fontsize=7)
    a1.set_ylim(bottom=0)
    a3.set_ylim(bottom=0)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
