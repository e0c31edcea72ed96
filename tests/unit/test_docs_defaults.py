"""Every default the docstrings and guides state is the code's (issue 42): one source for each default.

The code is the source: constants (``DEFAULT_THRESHOLD``, ``CACHE_TRUNCATED``, ``DEFAULT_LOOKUP_TIMEOUT_S``),
signature defaults (``inspect.signature``), the settings (``ragcache.config``), the command line's options
and the packaged verifier head. The texts are every docstring of ragcache and its integrations, the
hand-written guides (``docs/**/*.md``), the README and the generated reference's prose
(``docs/gen_reference.py``: the CLI and configuration pages). Four checks, each shown to fail on a fixture:

- :data:`KNOWN`: defaults stated in prose ("0.94 for the guards", "``lookup_timeout_s`` (default 10 s",
  "``--cache-truncated``, on by default"): each pattern's value must be the code's, and each pattern must
  still match somewhere (a pattern that stopped matching is a check that stopped checking).
- named settings in the guides: "``RAGCACHE_X`` (default V", "``--flag`` (default V", "``name=V`` (the
  default" and "``Owner(name=V)`` is the default" are compared with the settings, the options and the
  signatures of the public API; a name the test cannot find fails too.
- the command line's help: "default $RAGCACHE_X, else V" against the setting, "(default V)" against the
  option's default or, for ``ragcache calibrate``'s rule options, the license rule's (``LicenseRule``).
- the ``Args:`` entries of the public API (the reference page's objects and their public methods): a
  parameter described with "default V" (a literal) must have V as its signature default; a parameter
  whose signature default is ``None`` (a default derived elsewhere) must be listed in :data:`DERIVED`
  with the code value it stands for.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import runpy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "ragcache", ROOT / "integrations" / "langchain" / "langchain_ragcache",
           ROOT / "integrations" / "llama_index" / "llama_index"]
GUIDES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]

UNITS = {"s": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "tokens": 1}


# --- the code's values -------------------------------------------------------------------------------

def _sig_default(path: str, param: str) -> Any:
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):  # the longest importable module, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            break
        except ImportError:
            continue
    for part in parts[i:]:
        obj = getattr(obj, part)
    return inspect.signature(obj).parameters[param].default


def _threshold() -> float:
    from ragcache.semantic import DEFAULT_THRESHOLD
    return DEFAULT_THRESHOLD


def _verifier_floor() -> float:
    from ragcache.semantic.decision.verifier import load_head
    return load_head().floor


def _config(field: str) -> Callable[[], Any]:
    def get() -> Any:
        from ragcache.config import Config
        return Config.__dataclass_fields__[field].default
    return get


def _const(module: str, name: str) -> Callable[[], Any]:
    return lambda: getattr(importlib.import_module(module), name)


def _cli_option(command: str, option: str) -> Callable[[], Any]:
    def get() -> Any:
        import typer

        from ragcache.app.cli import app

        cmd = typer.main.get_command(app)
        for name in command.split():
            cmd = cmd.commands[name]
        return next(p.default for p in cmd.params if option in p.opts)
    return get


def _dataclass_default(path: str, field: str) -> Any:
    mod, _, name = path.rpartition(".")
    return getattr(importlib.import_module(mod), name).__dataclass_fields__[field].default


def _field(path: str, field: str) -> Callable[[], Any]:
    """The default of a pydantic field (LangChain and LlamaIndex classes are pydantic models)."""
    def get() -> Any:
        mod, _, name = path.rpartition(".")
        return getattr(importlib.import_module(mod), name).model_fields[field].default
    return get


@dataclass(frozen=True)
class Known:
    """A default stated in prose: ``value()`` is the code's; each of ``patterns`` captures a stated value
    as group ``v`` (a number with an optional unit, ``on`` / ``off``, or a name)."""

    what: str
    value: Callable[[], Any]
    patterns: tuple[str, ...]


KNOWN: tuple[Known, ...] = (
    Known("the semantic gate with the guards (the default decider)", _threshold, (
        r"(?<![\d.])(?P<v>0\.\d+|1\.0)\)?,? (?:for|with) (?:the )?guards",
        r"\|\s*(?:the \*\*guards\*\*|your own guards|plain cosine)\s*\|\s*(?P<v>\d\.\d+)\s*\|",
        r"(?<![\d.])(?P<v>0\.\d+|1\.0), the guards' own gate")),
    Known("the semantic gate with the learned verifier (the packaged head's floor)", _verifier_floor, (
        r"(?<![\d.])(?P<v>0\.\d+|1\.0),? with the (?:learned )?verifier",
        r"\|\s*the learned verifier \(opt in\)\s*\|\s*(?P<v>\d\.\d+)\s*\|")),
    Known("the answer store's lookup timeout", _const("ragcache.answering", "DEFAULT_LOOKUP_TIMEOUT_S"), (
        r"lookup_timeout_s`{1,2} \(default (?P<v>[\d.]+ s)\b",)),
    Known("a remote store's timeout", lambda: _sig_default(
        "ragcache.engine.chunk.stores.redis_store.RedisChunkStore", "timeout_s"), (
        r"its `timeout_s` \(default (?P<v>[\d.]+ s)\b",)),
    Known("storing answers cut at the token budget", _const("ragcache.answering", "CACHE_TRUNCATED"), (
        r"cache[_-]truncated`{1,2},? (?P<v>on|off) by default",
        r"\(the budget is in the partition\): (?P<v>on|off) by default")),
    Known("the chunk KV budget of `ragcache ask`", _config("kv_max_bytes"), (
        r"kv/chunks`{1,2} \((?P<v>[\d.]+ [KMG]iB) budget",)),
    Known("the exact prefix cache's budget", _config("prefix_max_bytes"), (
        r"\(default (?P<v>[\d.]+ [KMG]iB), `RAGCACHE_PREFIX_MAX_BYTES`",)),
    Known("the default chunk store of a ChunkCache", lambda: _sig_default(
        "ragcache.engine.chunk.stores.MemoryChunkStore", "max_bytes"), (
        r"a (?P<v>[\d.]+ [KMG]iB) :class:`MemoryChunkStore`",)),
    Known("the engine's decode budget", lambda: _sig_default("ragcache.engine.request.EngineRequest",
                                                             "max_new_tokens"), (
        r"max_new_tokens: decode budget \(tokens\), default (?P<v>\d+)",)),
    Known("the demo's decode budget", _cli_option("demo", "--max-new-tokens"), (
        r"cut at its (?P<v>\d+)-token budget",)),
    Known("ChatRagCache's decode budget", _field("langchain_ragcache.chat_models.ChatRagCache", "max_tokens"), (
        r"``max_tokens`` at (?P<v>\d+) without a word",)),
    Known("RagCacheLLM's decode budget", _field("llama_index.llms.ragcache.base.RagCacheLLM", "max_new_tokens"), (
        r"RagCacheLLM\(\)[^\n]*?\((?P<v>\d+)-token budget\)",)),
    Known("the LlamaIndex query engine's budget for an LLM that states none", _const(
        "llama_index.query_engine.ragcache.backend", "DEFAULT_MAX_NEW_TOKENS"), (
        r"`metadata\.num_output`, (?P<v>\d+) when it states none",)),
    Known("sharing KV across namespaces", lambda: _dataclass_default(
        "ragcache.engine.engine_config.EngineConfig", "share_kv_across_namespaces"), (
        r"``share_kv_across_namespaces`` \(default (?P<v>True|False)",)),
    Known("a local Valkey's eviction policy", lambda: _sig_default(
        "ragcache.testing.local_servers.LocalValkey", "maxmemory_policy"), (
        r"``maxmemory_policy`` \(default ``(?P<v>[\w-]+)``",)),
    Known("the embedded model", _config("model"), (
        r"embedded (?:defaults \()?(?P<v>SmolLM2-[\w-]+)",)),
    Known("the embedded embedder", _config("embedder"), (
        r"embedded defaults \([\w-]+ \+ (?P<v>[\w-]+)\)",)),
)


#: Parameters whose signature default is ``None`` and whose docstring states the value that ``None``
#: stands for: (object path, parameter) -> the code's value.
DERIVED: dict[tuple[str, str], Callable[[], Any]] = {
    ("ragcache.models.load_model", "dtype"): lambda: _sig_default("ragcache.models.model_fingerprint", "dtype"),
}


# --- the texts ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Text:
    where: str
    text: str


def docstrings(path: Path, label: str | None = None) -> Iterator[Text]:
    """Every docstring of one Python file (module, classes, functions), with ``file:qualname``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    label = label or str(path.relative_to(ROOT))

    def walk(node: ast.AST, prefix: str) -> Iterator[Text]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                if (doc := ast.get_docstring(child)) is not None:
                    yield Text(f"{label}:{name}", doc)
                yield from walk(child, name + ".")

    if (doc := ast.get_docstring(tree)) is not None:
        yield Text(label, doc)
    yield from walk(tree, "")


