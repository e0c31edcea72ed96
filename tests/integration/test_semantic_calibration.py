"""`ragcache calibrate semantic`: the confidence rule, the refusal message, the record and its pick-up."""

import json
import os
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ragcache.app.cli import app
from ragcache.semantic.decision.calibration import (
    calibrate_pairs,
    head_digest,
    load_record,
    pairs_needed,
    recorded_threshold,
    save_record,
    wilson_lower,
)
from ragcache.semantic.decision.verifier import load_head
from ragcache.semantic.embedding import QuestionEmbedder
from ragcache.testing import HashingEmbedder

runner = CliRunner()


def _embedder(fingerprint: str) -> QuestionEmbedder:
    """An embedder named as the packaged one, with the given identity (its vectors are not read)."""
    return QuestionEmbedder(HashingEmbedder(16).encode, name="all-MiniLM-L6-v2", fingerprint=fingerprint)


class ScoredVerifier:
    """A verifier double whose decision score is given per pair (the question text -> score)."""

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores
        self.embedder = _embedder("fp-test")
        self.head = load_head()

    def decision_score(self, a: str, b: str) -> float:
        return self.scores[b]


def _pairs(n_same: int, n_diff: int, n_bad: int = 0) -> tuple[list[dict], dict[str, float]]:
    """``n_same`` duplicates scored 0.9, ``n_diff`` non-duplicates scored 0.1 and ``n_bad``
    non-duplicates scored 0.95 (false hits at any threshold that serves the duplicates)."""
    rows, scores = [], {}
    for i in range(n_same):
        rows.append({"a": f"q{i}", "b": f"same {i}", "same": True})
        scores[f"same {i}"] = 0.9 - i * 1e-4
    for i in range(n_diff):
        rows.append({"a": f"q{i}", "b": f"diff {i}", "same": False})
        scores[f"diff {i}"] = 0.1
    for i in range(n_bad):
        rows.append({"a": f"q{i}", "b": f"bad {i}", "same": False})
        scores[f"bad {i}"] = 0.95
    return rows, scores


@pytest.mark.parametrize(("precision", "confidence", "need"), [(0.97, 0.95, 88), (0.95, 0.95, 52), (0.99, 0.95, 268),
                                                                (0.9, 0.99, 49)])
def test_pairs_needed_is_the_fewest_all_correct_hits_whose_bound_reaches_the_target(precision, confidence, need):
    assert pairs_needed(precision, confidence) == need
    assert wilson_lower(need, need, confidence) >= precision > wilson_lower(need - 1, need - 1, confidence)


@pytest.mark.parametrize(("n_same", "need"), [(0, 88), (10, 88), (87, 88)])
def test_too_few_pairs_are_refused_with_the_count(n_same, need):
    rows, scores = _pairs(n_same, 50)
    with pytest.raises(ValueError) as e:
        calibrate_pairs(ScoredVerifier(scores), rows, precision=0.97)
    msg = str(e.value)
    assert f"needs at least {need} pairs labelled same" in msg
    assert f"has {n_same} labelled same" in msg and f"at least {need - n_same} more" in msg


def test_threshold_meets_the_lower_bound_and_the_record_is_picked_up(tmp_path):
    rows, scores = _pairs(300, 200, n_bad=2)
    v = ScoredVerifier(scores)
    cal = calibrate_pairs(v, rows, precision=0.97)
    assert cal.lower_bound >= 0.97 and cal.hits >= 88
    assert cal.correct == cal.hits - 2  # the two bad pairs score above every duplicate
    assert 0.1 < cal.threshold <= 0.9
    save_record(cal, tmp_path)
    assert load_record("fp-test", tmp_path).threshold == cal.threshold
    assert recorded_threshold(v.embedder, v.head, tmp_path) == cal.threshold
    other = SimpleNamespace(to_json=lambda: {**v.head.to_json(), "bias": v.head.bias + 1})
    assert head_digest(other) != head_digest(v.head)
    assert recorded_threshold(v.embedder, other, tmp_path) is None  # fitted for another head
    assert recorded_threshold(_embedder("fp-other"), v.head, tmp_path) is None


def test_no_threshold_reaching_the_target_says_so():
    rows, scores = _pairs(100, 0, n_bad=30)  # precision 100/130 at best
    with pytest.raises(ValueError, match="no threshold shows precision 0.97"):
        calibrate_pairs(ScoredVerifier(scores), rows, precision=0.97)


def test_cli_refuses_too_few_pairs_before_loading_a_model(tmp_path):
    f = tmp_path / "my_pairs.jsonl"
    f.write_text("".join(json.dumps({"a": f"q {i}?", "b": f"p {i}?", "same": i % 2 == 0}) + "\n" for i in range(40)))
    r = runner.invoke(app, ["calibrate", "semantic", "--pairs", str(f), "--precision", "0.97", "--home", str(tmp_path)])
    assert r.exit_code == 2, r.output
    assert "needs at least 88 pairs labelled same" in r.stderr and "has 20 labelled same" in r.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": "x", "b": 3}\n')
    r = runner.invoke(app, ["calibrate", "semantic", "--pairs", str(bad)])
    assert r.exit_code == 2 and "bad.jsonl:1" in r.stderr


@pytest.mark.slow
def test_the_default_cache_uses_the_recorded_threshold(tmp_path, monkeypatch):
    from ragcache.semantic import SemanticCache
    from ragcache.semantic.decision.calibration import SemanticCalibration
    from ragcache.semantic.embedding import resolve_embedder

    from ragcache.home import Home

    monkeypatch.setattr(Home, "default", classmethod(lambda cls: cls(tmp_path)))  # the library's default home
    emb = resolve_embedder(None)
    head = load_head()
    assert type(SemanticCache(embedder=emb).guards).__name__ == "PairDecider"  # no record: the pair model
    assert SemanticCache(embedder=emb, guards="verifier").guards.head.threshold == head.threshold
    save_record(SemanticCalibration(emb.name, emb.fingerprint, head_digest(head), 0.123, 0.97, 0.95, 200, 100, 90,
                                    90, 1.0, 0.97, 0.9))
    assert SemanticCache(embedder=emb).guards.head.threshold == 0.123  # a record: the verifier at its threshold
    assert SemanticCache(embedder=emb, guards="verifier").guards.head.threshold == 0.123
    assert type(SemanticCache(embedder=emb, guards=False).guards).__name__ == "GuardSet"
    assert type(SemanticCache(embedder=emb, guards="rules").guards).__name__ == "GuardSet"  # the record aside


def test_pair_splits_keep_clusters_together_and_are_fixed(tmp_path):
    from ragcache.app.verifier_data import components, qqp_splits, read_pairs

    rows = [{"a": f"q{i}", "b": f"q{i + 1}", "same": i % 3 != 0} for i in range(0, 300)]
    rows += [{"a": f"x{i}", "b": f"y{i}", "same": False} for i in range(300)]
    comp = components(rows)
    splits = qqp_splits(rows)
    assert splits == qqp_splits(list(rows))  # no random state
    where = {q: name for name, part in splits.items() for r in part for q in (r["a"], r["b"])}
    for r in rows:  # a question's whole component lies in one split, and so does every pair it is in
        assert where.get(r["a"]) == where.get(r["b"])
        assert comp[r["a"]] == comp[r["b"]]
    assert sum(len(v) for v in splits.values()) == len(rows)
    f = tmp_path / "p.jsonl"
    f.write_text('{"a": "x", "b": "y", "same": true}\n\n{"a": "", "b": "y", "same": false}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:3"):
        read_pairs(f)
