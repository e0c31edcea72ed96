"""The ``ragcache`` command: demo, ask, bench, serve, lint."""

from __future__ import annotations

import enum
import logging
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="ragcache: the caching layer for retrieval-augmented generation.")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks: print a table and write JSON.")
app.add_typer(bench_app, name="bench")
console = Console()
if not console.is_terminal:  # piped output: rich would fall back to 80 columns and wrap the tables word by word
    console = Console(width=160)
DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


class BackendName(str, enum.Enum):
    local = "local"
    anthropic_local = "anthropic-local"


def _fail(msg: str, code: int = 2) -> None:
    console.print(f"[bold red]error:[/bold red] {msg}", soft_wrap=True)
    raise typer.Exit(code)


def _run(fn, *args, **kwargs):
    """Call fn; user errors become one clear line and exit code 2, never a deep stack trace."""
    from ragcache.models import ModelNotFoundError

    try:
        return fn(*args, **kwargs)
    except (ValueError, ModelNotFoundError, ImportError, OSError) as e:
        _fail(str(e))


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log at INFO level.")) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


@app.command()
def demo(
    model: Optional[str] = typer.Option(None, help="HF model id or local directory (default: embedded SmolLM2-135M-Instruct)."),
    embedder: Optional[str] = typer.Option(None, help="sentence-transformers model (default: packaged all-MiniLM-L6-v2)."),
    backend: BackendName = typer.Option(BackendName.local, help="'local' (transformers engine) or 'anthropic-local' (real anthropic SDK "
                                              "against ragcache's local Anthropic-compatible server)."),
    top_k: int = typer.Option(4, min=1, help="Documents retrieved per question."),
    max_new_tokens: int = typer.Option(64, min=1, help="Decode budget per answer (tokens)."),
    chunk_cache: bool = typer.Option(True, help="Reuse each document's KV at any position (CacheBlend)."),
    recompute_ratio: float = typer.Option(0.15, min=0.0, max=1.0, help="CacheBlend recompute ratio r."),
) -> None:
    """Scripted RAG session over the Python standard library's docs, showing each cache layer."""
    from ragcache.app.demo import demo as run

    _run(run, model=model, embedder=embedder, backend=backend.value, top_k=top_k, max_new_tokens=max_new_tokens,
         chunk_cache=chunk_cache, recompute_ratio=recompute_ratio, console=console)


@app.command()
def ask(
    question: str = typer.Argument(..., help="The question."),
    docs: str = typer.Option(..., "--docs", help="Folder of .txt / .md files to answer from."),
    model: Optional[str] = typer.Option(None),
    embedder: Optional[str] = typer.Option(None),
    top_k: int = typer.Option(4, min=1),
    max_new_tokens: int = typer.Option(128, min=1),
) -> None:
    """Answer a question over your own folder of .txt / .md files."""
    from ragcache.app.demo import ask as run

    _run(run, question, docs, model=model, embedder=embedder, top_k=top_k, max_new_tokens=max_new_tokens,
         console=console)


@bench_app.command("prefix")
def bench_prefix(
    json_path: str = typer.Option("bench/results/prefix.json", "--json", help="Where to write the JSON results."),
    prefix_tokens: int = typer.Option(2000, help="Length of the stable system prefix (tokens)."),
    question_tokens: int = typer.Option(50, help="Length of each question (tokens)."),
    questions: int = typer.Option(5, min=1, max=5, help="Number of different questions."),
    model: Optional[str] = typer.Option(None),
) -> None:
    """TTFT with and without a warm exact prefix cache."""
    from ragcache.app.bench.prefix import main

    _run(main, json_path=json_path, prefix_tokens=prefix_tokens, question_tokens=question_tokens,
         n_questions=questions, model=model)


