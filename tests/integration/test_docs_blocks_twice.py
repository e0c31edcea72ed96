"""A docs page's Python blocks run twice in a row against the same stores (issue 50, item 5): a reader who runs
a page again, or a second replica running the same code, gets what the page says, not an assertion error
from what the first run stored.

Sybil (the repository's root ``conftest.py``) runs each page once per test session; this runs the page's
Python blocks (those not marked ``skip`` or ``slow``) in order, twice, each run in a fresh namespace, with the
same environment Sybil gives the page (``shared_stores_env``: one PostgreSQL + pgvector and one Valkey for both
runs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.S)
MARKED = re.compile(r"<!--\s*(skip|slow):")


def python_blocks(page: Path) -> list[str]:
    """The ```python blocks of ``page`` that Sybil runs at the default marker (not after a ``skip`` or
    ``slow`` comment), in page order."""
    return [m["code"] for m in BLOCK.finditer(page.read_text(encoding="utf-8")) if not MARKED.search(m["before"])]


def test_the_block_finder_sees_the_markers(tmp_path):
    page = tmp_path / "p.md"
    page.write_text('x\n```python\na = 1\n```\n<!-- skip: next "r" -->\n```python\nb\n```\n'
                    "<!-- slow: r -->\n```python\nc\n```\ntext\n```python\nd = 2\n```\n")
    assert python_blocks(page) == ["a = 1", "d = 2"]


@pytest.mark.usefixtures("shared_stores_env")
def test_the_scaling_out_page_runs_twice(capsys):
    blocks = python_blocks(ROOT / "docs" / "guides" / "scaling-out.md")
    assert blocks, "the scaling-out page has no Python block to run"
    for run in (1, 2):
        namespace: dict = {"__name__": f"scaling_out_run_{run}"}
        for code in blocks:
            exec(compile(code, f"scaling-out.md (run {run})", "exec"), namespace)  # noqa: S102 - the page's own code
        out = capsys.readouterr().out
        assert "'provider'" in out and out.count("'semantic'") == 7, (run, out)
