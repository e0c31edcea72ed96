"""One request shape (issue 41 item 1): only ``ragcache.request`` computes a request's partition.

Every entry point keys its requests through :mod:`ragcache.request` (``key_messages`` / ``cache_request``),
so one request has one partition whatever door it came through. A module that called the partition
primitives itself would be a second keying rule that drifts from the first; this test names it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = [_ROOT / "ragcache", _ROOT / "integrations" / "langchain" / "langchain_ragcache",
             _ROOT / "integrations" / "llama_index" / "llama_index"]
PARTITION_PRIMITIVES = {"partition_key", "request_partition"}
"""The functions that compute a partition from its parts (:mod:`ragcache.semantic.partition`)."""
OWNERS = ("ragcache/request/", "ragcache/semantic/partition.py")
"""Where they may be called: the request package, and the primitive's own module."""


def partition_calls(source: str) -> list[str]:
    """``"line: name"`` of each call of a partition primitive in ``source`` (a bare name, an attribute
    such as ``semantic.partition_key``, or an alias bound by ``from ... import partition_key as pk``);
    names in strings, comments and docstrings do not count."""
    tree = ast.parse(source)
    aliases = set(PARTITION_PRIMITIVES)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            aliases |= {a.asname for a in node.names if a.name in PARTITION_PRIMITIVES and a.asname}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name in aliases:
            out.append(f"{node.lineno}: {name}")
    return out


def test_the_partition_scan_finds_every_form():
    src = ('"""partition_key(namespace=...) in a docstring."""\n'
           "from ragcache.semantic import partition_key, request_partition as rp\n"
           "import ragcache.semantic as s\n"
           "# partition_key(model='m') in a comment\n"
           "a = partition_key(model='m')\nb = rp(layout, namespace='n', model='m', params={})\n"
           "c = s.partition_key(model='m')\nd = 'request_partition(x)'\n")
    assert partition_calls(src) == ["5: partition_key", "6: rp", "7: partition_key"]
    assert partition_calls("from ragcache.request import cache_request\ncache_request('q', None)\n") == []


@pytest.mark.parametrize("root", _PACKAGES, ids=lambda p: p.name)
def test_only_the_request_package_computes_a_partition(root):
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(_ROOT).as_posix()
        if rel.startswith(OWNERS):
            continue
        found += [f"{rel}:{c}" for c in partition_calls(f.read_text(encoding="utf-8"))]
    assert not found, ("a partition computed outside ragcache.request (key the request with "
                       "ragcache.request.key_messages / cache_request instead):\n" + "\n".join(found))


def test_every_door_builds_a_cache_request():
    """The answer path takes one record: no door passes ``(question, partition, **kw)`` any more."""
    import inspect

    from ragcache.answering import AnswerPath

    for name in ("run", "arun", "stream", "astream", "lookup", "alookup", "record", "arecord"):
        params = list(inspect.signature(getattr(AnswerPath, name)).parameters)
        assert params[1] == "request" and "partition" not in params and "question" not in params, (name, params)


# -- the semantic cache receives a key (issue 49 item 2): no request derivation, no proxy body rule, no import up --
_SEMANTIC = _ROOT / "ragcache" / "semantic"
REQUEST_DERIVATIONS = {"request_partition", "shaping_fields", "ANTHROPIC_SHAPING", "ANTHROPIC_NEUTRAL"}
"""A request's partition (:mod:`ragcache.request.partition`) and the proxy's body-field rule
(:mod:`ragcache.server.body_fields`): decided above the semantic cache, never inside it."""
UPPER_PACKAGES = ("ragcache.request", "ragcache.server")
"""Packages above ``ragcache.semantic``: it imports nothing from them."""


def semantic_violations(source: str) -> list[str]:
    """``"line: what"`` for each definition, import or attribute use of a name in
    :data:`REQUEST_DERIVATIONS`, and each import from :data:`UPPER_PACKAGES` (at module level or
    inside a function; ``from ragcache import request`` too); names in strings and docstrings do not count."""
    out = []

    def upper(module: str) -> bool:
        return any(module == p or module.startswith(p + ".") for p in UPPER_PACKAGES)

    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name in REQUEST_DERIVATIONS:
            out.append(f"{line}: defines {node.name}")
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in REQUEST_DERIVATIONS:
            out.append(f"{line}: defines {node.id}")
        elif isinstance(node, ast.Import):
            out += [f"{line}: imports {a.name}" for a in node.names if upper(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = [a.name for a in node.names]
            if upper(module) or any(upper(f"{module}.{n}") for n in names):
                out.append(f"{line}: imports from {module}")
            out += [f"{line}: imports {n}" for n in names if n in REQUEST_DERIVATIONS]
        elif isinstance(node, ast.Attribute) and node.attr in REQUEST_DERIVATIONS:
            out.append(f"{line}: uses {node.attr}")
    return out


def test_the_semantic_scan_finds_every_form():
    src = ('"""request_partition and ragcache.request in a docstring."""\n'
           "from ragcache.request.partition import request_partition\n"
           "import ragcache.server.body_fields\n"
           "from ragcache import request\n"
           "def shaping_fields(body):\n    from ragcache.server import proxy\n    return proxy\n"
           "ANTHROPIC_SHAPING = frozenset()\n"
           "x = ragcache.ANTHROPIC_NEUTRAL\n"
           "s = 'from ragcache.request import cache_request'\n")
    assert sorted(semantic_violations(src)) == [
        "2: imports from ragcache.request.partition", "2: imports request_partition",
        "3: imports ragcache.server.body_fields", "4: imports from ragcache", "5: defines shaping_fields",
        "6: imports from ragcache.server", "8: defines ANTHROPIC_SHAPING", "9: uses ANTHROPIC_NEUTRAL"]
    assert semantic_violations("from ragcache.semantic.partition import PartitionKey, partition_key\n"
                               "from ragcache.requests_log import x\nimport ragcache.serverless\n") == []


def test_the_semantic_cache_receives_a_key_and_derives_none():
    files = sorted(_SEMANTIC.rglob("*.py"))
    assert len(files) > 40  # the scan reads the real package
    found = [f"{f.relative_to(_ROOT).as_posix()}:{v}" for f in files
             for v in semantic_violations(f.read_text(encoding="utf-8"))]
    assert not found, ("ragcache.semantic derives a request's partition, holds the proxy's body rule or imports "
                       "from above it (derive in ragcache.request.partition, the proxy's fields in "
                       "ragcache.server.body_fields, and pass the semantic cache a PartitionKey):\n" + "\n".join(found))


def test_the_public_names_point_to_their_owners():
    import ragcache
    import ragcache.semantic
    import ragcache.semantic.partition
    from ragcache.request import request_partition
    from ragcache.server import body_fields

    assert ragcache.request_partition is request_partition
    assert request_partition.__module__ == "ragcache.request.partition"
    assert body_fields.shaping_fields.__module__ == "ragcache.server.body_fields"
    for name in REQUEST_DERIVATIONS:
        assert not hasattr(ragcache.semantic, name) and not hasattr(ragcache.semantic.partition, name), name
