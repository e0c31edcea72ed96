"""The docs site shows no raw Sphinx role (issue 42): the docstrings' ``:class:`` / ``:func:`` / ``:meth:``
roles become cross-references, a role naming nothing fails the build, and a role left on a built page
fails it too. ``docs/hooks/roles.py`` holds the griffe extension and the mkdocs hook; these tests run
the same code on fixtures and on the real packages, without building the site."""

from __future__ import annotations

import logging
import runpy
from pathlib import Path

import pytest

griffe = pytest.importorskip("griffe")

ROOT = Path(__file__).resolve().parents[2]
roles = runpy.run_path(str(ROOT / "docs" / "hooks" / "roles.py"), run_name="roles")


@pytest.mark.parametrize(("kind", "content", "name", "title", "link"), [
    ("class", "SemanticCache", "SemanticCache", "SemanticCache", True),
    ("class", "~ragcache.config.Config", "ragcache.config.Config", "Config", True),
    ("meth", ".get", ".get", "get", True),
    ("func", "~ragcache.answering.cacheable()", "ragcache.answering.cacheable", "cacheable()", True),
    ("meth", "Config.from_env() <ragcache.config.Config.from_env>", "ragcache.config.Config.from_env",
     "Config.from_env()", True),
    ("meth", "SettingsPlan.to_dict\n        ", "SettingsPlan.to_dict", "SettingsPlan.to_dict", True),
    ("class", "!Unlinked", "Unlinked", "Unlinked", False),
])
def test_parse_role(kind, content, name, title, link):
    assert roles["parse_role"](kind, content) == roles["Role"](kind, name, title, link)


def test_plain_roles_leaves_code_spans():
    text = "the lowest ``t`` on :data:`GRID` plus :data:`~benchmarks.semantic_decider.MARGIN`."
    assert roles["plain_roles"](text) == "the lowest ``t`` on `GRID` plus `MARGIN`."


PAGE_WITH_ROLES = """<html><head><script>var s = ":class:`x`";</script></head><body>
<p>See :class:<code>SemanticCache</code> and :meth:`get` and
<td>:py:func:&#96;run&#96;</td> but not <a class="autorefs" href="#x"><code>Config</code></a>.</p></body></html>"""


def test_raw_roles_finds_every_role_left_on_a_page():
    found = roles["raw_roles"](PAGE_WITH_ROLES)
    assert [f.split("`")[0].split(" ")[0] for f in found] == [":class:SemanticCache", ":meth:", ":py:func:"]
    assert roles["raw_roles"]('<p>See <a href="#c"><code>Config</code></a>: class: a word, not a role.</p>') == []


def test_the_hook_fails_a_page_with_a_role():
    from mkdocs.exceptions import PluginError

    class Page:
        class file:
            src_uri = "reference/api.md"

    with pytest.raises(PluginError, match=r"reference/api.md: 3 unrendered Sphinx role"):
        roles["on_post_page"](PAGE_WITH_ROLES, Page, None)
    clean = "<p>no roles</p>"
    assert roles["on_post_page"](clean, Page, None) == clean


STORE = '''
"""Stores. :class:`Store` keeps things; :meth:`get` reads one (the module's one class has it)."""
from rcfixture.records import Record as Rec


class Store:
    """A store of :class:`~rcfixture.records.Record` (also :class:`Rec`); :meth:`.get` and :meth:`Store.put`.
    Not in the packages: :class:`ValueError`, :class:`!Anything`."""

    def get(self, key):
        """Read :attr:`Store.size` items; see :func:`rcfixture.store.helper`."""

    def put(self, key):
        """Write."""

    size = 0


def helper():
    """Help; :meth:`.missing` and :func:`rcfixture.gone` name nothing; :class:`rcfixture.Lazy` is the
    package's lazy export."""
'''


def _load(package: str, modules: dict[str, str], caplog):
    with caplog.at_level(logging.WARNING), griffe.temporary_visited_package(
            package, modules, extensions=griffe.load_extensions(roles["SphinxRoles"](roots=(package,)))) as pkg:
        return {path: obj.docstring.value for path, obj in _walk(pkg)}


def _walk(obj):
    if obj.docstring is not None:
        yield obj.path, obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)


def _ref(target: str, title: str) -> str:
    return f'<autoref identifier="{target}" optional>`{title}`</autoref>'


def test_extension_resolves_roles_in_their_scope_and_warns_on_the_unknown(caplog):
    modules = {"store.py": STORE, "records.py": "class Record:\n    '''A record.'''\n",
               "lazy.py": "class Lazy:\n    '''Imported on first use (the package's __getattr__).'''\n"}
    docs = _load("rcfixture", modules, caplog)
    assert docs["rcfixture.store"].startswith(f"Stores. {_ref('rcfixture.store.Store', 'Store')} keeps things; "
                                             f"{_ref('rcfixture.store.Store.get', 'get')} reads one")
    assert docs["rcfixture.store.Store"] == (
        f"A store of {_ref('rcfixture.records.Record', 'Record')} (also {_ref('rcfixture.records.Record', 'Rec')}); "
        f"{_ref('rcfixture.store.Store.get', 'get')} and {_ref('rcfixture.store.Store.put', 'Store.put')}.\n"
        "Not in the packages: `ValueError`, `Anything`.")
    assert docs["rcfixture.store.Store.get"] == (f"Read {_ref('rcfixture.store.Store.size', 'Store.size')} items; "
                                                f"see {_ref('rcfixture.store.helper', 'rcfixture.store.helper')}.")
    assert docs["rcfixture.store.helper"] == ("Help; `missing` and `rcfixture.gone` name nothing; "
                                              f"{_ref('rcfixture.lazy.Lazy', 'rcfixture.Lazy')} is the\n"
                                              "package's lazy export.")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2
    assert "rcfixture.store.helper: the docstring's :meth:`.missing` names nothing" in warned[0]
    assert ":func:`rcfixture.gone`" in warned[1]


def test_every_role_in_the_documented_packages_resolves(caplog):
    """The same check ``mkdocs build --strict`` makes, on the real packages: a renamed or removed name
    that a docstring still cites fails here, naming the docstring and the role."""
    loader = griffe.GriffeLoader(extensions=griffe.load_extensions(roles["SphinxRoles"]()),
                                 search_paths=[ROOT, ROOT / "integrations" / "langchain",
                                               ROOT / "integrations" / "llama_index"])
    with caplog.at_level(logging.WARNING):
        for package in ("ragcache", "langchain_ragcache", "llama_index"):
            loader.load(package, try_relative_path=False)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    config = loader.modules_collection["ragcache.config"].docstring.value
    assert "<autoref identifier=" in config and not roles["ROLE_RE"].search(config)
