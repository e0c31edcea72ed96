"""``ragcache bench provider``: Anthropic prompt-caching savings, naive prompt vs ragcache layout.

A 20-question session over a fixed corpus (the docstrings of 19 Python
standard-library functions, read with :mod:`inspect` from the running
interpreter; over 3,000 tokens with the system text) goes through the official
``anthropic`` SDK to the local Anthropic-compatible server
(:mod:`ragcache.server.anthropic`), which applies Anthropic's caching rules and
reports the usage fields. Every question sends the whole corpus:

* **naive** -- as many RAG tutorials write it: the current date and time in the
  system text, the documents in retrieval-score order (lexical overlap with
  the question) in one user string, no ``cache_control``;
* **naive + auto cache** -- the same prompt with the request-level
  ``cache_control`` (automatic caching marks the last block): every request
  writes its prefix at 1.25x and none reads it, because the prefix changes;
* **ragcache** -- :class:`~ragcache.prompt.layout.PromptLayout` (lint moves the date into
  the volatile segment, canonical document order) with
  :class:`~ragcache.providers.anthropic.backend.AnthropicBackend` breakpoints.

Measured: share of input tokens read from cache, written, uncached (all
requests, and from request 2 on), cost relative to no caching at Claude Sonnet
list prices ($3 / MTok input, $15 / MTok output). Token counts are the server
tokenizer's (SmolLM2's); the answering model is a tiny random Llama with that
tokenizer by default (the numbers measured do not depend on the weights),
or any model given with ``model=``.
"""

from __future__ import annotations

import datetime as dt
import importlib
import inspect
import json
import os
import platform
import re
import sys
from ragcache.config import Config
from benchmarks.plotting import draw
from pathlib import Path
from typing import Any

FUNCTIONS = [
    "textwrap.dedent", "textwrap.fill", "textwrap.shorten", "textwrap.indent", "json.dumps", "json.loads",
    "bisect.bisect_left", "bisect.insort_right", "heapq.merge", "fnmatch.fnmatch", "functools.lru_cache",
    "functools.reduce", "statistics.median", "statistics.stdev", "difflib.get_close_matches", "string.capwords",
    "base64.b64encode", "itertools.groupby", "collections.namedtuple",
]
QUESTIONS = [
    "How does dedent treat lines that consist solely of whitespace?",
    "What does textwrap.fill return?",
    "How does shorten truncate text that is too long?",
    "Which lines does textwrap.indent add the prefix to by default?",
    "What does json.dumps do when ensure_ascii is false?",
    "How do I make json.loads parse floats as Decimal?",
    "What index does bisect_left return when the item is already present?",
    "Where does insort_right insert an item equal to existing ones?",
    "Does heapq.merge read all inputs into memory at once?",
    "Is fnmatch case sensitive?",
    "What does the maxsize argument of lru_cache control?",
    "How does functools.reduce use the initial value?",
    "What does statistics.median return for an even number of data points?",
    "When does statistics.stdev raise an error?",
    "What does the cutoff parameter of get_close_matches mean?",
    "How does string.capwords split and join the words?",
    "What does the altchars argument of b64encode do?",
    "Does itertools.groupby need sorted input?",
    "How do I give a namedtuple default values?",
    "Which of these functions work on sorted sequences?",
]
SYSTEM_TEMPLATE = ("You are a Python documentation assistant. Answer the question using only the reference "
                   "documents, and name the function you used. Current date and time: {now}.")
NAIVE_USER_TEMPLATE = "Use the following context to answer.\n\nContext:\n{context}\n\nQuestion: {question}"


def corpus() -> list[dict[str, Any]]:
    """The fixed corpus: one document per function (qualified name, signature, docstring)."""
    docs = []
    for name in FUNCTIONS:
        mod, _, attr = name.rpartition(".")
        obj = getattr(importlib.import_module(mod), attr)
        try:
            sig = str(inspect.signature(obj))
        except (TypeError, ValueError):
            sig = "(...)"
        docs.append({"id": name, "text": f"{name}{sig}\n\n{inspect.getdoc(obj) or ''}",
                     "metadata": {"module": mod}})
    return docs


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z_]{3,}", text.lower()))


