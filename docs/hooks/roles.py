"""Sphinx roles in docstrings, rendered as cross-references on the docs site, and a check that none is left.

The docstrings write references the Sphinx way (``:class:`~ragcache.config.Config```, ``:meth:`.get```,
``:func:`title <ragcache.x.f>```): readable in the source and in an editor's hover. The site is built by
mkdocstrings, which renders Markdown and does not know roles. Two parts, both registered in ``mkdocs.yml``:

- :class:`SphinxRoles`, a griffe extension (``mkdocstrings`` handler option ``extensions``): when a package
  is loaded, every role in every docstring is resolved the way Python would resolve the name in the
  docstring's scope (imports, enclosing class and module, then the full path) and rewritten to an
  autorefs cross-reference. The link is *optional*: it becomes a link where the target is on the site and
  stays a code span (with the full name as its tooltip) where it is not, such as a private helper. A
  target inside the documented packages that does not resolve (a typo, a renamed or removed name) is a
  warning, which fails ``mkdocs build --strict``. Names outside them (the standard library, LangChain)
  render as code spans. A full name in a documented package that is not loaded yet (``ragcache`` loads
  before the adapters) is linked as written, unchecked.
- :func:`on_post_page`, an mkdocs hook: every built page is scanned with :func:`raw_roles`, and a page with
  a role left in its text (a generated page, a guide, a docstring the extension did not see) fails the
  build, naming the page and the roles.

:func:`plain_roles` turns roles into code spans for text that is not a docstring (the evaluation pages
quote benchmark docstrings from ``bench/results``).
"""

from __future__ import annotations

import builtins
import html
import importlib.util
import re
from dataclasses import dataclass

#: A Sphinx cross-reference role and its content: ``:class:`x```, ``:py:meth:`~a.b```, ``:func:`t <a.b>```.
#: The content may be wrapped over lines (a long role at the end of a docstring line).
ROLE_RE = re.compile(r":(?:py:)?(?P<kind>class|func|meth|data|mod|attr|exc|obj|const|type):`(?P<content>[^`]+)`")

#: A role as it is left in a built page: the role name followed by its backticked or ``<code>`` content.
RAW_ROLE_RE = re.compile(r":(?:py:)?(?:class|func|meth|data|mod|attr|exc|obj|const|type):(?:`|<code>|&#96;)")

#: The root packages the site documents: an unresolved reference inside them is an error.
DOCUMENTED_ROOTS = ("ragcache", "langchain_ragcache", "llama_index")


@dataclass(frozen=True, slots=True)
class Role:
    """One parsed role: ``name`` is the dotted target as written (``.``-relative names keep their dots,
    a trailing ``()`` dropped), ``title`` the text the page shows, ``link`` false for ``!``-prefixed
    targets (Sphinx's "do not link")."""

    kind: str
    name: str
    title: str
    link: bool


def parse_role(kind: str, content: str) -> Role:
    """Parse a role's content: ``name``, ``~name`` (title: the last component), ``!name`` (no link),
    ``title <name>`` (explicit title). Whitespace inside the name (a wrapped line) is removed."""
    content = " ".join(content.split())
    explicit = re.fullmatch(r"(?P<title>.+?)\s*<(?P<name>[^<>]+)>", content)
    if explicit:
        title, name = explicit["title"], explicit["name"]
    else:
        title = name = content
    name = name.replace(" ", "")
    link = not name.startswith("!")
    name = name.lstrip("!")
    short = name.startswith("~")
    name = name.lstrip("~")
    if not explicit:
        title = name.rsplit(".", 1)[-1] if short else name.lstrip(".")
    return Role(kind, name.removesuffix("()"), title, link)


def plain_roles(text: str) -> str:
    """``text`` with every role replaced by a Markdown code span of its title (no link): for text quoted
    from docstrings outside the documented packages, such as a benchmark's rule on an evaluation page."""
    return ROLE_RE.sub(lambda m: f"`{parse_role(m['kind'], m['content']).title}`", text)


def raw_roles(page_html: str) -> list[str]:
    """The roles left unrendered in a built page, each with a little of its text (empty when none).
    ``<script>`` and ``<style>`` bodies are not page text and are skipped."""
    text = re.sub(r"<(script|style)\b.*?</\1>", "", page_html, flags=re.DOTALL | re.IGNORECASE)
    return [html.unescape(re.sub(r"<[^>]+>", "", text[m.start():m.end() + 60])).split("\n")[0]
            for m in RAW_ROLE_RE.finditer(text)]


def on_post_page(output: str, page, config) -> str:
    """mkdocs hook: fail the build on a page that shows a raw role (strict or not: a raw role is a bug)."""
    from mkdocs.exceptions import PluginError

    if found := raw_roles(output):
        shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
        raise PluginError(f"{page.file.src_uri}: {len(found)} unrendered Sphinx role(s): {shown}. Write them as "
                          "autorefs cross-references, or in a docstring of a documented package (the griffe "
                          "extension in docs/hooks/roles.py renders those).")
    return output


# --- the griffe extension --------------------------------------------------------------------------------

try:
    import griffe
except ImportError:  # the hook and the helpers above work without griffe (the tests import them)
    griffe = None


def _lookup(collection, path: str) -> str | None:
    """The canonical path of ``path`` in the loaded packages (aliases followed), or ``None``."""
    try:
        obj = collection[path]
        return obj.final_target.path if obj.is_alias else obj.path
    except Exception:  # KeyError, AliasResolutionError, CyclicAliasError: not (yet) a known object
        return None


def _scopes(obj):
    while obj is not None:
        yield obj
        obj = obj.parent


