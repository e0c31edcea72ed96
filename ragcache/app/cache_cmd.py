"""``ragcache cache stats|ls|show|invalidate|evict|clear``: see and manage the caches the settings point at.

Layers (each location configurable, see :mod:`ragcache.config`); every command works on the store
``ragcache ask`` and the adapters use, and ``stats`` names it:

- ``answers``: the semantic answer cache: PostgreSQL + pgvector when ``$RAGCACHE_SEMANTIC_URL`` is
  set (shared by every process), else SQLite + FAISS in ``$RAGCACHE_ANSWERS_DIR``;
- ``chunks``: per-document KV: the store ``$RAGCACHE_KV_URL`` names (:data:`ragcache.store_kinds.CHUNK_STORES`:
  Redis / Valkey for a ``redis://`` / ``valkey://`` URL, opened and asked through its admin methods,
  :class:`~ragcache.engine.chunk.stores.ChunkStoreAdmin`; a folder for a path, read here without importing
  torch), else one safetensors file per document chunk in ``$RAGCACHE_KV_DIR``;
- ``index``: retrieval indexes of ``ask`` folders and the demo corpus, ``$RAGCACHE_INDEX_DIR``.

The exact prefix KV cache lives in the serving process's memory only (nothing to manage on disk).
Chunk KV is keyed by the document's tokens, so an edited document never reuses stale KV;
``evict`` frees space. Every command takes ``--json``.
"""

from __future__ import annotations

import enum
import json
import shutil
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from ragcache.app.answers import open_answers
from ragcache.app.output import clean, error, make_console, print_json, run_or_exit, say
from ragcache.config import Config
from ragcache.store_kinds import CHUNK_STORES, ChunkStoreKind, chunk_store_kind

if TYPE_CHECKING:
    from ragcache.engine.chunk.stores.base import ChunkStoreAdmin

cache_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="See and manage the caches the settings point at (answers, chunk KV, indexes).")
console = make_console()


class LayerName(str, enum.Enum):
    answers = "answers"
    chunks = "chunks"
    index = "index"


class EvictLayer(str, enum.Enum):
    """The layers ``evict`` frees (index folders are replaced in place: ``clear --layer index``)."""

    answers = "answers"
    chunks = "chunks"


class ClearLayer(str, enum.Enum):
    all = "all"
    answers = "answers"
    chunks = "chunks"
    index = "index"


def _cfg() -> Config:
    return run_or_exit(console, Config.from_env)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


