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
