"""``ragcache bench ...``: each benchmark prints a table, writes JSON under bench/results/ and draws a PNG
(the PNG only with matplotlib, from ``pip install 'ragcache[bench]'``; without it the plot is skipped with
one line naming the extra, after the JSON and table: ``benchmarks.plotting``).

To add a benchmark ``NAME``: write ``benchmarks/NAME.py`` (top level of the checkout, not in the wheel) with a ``main(**options) -> dict``
that prints, writes ``json_path`` and then draws ``plot_path`` through
``benchmarks.plotting.draw``; then register it here::

    @bench_app.command("NAME")
    def bench_NAME(json_path: str = json_option("NAME"), plot_path: str = plot_option("NAME"), ...) -> None:
        \"\"\"One line for --help.\"\"\"
        run_bench("NAME", json_path=json_path, plot_path=plot_path, ...)

``run_bench`` imports ``benchmarks.NAME`` lazily (so ``ragcache --help`` stays fast) and turns
user errors into one ``error:`` line.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from ragcache.app.argv import number_in
from ragcache.app.output import make_console, run_or_exit
from ragcache.engine.blend.rules import rules_help

bench_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Benchmarks: print a table, write JSON and draw a PNG "
                                                   "(the PNG needs matplotlib: pip install 'ragcache[bench]').")
console = make_console()


def data_dir() -> Path:
    """Benchmark data: ``$RAGCACHE_DATA_DIR``, else ``shared/data`` beside the checkout."""
    from ragcache.config import Config

    cfg = run_or_exit(console, Config.from_env)
    return cfg.data_dir or Path(__file__).resolve().parents[3] / "shared" / "data"


def json_option(name: str) -> Any:
    return typer.Option(f"bench/results/{name}.json", "--json", help="Where to write the JSON results.")


def musique_option() -> Any:
    return typer.Option(None, help="MuSiQue sample (JSON list); default $RAGCACHE_DATA_DIR/musique_s.json.")


def musique(data: str | None) -> str:
    """The MuSiQue sample a blend benchmark reads: ``data``, else ``$RAGCACHE_DATA_DIR/musique_s.json``."""
    return data or str(data_dir() / "musique_s.json")


def plot_option(name: str) -> Any:
    return typer.Option(f"bench/results/{name}.png", "--plot", help="Where to draw the PNG.")


NO_CHECKOUT = ("the benchmarks are not in the ragcache wheel: run `ragcache bench` inside a checkout of the "
               "ragcache repository (git clone it, `pip install -e '.[dev]'`, then `ragcache bench ...` in that folder)")


def checkout_root() -> Path | None:
    """The repository checkout whose ``benchmarks/`` package ``ragcache bench`` runs: the folder above
    an editable install's ``ragcache`` package, else the working directory or the nearest parent with
    both ``ragcache/`` and ``benchmarks/`` in it; ``None`` outside a checkout (an installed wheel)."""
    here = Path(__file__).resolve().parents[2]
    cwd = Path.cwd().resolve()
    for root in (here, cwd, *cwd.parents):
        if (root / "benchmarks" / "__init__.py").is_file() and (root / "ragcache" / "__init__.py").is_file():
            return root
    return None


def load_benchmark(name: str) -> Any:
    """Import ``benchmarks.<name>`` from the checkout (:func:`checkout_root`).

    Raises:
        ImportError: not run from a checkout (the message says how to get one).
    """
    try:
        return importlib.import_module(f"benchmarks.{name}")
    except ModuleNotFoundError as e:
        if e.name not in ("benchmarks", f"benchmarks.{name}"):
            raise
    root = checkout_root()
    if root is None:
        raise ImportError(NO_CHECKOUT)
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    return importlib.import_module(f"benchmarks.{name}")


def run_bench(name: str, **options: Any) -> Any:
    """Run ``benchmarks.<name>.main(**options)`` (the ``benchmarks/`` package of the checkout)."""
    module = run_or_exit(console, load_benchmark, name)
    out = run_or_exit(console, module.main, **options)
    written = [Path(options[k]).resolve() for k in ("json_path", "plot_path") if options.get(k)]
    for path in (p for p in written if p.is_file()):  # relative paths land under the working directory
        console.print(f"written: {path}", markup=False, highlight=False, soft_wrap=True)
    return out


@bench_app.command("prefix")
def bench_prefix(
    json_path: str = json_option("prefix"),
    plot_path: str = plot_option("prefix"),
    prefix_tokens: int = typer.Option(2000, help="Length of the stable system prefix (tokens)."),
    question_tokens: int = typer.Option(50, help="Length of each question (tokens)."),
    questions: int = typer.Option(5, min=1, max=5, help="Number of different questions."),
    model: Optional[str] = typer.Option(None, help="LLM folder or cached HF id (default: embedded SmolLM2)."),
) -> None:
    """TTFT with and without a warm exact prefix cache."""
    run_bench("prefix", json_path=json_path, plot_path=plot_path, prefix_tokens=prefix_tokens,
              question_tokens=question_tokens, n_questions=questions, model=model)


@bench_app.command("blend")
def bench_blend(
    data: Optional[str] = musique_option(),
    start: int = typer.Option(0, help="First item (0-49 is the development split, 50-149 evaluation)."),
    end: int = typer.Option(50, help="One past the last item."),
    json_path: str = json_option("blend"),
    plot_path: str = plot_option("blend"),
    ratios: str = typer.Option("0.05,0.10,0.15,0.30,0.50,1.0", help="Comma-separated recompute ratios (r=0 always runs)."),
    rank_by: str = typer.Option("cacheblend", "--rank-by", "--rules",
                                help="Comma-separated KV selection rules run at every ratio (--rules: their former "
                                     f"name): cacheblend (= deviation), {rules_help()}."),
    threads: Optional[int] = typer.Option(None, help="torch threads (default: RAGCACHE_BENCH_THREADS or torch's)."),
) -> None:
    """CacheBlend vs full prefill, prefix-only and full reuse on MuSiQue (items 0-49 dev, 50-149 evaluation)."""
    run_bench("blend", data=musique(data), start=start, end=end, json_path=json_path,
              plot_path=plot_path, ratios=[float(r) for r in ratios.split(",") if r.strip()], threads=threads,
              rules=[r.strip() for r in rank_by.split(",") if r.strip()])


@bench_app.command("blend-variants")
def bench_blend_variants(
    data: Optional[str] = musique_option(),
    start: int = typer.Option(0, help="First development item (0-49 only)."),
    end: int = typer.Option(8, help="One past the last item (<= 50)."),
    json_path: str = typer.Option("bench/results/blend_variants_dev.json", "--json", help="Where to write the JSON."),
    variants: str = typer.Option("", help="Semicolon-separated variant names (default: all)."),
    threads: int = typer.Option(1, help="torch threads."),
    resume: bool = typer.Option(False, help="Keep the items already in --json when they end at --start."),
) -> None:
    """CacheBlend selection variants (check layer, K/V deviation, gradual filtering, chunk heads, sink) on dev items."""
    run_bench("blend_variants", data=musique(data), start=start, end=end,
              json_path=json_path, threads=threads, resume=resume,
              names=[v.strip() for v in variants.split(";") if v.strip()] or None)


@bench_app.command("blend-ties")
def bench_blend_ties(
    data: Optional[str] = musique_option(),
    start: int = typer.Option(0, help="First item (development items 0-49 only)."),
    end: int = typer.Option(25, help="One past the last item (<= 50)."),
    ratios: str = typer.Option("0.3,0.5", help="Comma-separated recompute ratios (infoflow, prefix-conditioned chunks)."),
    answer_tokens: int = typer.Option(32, min=1, help="Teacher-forced answer length (tokens)."),
    threads: Optional[int] = typer.Option(None, help="torch threads (default: torch's)."),
    json_path: str = json_option("blend_ties_dev"),
    plot_path: str = plot_option("blend_ties_dev"),
) -> None:
    """Where a blend's top-1 disagreements fall: agreement by the full prefill's top-1 margin (near ties)."""
    run_bench("blend_ties", data=musique(data), start=start, end=end, ratios=ratios, answer_tokens=answer_tokens,
              threads=threads, json_path=json_path, plot_path=plot_path, console=console)


@bench_app.command("blend-peer")
def bench_blend_peer(
    data: Optional[str] = musique_option(),
    start: int = typer.Option(50, help="First item (50-149 is the evaluation split)."),
    end: int = typer.Option(55, help="One past the last item."),
    json_path: str = typer.Option("bench/results/blend_peer.json", "--json", help="Where to write the JSON."),
    ratio: float = typer.Option(0.15, callback=number_in(0.0, 1.0, "a share of the prompt's tokens"),
                                help="Recompute ratio of both caches."),
    rank_by: str = typer.Option("infoflow", "--rank-by", "--rule",
                                help=f"ragcache's KV selection rule (--rule: its former name): {rules_help()}."),
    threads: int = typer.Option(1, help="torch threads."),
) -> None:
    """kvboost (pip install 'ragcache[bench]') vs ragcache's chunk cache when the same documents come back reordered."""
    run_bench("blend_peer", data=musique(data), start=start, end=end,
              json_path=json_path, ratio=ratio, rule=rank_by, threads=threads)


