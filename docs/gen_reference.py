"""Generate the command-line and configuration reference pages at build time (mkdocs-gen-files).

Both pages come from the code, so they cannot disagree with it:

- ``reference/cli.md``: every command of the typer app (``ragcache.app.cli.app``), converted to its
  click command with ``typer.main.get_command`` and printed with click's own ``--help`` formatter.
- ``reference/configuration.md``: every ``RAGCACHE_*`` variable of ``ragcache.config.ENV_VARS``
  with its default and meaning, and the type of the :class:`~ragcache.config.Config` field it sets.

Run by ``mkdocs build`` / ``mkdocs serve`` (the ``gen-files`` plugin in ``mkdocs.yml``); also
importable by the tests (``cli_page()``, ``configuration_page()``).
"""

from __future__ import annotations

import dataclasses


CLI_NOTES = """
## Behaviour common to every command

**Output.** Errors go to stderr as one `error:` line, or under `--json` as one JSON object
`{"error": "...", "exit_code": 2}` on stderr (usage errors too); stdout then stays empty. Nothing
untrusted (answers, questions, file names, document text) is printed as Rich markup, and its control
characters are printed as visible escapes (`\\x1b`, `\\u202e`), so a stored answer or a file name
cannot move the cursor or recolour the terminal.

**Exit codes.** 0 on success; 2 for bad input (`cache invalidate` of a path that does not exist names
it); 130 after Ctrl-C at any point, start-up included (`ragcache: interrupted`, never a traceback).
`cache clear` asks first unless `--yes`; with no terminal to ask on (a script, a pipe) and no `--yes` it
deletes nothing and exits with code 2. Flags also accept a value (`--json=true`, `--yes=false`).
Diagnostics (warnings, skipped files, progress) go to stderr, so stdout holds only the answer or the
`--json` object. `cache show ID --json` prints everything stored for an answer, its provenance (the
layer that computed it, the real finish reason, approximate / recompute ratio, the model) and its token
budget among them.

**`ask` and its caches.** `ask` reads `.txt` / `.md` files (text that is not UTF-8 is decoded with
charset-normalizer; every skipped file is named with the reason). A file larger than
`RAGCACHE_MAX_FILE_BYTES` (default 1 MiB; 0: no limit) is skipped with a warning. A repeated or paraphrased question is
answered from `$RAGCACHE_HOME/answers` without loading the model (the embedder runs in NumPy on this
path). An answer cut at the token budget is stored too (`--cache-truncated`, on by default) and served
only to the same budget. An edit re-embeds only the chunks that changed. Each document's KV is kept
under `$RAGCACHE_HOME/kv/chunks` (2 GiB budget, least recently used evicted first).

**Concurrent runs.** Several `ask` runs on one `$RAGCACHE_HOME` share the work: the index update holds
a file lock (one process embeds, the others read its index), and a miss holds a per-question lock
across processes, so identical concurrent asks make one model call.

**Benchmarks** (`ragcache bench NAME`) print their table, write JSON under `bench/results/` and draw a
PNG (matplotlib comes with the `bench` extra; without it the plot is skipped with one line). Their
results are the [evaluation pages](../evaluation/index.md).
"""


def _commands(cmd, path: list[str], parent=None):
    """(name path, command, context) for ``cmd`` and every visible sub-command, depth first. Typer
    ships its own copy of click, so contexts are made with the command's own ``context_class``."""
    ctx = cmd.context_class(cmd, info_name=path[-1], parent=parent, terminal_width=100, max_content_width=100)
    yield path, cmd, ctx
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _commands(sub, [*path, name], ctx)


def cli_page() -> str:
    """The Markdown of the command-line reference: one section per command, its ``--help`` text."""
    import typer

    from ragcache.app.cli import app

    out = ["# Command line", "",
           "Generated from the typer app (`ragcache.app.cli.app`) at build time: each section is the",
           "command's own `--help`. Options read their `RAGCACHE_*` variable where the help says so",
           "(see [Configuration](configuration.md)); command-line options win.", ""]
    for path, cmd, ctx in _commands(typer.main.get_command(app), ["ragcache"]):
        level = "#" * min(len(path) + 1, 4)
        out += [f"{level} `{' '.join(path)}`", "", "```text", cmd.get_help(ctx).rstrip(), "```", ""]
    return "\n".join(out) + CLI_NOTES