# ------------------------------------------------------------------ chunk KV files (no torch import)
def chunk_header(path: Path) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file, read from its JSON header (no tensor is loaded).

    Raises:
        ValueError: not a safetensors file.
    """
    fix = ("delete it or run `ragcache cache clear --layer chunks` (a bad chunk file is only a cache miss: "
           "`ragcache ask` deletes it and recomputes the document's KV)")
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path} is not a safetensors file: {fix}")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 << 20:
            raise ValueError(f"{path} has an implausible header of {n} bytes: {fix}")
        header = f.read(n)
        if len(header) != n:
            raise ValueError(f"{path} is truncated (header of {n} bytes, {len(header)} present): {fix}")
        try:
            meta = json.loads(header).get("__metadata__") or {}
        except (ValueError, AttributeError) as e:
            raise ValueError(f"{path} has an unreadable safetensors header ({e}): {fix}") from None
        return dict(meta)


def chunk_kind(cfg: Config) -> ChunkStoreKind:
    """The kind of chunk store the settings point at (:data:`ragcache.store_kinds.CHUNK_STORES`): the one
    ``$RAGCACHE_KV_URL`` names, else the ``disk`` folder ``$RAGCACHE_KV_DIR``.

    Raises:
        ValueError: a URL of a scheme no kind lists (the error names every kind and its URLs)."""
    if not cfg.kv_url:
        return CHUNK_STORES["disk"]
    return chunk_store_kind(cfg.kv_url, "RAGCACHE_KV_URL")


def shared_kv_url(cfg: Config) -> str | None:
    """``cfg.kv_url`` when it names a store ``ragcache cache`` opens and asks (Redis / Valkey, any kind that
    is not a folder), else ``None`` (a folder of chunk files, read here)."""
    return None if chunk_kind(cfg).folder else cfg.kv_url


def kv_folder(cfg: Config) -> Path:
    """The chunk KV folder: ``$RAGCACHE_KV_URL`` when it is a path (or ``file://DIR``), else ``$RAGCACHE_KV_DIR``."""
    if cfg.kv_url and shared_kv_url(cfg) is None:
        return Path(cfg.kv_url.removeprefix("file://")).expanduser()
    return cfg.kv_dir


def _shared_store(cfg: Config) -> ChunkStoreAdmin:
    """The shared chunk store the settings name, opened through the table (closed by the caller).

    Raises:
        ValueError: the store of that kind has no admin methods (:class:`~ragcache.engine.chunk.stores.ChunkStoreAdmin`),
            so ``ragcache cache`` cannot list, evict or clear it (the message names the kind and the methods)."""
    from ragcache.engine.chunk.stores import ChunkStoreAdmin
    from ragcache.engine.chunk.stores.factory import open_chunk_store

    store = open_chunk_store(shared_kv_url(cfg))
    if not isinstance(store, ChunkStoreAdmin):
        store.close()
        kind = chunk_kind(cfg)
        raise ValueError(f"the {kind.name!r} chunk store ({kind.store}) named by RAGCACHE_KV_URL has no admin methods, "
                         "so ragcache cache cannot read it: implement ragcache.engine.chunk.stores.ChunkStoreAdmin "
                         "(where, entries, remove, clear, nbytes, close) in the store class")
    return store


def _shared_rows(cfg: Config) -> list[dict[str, Any]]:
    """The shared store's chunks (:meth:`~ragcache.engine.chunk.stores.ChunkStoreAdmin.entries`), least
    recently used first, as ``ls`` rows."""
    store = _shared_store(cfg)
    try:
        entries = store.entries()
    finally:
        store.close()
    out = []
    for e in entries:
        row: dict[str, Any] = {"key": e.key, "bytes": e.nbytes, "used": e.used, "path": None}
        if e.metadata is None:
            row["error"] = e.error
        else:
            row.update(_chunk_fields(e.metadata))
        out.append(row)
    return out


def _chunk_fields(meta: dict[str, str]) -> dict[str, Any]:
    """What ``ls`` shows of a chunk's metadata: its tokens, dtype and model (the fingerprint's first 12 digits)."""
    return {"n_tokens": int(meta.get("n_tokens", 0)), "dtype": meta.get("dtype"),
            "model": (meta.get("fingerprint") or "")[:12]}


def chunk_where(cfg: Config) -> str:
    """The chunk KV store, as ``cache stats`` names it: a shared store's own ``where`` (Redis / Valkey: the URL
    with its password hidden, and the key prefix), or the folder."""
    if shared_kv_url(cfg) is None:
        return str(kv_folder(cfg))
    store = _shared_store(cfg)
    try:
        return store.where
    finally:
        store.close()


def chunk_files(cfg: Config) -> list[dict[str, Any]]:
    """Chunk KV entries of the store the settings point at (:func:`chunk_where`), least recently used
    first (the order both stores evict in)."""
    if shared_kv_url(cfg):
        return _shared_rows(cfg)
    root = kv_folder(cfg)
    if not root.is_dir():
        return []
    out = []
    for p in sorted(root.glob("*.safetensors"), key=lambda p: p.stat().st_mtime):
        st = p.stat()
        row: dict[str, Any] = {"key": p.stem, "bytes": st.st_size, "used": st.st_mtime, "path": str(p)}
        try:
            row.update(_chunk_fields(chunk_header(p)))
        except (OSError, ValueError) as e:
            row["error"] = str(e)
        out.append(row)
    return out


def index_folders(cfg: Config) -> list[dict[str, Any]]:
    root = cfg.index_dir
    if not root.is_dir():
        return []
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            meta = json.loads((d / "meta.json").read_text())
        except (OSError, ValueError):
            meta = {}
        out.append({"name": d.name, "source": meta.get("source"), "chunks": meta.get("count"),
                    "embedder": meta.get("embedder"), "bytes": sum(f.stat().st_size for f in d.rglob("*") if f.is_file()),
                    "path": str(d)})
    return out


def collect_stats(cfg: Config) -> dict[str, Any]:
    """Each layer's entries and bytes, in the stores the settings point at; ``answers.store`` /
    ``chunks.store`` say which kind (``sqlite`` / ``postgresql``, ``files`` / ``redis``) and ``where`` where;
    ``chunks.budget`` what bounds a shared store (its row's :attr:`~ragcache.store_kinds.ChunkStoreKind.budget`),
    ``chunks.max_bytes`` the folder's byte budget."""
    chunks = chunk_files(cfg)
    idx = index_folders(cfg)
    kind = chunk_kind(cfg)
    shared_kv = not kind.folder
    return {
        "home": str(cfg.home),
        "answers": open_answers(cfg).stats(),
        "chunks": {"store": kind.name if shared_kv else "files", "where": chunk_where(cfg),
                   "path": None if shared_kv else str(kv_folder(cfg)), "files": len(chunks),
                   "bytes": sum(c["bytes"] for c in chunks), "max_bytes": None if shared_kv else cfg.kv_max_bytes,
                   "budget": kind.budget if shared_kv else None,
                   "tokens": sum(c.get("n_tokens", 0) for c in chunks)},
        "index": {"path": str(cfg.index_dir), "folders": len(idx), "bytes": sum(i["bytes"] for i in idx)},
        "prefix": {"persisted": False, "note": "the exact prefix KV cache is in the serving process's memory only"},
    }


# ------------------------------------------------------------------ commands
@cache_app.command()
def stats(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Entries and bytes of each cache layer."""
    s = run_or_exit(console, collect_stats, _cfg())
    if as_json:
        print_json(s)
        return
    a, c, i = s["answers"], s["chunks"], s["index"]
    t = Table(title=Text(clean(f"ragcache caches (home {s['home']})")))
    for col in ("layer", "store", "entries", "size", "details"):
        t.add_column(col, overflow="fold")
    rate = "-" if a["hit_rate"] is None else f"{a['hit_rate']:.0%}"
    t.add_row("answers", Text(clean(f"{a['store']}: {a['where']}", newlines=False)), str(a["entries"]),
              _bytes(a["bytes"]),
              Text(clean(f"{a['lookups']} lookups: {a['lookup_hits']} hits, {a['lookup_misses']} misses (hit rate "
                         f"{rate}); {a['partitions']} partitions, namespaces {a['namespaces'] or '-'}",
                         newlines=False)))
    budget = c["budget"] if c["max_bytes"] is None else _bytes(c["max_bytes"])
    t.add_row("chunks", Text(clean(f"{c['store']}: {c['where']}", newlines=False)), str(c["files"]),
              _bytes(c["bytes"]), Text(f"{c['tokens']} tokens of KV, budget {budget}"))
    t.add_row("index", Text(clean(f"files: {i['path']}", newlines=False)), str(i["folders"]), _bytes(i["bytes"]),
              Text("retrieval indexes"))
    t.add_row("prefix", "-", "-", "-", Text("in process memory only"))
    console.print(t)


@cache_app.command("ls")
def ls(layer: LayerName = typer.Option(LayerName.answers, help="Which layer to list."),
       limit: int = typer.Option(50, min=1, help="At most this many rows (answers: most recently used first)."),
       namespace: Optional[str] = typer.Option(None, help="Answers of one namespace only."),
       as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List stored answers, chunk KV files or index folders."""
    cfg = _cfg()
    if layer is LayerName.answers:
        rows = [r.to_dict(full=as_json) for r in run_or_exit(console, open_answers(cfg).list,
                                                         namespace=namespace, limit=limit)]
        cols = ("id", "namespace", "question", "answer", "hits", "accessed")
    elif layer is LayerName.chunks:
        rows = run_or_exit(console, chunk_files, cfg)[::-1][:limit]
        cols = ("key", "n_tokens", "bytes", "model", "used")
    else:
        rows = index_folders(cfg)[:limit]
        cols = ("name", "source", "chunks", "bytes")
    if as_json:
        print_json(rows)
        return
    where = {LayerName.answers: lambda: open_answers(cfg).where, LayerName.chunks: lambda: chunk_where(cfg),
             LayerName.index: lambda: str(cfg.index_dir)}[layer]()
    t = Table(title=Text(clean(f"{layer.value} in {where} ({len(rows)} shown)", newlines=False)))

    def _cell(col: str, value: object) -> str:
        # a question or answer is a one-line preview: its line breaks and tabs read as spaces ("ls" showed
        # them as \x0a); other control characters, and any in a file name, stay visible escapes
        text = " ".join(str(value).split()) if col in ("question", "answer") else value
        return clean(text, newlines=False)

    for c in cols:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*[Text(_when(r.get(c)) if c in ("accessed", "used") else
                         _bytes(r[c]) if c == "bytes" else ("-" if r.get(c) is None else _cell(c, r.get(c))))
                    for c in cols])
    console.print(t)


@cache_app.command()
def show(entry: str = typer.Argument(..., metavar="ENTRY", help="An answer id (from `cache ls`) or a chunk key."),
         as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Everything stored for one answer or one chunk KV file."""
    cfg = _cfg()
    if entry.isascii() and entry.isdigit():  # str.isdigit alone also accepts '²' and other scripts' digits
        row = run_or_exit(console, open_answers(cfg).get, int(entry))
        if row is None:
            error(console, f"no stored answer with id {entry}: list them with `ragcache cache ls`")
            raise typer.Exit(2)
        d = row.to_dict()
    else:
        if not entry or not all(c in "0123456789abcdef" for c in entry):  # never a path: keys are hex digests
            error(console, f"{entry!r} is neither an answer id (a number) nor a chunk key (a lower-case hex "
                           "digest): list them with `ragcache cache ls` / `ragcache cache ls --layer chunks`")
            raise typer.Exit(2)
        if shared_kv_url(cfg):
            found = [r for r in run_or_exit(console, chunk_files, cfg) if r["key"] == entry]
            if not found:
                error(console, f"no answer id or chunk key {entry!r}: see `ragcache cache ls --layer chunks`")
                raise typer.Exit(2)
            d = {**found[0], "where": chunk_where(cfg)}
        else:
            p = kv_folder(cfg) / f"{entry}.safetensors"
            if not p.is_file():
                error(console, f"no answer id or chunk key {entry!r}: see `ragcache cache ls --layer chunks`")
                raise typer.Exit(2)
            d = {"key": entry, "path": str(p), "bytes": p.stat().st_size, "used": p.stat().st_mtime,
                 "metadata": run_or_exit(console, chunk_header, p)}
    if as_json:
        print_json(d)
        return
    for k, v in d.items():
        value = _when(v) if k in ("created", "accessed", "used") else json.dumps(v, ensure_ascii=False) \
            if isinstance(v, dict) else str(v)
        say(console, (f"{k:10} ", "bold"), clean(value, newlines=k == "answer"))


@cache_app.command()
def invalidate(document: str = typer.Argument(..., metavar="DOCUMENT", help="A document file (its chunks), a chunk id such as "
                                               "notes.md#0, a content hash, or the document text."),
               as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Drop every stored answer built from a document (the next question about it goes to the model)."""
    from ragcache.app.corpus import pack_chunks, decode_bytes
    from ragcache.app.runtime import answer_cache, query_embedder

    if not document.strip():
        error(console, "invalidate needs a document: a file's path, a chunk id such as notes.md#0 (see "
                       "`ragcache cache ls`), a content hash, or the document text (got an empty string)")
        raise typer.Exit(2)
    cfg = _cfg()
    keys = [document]
    p = Path(document).expanduser()
    if p.is_dir():
        example = f"{clean(document.rstrip('/'))}/notes.md#0" if p.name else "notes.md#0"
        error(console, f"{clean(document)} is a folder: give one document file (or a chunk id such as {example})")
        raise typer.Exit(2)
    if p.is_file():
        text, how = decode_bytes(p.read_bytes())
        if text is None:
            error(console, f"cannot read {document}: {how}")
            raise typer.Exit(2)
        keys = [c.text for c in pack_chunks([text], p.name, 1400)] + [text]
    elif looks_like_path(document):
        error(console, f"no file {document}: give the document's path as it is now, or a chunk id such as "
                       f"{p.name}#0 (see `ragcache cache ls`), a content hash, or the document text")
        raise typer.Exit(2)
    removed = 0
    if run_or_exit(console, lambda: open_answers(cfg).exists):
        sem = run_or_exit(console, answer_cache, cfg, query_embedder(cfg))
        try:
            removed = sum(sem.invalidate(k) for k in keys if k.strip())
        finally:
            sem.close()
    if as_json:
        print_json({"document": document, "answers_removed": removed})
    else:
        say(console, f"removed {removed} stored answer(s) built from ", (clean(document, newlines=False), "bold"))


DOC_SUFFIXES = (".md", ".txt", ".markdown", ".rst", ".text")


def looks_like_path(arg: str) -> bool:
    """Whether a ``cache invalidate`` argument names a file rather than a chunk id (``notes.md#0``), a
    content hash or document text: one line without spaces or ``#`` that has a folder separator,
    starts with ``~`` or ``.``, or ends with a document suffix."""
    a = arg.strip()
    if not a or any(c.isspace() for c in a) or "#" in a:
        return False
    return "/" in a or "\\" in a or a.startswith(("~", ".")) or a.lower().endswith(DOC_SUFFIXES)


@cache_app.command()
def evict(layer: EvictLayer = typer.Option(EvictLayer.answers, help="answers or chunks (index folders: "
                                           "`ragcache cache clear --layer index`)."),
          older_than: Optional[float] = typer.Option(None, help="Answers: drop those unused for this many seconds."),
          keep: Optional[int] = typer.Option(None, help="Answers: keep only the N most recently used."),
          max_bytes: Optional[int] = typer.Option(None, help="Chunks: drop least recently used files down to this many bytes."),
          as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Free space: least recently used answers or chunk KV files first."""
    cfg = _cfg()
    if layer is EvictLayer.answers:
        store = open_answers(cfg)
        n = run_or_exit(console, store.evict, older_than_s=older_than, keep=keep)
        freed, where = None, store.where
    else:
        if max_bytes is None or max_bytes < 0:
            error(console, "give --max-bytes N (>= 0) for the chunk layer")
            raise typer.Exit(2)
        n, freed = run_or_exit(console, _evict_chunks, cfg, max_bytes)
        where = chunk_where(cfg)
    if as_json:
        print_json({"layer": layer.value, "where": where, "removed": n, "bytes_freed": freed})
    else:
        say(console, f"evicted {n} {layer.value} entr{'y' if n == 1 else 'ies'}" + (f" ({_bytes(freed)})" if freed else "")
            + " from ", (clean(where, newlines=False), "bold"))


def _evict_chunks(cfg: Config, max_bytes: int) -> tuple[int, int]:
    """Drop least recently used chunk KV down to ``max_bytes``: ``(entries removed, bytes freed)``."""
    files = chunk_files(cfg)
    store = _shared_store(cfg) if shared_kv_url(cfg) else None
    total, n, freed = sum(f["bytes"] for f in files), 0, 0
    try:
        for f in files:  # least recently used first
            if total - freed <= max_bytes:
                break
            if store is not None:
                store.remove(f["key"])
            else:
                Path(f["path"]).unlink(missing_ok=True)
            freed += f["bytes"]
            n += 1
    finally:
        if store is not None:
            store.close()
    return n, freed


def interactive() -> bool:
    """Whether stdin is a terminal (a person who can answer a confirmation)."""
    import sys

    return sys.stdin.isatty()


@cache_app.command()
def clear(layer: ClearLayer = typer.Option(ClearLayer.all, help="all (answers, chunks, index) or one layer."),
          yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
          as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Delete a cache layer from the stores the settings point at (PostgreSQL rows, Valkey keys or folders;
    converted models under $RAGCACHE_HOME/models are kept).
    Asks first unless --yes (on stderr, with --json too); with no terminal to ask on (a script, a
    pipe) and no --yes it deletes nothing and exits with code 2."""
    cfg = _cfg()
    answers = open_answers(cfg)
    chosen = ["answers", "chunks", "index"] if layer is ClearLayer.all else [layer.value]
    where = {"answers": lambda: answers.where, "chunks": lambda: chunk_where(cfg), "index": lambda: str(cfg.index_dir)}
    dirs = {c: run_or_exit(console, where[c]) for c in chosen}  # a shared store is opened only when chosen
    if not yes and not interactive():  # a piped "y" is not a person's answer: refuse in every output mode
        error(console, f"cache clear would delete {', '.join(chosen)} and stdin is not a terminal to confirm on: "
                       "nothing was deleted; add --yes to delete without asking")
        raise typer.Exit(2)
    if not yes:
        typer.confirm(clean(f"delete {', '.join(str(dirs[c]) for c in chosen)}?", newlines=False), abort=True,
                      err=True)
    out = {}
    for c in chosen:
        if c == "answers":
            n = run_or_exit(console, answers.clear)
        elif c == "chunks" and shared_kv_url(cfg):
            n = run_or_exit(console, _clear_shared_chunks, cfg)
        else:
            d = kv_folder(cfg) if c == "chunks" else cfg.index_dir
            n = sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) if d.exists() else 0
            shutil.rmtree(d, ignore_errors=True)
        out[c] = {"path": dirs[c], "bytes_freed": n}
    if as_json:
        print_json(out)
    else:
        for c, v in out.items():
            say(console, f"cleared {c}: ", (clean(v["path"], newlines=False), "bold"), f" ({_bytes(v['bytes_freed'])})")


def _clear_shared_chunks(cfg: Config) -> int:
    """Delete every chunk of the shared store (Redis / Valkey: under its prefix); the bytes it counted."""
    store = _shared_store(cfg)
    try:
        n = store.nbytes
        store.clear()
        return n
    finally:
        store.close()


__all__ = ["cache_app", "chunk_files", "chunk_header", "collect_stats", "index_folders"]
