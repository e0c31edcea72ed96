"""The ``ragcache`` command: demo, ask, serve, lint, cache, bench.

Settings come from ``RAGCACHE_*`` environment variables (:mod:`ragcache.config`); an option given
on the command line wins. Sub-command groups live in their own modules: ``ragcache cache ...``
in :mod:`ragcache.app.cache_cmd`, ``ragcache bench ...`` in :mod:`ragcache.app.bench_cmd`.
"""

from __future__ import annotations

import enum
import logging
import sys
from typing import Optional

import typer

from ragcache.answering import CACHE_TRUNCATED
from ragcache.app.argv import RagcacheGroup, number_in
from ragcache.app.bench_cmd import bench_app
from ragcache.app.cache_cmd import cache_app
from ragcache.app.calibrate_cmd import calibrate_app
from ragcache.app.output import error, make_console, print_json, run_or_exit, say, show_own_warnings
from ragcache.config import Config, default_help
from ragcache.limits import THRESHOLD_FLOOR, low_threshold_message

app = typer.Typer(cls=RagcacheGroup, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="ragcache: the caching layer for retrieval-augmented generation. Settings: RAGCACHE_* "
                       "environment variables (`ragcache config` shows them); options override them.")
app.add_typer(bench_app, name="bench")
app.add_typer(cache_app, name="cache")
app.add_typer(calibrate_app, name="calibrate")
console = make_console()


def config(**overrides: object) -> Config:
    """The configuration from the environment, with command-line ``overrides`` (None = not given)."""
    return run_or_exit(console, Config.from_env, **overrides)


class BackendName(str, enum.Enum):
    """What ``ragcache demo --backend`` takes (:data:`ragcache.app.demo.DEMO_BACKENDS`)."""

    local = "local"
    anthropic_local = "anthropic-local"
    anthropic = "anthropic"
    openai = "openai"


def _version(value: bool) -> None:
    if value:
        from ragcache import __version__

        sys.stdout.write(f"ragcache {__version__}\n")
        raise typer.Exit()


