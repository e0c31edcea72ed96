"""The example chain end to end on the embedded SmolLM2-135M-Instruct, and the notebook.

Short decode budgets keep this to about a minute of CPU; answers are not judged, the
layers and token accounting are.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
pytestmark = pytest.mark.slow


def _example():
    spec = importlib.util.spec_from_file_location("langchain_rag", EXAMPLES / "langchain_rag.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["langchain_rag"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_example_chain_end_to_end() -> None:
    ex = _example()
    rows = ex.run_local(max_tokens=8, quiet=True)
    layers = [r["layer"] for r in rows]
    assert layers[0] in ("model", "prefix")
    assert layers[1:3] == ["semantic", "semantic"]  # reworded, and reordered documents
    # new question over the same documents: their KV is reused, from the exact prefix cache (same order,
    # nothing before them changed) or blended from the chunk cache when the cost rule says it pays
    assert layers[3] in ("prefix", "chunk", "prefix+chunk")
    assert rows[1]["answer"] == rows[0]["answer"] == rows[2]["answer"]
    assert all(r["answer"] for r in rows)
    # local KV writes cost nothing: cache_creation is a provider's prompt-cache write, 0 here
    assert rows[0]["cache_creation"] == 0 and rows[3]["cache_read"] > 0 and rows[3]["cache_creation"] == 0
    if "chunk" in layers[3]:
        assert 0 < rows[3]["tokens_recomputed"] < rows[3]["cache_read"]
    else:
        assert rows[3]["tokens_recomputed"] == 0


def test_example_anthropic_variant_structure() -> None:
    # The ChatAnthropic variant against the local server, on the tiny random model (structure only:
    # breakpoints, cache write then read, semantic hit); the notebook runs it on the embedded model.
    from langchain_ragcache.chat_models import TINY_RANDOM_MODEL

    anth = _example().run_anthropic(max_tokens=4, quiet=True, model=TINY_RANDOM_MODEL)
    # an uncached provider call is "provider" (one rule: ragcache.backend.provider_layer)
    assert [r["layer"] for r in anth] == ["provider", "provider-cache", "semantic"]
    assert anth[0]["cache_creation"] > 0 and anth[0]["cache_read"] == 0
    assert anth[1]["cache_read"] > 0 and anth[1]["cache_creation"] == 0


def test_notebook_executes() -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(EXAMPLES / "langchain_rag.ipynb", as_version=4)
    env = {"RAGCACHE_NB_MAX_TOKENS": "8", "HF_HUB_OFFLINE": "1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "layers: ['" in text and any(f"'semantic', 'semantic', '{last}']" in text
                                        for last in ("prefix", "chunk", "prefix+chunk"))
    assert "cache read 0 tokens" in text  # first Anthropic call writes the cache ...
    reads = [int(line.split("cache read ")[1].split()[0]) for line in text.splitlines() if "cache read " in line]
    assert reads[-1] > 0  # ... the second reads it