def retrieval_order(question: str, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Documents by descending lexical-overlap score with the question (ties by id)."""
    q = _words(question)
    return sorted(docs, key=lambda d: (-len(q & _words(d["text"])), d["id"]))


def plot(results: dict, path: str | Path) -> Path:
    """Stacked bars per configuration: share of prompt tokens read from cache, written, uncached;
    cost relative to no caching above each bar. Returns the PNG path."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError("drawing the PNG needs matplotlib: pip install 'ragcache[bench]'") from e

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["configs"])
    cfgs = [results["configs"][n] for n in names]
    read = [c["read_share"] for c in cfgs]
    write = [c["write_share"] for c in cfgs]
    unc = [c["uncached_share"] for c in cfgs]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.bar(names, read, color="#2a9d8f", label="read from cache (0.1x price)")
    ax.bar(names, write, bottom=read, color="#e9c46a", label="written to cache (1.25x)")
    ax.bar(names, unc, bottom=[r + w for r, w in zip(read, write)], color="#e76f51", label="uncached (1x)")
    for i, c in enumerate(cfgs):
        ax.text(i, 1.02, f"cost {c['cost_ratio']:.2f}x", ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("share of prompt tokens")
    ax.set_title(f"Anthropic prompt caching, {results['questions']} questions ({results['claude_model']} prices)",
                 fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.09), ncol=3, fontsize=8, frameon=False)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def summarize(runs: dict[str, dict[str, Any]], *, claude_model: str, documents: int, max_tokens: int,
              server_model: str) -> dict[str, Any]:
    """The results dict of the three runs (token shares, cost against uncached, per-request records)."""
    from ragcache.providers.anthropic.pricing import price_for

    price, _ = price_for(claude_model)
    first = runs["ragcache"]["records"][0]
    results: dict[str, Any] = {
        "benchmark": "provider", "questions": len(QUESTIONS), "documents": documents,
        "claude_model": claude_model, "prices_usd_per_mtok": {"input": price.input_per_mtok,
                                                             "output": price.output_per_mtok},
        "stable_prefix_tokens": first.cache_write_tokens + first.cache_read_tokens,
        "prompt_tokens_first_request": first.prompt_tokens, "max_tokens": max_tokens,
        "server_model": server_model,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "python": sys.version.split()[0],
                    "gpu": False},
        "configs": {},
    }
    for name, run in runs.items():
        s, recs = run["stats"], run["records"]
        later = recs[1:]
        later_prompt = sum(r.prompt_tokens for r in later)
        results["configs"][name] = {
            **s.to_dict(),
            "uncached_share": s.input_tokens / s.prompt_tokens if s.prompt_tokens else 0.0,
            "read_share_from_request_2": (sum(r.cache_read_tokens for r in later) / later_prompt
                                          if later_prompt else 0.0),
            "per_request": [r.to_dict() for r in recs],
        }
    return results


