"""Benchmarks installed with `[all]` (no matplotlib, issue 22 item 9): each writes its JSON and prints
its table, then skips the plot naming `ragcache[bench]`, and exits 0."""

import json
import sys

import pytest
from typer.testing import CliRunner

from benchmarks.plotting import INSTALL, draw
from ragcache.app.cli import app

runner = CliRunner()
PAIRS = [
    {"a": "How do I reset my password?", "b": "How can I reset my password?", "same": True, "kind": "paraphrase"},
    {"a": "Can I bring 100ml of perfume?", "b": "Can I bring 200ml of perfume?", "same": False, "kind": "number"},
    {"a": "Which holidays are paid?", "b": "Which holidays are not paid?", "same": False, "kind": "negation"},
    {"a": "When do backups run?", "b": "At what time do the backups run?", "same": True, "kind": "paraphrase"},
]


@pytest.fixture()
def no_matplotlib(monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError


@pytest.mark.parametrize("path", ["out.png", "deep/dir/out.png"])
def test_draw_skips_and_names_the_extra(no_matplotlib, tmp_path, capsys, path):
    called = []
    assert draw(lambda: called.append(1), tmp_path / path) is None and called == []
    err = capsys.readouterr().err
    assert INSTALL in err and "plot skipped" in err and not (tmp_path / path).exists()
    assert draw(lambda: called.append(1), None) is None and called == []


def test_bench_semantic_writes_json_and_table_without_matplotlib(no_matplotlib, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    out = tmp_path / "res" / "semantic.json"
    r = runner.invoke(app, ["bench", "semantic", "--pairs", str(pairs), "--json", str(out), "--scale", ""])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["sets"]["pairs.jsonl"]["n"] == 4 and "guards" in data["sets"]["pairs.jsonl"]
    assert "semantic cache on pairs.jsonl" in r.stdout and INSTALL in r.stderr
    assert not out.with_suffix(".png").exists()


def test_bench_prefix_writes_json_and_table_without_matplotlib(no_matplotlib, tmp_path, tiny_seed1):
    lm = tiny_seed1
    model = tmp_path / "tiny"
    lm.model.save_pretrained(model)
    lm.tokenizer.save_pretrained(model)
    out, png = tmp_path / "prefix.json", tmp_path / "prefix.png"
    r = runner.invoke(app, ["bench", "prefix", "--model", str(model), "--prefix-tokens", "64", "--question-tokens",
                            "16", "--questions", "1", "--json", str(out), "--plot", str(png)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text()) and "mean" in r.stdout and INSTALL in r.stderr and not png.exists()