@bench_app.command("semantic")
def bench_semantic(
    pairs: Optional[str] = typer.Option(None, help="Labelled question pairs (JSONL); default "
                                        "$RAGCACHE_DATA_DIR/semantic_pairs_dev.jsonl."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Where to write the JSON results (default "
                                            "bench/results/semantic.json, or semantic_stream.json with --stream)."),
    scale: str = typer.Option("10000,100000", help="Stored-entry counts for the latency runs."),
    stream: bool = typer.Option(False, "--stream", help="The stream benchmark instead: QQP duplicate clusters in "
                                "a random order with repeats (pairs default $RAGCACHE_DATA_DIR/qqp_dev_20k.jsonl); "
                                "static thresholds, max_error 0.01/0.02/0.05 and GPTCache's default."),
    rows: int = typer.Option(3000, help="--stream: QQP pairs whose clusters make the stream."),
    qqp: Optional[str] = typer.Option(None, help="Data folder with qqp_dev_20k.jsonl and qqp_dev.jsonl: also run "
                                      "the QQP held-out split (default: $RAGCACHE_DATA_DIR when --pairs is not given, "
                                      "else skipped; 'none' to skip)."),
) -> None:
    """Precision / recall / false hits of the semantic cache vs plain cosine and GPTCache; lookup latency."""
    if stream:
        run_bench("semantic_stream", data=pairs or str(data_dir() / "qqp_dev_20k.jsonl"),
                  json_path=json_path or "bench/results/semantic_stream.json", rows=rows)
        return
    q = (str(data_dir()) if pairs is None else None) if qqp is None else (None if qqp.lower() == "none" else qqp)
    run_bench("semantic", pairs=pairs or str(data_dir() / "semantic_pairs_dev.jsonl"),
              json_path=json_path or "bench/results/semantic.json", scale=[int(s) for s in scale.split(",") if s.strip()],
              qqp=q)


@bench_app.command("pair-model")
def bench_pair_model(
    json_path: str = json_option("semantic_pair_model"),
    plot_path: str = plot_option("semantic_pair_model"),
    data: str = typer.Option(None, help="Folder of the development data (the held-out parts are read); default "
                                        "$RAGCACHE_DATA_DIR."),
) -> None:
    """The default hit decision (pair model) against the rules and plain cosine on held-out pairs; its latency."""
    run_bench("semantic_pair_model", data=data or str(data_dir()), json_path=json_path, plot_path=plot_path)


@bench_app.command("provider")
def bench_provider(json_path: str = json_option("provider"), plot_path: str = plot_option("provider")) -> None:
    """Naive vs ragcache prompt layout against the local Anthropic-compatible server: cache read share and cost."""
    run_bench("provider", json_path=json_path, plot_path=plot_path)




@bench_app.command("kvquant")
def bench_kvquant(
    data: Optional[str] = musique_option(),
    start: int = typer.Option(0, help="First item (development items 0-49 only)."),
    end: int = typer.Option(10, help="One past the last item (<= 50)."),
    formats: str = typer.Option("fp16,int8,int4", help="Chunk formats, optional :GROUP_SIZE (e.g. int4:128)."),
    decode_tokens: int = typer.Option(2000, min=0, help="Long-generation length (0 skips the decode part)."),
    decode_item: int = typer.Option(0, help="Item whose prompt the decode runs start from."),
    residual_length: int = typer.Option(128, min=1, help="QuantizedCache residual length (tokens)."),
    json_path: str = json_option("kvquant"),
    plot_path: str = plot_option("kvquant"),
) -> None:
    """fp16 / int8 / int4 chunk KV (size, load time, CacheBlend fidelity) and a 4-bit quantized decode cache."""
    run_bench("kvquant", data=musique(data), start=start, end=end, formats=formats,
              decode_tokens=decode_tokens, decode_item=decode_item, residual_length=residual_length,
              json_path=json_path, plot_path=plot_path, console=console)


@bench_app.command("decode-check")
def bench_decode_check(
    data: Optional[str] = musique_option(),
    start: int = typer.Option(0, help="First item (development items 0-49 only)."),
    end: int = typer.Option(6, help="One past the last item (<= 50)."),
    top_k: int = typer.Option(3, min=1, help="Passages per prompt."),
    answer_tokens: int = typer.Option(32, min=1, help="Teacher-forced answer length (tokens)."),
    settings: str = typer.Option("4:128:0,4:128:4", help="bits:residual:sink per setting, comma-separated."),
    json_path: str = json_option("decode_check"),
    plot_path: str = plot_option("decode_check"),
) -> None:
    """Quantized decode cache vs exact decoding (teacher-forced agreement, Wilson bound), with and without sinks."""
    run_bench("decode_check", data=musique(data), start=start, end=end, top_k=top_k,
              answer_tokens=answer_tokens, settings=settings, json_path=json_path, plot_path=plot_path,
              console=console)


@bench_app.command("shared")
def bench_shared(
    json_path: str = json_option("shared"),
    plot_path: str = plot_option("shared"),
    scale: str = typer.Option("10000,100000", help="Entries per semantic latency run, comma-separated."),
    pairs: Optional[str] = typer.Option(None, help="Paraphrase pairs for the replica stream (JSONL); default "
                                                   "$RAGCACHE_DATA_DIR/semantic_pairs_dev.jsonl."),
    parts: str = typer.Option("semantic,chunks,replicas,single_flight", help="Which measurements to run."),
) -> None:
    """Shared caches: PostgreSQL vs FAISS lookup, Valkey chunk fetch vs recompute, replicas, single flight.

    Starts PostgreSQL + pgvector and Valkey on loopback unless RAGCACHE_SEMANTIC_URL / RAGCACHE_KV_URL are set.
    """
    run_bench("shared", json_path=json_path, plot_path=plot_path,
              scale=[int(s) for s in scale.split(",") if s.strip()],
              pairs=pairs or str(data_dir() / "semantic_pairs_dev.jsonl"), parts=parts)


@bench_app.command("prefix-hits")
def bench_prefix_hits(
    json_path: str = json_option("prefix_hits"),
    plot_path: str = plot_option("prefix_hits"),
    sizes: str = typer.Option("1000,3500", help="Comma-separated prompt lengths (tokens)."),
    repeats: int = typer.Option(2, min=1, help="Runs per point; the best is kept."),
    threads: int = typer.Option(1, min=1, help="torch threads."),
    model: Optional[str] = typer.Option(None, help="HF model id or local directory (default: the embedded SmolLM2-135M-Instruct)."),
) -> None:
    """TTFT after prefix hits of several sizes vs the cold prefill, masked vs maskless attention."""
    run_bench("prefix_hits", json_path=json_path, plot_path=plot_path,
              sizes=tuple(int(s) for s in sizes.split(",") if s.strip()), repeats=repeats, threads=threads,
              model=model, console=console)


@bench_app.command("workload")
def bench_workload(
    json_path: str = json_option("workload"),
    plot_path: str = plot_option("workload"),
    requests: int = typer.Option(60, min=1, help="Requests per stream (>= 60 for a result)."),
    regimes: str = typer.Option("novel,zipf,demo", help="Comma-separated document-reuse regimes: novel (no "
                                "document repeats), zipf (skewed topic popularity), demo (the demo's session, again "
                                "and again)."),
    configs: str = typer.Option("defaults,every_miss,prefix_only", help="Comma-separated configurations: defaults "
                                "(prefix + chunk cache at the defaults), every_miss (every missed document's chunk KV "
                                "computed after its answer, as before), prefix_only (chunk cache off), no_cache."),
    max_new_tokens: int = typer.Option(16, min=1, help="Answer tokens per request."),
    threads: int = typer.Option(1, min=1, help="torch threads."),
    topics: int = typer.Option(24, min=1, help="Topics of the zipf regime."),
    zipf_s: float = typer.Option(1.1, min=0.0, help="Exponent of the zipf regime's popularity."),
    seed: int = typer.Option(0, help="Seed of the streams."),
    limit: Optional[int] = typer.Option(None, min=1, help="Requests per stream for a smoke run (overrides --requests)."),
    model: Optional[str] = typer.Option(None, help="HF model id or local directory (default: RAGCACHE_MODEL, the "
                                        "embedded SmolLM2-135M-Instruct)."),
    segment: int = typer.Option(10, min=1, help="Requests one configuration answers before the next takes the same "
                                "ones (configurations interleaved, order turned round every segment, so they share "
                                "the machine's load)."),
) -> None:
    """Streams of RAG requests over the demo's corpus: where chunk KV reuse pays (CPU, TTFT, reuse, chunks read again)."""
    run_bench("workload", json_path=json_path, plot_path=plot_path, requests=requests,
              regimes=tuple(r.strip() for r in regimes.split(",") if r.strip()),
              configs=tuple(c.strip() for c in configs.split(",") if c.strip()), max_new_tokens=max_new_tokens,
              threads=threads, topics=topics, zipf_s=zipf_s, seed=seed, limit=limit, model=model, segment=segment,
              console=console)


@bench_app.command("lexicon")
def bench_lexicon(
    json_path: str = json_option("lexicon"),
    plot_path: str = plot_option("lexicon"),
    repeats: int = typer.Option(5, help="Fresh processes per method."),
) -> None:
    """First WordNet lookup of a process: lazy reads against parsing the whole database."""
    run_bench("lexicon", json_path=json_path, plot_path=plot_path, repeats=repeats)


@bench_app.command("stemmers")
def bench_stemmers(json_path: str = json_option("stemmers"),
                   repeats: int = typer.Option(3, help="Fresh processes per import.")) -> None:
    """The guards' suffix stemmer against nltk's Porter / Snowball: import cost and false joins."""
    run_bench("stemmers", json_path=json_path, repeats=repeats)


@bench_app.command("ask")
def bench_ask(
    json_path: str = json_option("ask_latency"),
    plot_path: str = plot_option("ask_latency"),
    docs: Optional[str] = typer.Option(None, help="Folder to ask over (default: three short notes the bench writes)."),
    question: str = typer.Option("How do I rotate the API keys?", help="The question asked each time."),
    paraphrase: str = typer.Option("Rotating the API keys: how?", help="A paraphrase of it, asked as often."),
    repeats: int = typer.Option(7, help="Repeated asks (each a fresh process)."),
    home: Optional[str] = typer.Option(None, help="Folder for the bench's answers / index / KV (default $RAGCACHE_HOME)."),
    against: Optional[list[str]] = typer.Option(None, help="Another checkout's root to time interleaved (repeatable)."),
) -> None:
    """A repeated `ragcache ask` end to end, process start included: wall and CPU time, load."""
    run_bench("ask", json_path=json_path, plot_path=plot_path, docs=docs, question=question, paraphrase=paraphrase,
              repeats=repeats, home=home, against=against)


@bench_app.command("ask-rewordings")
def bench_ask_rewordings(
    json_path: str = json_option("ask_rewordings"),
    plot_path: str = plot_option("ask_rewordings"),
    pairs: Optional[str] = typer.Option(None, help="Pairs (JSONL: a, b, label, kind, split); default "
                                                   "bench/data/ask_wiki_pairs.jsonl of the checkout."),
    docs: Optional[str] = typer.Option(None, help="Notes folder; default bench/data/ask_wiki of the checkout."),
    split: str = typer.Option("all", help="Which pairs: dev, heldout or all."),
    top_k: Optional[int] = typer.Option(None, help="Documents retrieved per question (default: the settings')."),
) -> None:
    """Rewordings and near misses through `ragcache ask` with real retrieval: served with and without
    the stored questions' retrieval (no language model runs)."""
    run_bench("ask_rewordings", json_path=json_path, plot_path=plot_path, pairs=pairs, docs=docs, split=split,
              top_k=top_k)


__all__ = ["bench_app", "data_dir", "json_option", "plot_option", "run_bench"]


@bench_app.command("lint")
def bench_lint(
    json_path: str = json_option("lint"),
    data: Optional[str] = typer.Option(None, help="Labelled prompt set (JSONL); default "
                                                  "tests/data/system_prompts/prompts.jsonl of the checkout."),
) -> None:
    """Volatile-text lint on real agent-framework system prompts: false moves, dates moved / missed."""
    run_bench("lint", json_path=json_path, data=data)
