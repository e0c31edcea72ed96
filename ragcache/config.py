"""ragcache's settings: one dataclass, every field read from a ``RAGCACHE_*`` environment variable.

    cfg = Config.from_env()          # reads os.environ (never writes it)
    cfg.home, cfg.kv_max_bytes, cfg.threshold ...

:data:`ENV_VARS` lists each variable with its field, default and meaning (the docs' configuration
page is generated from it by ``docs/gen_reference.py``; :func:`env_table` prints it as Markdown).
Nothing here imports the rest of ragcache. Library code below the app takes explicit keyword
arguments; only the app layer (CLI, server, demo) reads the environment, through this module.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _home_default() -> Path:
    return Path.home() / ".cache" / "ragcache"


def _expand(var: str, path: Path | str) -> Path:
    """``path`` with ``~`` / ``~user`` expanded; ``var`` names the setting when that cannot be done.

    Raises:
        ValueError: ``~user`` of an unknown user, or ``~`` with no home directory (pathlib raises
            RuntimeError, which would reach the CLI as a stack trace).
    """
    try:
        return Path(path).expanduser()
    except RuntimeError as e:
        raise ValueError(f"{var}={str(path)!r}: {e} (~ or ~user cannot be expanded here): give {var} as a full "
                         "path (or unset it)") from None


def _can_create_in(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def _check_folder(var: str, path: Path | str | None, *, create: bool = True, fix: str | None = None) -> None:
    """Raise ValueError when ``path`` (or the nearest part of it that exists) is a file, not a
    folder, or when ``path`` does not exist yet and ``create`` is set but the nearest existing
    folder above it cannot be written (ragcache could never create it). An existing folder is
    accepted as is: reading a cache needs no write permission. ``fix`` names the variable the
    user should change when ``path`` was derived from another one (``RAGCACHE_HOME``)."""
    fix = fix or var
    if path is None:
        return
    p = _expand(var, path)
    for q in (p, *p.parents):
        if create and q.is_symlink() and not q.exists():  # mkdir would fail later: a bare "File exists"
            where = "is" if q == p else f"lies under {q}, which is"
            raise ValueError(f"{var}={str(p)!r} {where} a symbolic link to {os.readlink(q)!r}, which does not exist: "
                             f"create its target or point {fix} at a folder (or unset it)")
        if q.exists():
            if not q.is_dir():
                what = "is a file" if q == p else f"lies under {q}, which is a file"
                raise ValueError(f"{var}={str(p)!r} {what}, not a folder: point {fix} at a folder (or unset it)")
            if q != p and create and not _can_create_in(q):
                raise ValueError(f"{var}={str(p)!r} cannot be created: {q} is not writable by this user; "
                                 f"point {fix} at a folder you can write (or unset it)")
            return


@dataclass(frozen=True, slots=True)
class EnvVar:
    """One documented variable: ``name`` (``RAGCACHE_...``), the :class:`Config` ``field``, the
    default as written in the docs, and what it sets."""

    name: str
    field: str
    default: str
    doc: str


ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar("RAGCACHE_HOME", "home", "~/.cache/ragcache", "root of every on-disk cache (models, answers, index, KV)"),
    EnvVar("RAGCACHE_MODEL", "model", "embedded SmolLM2-135M-Instruct",
           "LLM for ask / demo / serve: a local model folder or a Hugging Face id in the local cache"),
    EnvVar("RAGCACHE_EMBEDDER", "embedder", "packaged all-MiniLM-L6-v2", "sentence-transformers embedder (folder or id)"),
    EnvVar("RAGCACHE_ALLOW_DOWNLOADS", "allow_downloads", "0",
           "1: models given by hub id may be downloaded; 0: load from local files only"),
    EnvVar("RAGCACHE_ANSWERS_DIR", "answers_dir", "$RAGCACHE_HOME/answers", "semantic answer cache (SQLite + FAISS)"),
    EnvVar("RAGCACHE_INDEX_DIR", "index_dir", "$RAGCACHE_HOME/index", "document retrieval indexes (one folder per corpus)"),
    EnvVar("RAGCACHE_KV_DIR", "kv_dir", "$RAGCACHE_HOME/kv/chunks", "persisted per-document (chunk) KV, safetensors"),
    EnvVar("RAGCACHE_KV_MAX_BYTES", "kv_max_bytes", "2147483648 (2 GiB)",
           "byte budget of the chunk KV on disk (LRU eviction); 0 disables KV persistence"),
    EnvVar("RAGCACHE_PREFIX_MAX_BYTES", "prefix_max_bytes", "536870912 (512 MiB)",
           "byte budget of the in-memory exact prefix KV cache"),
    EnvVar("RAGCACHE_THRESHOLD", "threshold", "none",
           "semantic cache cosine gate (none: the decider's own, 0.94 for the guards alone; 1.0 = exact repeats only)"),
    EnvVar("RAGCACHE_SEMANTIC_URL", "semantic_url", "none",
           "shared answer cache: postgresql://... (PostgreSQL + pgvector) instead of the local SQLite + FAISS"),
    EnvVar("RAGCACHE_KV_URL", "kv_url", "none", "shared chunk KV: redis://... (Redis / Valkey) instead of RAGCACHE_KV_DIR"),
    EnvVar("RAGCACHE_KV_FORMAT", "kv_format", "fp16", "stored chunk KV format: fp16, int8 or int4 (KIVI groups)"),
    EnvVar("RAGCACHE_KV_GROUP_SIZE", "kv_group_size", "64", "quantization group size of int8 / int4 chunk KV"),
    EnvVar("RAGCACHE_DECODE_CACHE", "decode_cache", "dynamic", "decode KV cache: dynamic or quantized (4-bit quanto)"),
    EnvVar("RAGCACHE_SEMANTIC_MAX_ENTRIES", "semantic_max_entries", "100000", "answers kept (LRU)"),
    EnvVar("RAGCACHE_SEMANTIC_TTL_S", "semantic_ttl_s", "none", "seconds an answer lives (none: no expiry)"),
    EnvVar("RAGCACHE_RECOMPUTE_RATIO", "recompute_ratio", "none",
           "CacheBlend recompute ratio r (none: the ratio the model's calibration record licenses; without a record, or "
           "when the record licenses none, exact prefill)"),
    EnvVar("RAGCACHE_MIN_REUSE_TOKENS", "min_reuse_tokens", "none",
           "reusable document tokens needed to blend chunk KV (none: what saves 0.1 s at the measured prefill rate)"),
    EnvVar("RAGCACHE_TOP_K", "top_k", "4", "documents retrieved per question (ask, demo)"),
    EnvVar("RAGCACHE_MAX_NEW_TOKENS", "max_new_tokens", "128", "decode budget per answer (ask)"),
    EnvVar("RAGCACHE_HOST", "host", "127.0.0.1", "serve: address to bind"),
    EnvVar("RAGCACHE_PORT", "port", "8788", "serve: port"),
    EnvVar("RAGCACHE_UPSTREAM", "upstream", "none", "serve: proxy to this Anthropic API base URL (e.g. https://api.anthropic.com)"),
    EnvVar("RAGCACHE_SERVE_KEY", "serve_key", "none",
           "serve: key(s) callers must send (x-api-key or Authorization: Bearer; comma-separated, >= 16 characters); "
           "required off loopback unless --insecure"),
    EnvVar("RAGCACHE_TENANT_HEADER", "tenant_header", "none",
           "serve: header naming the caller's tenant (set by your gateway); none: a digest of the caller's key"),
    EnvVar("RAGCACHE_UPSTREAM_AUTH", "upstream_auth", "auto",
           "serve --upstream: credential sent upstream: caller (the caller's own key), operator (ANTHROPIC_API_KEY) "
           "or auto (operator with serve keys, else caller)"),
    EnvVar("RAGCACHE_UPSTREAM_TIMEOUT_S", "upstream_timeout_s", "600", "serve --upstream: seconds before an upstream call fails"),
    EnvVar("RAGCACHE_METRICS", "metrics", "off", "off, prometheus or otel: export cache metrics (serve: GET /metrics)"),
    EnvVar("RAGCACHE_THREADS", "threads", "none", "torch CPU threads for the CLI (none: torch's default)"),
    EnvVar("RAGCACHE_DATA_DIR", "data_dir", "shared/data beside the checkout", "benchmark data folder (bench blend / semantic)"),
    EnvVar("RAGCACHE_BENCH_THREADS", "bench_threads", "none", "torch CPU threads for `ragcache bench` (none: torch's default)"),
    EnvVar("RAGCACHE_WORDNET_DIR", "wordnet_dir", "the `wn` package's WordNet 3.0",
           "WordNet 3.x dict/ folder for the semantic guards' antonyms"),
)
"""Every variable :meth:`Config.from_env` reads."""


@dataclass(frozen=True, slots=True)
class Config:
    """Settings of the app layer. Sizes are bytes, times seconds, thresholds cosine similarities.

    Build one with :meth:`from_env` (environment) or directly with keyword arguments (tests).
    """

    home: Path
    model: str | None = None
    embedder: str | None = None
    allow_downloads: bool = False
    answers_dir: Path | None = None
    index_dir: Path | None = None
    kv_dir: Path | None = None
    kv_max_bytes: int = 2 << 30
    prefix_max_bytes: int = 512 << 20
    threshold: float | None = None
    semantic_url: str | None = None
    kv_url: str | None = None
    kv_format: str = "fp16"
    kv_group_size: int = 64
    decode_cache: str = "dynamic"
    semantic_max_entries: int = 100_000
    semantic_ttl_s: float | None = None
    recompute_ratio: float | None = None
    min_reuse_tokens: int | None = None
    top_k: int = 4
    max_new_tokens: int = 128
    host: str = "127.0.0.1"
    port: int = 8788
    upstream: str | None = None
    upstream_timeout_s: float = 600.0
    serve_key: str | None = field(default=None, repr=False)
    tenant_header: str | None = None
    upstream_auth: str = "auto"
    metrics: str = "off"
    threads: int | None = None
    data_dir: Path | None = None
    bench_threads: int | None = None
    wordnet_dir: Path | None = None

    def __post_init__(self) -> None:
        home = _expand("RAGCACHE_HOME", self.home)
        object.__setattr__(self, "home", home)
        derived = set()
        for var, name, sub in (("RAGCACHE_ANSWERS_DIR", "answers_dir", "answers"),
                               ("RAGCACHE_INDEX_DIR", "index_dir", "index"), ("RAGCACHE_KV_DIR", "kv_dir", "kv/chunks")):
            v = getattr(self, name)
            object.__setattr__(self, name, _expand(var, v) if v else home / sub)
            derived |= set() if v else {name}
        for var, name in (("RAGCACHE_HOME", "home"), ("RAGCACHE_ANSWERS_DIR", "answers_dir"),
                          ("RAGCACHE_INDEX_DIR", "index_dir"), ("RAGCACHE_KV_DIR", "kv_dir"),
                          ("RAGCACHE_DATA_DIR", "data_dir")):
            _check_folder(var, getattr(self, name), create=var != "RAGCACHE_DATA_DIR",  # data is only read
                          fix="RAGCACHE_HOME" if name in derived else var)
        for var, value, least in (("RAGCACHE_KV_MAX_BYTES", self.kv_max_bytes, 0),
                                  ("RAGCACHE_PREFIX_MAX_BYTES", self.prefix_max_bytes, 1),
                                  ("RAGCACHE_SEMANTIC_MAX_ENTRIES", self.semantic_max_entries, 1),
                                  ("RAGCACHE_TOP_K", self.top_k, 1), ("RAGCACHE_MAX_NEW_TOKENS", self.max_new_tokens, 1)):
            if value < least:  # name only the variable that is wrong
                raise ValueError(f"{var} must be >= {least}, got {value}")
        if self.threshold is not None and not -1.0 <= self.threshold <= 1.0:
            raise ValueError(f"RAGCACHE_THRESHOLD must be a cosine similarity in [-1, 1], got {self.threshold}")
        if self.semantic_ttl_s is not None and not self.semantic_ttl_s > 0:  # NaN refused too
            raise ValueError("RAGCACHE_SEMANTIC_TTL_S must be > 0 seconds or 'none'")
        if self.kv_url is not None and kv_url_scheme(self.kv_url) not in KV_URL_SCHEMES:
            raise ValueError(f"RAGCACHE_KV_URL={self.kv_url!r} has an unknown scheme "
                             f"{kv_url_scheme(self.kv_url)!r}: use redis://host:port/db (Redis / Valkey), "
                             "rediss://, unix:///path.sock, file://DIR or a folder path, or unset it")
        if self.recompute_ratio is not None and not 0.0 <= self.recompute_ratio <= 1.0:
            raise ValueError(f"RAGCACHE_RECOMPUTE_RATIO must be in [0, 1], got {self.recompute_ratio}")
        if not 0 < self.upstream_timeout_s < math.inf:  # NaN refused too; the socket layer rejects inf
            raise ValueError(f"RAGCACHE_UPSTREAM_TIMEOUT_S must be a finite number of seconds > 0, "
                             f"got {self.upstream_timeout_s}")
        if self.upstream_auth not in ("caller", "operator", "auto"):
            raise ValueError(f"RAGCACHE_UPSTREAM_AUTH must be caller, operator or auto, got {self.upstream_auth!r}")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"RAGCACHE_PORT must be in 1..65535, got {self.port}")
        if self.metrics not in ("off", "prometheus", "otel"):
            raise ValueError(f"RAGCACHE_METRICS must be off, prometheus or otel, got {self.metrics!r}")
        if self.min_reuse_tokens is not None and self.min_reuse_tokens < 0:
            raise ValueError(f"RAGCACHE_MIN_REUSE_TOKENS must be >= 0 tokens or 'none', got {self.min_reuse_tokens}")
        if self.kv_format not in ("fp16", "int8", "int4"):
            raise ValueError(f"RAGCACHE_KV_FORMAT must be fp16, int8 or int4, got {self.kv_format!r}")
        if self.kv_group_size < 1:
            raise ValueError(f"RAGCACHE_KV_GROUP_SIZE must be >= 1, got {self.kv_group_size}")
        if self.decode_cache not in ("dynamic", "quantized"):
            raise ValueError(f"RAGCACHE_DECODE_CACHE must be dynamic or quantized, got {self.decode_cache!r}")
        for var, n in (("RAGCACHE_THREADS", self.threads), ("RAGCACHE_BENCH_THREADS", self.bench_threads)):
            if n is not None and n < 1:
                raise ValueError(f"{var} must be >= 1, got {n}")

    @property
    def models_dir(self) -> Path:
        """Where converted models live (``$RAGCACHE_HOME/models``)."""
        return self.home / "models"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Config:
        """Read every :data:`ENV_VARS` variable (unset or empty: the default); ``overrides`` (not
        ``None``) win, so CLI options override the environment.

        Raises:
            ValueError: a variable that does not parse (the message names it and the expected form).
        """
        env = os.environ if environ is None else environ
        kw: dict[str, Any] = {"home": env.get("RAGCACHE_HOME") or _home_default()}
        types = {f.name: f.type for f in fields(cls)}
        for var in ENV_VARS:
            raw = env.get(var.name)
            if var.field == "home" or raw is None or raw.strip() == "":
                continue
            kw[var.field] = _parse(var.name, raw.strip(), str(types[var.field]))
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**kw)


KV_URL_SCHEMES = ("redis", "rediss", "unix", "valkey", "valkeys", "file", "")
"""Schemes a chunk KV store URL may have (``""``: a folder path)."""


def kv_url_scheme(url: str) -> str:
    """The lower-case scheme of a chunk store URL (``""`` for a plain path)."""
    return url.split("://", 1)[0].lower() if "://" in url else ""


def _parse(name: str, raw: str, typ: str) -> Any:
    try:
        if raw.lower() == "none" and "None" in typ:
            return None
        if typ.startswith("bool"):
            if raw.lower() in _TRUE:
                return True
            if raw.lower() in _FALSE:
                return False
            raise ValueError(raw)
        if typ.startswith("int"):
            return int(raw.replace("_", ""))
        if typ.startswith("float"):
            return float(raw)
        if typ.startswith("Path"):
            return Path(raw)
        return raw
    except ValueError:
        want = {"b": "1/0", "i": "an integer", "f": "a number", "P": "a path"}.get(typ[:1], "a string")
        raise ValueError(f"environment variable {name}={raw!r} is not {want}: fix or unset it") from None


def env_setting(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """One :class:`Config` field from its ``RAGCACHE_*`` variable, parsed as :meth:`Config.from_env`
    parses it (no folder checks, nothing created): the library's defaults that a user may set by
    environment (the cache home, the chunk KV format, the decode cache, the shared-store URLs) are
    read here and nowhere else. Unset or empty: the field's default (``home``: ``~/.cache/ragcache``).

    Raises:
        KeyError: ``name`` is not a documented field; ValueError: a value that does not parse.
    """
    var = _BY_FIELD[name]
    raw = (os.environ if environ is None else environ).get(var.name)
    if raw is None or not raw.strip():
        return _home_default() if name == "home" else _DEFAULTS[name]
    return _parse(var.name, raw.strip(), str(_TYPES[name]))


def provider_api_key(provider: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``$<PROVIDER>_API_KEY`` (e.g. ``ANTHROPIC_API_KEY``) or ``None``: the key a provider's SDK
    would read itself, for code that forwards it (the proxy)."""
    return (os.environ if environ is None else environ).get(f"{provider.upper()}_API_KEY") or None


def env_table() -> str:
    """The Markdown table of :data:`ENV_VARS` (variable, default, what it sets)."""
    rows = ["| variable | default | what it sets |", "| --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.default} | {v.doc} |" for v in ENV_VARS]
    return "\n".join(rows)


_BY_FIELD = {v.field: v for v in ENV_VARS}
_TYPES = {f.name: f.type for f in fields(Config)}
_DEFAULTS = {f.name: f.default for f in fields(Config) if f.name != "home"}

__all__ = ["Config", "ENV_VARS", "EnvVar", "KV_URL_SCHEMES", "kv_url_scheme", "env_setting", "env_table", "provider_api_key"]
