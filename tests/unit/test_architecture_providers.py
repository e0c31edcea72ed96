"""One provider table (issue 49 item 4): what differs between providers is a row under ``ragcache/providers/``.

Each provider declares its usage dialect, finish reasons, unset-temperature meaning and prompt caching in
its own module, with one row in :data:`ragcache.providers.table.PROVIDERS`; the core record, the servers and
both integrations read the row. A module elsewhere that compares a provider's name (``kind == "anthropic"``,
``t in ("openai-chat", ...)``) or holds its own per-provider table (finish reasons, sampling defaults) is a
second copy of a row that drifts from the first: these tests name it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ragcache.providers.spec import FINISH_REASONS
from ragcache.providers.table import rows

_ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = [_ROOT / "ragcache", _ROOT / "integrations" / "langchain" / "langchain_ragcache",
             _ROOT / "integrations" / "llama_index" / "llama_index"]
OWNER = "ragcache/providers/"
"""Where provider names and per-provider tables may be written: the providers' own modules and the table."""

ALLOWED: dict[str, str] = {
    "ragcache/app/runtime.py": "the CLI's --backend words pick an SDK client (app layer: a user's choice, "
                               "not a provider's behaviour)",
    "ragcache/app/demo.py": "the demo's --backend words (app layer)",
    "ragcache/app/ask.py": "the CLI's --backend word and 'is the local engine answering' for the long-question "
                           "note (app layer; ask.py is another change's, left as it is)",
}
"""Modules that may name a provider, each with the reason. Behaviour (usage, finish reasons, sampling,
prompt caching) is never among the reasons."""


def provider_words() -> frozenset[str]:
    """Every name the table knows a provider by: row names, LangChain types and class names."""
    out: set[str] = set()
    for p in rows():
        out |= {p.name, *p.langchain_types, *p.langchain_classes}
        out |= {c.rpartition(":")[2] for c in p.llama_index_classes}
    return frozenset(out)


def _strings(node: ast.AST) -> list[str]:
    """The string constants of ``node`` itself, or of a tuple / list / set / frozenset(...) literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set", "tuple") \
            and node.args:
        return _strings(node.args[0])
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def provider_switches(source: str, words: frozenset[str]) -> list[str]:
    """``"line: what"`` of each provider switch in ``source``:

    - a comparison (``==``, ``!=``, ``in``, ``not in``, ``is``) or ``case`` with a provider's name;
    - a dict keyed by two or more provider names, or a tuple / list / set (frozenset) of strings that are
      mostly provider names (two or more): a per-provider table (a list of package names that happens to
      hold ``"openai"`` is not);
    - a dict of two or more native end reasons mapped to ragcache's words: a finish-reason table.

    Names in docstrings, comments and plain strings (messages) do not count."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            named = [s for side in (node.left, *node.comparators) for s in _strings(side) if s in words]
            if named:
                out.append(f"{node.lineno}: compares a provider name {named[0]!r}")
        elif isinstance(node, ast.MatchValue):
            named = [s for s in _strings(node.value) if s in words]
            if named:
                out.append(f"{node.lineno}: case on a provider name {named[0]!r}")
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            vals = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            if len([k for k in keys if k in words]) >= 2:
                out.append(f"{node.lineno}: a table keyed by provider names")
            elif (len(keys) >= 2 and len(vals) == len(node.values) == len(keys)
                  and all(v in FINISH_REASONS for v in vals) and any(k != v for k, v in zip(keys, vals, strict=True))):
                out.append(f"{node.lineno}: a finish-reason table")
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            strings = _strings(node)
            named = {s for s in strings if s in words}
            if len(named) >= 2 and 2 * len(named) >= len(strings):  # mostly provider names: a table of them
                out.append(f"{node.lineno}: a collection of provider names")
    return sorted(set(out), key=lambda s: int(s.split(":")[0]))


WORDS = frozenset({"anthropic", "openai", "local", "openai-chat", "ChatAnthropic"})


