"""benchmarks.blend_ties: pooling teacher-forced disagreements by the reference's top-1 margin."""

from __future__ import annotations

import pytest

from benchmarks.blend_ties import EDGES, bucket_of, by_margin


def _measured(name, rows):
    return {"setting": {"name": name}, "per_prompt": [
        {"ref_margin": m, "mismatch": w, "full_cpu_s": 10.0, "cpu_s": c} for m, w, c in rows]}


@pytest.mark.parametrize(("margin", "bucket"), [(0.0, 0), (0.099, 0), (0.1, 1), (0.29, 1), (0.3, 2), (2.9, 3),
                                                (3.0, 4), (40.0, 4)])
def test_bucket_edges_are_lower_inclusive(margin, bucket):
    assert bucket_of(margin) == bucket


def test_by_margin_pools_prompts_and_keeps_the_margin_of_every_flip():
    a = _measured("r=0.3", [([0.05, 2.0, 5.0], [0], 5.0), ([0.2, 0.5, 0.05, 4.0], [1, 2], 4.0)])
    b = _measured("r=0.5", [([0.05, 2.0, 5.0], [], 8.0), ([0.2, 0.5, 0.05, 4.0], [2], 5.0)])
    ra, rb = by_margin([a, b])
    assert ra["tokens"] == rb["tokens"] == 7
    assert (ra["mismatches"], rb["mismatches"]) == (3, 1)
    assert ra["pooled_top1_agreement"] == pytest.approx(4 / 7)
    assert ra["mismatch_margins"] == [0.05, 0.05, 0.5] and rb["mismatch_margins"] == [0.05]
    first = ra["buckets"][0]
    assert first["tokens"] == 2 and first["mismatches"] == 2 and first["agreement"] == 0.0
    assert ra["buckets"][1] == {"margin": "[0.1, 0.3)", "tokens": 1, "mismatches": 0, "agreement": 1.0}
    assert ra["buckets"][3]["agreement"] == 1.0 and ra["buckets"][4]["tokens"] == 2
    assert len(ra["buckets"]) == len(EDGES) and ra["buckets"][-1]["margin"] == "[3, inf)"
    assert ra["median_cpu_speedup"] == pytest.approx(2.25) and rb["median_cpu_speedup"] == pytest.approx(1.625)


def test_by_margin_needs_token_detail():
    with pytest.raises(KeyError):
        by_margin([{"setting": {"name": "x"}, "per_prompt": [{"top1_agreement": 1.0}]}])


def test_empty_bucket_has_no_agreement():
    (r,) = by_margin([_measured("r", [([5.0], [], 1.0)])])
    assert r["buckets"][0] == {"margin": "[0, 0.1)", "tokens": 0, "mismatches": 0, "agreement": None}


def test_merge_pools_disjoint_parts_and_refuses_overlap(tmp_path):
    import json

    from benchmarks.blend_ties import merge

    def part(name, items):
        rows = [{"prompt": i, "ref_margin": [0.05, 2.0], "mismatch": [0] if i % 2 else [], "full_cpu_s": 2.0,
                 "cpu_s": 1.0} for i in items]
        p = tmp_path / name
        p.write_text(json.dumps({"complete": True, "items": [items[0], items[-1] + 1], "model": "m",
                                 "measured": [{"setting": {"name": "r=0.3"}, "per_prompt": rows}]}))
        return p

    a, b = part("a.json", [0, 1]), part("b.json", [2, 3])
    out = merge([a, b], tmp_path / "out.json")
    assert out["items"] == [0, 1, 2, 3] and out["rows"][0]["tokens"] == 8 and out["rows"][0]["mismatches"] == 2
    assert json.loads((tmp_path / "out.json").read_text())["rows"][0]["buckets"][0]["mismatches"] == 2
    with pytest.raises(ValueError, match="overlap"):
        merge([a, part("c.json", [1, 2])], tmp_path / "x.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"complete": False, "measured": []}))
    with pytest.raises(ValueError, match="complete"):
        merge([a, bad], tmp_path / "y.json")
