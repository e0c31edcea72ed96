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

    mod = importlib.import_module(f"benchmarks.{name}")
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
    said = " ".join(r.output.split())
    assert f"written: {out.resolve()}" in said and f"written: {(tmp_path / 'l.png').resolve()}" in said


def test_benchmarks_are_found_in_the_checkout_from_any_folder(tmp_path, monkeypatch):
    from ragcache.app import bench_cmd

    monkeypatch.chdir(tmp_path)  # the editable install's checkout is found, not the working directory
    root = bench_cmd.checkout_root()
    assert root is not None and (root / "benchmarks" / "lexicon.py").is_file()
    assert bench_cmd.load_benchmark("lexicon").main


@pytest.mark.parametrize("name", ["lexicon", "prefix", "blend"])
def test_bench_outside_a_checkout_says_how_to_get_one(name, tmp_path, monkeypatch):
    import sys

    from ragcache.app import bench_cmd

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench_cmd, "checkout_root", lambda: None)  # as from an installed wheel
    for m in [m for m in sys.modules if m == "benchmarks" or m.startswith("benchmarks.")]:
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p or ".") / "benchmarks").is_dir()])
    r = CliRunner().invoke(app, ["bench", name, "--json", str(tmp_path / "x.json")])
    assert r.exit_code == 2, r.output
    assert "not in the ragcache wheel" in r.output and "checkout" in r.output
    assert not (tmp_path / "x.json").exists()
