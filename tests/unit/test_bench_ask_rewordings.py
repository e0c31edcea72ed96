"""``ragcache bench ask-rewordings`` on a small folder: both configurations run every direction, the
stored-question retrieval serves the rewording whose retrieval moved, and no near miss is served."""

import json

from benchmarks.ask_rewordings import main
from cli_doubles import NOTES, REWORDED, STORED


def test_rewordings_bench_counts_both_configurations(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path / "home"))
    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in NOTES.items():
        (notes / name).write_text(text)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps(r) for r in [
        {"id": "p1", "a": STORED, "b": REWORDED, "label": "paraphrase", "kind": "content_words", "split": "dev"},
        {"id": "n1", "a": STORED, "b": "When do restores run?", "label": "near_miss", "kind": "entity",
         "split": "heldout"},
    ]) + "\n")
    out = main(pairs=str(pairs), docs=str(notes), json_path=str(tmp_path / "r.json"), plot_path=None, top_k=2)
    s = out["summary"]
    assert s["dev/paraphrase"]["directions"] == 2 and s["dev/paraphrase"]["same_retrieval"] == 0
    assert s["dev/paraphrase"]["partition only"] == {"served": 0, "via": 0}
    assert s["dev/paraphrase"]["default"] == {"served": 2, "via": 2}
    assert s["heldout/near_miss"]["default"]["served"] == 0 and out["wrong"] == []
    assert out["via_s"]["n"] == 8  # the step ran on each miss of the default configuration (2 asks x 4 directions)
    assert json.loads((tmp_path / "r.json").read_text())["directions"] == 4