def configuration_page() -> str:
    """The Markdown of the configuration reference, from ``ragcache.config.ENV_VARS``."""
    from ragcache.config import ENV_VARS, Config

    types = {f.name: str(f.type) for f in dataclasses.fields(Config)}
    out = ["# Configuration", "",
           "Generated from `ragcache/config.py` (`ENV_VARS`, the one registry of settings) at build time.",
           "The command line and the servers read these variables through `Config.from_env()`; command-line",
           "options win. `ragcache config` prints the settings in effect, the embedded defaults (model and",
           "embedder) by name, and what an unset setting means (`--json` for a machine-readable form). Unset",
           "or empty means the default; `none` is accepted where the default is none.", "",
           "| variable | default | type | what it sets |", "| --- | --- | --- | --- |"]
    for v in ENV_VARS:
        typ = types[v.field].replace("|", "or")
        out.append(f"| `{v.name}` | {v.default} | `{typ}` | {v.doc.replace('|', '/')} |")
    out += ["", "The library reads no environment, with one exception: `RagCache` (the facade) opens its default",
            "answer cache with `Config.from_env()` (`RAGCACHE_SEMANTIC_URL`, else `RAGCACHE_ANSWERS_DIR`, default",
            "`$RAGCACHE_HOME/answers`; `RagCache(backend, config=...)` passes other settings, `semantic=None` keeps",
            "no answers). Every other class takes its settings as keyword arguments, and every path through",
            "`home=` (`ragcache.home.Home`, which owns every path under the home; a folder; or `None` for",
            "`~/.cache/ragcache`). To use `$RAGCACHE_HOME` from library code, pass it:",
            "`LocalEngine.from_pretrained(home=Config.from_env().paths)`. Ranges (the recompute ratio, a model's",
            "context window) are checked once, in `ragcache.limits`. The command line, the servers, the demo and",
            "the LangChain / LlamaIndex adapters read this table through `Config.from_env()`. A value that does",
            "not parse is refused with the variable's name and the expected form.", ""]
    return "\n".join(out)


EXTRA_API = {  # public names outside ``ragcache.__all__`` that the guides use
    "Scaling out": ["ragcache.semantic.pg_cache.PgSemanticCache", "ragcache.engine.chunk.stores.redis_store.RedisChunkStore",
                    "ragcache.remote.RemoteStoreError"],
    "The answer path": ["ragcache.answering.AnswerPath", "ragcache.answering.cacheable",
                        "ragcache.provenance.Provenance"],
    "Settings": ["ragcache.config.Config", "ragcache.config.env_setting",
                 "ragcache.limits.check_recompute_ratio", "ragcache.limits.context_window_of"],
    "Servers": ["ragcache.server.app.running_server"],
    "LangChain (`langchain_ragcache`)": [
        "langchain_ragcache.cache.RagCacheSemanticCache", "langchain_ragcache.chat_models.ChatRagCache",
        "langchain_ragcache.prompts.RagPrompt", "langchain_ragcache.cache_info.with_cache_info",
        "langchain_ragcache.callbacks.RagCacheCallbackHandler", "langchain_ragcache.embeddings.RagCacheEmbeddings",
        "langchain_ragcache.middleware.RagCacheMiddleware", "langchain_ragcache.middleware.RagPromptLayoutMiddleware",
        "langchain_ragcache.graph_cache.RagCacheGraphCache"],
    "LlamaIndex (`llama-index-ragcache`)": [
        "llama_index.llms.ragcache.base.RagCacheLLM", "llama_index.embeddings.ragcache.base.RagCacheEmbedding",
        "llama_index.postprocessor.ragcache.base.StableOrderPostprocessor",
        "llama_index.query_engine.ragcache.base.RagCacheQueryEngine"],
}


def api_page() -> str:
    """The Markdown of the Python API reference: one mkdocstrings section per public name.

    The names and their modules come from ``ragcache._EXPORTS`` (what ``from ragcache import X``
    resolves), so a name that moves to another module is documented from its new home."""
    import ragcache

    out = ["# Python API", "",
           "Generated from the docstrings at build time (mkdocstrings). `from ragcache import NAME` works for",
           "every name in the first section; the others are imported from the module shown.", "",
           "## `ragcache`", ""]
    for name in sorted(ragcache._EXPORTS, key=str.lower):
        if not name.isupper():  # constants are documented with their module
            out += [f"::: {ragcache._EXPORTS[name]}.{name}", "    options:", "      heading_level: 3", ""]
    for section, paths in EXTRA_API.items():
        out += [f"## {section}", ""]
        for path in paths:
            out += [f"::: {path}", "    options:", "      heading_level: 3", ""]
    return "\n".join(out)


def main() -> None:
    import mkdocs_gen_files

    for path, text in (("reference/cli.md", cli_page()), ("reference/configuration.md", configuration_page()),
                       ("reference/api.md", api_page())):
        with mkdocs_gen_files.open(path, "w") as f:
            f.write(text)


if __name__ == "<run_path>":  # run by mkdocs-gen-files at build time only
    main()
