"""bench prefix / provider draw their PNG from the results they write; the bench group is registered."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragcache.app.cli import app

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"
pytest.importorskip("matplotlib")


@pytest.mark.parametrize("name", ["prefix", "provider"])
def test_plot_from_written_results(name, tmp_path):
    import importlib

    mod = importlib.import_module(f"ragcache.app.bench.{name}")
    out = mod.plot(json.loads((RESULTS / f"{name}.json").read_text()), tmp_path / f"{name}.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def test_bench_commands_have_plot_options():
    for name in ("prefix", "provider", "blend"):
        r = CliRunner().invoke(app, ["bench", name, "--help"])
        assert r.exit_code == 0 and "--plot" in r.output and "--json" in r.output
