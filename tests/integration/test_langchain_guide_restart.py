"""The LangChain guide's own example (docs/integrations/langchain.md, its first block, run verbatim) hits
after a restart (issue 42): two processes on one ``RAGCACHE_HOME``. ``InMemoryVectorStore`` gives the
documents new random ids in each process; ids are metadata, so the second process's question lands in
the first one's partition, with the same prompt, and is served by the semantic cache."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langchain_ragcache")

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

AFTER = """
import json
from langchain_core.globals import get_llm_cache
print("STATS " + json.dumps(dict(get_llm_cache().stats)))
"""


def guide_block() -> str:
    text = (ROOT / "docs" / "integrations" / "langchain.md").read_text(encoding="utf-8")
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def run(home: Path, cwd: Path) -> tuple[str, dict]:
    env = {**os.environ, "RAGCACHE_HOME": str(home), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}  # this checkout
    for var in ("RAGCACHE_SEMANTIC_URL", "RAGCACHE_ANSWERS_DIR"):
        env.pop(var, None)
    r = subprocess.run([sys.executable, "-c", guide_block() + AFTER], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    answer, stats = r.stdout.rsplit("STATS ", 1)
    return answer.strip(), json.loads(stats)


def test_the_guide_example_hits_after_a_restart(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    real = Path(os.environ.get("RAGCACHE_HOME") or "~/.cache/ragcache").expanduser()
    if (real / "models").is_dir():  # the converted model (the session's home links it), not converted again
        (home / "models").symlink_to((real / "models").resolve(), target_is_directory=True)
    first, s1 = run(home, tmp_path)
    assert first and s1["hits"] == 0 and s1["lookups"] == 1, s1
    second, s2 = run(home, tmp_path)
    assert s2["hits"] == 1 and s2["lookups"] == 1, f"the restarted process missed: {s2}"
    assert second == first