@app.callback()
def _main(
    verbose: bool = typer.Option(False, "--verbose", "-v",
                                 help="Log at INFO level: why a semantic lookup missed, what was re-embedded "
                                      "(before or after the sub-command)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("ragcache").setLevel(logging.INFO if verbose else logging.WARNING)
    show_own_warnings()  # PromptCacheWarning and the like: one line, no source path


@app.command()
def demo(
    model: Optional[str] = typer.Option(None, help="LLM: a local model folder or cached HF id (default: "
                                                   f"{default_help('model')}); with --backend anthropic|openai, "
                                                   "the provider's model id."),
    embedder: Optional[str] = typer.Option(None, help="sentence-transformers embedder (default: "
                                                      f"{default_help('embedder')})."),
    backend: BackendName = typer.Option(BackendName.local, help="Who answers a miss: 'local' (transformers engine), "
                                        "'anthropic-local' (real anthropic SDK against ragcache's local "
                                        "Anthropic-compatible server), or 'anthropic' / 'openai' (the provider's API, "
                                        "as `ragcache ask --backend`: --model is its model id, the key from "
                                        "ANTHROPIC_API_KEY / OPENAI_API_KEY, the URL from ANTHROPIC_BASE_URL / "
                                        "OPENAI_BASE_URL; no local model is loaded)."),
    top_k: Optional[int] = typer.Option(None, min=1,
                                        help=f"Documents retrieved per question (default {default_help('top_k')})."),
    max_new_tokens: int = typer.Option(64, min=1, help="Decode budget per answer (tokens)."),
    chunk_cache: bool = typer.Option(True, help="Reuse each document's KV at any position (CacheBlend)."),
    recompute_ratio: Optional[float] = typer.Option(None, callback=number_in(0.0, 1.0, "a share of the prompt's tokens"),
                                                    help="CacheBlend recompute ratio r, used as given and labelled "
                                                         f"approximate (default {default_help('recompute_ratio')})."),
) -> None:
    """Scripted RAG session over the Python standard library's docs, showing each cache layer."""
    from ragcache.app.demo import demo as run

    from ragcache.app.runtime import PROVIDERS

    provider = backend.value in PROVIDERS  # --model is the provider's id, not a local model
    cfg = config(model=None if provider else model, embedder=embedder, top_k=top_k, recompute_ratio=recompute_ratio)
    run_or_exit(console, run, cfg=cfg, backend=backend.value, model=model if provider else None,
                max_new_tokens=max_new_tokens, chunk_cache=chunk_cache, console=console)


@app.command()
def ask(
    question: str = typer.Argument(..., metavar="QUESTION", help="The question (quote it), or - to read it from stdin."),
    docs: str = typer.Option(..., "--docs", help="Folder (or one file) of .txt / .md notes to answer from."),
    model: Optional[str] = typer.Option(None, help=f"LLM folder or cached HF id (default {default_help('model')})."),
    embedder: Optional[str] = typer.Option(None, help=f"Embedder folder or id (default {default_help('embedder')})."),
    top_k: Optional[int] = typer.Option(None, min=1, help=f"Chunks retrieved (default {default_help('top_k')})."),
    max_new_tokens: Optional[int] = typer.Option(None, min=1,
                                                  help=f"Decode budget (default {default_help('max_new_tokens')})."),
    system: Optional[str] = typer.Option(None, help="System text instead of the default instructions (part of the cache key)."),
    threshold: Optional[float] = typer.Option(None, callback=number_in(-1.0, 1.0, "a cosine similarity"), help="Semantic cache cosine threshold for this "
                                              "question (default $RAGCACHE_THRESHOLD, else the decider's gate: 0.55 with "
                                              "the pair model (the default), 0.75 with the learned verifier, 0.94 with the "
                                              "guards alone; 1.0 = exact repeats only; "
                                              f"below {THRESHOLD_FLOOR:g} refused unless --allow-low-threshold)."),
    allow_low_threshold: bool = typer.Option(False, "--allow-low-threshold", help=f"Accept a --threshold below "
                                             f"{THRESHOLD_FLOOR:g}, where answers to other questions may be served "
                                             "(also RAGCACHE_ALLOW_LOW_THRESHOLD=1)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither look in nor write to the semantic answer cache."),
    refresh: bool = typer.Option(False, "--refresh", help="Skip the lookup, answer with the model and replace the stored answer."),
    cache_truncated: bool = typer.Option(CACHE_TRUNCATED, help="Store an answer cut at the token budget too; it is served "
                                         "only to the same budget (a larger --max-new-tokens asks the model)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (answer, layer, similarity, usage, timings)."),
    backend: str = typer.Option("local", help="Who answers a miss: local (the engine over --model), anthropic or "
                                "openai (the provider's API: --model is its model id; the key from ANTHROPIC_API_KEY / "
                                "OPENAI_API_KEY, the URL from ANTHROPIC_BASE_URL / OPENAI_BASE_URL)."),
) -> None:
    """Answer a question over your own folder of .txt / .md files (semantic cache first, model on a miss)."""
    from ragcache.app.ask import ask as run

    if no_cache and refresh:
        error(console, "--no-cache and --refresh exclude each other: --refresh stores the new answer, --no-cache stores nothing")
        raise typer.Exit(2)
    cfg = config()
    low = None if threshold is None else low_threshold_message(threshold, "--threshold")
    if low and not (allow_low_threshold or cfg.allow_low_threshold):
        error(console, f"{low}. Fix: use --threshold {THRESHOLD_FLOOR:g} or more (1.0 = exact repeats only), or add "
                       "--allow-low-threshold to use it anyway")
        raise typer.Exit(2)
    if question == "-":
        question = run_or_exit(console, read_stdin_question)
    r = run_or_exit(console, run, question, docs, cfg=cfg, model=model, embedder=embedder, top_k=top_k,
                    max_new_tokens=max_new_tokens, system=system, threshold=threshold,
                    lookup=not (no_cache or refresh), store=not no_cache, cache_truncated=cache_truncated,
                    console=console, quiet=as_json, backend=backend)
    if as_json:
        print_json(r.to_dict())


def read_stdin_question() -> str:
    """The question from stdin (``ragcache ask -``): UTF-8, trailing newlines dropped.

    Raises:
        ValueError: stdin is not UTF-8 text.
    """
    if sys.stdin.isatty():
        sys.stderr.write("reading the question from stdin; end it with Ctrl-D\n")
    data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
    try:
        return data.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise ValueError(f"the question on stdin is not UTF-8 text ({e.reason} at byte {e.start})") from None


@app.command()
def serve(
    anthropic: bool = typer.Option(False, "--anthropic", help="Accepted for compatibility: the server always answers "
                                   "both the Anthropic Messages API and the OpenAI Chat Completions API."),
    upstream: Optional[str] = typer.Option(None, help="Run as a caching proxy in front of this Anthropic API base URL "
                                           "(e.g. https://api.anthropic.com; key from ANTHROPIC_API_KEY or the client's "
                                           "x-api-key). Default $RAGCACHE_UPSTREAM; unset: answer with the local model."),
    host: Optional[str] = typer.Option(None, help=f"Address to bind (default {default_help('host')})."),
    port: Optional[int] = typer.Option(None, min=1, max=65535, help=f"Port (default {default_help('port')})."),
    model: Optional[str] = typer.Option(None, help="Local mode: LLM folder or cached HF id "
                                                   f"(default {default_help('model')})."),
    semantic: bool = typer.Option(True, help="Proxy mode: answer repeated questions from the semantic cache."),
    metrics: Optional[str] = typer.Option(None, help=f"off | prometheus | otel (default {default_help('metrics')}); "
                                          "prometheus also serves GET /metrics."),
    key: Optional[str] = typer.Option(None, help="Key(s) callers must send as x-api-key or 'Authorization: Bearer' "
                                      "(comma-separated; default $RAGCACHE_SERVE_KEY, which keeps it out of `ps`)."),
    insecure: bool = typer.Option(False, "--insecure", help="Serve on a non-loopback address without a key."),
    tenant_header: Optional[str] = typer.Option(None, help="Header naming the caller's tenant (default "
                                                "$RAGCACHE_TENANT_HEADER; unset: a digest of the caller's key)."),
    upstream_auth: Optional[str] = typer.Option(None, help="Proxy: caller (forward the caller's key), operator "
                                                "(send ANTHROPIC_API_KEY) or auto (operator when serve keys are "
                                                f"set); default {default_help('upstream_auth')}."),
) -> None:
    """Anthropic- and OpenAI-compatible server on the local model (prefix + chunk KV caches, Anthropic
    prompt-caching semantics), or a caching proxy in front of the Anthropic API (--upstream)."""
    from ragcache.app.serve_cmd import run_serve

    cfg = config(upstream=upstream, host=host, port=port, model=model, metrics=metrics, serve_key=key,
                 tenant_header=tenant_header, upstream_auth=upstream_auth)
    run_or_exit(console, run_serve, cfg, semantic=semantic, insecure=insecure, console=console)


@app.command()
def lint(
    path: str = typer.Argument(..., metavar="PATH", help="JSON request (messages.create kwargs) or a messages list."),
    against: Optional[str] = typer.Option(None, help="A second render: report the first token where they diverge."),
) -> None:
    """Find volatile text (dates, ids, counters) inside stable prompt segments."""
    from ragcache.app.lint import run_lint as lint_cli

    code = run_or_exit(console, lint_cli, path, against)
    raise typer.Exit(code or 0)


@app.command("config")
def show_config(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Show the settings in effect (RAGCACHE_* variables and defaults): the embedded model and embedder
    by name, what an unset setting means. A bad variable is reported (exit code 2) and the others
    are still shown, the bad one with its raw value."""
    from dataclasses import fields

    from ragcache.config import ENV_VARS, from_env_skipping_bad

    if as_json:  # raw values; secrets (repr=False fields: the serve key) are never printed
        cfg = config()
        print_json({f.name: getattr(cfg, f.name) if f.repr or getattr(cfg, f.name) is None else "<set, hidden>"
                    for f in fields(cfg)})
        return
    cfg, bad = run_or_exit(console, from_env_skipping_bad)
    for message in dict.fromkeys(m for _, m in bad.values()):
        error(console, message)
    names = {e.field: e for e in ENV_VARS}
    secret = {f.name for f in fields(cfg) if not f.repr}
    for k, v in cfg.shown().items():
        var = names.get(k)
        if var is None:
            say(console, (f"{k:30}", "bold"), v)
        elif var.name in bad:
            raw = "<set, hidden>" if k in secret else repr(bad[var.name][0])
            say(console, (f"{var.name:30}", "bold red"), (f"{raw} (bad, not used: see the error above; unset, "
                                                         f"it would be {v})", "red"), (f"  ({var.doc})", "dim"))
        else:
            say(console, (f"{var.name:30}", "bold"), v, (f"  ({var.doc})", "dim"))
    if bad:
        raise typer.Exit(2)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
