"""bench prefix / provider draw their PNG from the results they write; the bench group is registered."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragcache.app.cli import app

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
pytest.importorskip("matplotlib")


@pytest.mark.parametrize("name", ["prefix", "provider"])
def test_plot_from_written_results(name, tmp_path):
    import importlib

    mod = importlib.import_module(f"ragcache.app.bench.{name}")
    out = mod.plot(json.loads((RESULTS / f"{name}.json").read_text()), tmp_path / f"{name}.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def test_bench_commands_have_plot_options():
    for name in ("prefix", "provider", "blend", "ask", "lexicon"):
        r = CliRunner().invoke(app, ["bench", name, "--help"])
        assert r.exit_code == 0 and "--plot" in r.output and "--json" in r.output


def test_bench_lexicon_writes_json_and_table(tmp_path):
    out = tmp_path / "lexicon.json"
    r = CliRunner().invoke(app, ["bench", "lexicon", "--repeats", "1", "--json", str(out), "--plot", str(tmp_path / "l.png")])
    assert r.exit_code == 0, r.output
    assert "lazy" in r.output and "full_parse" in r.output
    d = json.loads(out.read_text())
    assert set(d["methods"]) == {"lazy", "full_parse"} and d["repeats"] == 1
    assert all(len(m["first_lookup_s"]) == 1 and m["first_lookup_s"][0] > 0 for m in d["methods"].values())
    assert (tmp_path / "l.png").read_bytes()[:4] == b"\x89PNG"
