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