@bench_app.command("blend")
def bench_blend(
    data: str = typer.Option(str(DATA / "musique_s.json"), help="MuSiQue sample (JSON list)."),
    start: int = typer.Option(0, help="First item (0-49 is the development split)."),
    end: int = typer.Option(50, help="One past the last item."),
    json_path: str = typer.Option("bench/results/blend.json", "--json"),
    plot_path: str = typer.Option("bench/results/blend.png", "--plot"),
    ratios: str = typer.Option("0.05,0.10,0.15,0.30,0.50,1.0", help="Comma-separated recompute ratios (r=0 always runs)."),
    threads: Optional[int] = typer.Option(None, help="torch threads (default: RAGCACHE_BENCH_THREADS or torch's)."),
) -> None:
    """CacheBlend vs full prefill, prefix-only and full reuse on MuSiQue (items 0-49 dev, 50-149 evaluation)."""
    from ragcache.app.bench.blend import main

    _run(main, data=data, start=start, end=end, json_path=json_path, plot_path=plot_path,
         ratios=[float(r) for r in ratios.split(",") if r.strip()], threads=threads)


@bench_app.command("blend-variants")
def bench_blend_variants(
    data: str = typer.Option(str(DATA / "musique_s.json"), help="MuSiQue sample (JSON list)."),
    start: int = typer.Option(0, help="First development item (0-49 only)."),
    end: int = typer.Option(8, help="One past the last item (<= 50)."),
    json_path: str = typer.Option("bench/results/blend_variants_dev.json", "--json"),
    variants: str = typer.Option("", help="Semicolon-separated variant names (default: all)."),
    threads: int = typer.Option(1, help="torch threads."),
    resume: bool = typer.Option(False, help="Keep the items already in --json when they end at --start."),
) -> None:
    """CacheBlend selection variants (check layer, K/V deviation, gradual filtering, chunk heads, sink) on dev items."""
    from ragcache.app.bench.blend_variants import main

    _run(main, data=data, start=start, end=end, json_path=json_path, threads=threads, resume=resume,
         names=[v.strip() for v in variants.split(";") if v.strip()] or None)


@bench_app.command("semantic")
def bench_semantic(
    pairs: str = typer.Option(str(DATA / "semantic_pairs_dev.jsonl"), help="Labelled question pairs (JSONL)."),
    json_path: str = typer.Option("bench/results/semantic.json", "--json"),
    scale: str = typer.Option("10000,100000", help="Stored-entry counts for the latency runs."),
) -> None:
    """Precision / recall / false hits of the semantic cache vs plain cosine and GPTCache; lookup latency."""
    from ragcache.app.bench.semantic import main

    _run(main, pairs=pairs, json_path=json_path, scale=[int(s) for s in scale.split(",") if s.strip()])


@bench_app.command("provider")
def bench_provider(json_path: str = typer.Option("bench/results/provider.json", "--json")) -> None:
    """Naive vs ragcache prompt layout against the local Anthropic-compatible server: cache read share and cost."""
    from ragcache.app.bench.provider import main

    _run(main, json_path=json_path)


@app.command()
def serve(
    anthropic: bool = typer.Option(False, "--anthropic", help="Serve the Anthropic Messages API (required)."),
    host: str = typer.Option("127.0.0.1"),
    port: int = typer.Option(8788, min=1, max=65535),
    model: Optional[str] = typer.Option(None),
) -> None:
    """Local Anthropic-compatible server with prompt-caching semantics, answered by the local engine."""
    if not anthropic:
        _fail("only the Anthropic API is served: run `ragcache serve --anthropic`")
    from ragcache.engine.engine import LocalEngine
    from ragcache.server.anthropic import serve as run

    engine = _run(LocalEngine.from_pretrained, model)
    console.print(f"serving the Anthropic Messages API on http://{host}:{port} (model {engine.fingerprint})")
    _run(run, engine, host=host, port=port)


@app.command()
def lint(
    path: str = typer.Argument(..., help="JSON request (messages.create kwargs) or a messages list."),
    against: Optional[str] = typer.Option(None, help="A second render: report the first token where they diverge."),
) -> None:
    """Find volatile text (dates, ids, counters) inside stable prompt segments."""
    from ragcache.app.lint import run_lint as lint_cli

    code = _run(lint_cli, path, against)
    raise typer.Exit(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