def resolve(obj, name: str, collection) -> str | None:
    """The full path that ``name``, written in ``obj``'s docstring, refers to; ``None`` when unknown.

    Tried in order: the first component resolved in ``obj``'s scope the way Python would (members, the
    module's imports, enclosing scopes; so ``SemanticCache.get`` in a module that imports it), the name
    as a full path, the name relative to each enclosing scope (``.get`` in a class, ``.backend`` in a
    package); then, when exactly one matches, a member of a class of the docstring's module (``get_many``
    in a module's docstring about its one store class) or a name of a submodule of the docstring's package
    (a class a package exports lazily, through its ``__getattr__``; also by its full public path,
    ``ragcache.engine.blend.blend_prefill``)."""
    bare = name.lstrip(".")
    first, _, rest = bare.partition(".")
    candidates = []
    if not name.startswith("."):
        try:
            candidates.append(obj.resolve(first) + (f".{rest}" if rest else ""))
        except Exception:  # NameResolutionError: not a name in scope
            pass
        candidates.append(bare)
    candidates += [f"{scope.path}.{bare}" for scope in _scopes(obj)]
    for candidate in candidates:
        if (found := _lookup(collection, candidate)) is not None:
            return found
    module = obj if obj.is_module else obj.module
    if (found := _one_of(collection, [c for c in module.members.values() if not c.is_alias and c.is_class], bare)):
        return found
    if (found := _in_submodules(collection, module, bare)):
        return found
    head, _, last = bare.rpartition(".")  # ragcache.engine.blend.blend_prefill: a package's lazy export
    for candidate in (c.rpartition(".")[0] for c in candidates if head):
        try:
            package = collection[candidate]
            if package.is_alias or not package.is_module:
                continue
        except Exception:  # not a known object
            continue
        if found := _in_submodules(collection, package, last):
            return found
    return None


def _one_of(collection, scopes, bare: str) -> str | None:
    """The one object ``bare`` names in ``scopes`` (``None`` when none or several)."""
    found = {f for f in (_lookup(collection, f"{scope.path}.{bare}") for scope in scopes) if f is not None}
    return found.pop() if len(found) == 1 else None


def _in_submodules(collection, module, bare: str) -> str | None:
    """The one object ``bare`` names in the submodules of ``module`` (a name the package exports lazily)."""
    return _one_of(collection, [m for m in module.members.values() if not m.is_alias and m.is_module], bare)


def documented(path: str, roots: tuple[str, ...] = DOCUMENTED_ROOTS) -> bool:
    """Whether ``path`` is inside the documented packages ``roots`` (``llama_index``: its ``ragcache`` parts)."""
    root = path.split(".", 1)[0]
    return root in roots and (root != "llama_index" or path.endswith(".ragcache") or ".ragcache." in path)


def _outside(name: str, roots: tuple[str, ...]) -> bool:
    """Whether an unresolved ``name`` is outside the documented packages: a built-in or a module that is
    importable and is not one of :data:`DOCUMENTED_ROOTS`."""
    if name.startswith("."):
        return False
    root = name.split(".", 1)[0]
    if hasattr(builtins, root):
        return True
    if root in roots:
        return not documented(name, roots)
    try:
        return importlib.util.find_spec(root) is not None
    except (ImportError, ValueError):
        return False


def render(obj, kind: str, content: str, collection, roots: tuple[str, ...] = DOCUMENTED_ROOTS) -> tuple[str, str | None]:
    """The Markdown for one role in ``obj``'s docstring, and the name when it does not resolve."""
    role = parse_role(kind, content)
    code = f"`{role.title}`"
    if not role.link:
        return code, None
    target = resolve(obj, role.name, collection)
    if target is None and documented(role.name, roots) and role.name.split(".", 1)[0] not in collection:
        target = role.name  # another documented package, not loaded yet (ragcache citing an adapter)
    if target is None:
        return code, None if _outside(role.name, roots) else role.name
    # autorefs: a link where the target is documented on the site, the code span (with tooltip) elsewhere
    return f'<autoref identifier="{target}" optional>{code}</autoref>', None


if griffe is not None:

    class SphinxRoles(griffe.Extension):
        """Rewrite the Sphinx roles of every docstring of a loaded package into autorefs cross-references
        (see the module docstring); log a warning for each reference that does not resolve. ``roots``:
        the documented root packages (default :data:`DOCUMENTED_ROOTS`)."""

        def __init__(self, roots: tuple[str, ...] | list[str] = DOCUMENTED_ROOTS) -> None:
            super().__init__()
            self.roots = tuple(roots)

        def on_package(self, *, pkg, loader, **kwargs) -> None:
            collection = loader.modules_collection
            for obj in self._objects(pkg):
                if not documented(obj.path, self.roots):
                    continue
                doc = obj.docstring
                if doc is None or ":" not in doc.value:
                    continue
                unresolved: list[str] = []

                def sub(m, obj=obj, unresolved=unresolved):
                    text, bad = render(obj, m["kind"], m["content"], collection, self.roots)
                    if bad:
                        unresolved.append(f":{m['kind']}:`{bad}`")
                    return text

                doc.value = ROLE_RE.sub(sub, doc.value)
                for bad in unresolved:
                    griffe.logger.warning(f"{obj.path}: the docstring's {bad} names nothing in the documented "
                                          f"packages (misspelled, moved or removed?)")

        on_package_loaded = on_package  # the name of the same hook in griffe 1.x

        @classmethod
        def _objects(cls, obj):
            yield obj
            for member in obj.members.values():
                if not member.is_alias:
                    yield from cls._objects(member)