def test_the_switch_scan_finds_every_form():
    src = ('"""kind == "anthropic" in a docstring."""\n'
           "a = kind == 'anthropic'\n"
           "b = t in ('openai-chat', 'x')\n"
           "# if name == 'openai': in a comment\n"
           "c = {'anthropic': 1.0, 'openai': 1.0, 'local': 0.0}\n"
           "d = frozenset({'openai-chat', 'ChatAnthropic'})\n"
           "e = {'end_turn': 'stop', 'max_tokens': 'length'}\n"
           "f = type(m).__name__ != 'ChatAnthropic'\n"
           "match kind:\n    case 'local':\n        pass\n"
           "g = f'needs the {kind} SDK'\n"
           "h = {'stop': 'stop', 'length': 'length'} if x else {}\n"
           "i = row.prompt_caching == 'breakpoints'\n"
           "j = ('ragcache', 'langchain', 'anthropic', 'openai', 'pydantic')\n"
           "k = ('local', 'openai')\n")
    assert provider_switches(src, WORDS) == [
        "2: compares a provider name 'anthropic'", "3: compares a provider name 'openai-chat'",
        "5: a table keyed by provider names", "6: a collection of provider names", "7: a finish-reason table",
        "8: compares a provider name 'ChatAnthropic'", "10: case on a provider name 'local'",
        "16: a collection of provider names"]


def test_the_scan_knows_every_row():
    words = provider_words()
    assert {"anthropic", "openai", "local", "anthropic-chat", "openai-chat", "ChatAnthropic", "RagCacheLLM",
            "Anthropic"} <= words


@pytest.mark.parametrize("root", _PACKAGES, ids=lambda p: p.name)
def test_no_module_outside_the_providers_switches_on_a_provider(root):
    words = provider_words()
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(_ROOT).as_posix()
        if rel.startswith(OWNER) or rel in ALLOWED:
            continue
        found += [f"{rel}:{s}" for s in provider_switches(f.read_text(encoding="utf-8"), words)]
    assert not found, ("a provider switch outside ragcache/providers/ (read the provider's row instead: "
                       "ragcache.providers.table.provider / for_langchain / for_llama_index; see docs/design/"
                       "architecture.md, 'Adding a provider'):\n" + "\n".join(found))


def test_every_allowed_module_still_needs_its_exception():
    """An exception that no longer switches is removed, so the list only shrinks."""
    words = provider_words()
    stale = [rel for rel in ALLOWED if not provider_switches((_ROOT / rel).read_text(encoding="utf-8"), words)]
    assert not stale, f"these modules no longer name a provider; drop them from ALLOWED: {stale}"


# -- what a server reports in a provider's words comes from the row -----------------------------------
def native_end_reasons() -> frozenset[str]:
    """Every row's native end reasons that are not ragcache's own words (``end_turn``, ``max_tokens``,
    ``stop_sequence``...): spellings only a provider's API uses."""
    return frozenset(k for p in rows() for k in p.finish_reasons if k not in FINISH_REASONS)


def finish_fields() -> frozenset[str]:
    """The response fields that hold a native end reason (``stop_reason``, ``finish_reason``...)."""
    return frozenset(p.finish_field for p in rows() if p.finish_field)


def _number(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool)


def provider_defaults(source: str, natives: frozenset[str], fields: frozenset[str]) -> list[str]:
    """``"line: what"`` of each provider fact written out in ``source`` instead of read from its row:

    - a default temperature: a call that names ``"temperature"`` with a number right after it
      (``body.get("temperature", 1.0)``, ``_number(body, "temperature", 1.0, ...)``): the row's
      ``unset_temperature``;
    - a native end reason answered: a provider spelling (``"end_turn"``, ``"max_tokens"``...) returned, or
      given to a finish field (``{"stop_reason": "end_turn"}``, ``stop_reason = "max_tokens" if ... else ...``):
      the row's ``native_finish``.

    A ``getattr`` default (what an object without the attribute reads as) is not a provider's fact. The
    same spellings as request fields (``body["max_tokens"]``) do not count."""
    out = []

    def spelled(node: ast.AST | None) -> list[str]:
        if isinstance(node, ast.Tuple):
            return [s for e in node.elts for s in spelled(e)]
        if isinstance(node, ast.IfExp):
            return spelled(node.body) + spelled(node.orelse)
        return [node.value] if isinstance(node, ast.Constant) and node.value in natives else []

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id == "getattr"):
            args = node.args
            for i, a in enumerate(args[:-1]):
                if isinstance(a, ast.Constant) and a.value == "temperature" and _number(args[i + 1]):
                    out.append(f"{node.lineno}: a default temperature {args[i + 1].value!r}")
        elif isinstance(node, ast.Return) or (isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in fields for t in node.targets)):
            named = spelled(node.value)
            if named:
                out.append(f"{node.lineno}: answers a native end reason {named[0]!r}")
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(k, ast.Constant) and k.value in fields and spelled(v):
                    out.append(f"{node.lineno}: answers a native end reason {spelled(v)[0]!r}")
    return sorted(set(out), key=lambda s: int(s.split(":")[0]))


