"""The benchmark's own labelled kind rows and the fixed tuning / held-out split of the hard pairs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from benchmarks.semantic import OWN_KINDS
from benchmarks.semantic_split import HELDOUT_SHARE, changes, part_scores, split
from benchmarks.semantic_stream import add_kind_rows, clusters
from ragcache.semantic.decision.guards import GuardSet
from ragcache.semantic.text import normalize_question

ROOT = Path(__file__).resolve().parents[2]
ROWS = [json.loads(x) for x in (ROOT / OWN_KINDS).read_text().splitlines() if x.strip()]


def test_each_new_kind_has_five_labelled_near_misses():
    kinds = Counter(r["kind"] for r in ROWS if not r["same"])
    for k in ("bound", "complement", "relative_time", "same_words"):
        assert kinds[k] >= 5, k
    assert any(r["same"] for r in ROWS)


def test_the_guards_refuse_every_near_miss_row_and_pass_the_loosened_kinds():
    gs = GuardSet.default()
    for r in ROWS:
        v = gs.check(normalize_question(r["b"]), normalize_question(r["a"]), 0.95)
        if not r["same"]:
            assert not v.ok, r
        elif r["kind"] in ("number_words", "phrasal", "how_come"):  # loosened kinds; others may stay refused
            assert v.ok, (r, v)


def test_split_is_fixed_by_kind_and_position():
    rows = [{"kind": k, "same": k == "s"} for k in "abcabcaabs" * 10]
    one, two = split(rows), split(rows)
    assert one == two and not set(one["tuning"]) & set(one["heldout"])
    assert sorted(one["tuning"] + one["heldout"]) == list(range(len(rows)))
    for k, n in Counter(r["kind"] for r in rows).items():
        assert sum(rows[i]["kind"] == k for i in one["heldout"]) == round(HELDOUT_SHARE * n)
    other = split(rows, seed=7)
    assert other["heldout"] != one["heldout"]


def test_changes_and_scores_count_per_kind():
    rows = [{"kind": "x", "same": True}, {"kind": "x", "same": True}, {"kind": "y", "same": False}]
    before, after = [True, False, False], [False, True, True]
    assert changes(rows, before, after, [0, 1, 2]) == {"x": {"pairs": 2, "hit_to_miss": 1, "miss_to_hit": 1},
                                                       "y": {"pairs": 1, "hit_to_miss": 0, "miss_to_hit": 1}}
    s = part_scores(rows, after, [0, 1, 2])
    assert (s["true_hits"], s["wrong_hits"], s["recall"], s["precision"]) == (1, 1, 0.5, 0.5)


def test_stream_gets_each_kind_row_in_order_with_its_labels():
    stream = add_kind_rows(["q1", "q2", "q3"], ROWS, seed=0)
    assert len(stream) == 3 + 2 * len(ROWS)
    for r in ROWS:
        assert stream.index(r["a"]) < len(stream) - stream[::-1].index(r["b"])
    cid, linked = clusters(ROWS)
    for r in ROWS:
        assert (cid[r["a"]] == cid[r["b"]]) == bool(r["same"])
        if not r["same"]:
            assert frozenset((cid[r["a"]], cid[r["b"]])) in linked
