"""examples/openai_serve.py (ChatOpenAI against the local endpoint) executed: in-process on a tiny
random model (structure and cache accounting), and as a script on the packaged SmolLM2 (slow)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("langchain_openai")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_serve.py"


def _example():
    spec = importlib.util.spec_from_file_location("openai_serve", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_example_on_a_tiny_model():
    rows = _example().run(max_tokens=3, tiny=True, quiet=True)
    assert [r["step"][0] for r in rows] == ["1", "2", "3", "4"]
    # at the defaults prefill is exact (no calibration record): the third request's documents are chunk
    # hits, but only its prefix is reused
    # the streamed request carries the x-ragcache-* headers too (one record for headers and usage)
    assert [r["layer"] for r in rows] == ["model", "prefix", "prefix", "prefix"]
    assert rows[0]["cache_read"] == 0
    assert rows[1]["read_share"] > 0.8  # system turn and documents from the prefix cache
    assert rows[2]["cache_read"] > 0 and rows[3]["cache_read"] > 0
    assert all(r["prompt_tokens"] > 150 for r in rows)


@pytest.mark.slow
def test_example_script_on_the_packaged_model():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    out = subprocess.run([sys.executable, str(EXAMPLE), "--max-tokens", "8"], capture_output=True, text=True,
                         env=env, timeout=600, check=True).stdout
    lines = [line for line in out.splitlines() if "cache read" in line]
    assert len(lines) == 4
    reads = [int(line.split("cache read")[1].split()[0]) for line in lines]
    assert reads[0] == 0 and all(r > 0 for r in reads[1:])