def test_the_defaults_scan_finds_every_form():
    src = ('"""body.get("temperature", 1.0) in a docstring."""\n'
           "a = body.get('temperature', 1.0)\n"
           "b = _number(body, 'temperature', 1.0, 0.0, 2.0)\n"
           "c = body.get('temperature', ROW.unset_temperature)\n"
           "def f():\n    return 'max_tokens', None\n"
           "stop_reason = n if ok else ('max_tokens' if x else 'end_turn')\n"
           "e = {'stop_reason': 'end_turn', 'max_tokens': 5}\n"
           "g = body['max_tokens']\n"
           "h = getattr(llm, 'temperature', 0.0)\n"
           "i = float(d.get('temperature', 0))\n"
           "def k():\n    return ROW.native_finish('stop')\n"
           "m = {'budget_param': 'max_completion_tokens' if y else 'max_tokens'}\n")
    assert provider_defaults(src, frozenset({"end_turn", "max_tokens"}), frozenset({"stop_reason"})) == [
        "2: a default temperature 1.0", "3: a default temperature 1.0", "6: answers a native end reason 'max_tokens'",
        "7: answers a native end reason 'max_tokens'", "8: answers a native end reason 'end_turn'",
        "11: a default temperature 0"]


@pytest.mark.parametrize("root", _PACKAGES, ids=lambda p: p.name)
def test_no_module_outside_the_providers_writes_out_a_rows_default_or_end_reason(root):
    """The local servers speak Anthropic's and OpenAI's APIs: their default temperature and the end reasons
    they report are the rows' (``unset_temperature``, :meth:`~ragcache.providers.spec.Provider.native_finish`),
    so a server-side copy (``body.get("temperature", 1.0)``, ``return "end_turn", None``) fails here."""
    natives, fields = native_end_reasons(), finish_fields()
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(_ROOT).as_posix()
        if not rel.startswith(OWNER):
            found += [f"{rel}:{s}" for s in provider_defaults(f.read_text(encoding="utf-8"), natives, fields)]
    assert not found, ("a provider's default temperature or end reason written outside ragcache/providers/ (read "
                       "its row: ROW.unset_temperature, ROW.native_finish(reason)):\n" + "\n".join(found))


def test_the_servers_read_their_rows():
    """What the servers report, read back from the rows: the words their SDK clients expect."""
    from ragcache.providers.anthropic.provider import ANTHROPIC
    from ragcache.providers.openai.provider import OPENAI

    assert (ANTHROPIC.native_finish("stop"), ANTHROPIC.native_finish("length")) == ("end_turn", "max_tokens")
    assert ANTHROPIC.native_finish("stop", stop_sequence=True) == "stop_sequence"
    assert [OPENAI.native_finish(r) for r in ("stop", "length")] == ["stop", "length"]
    assert OPENAI.native_finish("stop", stop_sequence=True) == "stop"  # OpenAI says stop for both
    assert ANTHROPIC.unset_temperature == OPENAI.unset_temperature == 1.0
    for p in rows():  # every native value a row lists reads back to a spelling of the same word
        for word in p.finish_reasons.values():
            assert p.finish_reasons[p.native_finish(word)] == word
    with pytest.raises(ValueError, match="no native end reason for 'pause_turn'"):
        OPENAI.native_finish("pause_turn")