def print_table(results: dict[str, Any]) -> None:
    """The results as a rich table on stdout (shares of prompt tokens, cost against uncached)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Provider prompt caching, {results['questions']} questions, {results['claude_model']} "
                        "prices, local server")
    for col in ("config", "prompt tokens", "read", "written", "uncached", "read from req 2", "cost vs uncached",
                "cost USD"):
        table.add_column(col, justify="right" if col != "config" else "left")
    for name, c in results["configs"].items():
        table.add_row(name, str(c["prompt_tokens"]), f"{c['read_share']:.1%}", f"{c['write_share']:.1%}",
                      f"{c['uncached_share']:.1%}", f"{c['read_share_from_request_2']:.1%}",
                      f"{c['cost_ratio']:.2f}x", f"{c['cost_usd']:.4f}")
    Console(width=None if sys.stdout.isatty() else 120).print(table)


def main(json_path: str = "bench/results/provider.json", *, plot_path: str | None = "bench/results/provider.png",
         model: str | None = None,
         claude_model: str = "claude-sonnet-4-6", max_tokens: int = 8) -> dict:
    """Run the three configurations, print a rich table, write JSON; returns the results dict.

    Args:
        json_path: where to write the JSON results.
        model: local model for the server (None: a tiny random Llama with the SmolLM2 tokenizer;
            "embedded": the embedded SmolLM2-135M-Instruct; or a path / hub id).
        claude_model: model id sent in requests (its minimum cacheable length and prices apply).
        max_tokens: answer length per request (tokens).
    """
    import anthropic

    from ragcache.engine.engine import LocalEngine
    from ragcache.prompt.layout import PromptLayout
    from ragcache.models import load_model
    from ragcache.testing import tiny_llama
    from ragcache.providers.anthropic.backend import AnthropicBackend, AnthropicCaching, sdk_kwargs
    from ragcache.providers.anthropic.pricing import price_for
    from ragcache.server.app import running_server

    loaded = tiny_llama(seed=0, max_position_embeddings=8192) if model is None else \
        load_model(None if model == "embedded" else model, home=Config.from_env().paths)
    engine = LocalEngine(loaded)
    docs = corpus()
    start = dt.datetime(2026, 1, 5, 9, 0, 0)
    now = [start + dt.timedelta(seconds=37 * i) for i in range(len(QUESTIONS))]  # a session, 37 s per question
    runs: dict[str, dict[str, Any]] = {}
    with running_server(engine) as url, anthropic.Anthropic(base_url=url, api_key="local", max_retries=0) as client:
        for name in ("naive", "naive + auto cache"):
            acct = AnthropicCaching(claude_model, token_counter=engine.count_tokens, warn=False)
            recs = []
            for q, t in zip(QUESTIONS, now, strict=True):
                context = "\n\n".join(d["text"] for d in retrieval_order(q, docs))
                body = {"model": claude_model, "max_tokens": max_tokens, "temperature": 0.0,
                        "system": SYSTEM_TEMPLATE.format(now=t.isoformat(sep=" ")),
                        "messages": [{"role": "user", "content": [
                            {"type": "text", "text": NAIVE_USER_TEMPLATE.format(context=context, question=q)}]}]}
                if name != "naive":
                    body["cache_control"] = {"type": "ephemeral"}
                req = acct.prepare(body, stable_end=-1)  # no ragcache breakpoints: accounting only
                msg = client.messages.create(**sdk_kwargs(client.messages.create, req.kwargs))
                recs.append(acct.record(req, msg.usage))
            runs[name] = {"stats": acct.stats, "records": recs}
        backend = AnthropicBackend(client, claude_model, stream=True, token_counter=engine.count_tokens, warn=False)
        for q, t in zip(QUESTIONS, now, strict=True):
            lay = PromptLayout.build(question=q, system=SYSTEM_TEMPLATE.format(now=t.isoformat(sep=" ")),
                                     documents=retrieval_order(q, docs), lint="move")
            backend.generate(lay, max_new_tokens=max_tokens, temperature=0.0)
        runs["ragcache"] = {"stats": backend.stats, "records": list(backend.caching.monitor.history)}
    server_model = "tiny random Llama (SmolLM2 tokenizer)" if model is None else str(loaded.fingerprint)
    results = summarize(runs, claude_model=claude_model, documents=len(docs), max_tokens=max_tokens,
                        server_model=server_model)
    print_table(results)
    out = Path(json_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=2))
    os.replace(tmp, out)
    print(f"wrote {json_path}")
    if draw(lambda: plot(results, plot_path), plot_path):
        print(f"drew {plot_path}")
    return results


if __name__ == "__main__":
    main(*sys.argv[1:2])
