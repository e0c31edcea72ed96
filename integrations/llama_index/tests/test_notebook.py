"""Execute examples/llamaindex_rag.ipynb with nbclient (short decode budget) and check what it printed."""

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("llama_index.llms.anthropic")

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _text(cell):
    return "".join(o.get("text", "") or "".join(o.get("data", {}).get("text/plain", ""))
                   for o in cell.get("outputs", []))


def test_notebook_runs_and_shows_each_layer(monkeypatch):
    path = EXAMPLES / "llamaindex_rag.ipynb"
    if not path.is_file():
        pytest.skip(f"{path} not found (run from the ragcache repository)")
    monkeypatch.setenv("RAGCACHE_NB_MAX_TOKENS", "12")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    out = "\n".join(_text(c) for c in nb.cells if c.cell_type == "code")
    served = dict(re.findall(r"(?:^|, )([^=,\n]+)=([a-z+\-]+)", re.search(r"served by: (.*)", out).group(1)))
    assert served["ask"] != "semantic"
    assert served["ask again"] == "semantic" and served["ask reworded"] == "semantic"
    assert served["after editing returns.md"] != "semantic"
    # the documents seen before are chunk-cache hits; whether they are blended (layer "chunk") or
    # prefilled exactly ("prefix") is the engine's cost rule, which depends on the measured prefill rate
    hits = re.search(r"docs from the chunk cache: (\d) of 3", out)
    assert hits and served["another top-k (3)"] in ("chunk", "prefix+chunk", "prefix")
    # documents seen before are reused: from the chunk cache, or all from the exact prefix cache when the
    # new document sorts after them (then nothing is left to look up in the chunk cache)
    assert int(hits.group(1)) >= 1 or served["another top-k (3)"] == "prefix"
    assert re.search(r"provider-cache\s+cache write\s+0\s+cache read\s+[1-9]", out)
