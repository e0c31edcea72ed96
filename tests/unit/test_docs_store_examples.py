"""The store examples of ``docs/design/stores.md`` run as written (issue 49): each is a test module for the
reader's own store, skipped by the docs' runner (Sybil), so this runs them with pytest against stand-in stores
kept outside the package (:mod:`outside_store_doubles`) under the names the page imports from ``my_package``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "design" / "stores.md"
BLOCK = re.compile(r"<!-- skip: next \"[^\"]*test_docs_store_examples\.py runs it\)\" -->\n```python\n(.*?)```",
                   re.DOTALL)

MY_PACKAGE = '''"""The stores the docs' examples import, as the reader would write them (here: the outside doubles)."""
from outside_store_doubles import MemoryAnswerStore, MemoryAnswers, SharedMemoryChunkStore


class MyChunkStore(SharedMemoryChunkStore):
    def __init__(self, root, *, max_bytes=None):
        super().__init__(str(root), max_bytes=max_bytes)


class MyAnswerStore(MemoryAnswerStore):
    def __init__(self, root, *, embedder, max_entries=100_000):
        super().__init__(str(root), embedder=embedder, max_entries=max_entries)


class MyAnswerAdmin(MemoryAnswers):
    def __init__(self, root):
        super().__init__(f"memory://{root}")
'''


def test_the_pages_store_examples_pass_their_contracts(tmp_path):
    blocks = BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    names = [re.search(r"^class (Test\w+)\((\w+)\)", b, re.M).groups() for b in blocks]
    assert names == [("TestMyChunkStore", "ChunkStoreContract"), ("TestMyAnswerStore", "SemanticCacheContract"),
                     ("TestMyAnswerAdmin", "AnswerAdminContract")], names
    (tmp_path / "my_package.py").write_text(MY_PACKAGE)
    for i, block in enumerate(blocks):
        (tmp_path / f"test_example_{i}.py").write_text(block)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT / "tests"), str(ROOT)]),
               HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", str(tmp_path), "-v", "-p", "no:randomly", "-p",
                           "no:cacheprovider", "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
                           "-W", "ignore::UserWarning"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600, check=False)
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    for i in range(len(blocks)):  # every example's suite ran, none failed
        assert len(re.findall(rf"test_example_{i}\.py::\S+ PASSED", proc.stdout)) >= 5, tail
    assert not re.search(r" (FAILED|ERROR)\b", proc.stdout), tail
