"""``ragcache bench ask`` reports what a hit imports (issue 32, section 3): the -X importtime
parse names the heavy packages a process imported and says whether torch came in."""

import os
import sys
from pathlib import Path

from benchmarks.ask import hit_imports

ROOT = str(Path(__file__).resolve().parents[2])


def _env():
    return {**os.environ, "PYTHONPATH": ROOT}


def test_numpy_only_is_torch_free():
    got = hit_imports([sys.executable, "-c", "import numpy, sqlite3"], _env())
    assert got["torch_free"] and set(got["heavy_us"]) == {"numpy", "sqlite3"}
    assert got["total_import_us"] >= got["heavy_us"]["numpy"] > 0
    assert len(got["top_self_us"]) == 12 and all(us >= 0 for _, us in got["top_self_us"])


def test_nothing_heavy():
    got = hit_imports([sys.executable, "-c", "import json"], _env())
    assert got["torch_free"] and got["heavy_us"] == {}


def test_the_semantic_hit_modules_import_no_torch():
    got = hit_imports([sys.executable, "-c", "import ragcache.app.ask, ragcache.app.cli, ragcache.bert_numpy"], _env())
    assert got["torch_free"], got["top_self_us"]
    assert {"numpy", "faiss", "typer"} <= set(got["heavy_us"])
