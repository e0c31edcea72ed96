"""Prefix-cache benchmark: TTFT of a long stable system prefix with and without a warm cache.

A ~2,000-token system prefix (the standard library's docstrings, so real text) plus five
different ~50-token questions, the embedded model, greedy, one new token. For each question:
TTFT with the prefix cache disabled, then TTFT with a warm prefix cache (the prefix was
computed once by an earlier, different question). Prints a table and writes JSON.
"""

from __future__ import annotations

import os
import platform
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ragcache.config import Config
from ragcache.atomic import atomic_write_json
from ragcache.app.corpus import stdlib_chunks
from benchmarks.plotting import draw

QUESTION_STEMS = (
    "Explain how to read a CSV file with a header row and convert each row into a dictionary keyed by column name",
    "Describe how to parse an ISO date string into a datetime object and then format it in another timezone",
    "Show how to sort a list of dictionaries by two keys, the first descending and the second ascending order",
    "What is the difference between shutil copy and copy2 when copying files with their metadata and permissions",
    "How can a subprocess be run with a timeout while capturing its standard output and standard error streams",
    "How do I compute a running median of a stream of numbers efficiently using the heapq module functions",
)


def machine() -> str:
    import torch

    return (f"{platform.machine()} CPU, {os.cpu_count()} cores, {platform.system()}, Python {platform.python_version()}, "
            f"torch {torch.__version__} ({torch.get_num_threads()} threads), no GPU")


def _fit(tokenizer, text: str, n: int) -> str:
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) < n:
        raise ValueError(f"source text has only {len(ids)} tokens, need {n}")
    return tokenizer.decode(ids[:n])


def plot(result: dict, path: str | Path) -> Path:
    """Bars of TTFT per question, no cache vs warm prefix cache (log scale). Returns the PNG path."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("drawing the PNG needs matplotlib: pip install 'ragcache[bench]'") from e

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["per_question"]
    xs = range(1, len(rows) + 1)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    w = 0.38
    ax.bar([x - w / 2 for x in xs], [r["ttft_cold_s"] for r in rows], w, color="#e76f51", label="no prefix cache")
    ax.bar([x + w / 2 for x in xs], [r["ttft_warm_s"] for r in rows], w, color="#2a9d8f",
           label=f"warm prefix cache ({result['expected_reused_tokens']} tokens reused)")
    ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xlabel("question")
    ax.set_ylabel("TTFT (s, log scale)")
    ax.set_title(f"Exact prefix cache: {result['system_prefix_tokens']}-token system prefix, "
                 f"{result['ttft_ratio']:.1f}x faster first token", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8, frameon=False)
    fig.text(0.01, 0.01, result["machine"], fontsize=6, color="#555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(json_path: str = "bench/results/prefix.json", prefix_tokens: int = 2000, question_tokens: int = 50,
         n_questions: int = 5, model: str | None = None, console: Console | None = None,
         plot_path: str | None = "bench/results/prefix.png") -> dict:
    """Run the benchmark; returns the results dict written to ``json_path``."""
    from ragcache.engine.engine import LocalEngine

    console = console or Console()
    engine = LocalEngine.from_pretrained(model, home=Config.from_env().paths)  # the settings home, as the CLI
    tok = engine.tokenizer
    system = _fit(tok, "\n\n".join(c.text for c in stdlib_chunks()), prefix_tokens)
    if n_questions > len(QUESTION_STEMS) - 1:
        raise ValueError(f"at most {len(QUESTION_STEMS) - 1} questions are available")
    filler = " Please answer precisely and mention the relevant functions and their parameters."
    questions = [_fit(tok, q + filler * 4, question_tokens) for q in QUESTION_STEMS[: n_questions + 1]]
    warmup, questions = questions[0], questions[1:]

    def msgs(q: str) -> list[dict]:
        return [{"role": "system", "content": system}, {"role": "user", "content": q}]

    # warm the process (first forward passes are slower) and the prefix cache with another question
    engine.generate(msgs(warmup), max_new_tokens=1)
    rows = []
    for q in questions:
        cold = engine.generate(msgs(q), max_new_tokens=1, use_prefix_cache=False)
        # the warm run must reuse only the shared prefix, never this question's own blocks:
        # reset the cache to what another question leaves in it
        engine.prefix_cache.clear()
        engine.generate(msgs(warmup), max_new_tokens=1)
        warm = engine.generate(msgs(q), max_new_tokens=1)
        prompt_len = warm.stats.prompt_tokens
        rows.append({
            "prompt_tokens": prompt_len,
            "ttft_cold_s": cold.stats.ttft_s,
            "ttft_warm_s": warm.stats.ttft_s,
            "tokens_reused": warm.stats.prefix_tokens_reused,
            "tokens_computed": warm.stats.prefill_tokens_computed,
            "same_first_token": cold.token_ids[:1] == warm.token_ids[:1],
        })
    shared = _shared_prefix_len([engine.build_prompt(msgs(q)).input_ids for q in [warmup, *questions]])
    expected = engine.prefix_cache.block_size * (shared // engine.prefix_cache.block_size)
    cold_m = statistics.mean(r["ttft_cold_s"] for r in rows)
    warm_m = statistics.mean(r["ttft_warm_s"] for r in rows)
    result = {
        "benchmark": "prefix",
        "machine": machine(),
        "model": str(engine.fingerprint),
        "block_size": engine.prefix_cache.block_size,
        "system_prefix_tokens": prefix_tokens,
        "question_tokens": question_tokens,
        "shared_prefix_tokens": shared,
        "expected_reused_tokens": expected,
        "rule": "reused = block_size * floor(shared_prefix_tokens / block_size), where shared_prefix_tokens is the "
                "chat-template prefix common to all prompts (template + system text + the user turn's opening)",
        "ttft_cold_mean_s": cold_m,
        "ttft_warm_mean_s": warm_m,
        "ttft_ratio": cold_m / warm_m if warm_m else None,
        "per_question": rows,
    }
    t = Table(title=f"prefix cache: {prefix_tokens}-token system prefix + {question_tokens}-token question ({machine()})")
    for c in ("#", "prompt tokens", "TTFT no cache (s)", "TTFT warm (s)", "ratio", "reused", "computed", "same 1st token"):
        t.add_column(c, justify="right")
    for i, r in enumerate(rows, 1):
        t.add_row(str(i), str(r["prompt_tokens"]), f"{r['ttft_cold_s']:.2f}", f"{r['ttft_warm_s']:.3f}",
                  f"{r['ttft_cold_s'] / r['ttft_warm_s']:.1f}x", str(r["tokens_reused"]), str(r["tokens_computed"]),
                  str(r["same_first_token"]))
    t.add_row("mean", "", f"{cold_m:.2f}", f"{warm_m:.3f}", f"{result['ttft_ratio']:.1f}x", str(expected), "", "")
    console.print(t)
    _write_json(json_path, result)
    console.print(f"wrote {json_path}")
    if draw(lambda: plot(result, plot_path), plot_path):
        console.print(f"drew {plot_path}")
    return result


def _shared_prefix_len(seqs: list[list[int]]) -> int:
    n = min(len(s) for s in seqs)
    for i in range(n):
        if len({s[i] for s in seqs}) > 1:
            return i
    return n


def _write_json(path: str, data: dict) -> None:
    atomic_write_json(path, data)