@cache
def texts() -> tuple[Text, ...]:
    out: list[Text] = []
    for src in SOURCES:
        for path in sorted(src.rglob("*.py")):
            if "tests" not in path.relative_to(ROOT).parts:
                out += docstrings(path)
    out += [Text(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in GUIDES]
    ref = runpy.run_path(str(ROOT / "docs" / "gen_reference.py"), run_name="gen_reference")
    out += [Text("reference/cli.md (generated: the options' help)", ref["cli_page"]()),
            Text("reference/configuration.md (generated: the settings' help)", ref["configuration_page"]())]
    return tuple(out)


def _flat(text: str) -> str:
    """Lines joined (a statement may wrap), table rows kept apart."""
    return re.sub(r"(?<!\|)\n(?!\|)\s*", " ", text)


# --- comparing ----------------------------------------------------------------------------------------

def parse_value(stated: str) -> Any:
    """A stated value: ``10 s`` -> 10, ``512 MiB`` -> bytes, ``on`` / ``off`` -> bool, ``0-49`` -> (0, 49),
    a Python literal, else the text as written (a name)."""
    stated = stated.strip().strip("`").strip()
    if m := re.fullmatch(r"(?P<n>[\d.]+)\s*(?P<u>s|KiB|MiB|GiB|tokens)", stated):
        return float(m["n"]) * UNITS[m["u"]]
    if stated in ("on", "off"):
        return stated == "on"
    if m := re.fullmatch(r"(\d+)-(\d+)", stated):
        return int(m[1]), int(m[2])
    try:
        return ast.literal_eval(stated)
    except (ValueError, SyntaxError):
        return stated


def same(stated: Any, code: Any) -> bool:
    """Whether a stated value is the code's: numbers by value, names case-insensitively and by their last
    dotted part (``float16`` is ``torch.float16``), sequences element by element."""
    if isinstance(stated, bool) or isinstance(code, bool):
        return stated is code or (isinstance(code, str) and str(stated).lower() == code.lower())
    if isinstance(stated, (int, float)) and isinstance(code, (int, float)):
        return float(stated) == float(code)
    if isinstance(stated, (tuple, list)) and isinstance(code, (tuple, list)):
        return len(stated) == len(code) and all(same(a, b) for a, b in zip(stated, code))
    if isinstance(stated, str) and not isinstance(code, str) and code is not None:
        code = str(code)
    if isinstance(stated, str) and isinstance(code, str):
        return stated.lower() == code.lower() or stated.lower() == code.rsplit(".", 1)[-1].lower()
    return stated == code


def known_mismatches(items: tuple[Text, ...], known: tuple[Known, ...] = KNOWN) -> tuple[list[str], set[str]]:
    """(each statement of a :data:`KNOWN` default that is not the code's value, the patterns that matched)."""
    bad, used = [], set()
    for k in known:
        code = k.value()
        for pattern in k.patterns:
            for t in items:
                for m in re.finditer(pattern, _flat(t.text)):
                    used.add(pattern)
                    if not same(parse_value(m["v"]), code):
                        bad.append(f"{t.where}: {m.group(0)!r} states {k.what} as {m['v']}, the code's is {code!r}")
    return bad, used


# named settings in the guides: RAGCACHE_X, --flag, name=value
ENV_RE = r"`\$?(?P<name>RAGCACHE_[A-Z_]+)`? \(default (?P<v>[^),;]+)"
FLAG_RE = r"`(?P<name>--[a-z-]+)`(?: [a-z ]{0,20})? \(default (?P<v>[^\s),;:]+(?:, ?[\d.]+)*)"
PARAM_RE = (r"`(?:(?P<owner>[A-Z]\w+)\()?(?P<name>[a-z_]+)=(?P<v>[^`]+?)\)?`"
            r"(?:,? \(?(?:the|is the) default(?P<of> of `\w+`(?:,? (?:and )?`\w+`)*)?| \(default\))")


@cache
def _env_defaults() -> dict[str, tuple[Any, ...]]:
    """Each setting's default: the :class:`~ragcache.config.Config` field's value (when it has one) and
    the form the docs show (``EnvVar.default``: ``~/.cache/ragcache``, ``$RAGCACHE_HOME/answers``)."""
    import dataclasses

    from ragcache.config import ENV_VARS, Config

    out = {}
    for v in ENV_VARS:
        value = Config.__dataclass_fields__[v.field].default
        out[v.name] = (v.default,) if value is dataclasses.MISSING else (value, v.default)
    return out


def _env_same(stated: str, defaults: tuple[Any, ...]) -> bool:
    return any(stated.strip().strip("`") == str(d) or same(parse_value(stated), d) for d in defaults)


@cache
def _cli_defaults() -> dict[str, list[Any]]:
    """Each option of the command line (``--variants``) -> its defaults, one per command that has it."""
    out: dict[str, list[Any]] = {}
    for _, p in _cli_params():
        for opt in getattr(p, "opts", []):
            out.setdefault(opt, []).append(p.default)
    return out


@cache
def api_objects() -> dict[str, Any]:
    """The reference page's objects (``ragcache._EXPORTS`` and ``EXTRA_API`` of ``docs/gen_reference.py``)
    and the public methods of its classes, by dotted path."""
    import ragcache

    ref = runpy.run_path(str(ROOT / "docs" / "gen_reference.py"), run_name="gen_reference")
    paths = [f"{m}.{n}" for n, m in ragcache._EXPORTS.items() if not n.isupper()]
    paths += [p for ps in ref["EXTRA_API"].values() for p in ps]
    out: dict[str, Any] = {}
    for path in paths:
        mod, _, name = path.rpartition(".")
        obj = getattr(importlib.import_module(mod), name)
        out[path] = obj
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and inspect.isfunction(getattr(obj, attr, None)):
                    out[f"{path}.{attr}"] = getattr(obj, attr)
    return out


def _param_defaults(name: str, owner: str | None) -> list[Any]:
    found = []
    for path, obj in api_objects().items():
        if owner and path.rsplit(".", 1)[-1] != owner:
            continue
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            continue
        if name in params and params[name].default is not inspect.Parameter.empty:
            found.append(params[name].default)
    return found


def named_mismatches(items: tuple[Text, ...]) -> list[str]:
    """Each "``RAGCACHE_X`` (default V", "``--flag`` (default V" or "``name=V`` (the default" whose value is
    not the code's (a name the code does not have is reported too)."""
    env = _env_defaults()
    bad = []
    for t in items:
        flat = _flat(t.text)
        for m in re.finditer(ENV_RE, flat):
            if m["name"] not in env:
                bad.append(f"{t.where}: {m['name']} is not a setting")
            elif not _env_same(m["v"], env[m["name"]]):
                bad.append(f"{t.where}: {m.group(0)!r}: the code's default is {env[m['name']][-1]}")
        for m in re.finditer(FLAG_RE, flat):
            defaults = _cli_defaults().get(m["name"])
            stated = parse_value(m["v"])
            if defaults is None:
                bad.append(f"{t.where}: {m['name']} is not an option of the command line")
            elif not any(m["v"].replace(" ", "") == str(d) or same(stated, d) for d in defaults):
                bad.append(f"{t.where}: {m.group(0)!r}: the option's default is {defaults}")
        for m in re.finditer(PARAM_RE, flat):
            owners = [m["owner"]] if m["owner"] else re.findall(r"`(\w+)`", m["of"] or "") or [None]
            defaults = [d for owner in owners for d in _param_defaults(m["name"], owner)]
            if not defaults:
                bad.append(f"{t.where}: {m.group(0)!r}: no public callable has a parameter {m['name']!r}"
                           + (f" (in {m['owner']})" if m["owner"] else ""))
            elif not all(same(parse_value(m["v"]), d) for d in defaults):
                bad.append(f"{t.where}: {m.group(0)!r}: the signature defaults are {defaults}")
    return bad


# the command line's help texts
def _cli_params() -> Iterator[tuple[str, Any]]:
    """(command path, click parameter) for every parameter of every command of ``ragcache``."""
    import typer

    from ragcache.app.cli import app

    def walk(cmd: Any, path: str) -> Iterator[tuple[str, Any]]:
        for p in getattr(cmd, "params", []):
            yield path, p
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    yield from walk(typer.main.get_command(app), "ragcache")


def _rule_default(option: str) -> Any:
    """The license rule's default for a ``ragcache calibrate`` rule option (``--max-f1-drop``)."""
    return _dataclass_default("ragcache.engine.blend.license.LicenseRule", option.lstrip("-").replace("-", "_"))


def cli_help_mismatches(params: Iterator[tuple[str, Any]]) -> list[str]:
    """Each option whose help states a default that is not the code's: "default $RAGCACHE_X, else V" against
    the setting, "(default V)" against the option's own default or, for an option whose default is unset
    (``None``: the license rule decides), the rule's."""
    env = _env_defaults()
    bad = []
    for path, p in params:
        helptext, opt = " ".join((getattr(p, "help", None) or "").split()), p.opts[-1]
        for m in re.finditer(r"default:? \$(?P<env>RAGCACHE_[A-Z_]+), else (?P<v>[\w.-]*\w)(?=[).,;]| \(|$)",
                             helptext):
            if m["env"] not in env or not _env_same(m["v"], env[m["env"]]):
                bad.append(f"{path} {opt}: {m.group(0)!r}; the setting's default is "
                           f"{env[m['env']][-1] if m['env'] in env else 'missing'}")
        for m in re.finditer(r"\bdefault:? (?P<v>-?\d[\d.]*\d|\d)\)", helptext):
            code = p.default if p.default is not None else (
                _rule_default(opt) if helptext.startswith("License rule") else "no default in the code")
            if not same(parse_value(m["v"]), code):
                bad.append(f"{path} {opt}: {m.group(0)!r}; the code's default is {code!r}")
    return bad


# the Args: entries of the public API
DEFAULT_IN_ARG = re.compile(r"(?:\b[Dd]efault:? |\(default |, default |[Dd]efaults to )"
                            r"(?P<v>``[^`]+``|[\d.]+ ?(?:s|KiB|MiB|GiB|tokens)?\b|True|False|None|float\d+)")


def args_entries(doc: str) -> dict[str, str]:
    """The ``Args:`` section of a Google docstring: parameter (or ``a / b`` group) -> its description."""
    m = re.search(r"^(?P<indent>[ \t]*)Args:\n(?P<body>(?:(?P=indent)[ \t]+\S.*\n?|[ \t]*\n)+)", doc or "", re.M)
    if not m:
        return {}
    out: dict[str, str] = {}
    lines = [ln for ln in m["body"].splitlines() if ln.strip()]
    entry = min(len(ln) - len(ln.lstrip()) for ln in lines)
    current = None
    for ln in lines:
        if len(ln) - len(ln.lstrip()) == entry and (head := re.match(r"\s*([\w*][\w */,]*?):\s?(.*)", ln)):
            current = head[1]
            out[current] = head[2]
        elif current:
            out[current] += " " + ln.strip()
    return out


def arg_mismatches(objects: dict[str, Any], derived: dict = DERIVED) -> list[str]:
    """Each "default V" in an ``Args:`` entry that is not the parameter's signature default (or, for a
    ``None`` default, its :data:`DERIVED` value)."""
    bad = []
    for path, obj in objects.items():
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            continue
        doc = inspect.getdoc(obj) or ""
        if inspect.isclass(obj) and "Args:" not in doc:
            doc = inspect.getdoc(obj.__init__) or ""
        for names, text in args_entries(doc).items():
            for name in (n for n in re.split(r"[\s/,*]+", names) if n in params):
                code = params[name].default
                if code is inspect.Parameter.empty:
                    continue
                for m in DEFAULT_IN_ARG.finditer(text):
                    stated = parse_value(m["v"])
                    if m["v"].startswith("``") and isinstance(stated, str) and not m["v"].startswith("``\""):
                        continue  # not a literal: prose (``$RAGCACHE_HOME/answers``, ``Settings.llm``)
                    before = re.findall(r"\w+", text[:m.start()])[-1:]
                    if before and before[0] != name and before[0] in params:  # "a temperature (default 0.0"
                        other = params[before[0]].default
                        if other is not inspect.Parameter.empty and not same(stated, other):
                            bad.append(f"{path}({before[0]}): the docstring states the default {m['v']}, the "
                                       f"signature's is {other!r}")
                        continue
                    if code is None and stated is not None:
                        if (path, name) not in derived:
                            bad.append(f"{path}({name}=None): the docstring states the default {m['v']}; "
                                       "list the code value it stands for in DERIVED")
                            continue
                        code_value = derived[(path, name)]()
                        if not same(stated, code_value):
                            bad.append(f"{path}({name}): the docstring states {m['v']}, the code's is {code_value!r}")
                    elif not same(stated, code):
                        bad.append(f"{path}({name}): the docstring states the default {m['v']}, the signature's "
                                   f"is {code!r}")
    return bad


# --- the tests ----------------------------------------------------------------------------------------

def test_prose_defaults_are_the_codes():
    bad, used = known_mismatches(texts())
    assert bad == []
    unused = [p for k in KNOWN for p in k.patterns if p not in used]
    assert unused == [], "patterns that match no text any more (update them to the new wording): " + repr(unused)


def test_named_settings_in_the_guides_are_the_codes():
    assert named_mismatches(texts()) == []


def test_cli_help_defaults_are_the_codes():
    assert cli_help_mismatches(_cli_params()) == []


def test_args_defaults_are_the_signatures():
    assert arg_mismatches(api_objects()) == []


# the checks fail on a wrong statement --------------------------------------------------------------------

WRONG = Text("fixture", """
    threshold: cosine similarity needed for a hit; default: ragcache's tuned default (0.75, with guards).
    Answers cut at the budget are stored (``cache_truncated``, off by default).
    A store that hangs past ``lookup_timeout_s`` (default 3 s) is skipped.
| a `GuardSet(...)` | your own guards | 0.9 |
""")


def test_a_wrong_prose_default_fails():
    bad, _ = known_mismatches((WRONG,))
    assert len(bad) == 4, bad
    assert "'0.75, with guards' states the semantic gate with the guards" in bad[0]
    assert "the code's is 0.94" in bad[0]
    right = Text("fixture", "default: the decider's gate (0.94 with the guards alone, 0.75 with the learned verifier)")
    assert known_mismatches((right,))[0] == []


def test_a_wrong_named_setting_fails():
    wrong = Text("fixture", "a budget `RAGCACHE_PREFIX_MAX_BYTES` (default 256 MiB); `--variants` (default 3); "
                            "`single_flight=False` (the default); `RAGCACHE_NO_SUCH` (default 1); "
                            "`SemanticCache(error_scope=\"lookups\")` is the default")
    bad = named_mismatches((wrong,))
    assert [b.split(":")[1].strip(" '`") for b in bad] == [
        "RAGCACHE_PREFIX_MAX_BYTES` (default 256 MiB", "RAGCACHE_NO_SUCH is not a setting",
        "--variants` (default 3", "single_flight=False` (the default", "SemanticCache(error_scope=\"lookups\")` is the default"]
    right = Text("fixture", "`RAGCACHE_PREFIX_MAX_BYTES` (default 512 MiB); `--variants` (default 2); "
                            "`single_flight=True`, the default")
    assert named_mismatches((right,)) == []


def test_a_wrong_cli_help_default_fails():
    class Option:
        def __init__(self, opt: str, default: Any, helptext: str) -> None:
            self.opts, self.default, self.help = [opt], default, helptext

    options = [("ragcache calibrate", Option("--max-f1-drop", None, "License rule: F1 may fall (default 0.05).")),
               ("ragcache ask", Option("--top-k", None, "Chunks (default $RAGCACHE_TOP_K, else 5).")),
               ("ragcache demo", Option("--max-new-tokens", 64, "Decode budget (default 128).")),
               ("ragcache ask", Option("--port", None, "Port (default 8788)."))]
    bad = cli_help_mismatches(iter(options))
    assert [b.split(":")[0] for b in bad] == ["ragcache calibrate --max-f1-drop", "ragcache ask --top-k",
                                              "ragcache demo --max-new-tokens", "ragcache ask --port"]
    assert "the code's default is 0.02" in bad[0] and "the setting's default is 4" in bad[1]
    right = [("ragcache calibrate", Option("--max-f1-drop", None, "License rule: F1 may fall (default 0.02)."))]
    assert cli_help_mismatches(iter(right)) == []


def _fixture(max_new_tokens: int = 64, threshold: float | None = None, cache_truncated: bool = True) -> None:
    """A fixture whose docstring disagrees with its signature.

    Args:
        max_new_tokens: decode budget (tokens), default 128.
        threshold: the gate; default 0.94.
        cache_truncated: store cut answers (default ``True``).
    """


def test_a_wrong_args_default_fails():
    bad = arg_mismatches({"fixture": _fixture}, derived={})
    assert len(bad) == 2, bad
    assert "fixture(max_new_tokens): the docstring states the default 128, the signature's is 64" in bad
    assert "fixture(threshold=None): the docstring states the default 0.94" in bad[1]
    assert arg_mismatches({"fixture": _fixture}, derived={("fixture", "threshold"): _threshold}) == bad[:1]


@pytest.mark.parametrize(("stated", "value"), [
    ("10 s", 10.0), ("512 MiB", 512 << 20), ("on", True), ("``(\"en\",)``", ("en",)), ("0-49", (0, 49)),
    ("float16", "float16")])
def test_parse_value(stated, value):
    assert parse_value(stated) == value
