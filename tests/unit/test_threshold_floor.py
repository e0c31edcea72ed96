"""A semantic threshold below the documented floor (0.5): refused by the CLI and RAGCACHE_THRESHOLD (with
an override named in the error), warned about by the library; and a question of another type is
refused at every threshold, -1 included ("Where do I find the on-call calendar?" was served "How
do I rotate an API key?"'s answer at cosine 0.11)."""

import warnings

import pytest
from typer.testing import CliRunner

from cli_doubles import fixed_answer, home, tiny_dir, write_notes  # noqa: F401 - fixtures
from ragcache.app.cli import app
from ragcache.config import Config
from ragcache.limits import THRESHOLD_FLOOR
from ragcache.semantic import LowThresholdWarning, SemanticCache, partition_key
from ragcache.semantic.decision.qtype import QuestionTypeGuard, compatible

runner = CliRunner()
PK = partition_key(model="m")

OTHER_TYPE = [  # (stored, asked): each asks for another kind of answer
    ("How do I rotate an API key?", "Where do I find the on-call calendar?"),  # the reported pair, cosine 0.11
    ("How do I configure the VPN?", "Where can I download the VPN client?"),
    ("Who approves expense reports?", "When are expense reports due?"),
    ("Why was the deploy rolled back?", "How do I roll back a deploy?"),
    ("When does the cafe close?", "Where is the cafe?"),
    ("Where can I see my order status?", "How do I track my order?"),
    ("Is it possible to recover a deleted file?", "Who deleted the file?"),
]


@pytest.fixture(scope="module")
def embedder():
    from ragcache.models import load_embedder

    return load_embedder(runtime="numpy")


@pytest.mark.parametrize("threshold", [-1.0, 0.0, 0.5])
@pytest.mark.parametrize("stored,asked", OTHER_TYPE)
def test_another_question_type_is_never_served(embedder, stored, asked, threshold):
    cache = SemanticCache(None, embedder=embedder)
    cache.store(stored, "the stored answer", partition=PK)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LowThresholdWarning)
        assert cache.lookup(asked, partition=PK, threshold=threshold) is None
        (cand,) = cache.candidates_for(asked, partition=PK, threshold=threshold)
    assert not cand.verdict.ok, (cand.similarity, cand.verdict)
    if cand.similarity < THRESHOLD_FLOOR:  # the reported pair: below the floor only the same type passes
        assert cand.verdict.reason == "question_type" and "only the same type" in cand.verdict.detail


def test_loose_type_pairs_hold_only_near_the_floor():
    guard = QuestionTypeGuard()
    near, far = "Where can I see my order status?", "How do I track my order?"  # where_access / how: a loose pair
    assert compatible("where_access", "how") and not compatible("where_access", "how", loose=False)
    assert guard.check(near, far) is None  # no similarity given: as before
    assert guard.check(near, far, THRESHOLD_FLOOR) is None
    assert "only the same type" in guard.check(near, far, THRESHOLD_FLOOR - 0.01)
    assert guard.check("How do I track my order?", "How can I track my order?", -1.0) is None  # same type


def test_the_library_warns_below_the_floor(embedder):
    with pytest.warns(LowThresholdWarning, match=r"below the floor 0\.5"):
        SemanticCache(None, embedder=embedder, threshold=0.2)
    cache = SemanticCache(None, embedder=embedder)
    with pytest.warns(LowThresholdWarning, match="use 0.5 or more"):
        cache.lookup("How do I rotate an API key?", partition=PK, threshold=-1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LowThresholdWarning)
        cache.lookup("How do I rotate an API key?", partition=PK, threshold=0.5)
        SemanticCache(None, embedder=embedder, threshold=1.0)


def test_ragcache_threshold_below_the_floor_is_refused_with_its_override(tmp_path):
    with pytest.raises(ValueError, match=r"RAGCACHE_THRESHOLD -1 is below the floor 0\.5.*RAGCACHE_ALLOW_LOW_THRESHOLD=1"):
        Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_THRESHOLD": "-1"})
    cfg = Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_THRESHOLD": "-1",
                           "RAGCACHE_ALLOW_LOW_THRESHOLD": "1"})
    assert cfg.threshold == -1.0 and cfg.allow_low_threshold
    assert Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_THRESHOLD": "0.5"}).threshold == 0.5


def test_ask_refuses_a_threshold_below_the_floor_and_serves_no_wrong_answer_when_forced(home, tmp_path, tiny_dir,
                                                                                         monkeypatch):
    notes = write_notes(tmp_path / "notes")
    calls = fixed_answer(monkeypatch, "Rotate keys from Settings > Keys.")
    base = ["ask", "--docs", str(notes), "--model", str(tiny_dir)]
    r = runner.invoke(app, [*base, "How do I rotate an API key?"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, [*base, "--threshold", "-1", "Where do I find the on-call calendar?"])
    assert r.exit_code == 2 and len(calls) == 1
    text = " ".join(r.output.split())
    assert "--threshold -1 is below the floor 0.5" in text and "--allow-low-threshold" in text, text
    r = runner.invoke(app, [*base, "--threshold", "-1", "--allow-low-threshold", "--json",
                            "Where do I find the on-call calendar?"])
    assert r.exit_code == 0, r.output
    assert '"layer": "model"' in r.stdout and len(calls) == 2  # asked the model: the stored answer was refused
