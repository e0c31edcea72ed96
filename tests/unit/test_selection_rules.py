"""KV selection rules live in one table (ragcache.engine.blend.rules, issue 41 item 4): a new rule is one
class plus one line, and validation, the engine, blend settings and the command-line help read the table."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch
from test_blend import DOCS, build, prefix_cache

from ragcache import ChunkCache, LocalEngine, MemoryChunkStore
from ragcache.engine.blend.hkvd import budget
from ragcache.engine.blend.prefill import blend_prefill
from ragcache.engine.blend.rules import (
    SELECTION_RULES,
    BeforeLayersRule,
    CheckLayerRule,
    RankInputs,
    check_serving_rule,
    register_rule,
    rules_help,
    serving_rules,
    unregister_rule,
)
from ragcache.engine.blend.setting import BlendSetting
from ragcache.engine.engine_config import EngineConfig


class NewestFirst(BeforeLayersRule):
    """A toy rule: recompute the document tokens nearest the question (the highest positions) first."""

    name = "newest-first"
    summary = "toy: the latest document tokens"

    def score(self, inputs: RankInputs) -> torch.Tensor:
        return torch.arange(inputs.n, dtype=torch.float32, device=inputs.ids.device)


class LeastDeviation(CheckLayerRule):
    """A toy check-layer rule: the tokens whose cached KV deviates least (the opposite of CacheBlend's)."""

    name = "least-deviation"
    summary = "toy: the smallest KV deviation"

    def score(self, deviation, tail_mass):
        return -deviation


@pytest.fixture
def toy_rules():
    for cls in (NewestFirst, LeastDeviation):
        register_rule(cls)
    yield
    for cls in (NewestFirst, LeastDeviation):
        unregister_rule(cls.name)


def _blend(lm, r, **kw):
    ids, plen, spans, doc_ids = build(lm, DOCS)
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    kvs = [cc.lookup_or_compute(lm.model, lm.fingerprint.digest, d)[0] for d in doc_ids]
    res = blend_prefill(lm.model, ids, prefix_len=plen, prefix_cache=prefix_cache(lm, ids, plen), doc_spans=spans,
                        chunk_kvs=kvs, recompute_ratio=r, **kw)
    return ids, spans, res


def _doc_positions(spans):
    return [p for s, e in spans for p in range(s, e)]


def test_a_registered_rule_blends_on_a_tiny_model(tiny, toy_rules):
    _, spans, res = _blend(tiny, 0.3, rank_by="newest-first")
    docs = _doc_positions(spans)
    k = budget(0.3, len(docs))
    chosen = sorted(set(res.selected.tolist()) & set(docs))
    assert chosen == docs[-k:]  # exactly the latest k document tokens, as the toy rule ranks them
    assert res.tokens_recomputed == k and torch.isfinite(res.last_logits).all()
    assert res.token_scores is not None and res.token_scores[docs[-1]] > res.token_scores[docs[0]]


def test_a_registered_check_layer_rule_inverts_cacheblend(tiny, toy_rules):
    _, spans, ours = _blend(tiny, 0.2, rank_by="least-deviation")
    _, _, theirs = _blend(tiny, 0.2, rank_by="deviation")
    docs = set(_doc_positions(spans))
    least, most = set(ours.selected.tolist()) & docs, set(theirs.selected.tolist()) & docs
    assert len(least) == len(most) == budget(0.2, len(docs)) and not least & most


def test_the_engine_and_settings_read_the_table(tiny, toy_rules):
    assert "newest-first" in serving_rules() and "newest-first (toy: the latest document tokens)" in rules_help()
    assert BlendSetting(recompute_ratio=0.5, rank_by="newest-first").name == "newest-first r=0.5"
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    engine = LocalEngine(tiny, chunk_cache=cc, rank_by="newest-first", recompute_ratio=0.5, min_reuse_tokens=0,
                         calibration=False)
    docs = [{"id": f"d{i}", "text": t} for i, t in enumerate(DOCS)]
    cc.precompute(engine, docs, progress=False)
    messages = [{"role": "user", "content": [{"type": "text", "text": d["text"], "ragcache_kind": "document"}
                                             for d in docs] + [{"type": "text", "text": "Where is Paris?"}]}]
    st = engine.generate(messages, max_new_tokens=2).stats
    assert st.approximate and st.blend_setting == "newest-first r=0.5" and st.tokens_recomputed > 0


def test_unknown_and_benchmark_only_rules_are_named():
    with pytest.raises(ValueError, match=r"rank_by must be one of \[.*'infoflow'.*\]; got 'vibes'"):
        BlendSetting(rank_by="vibes")
    with pytest.raises(ValueError, match="rank_by must be one of"):
        BlendSetting(rank_by="given")  # needs the bench's token scores: no serving rule
    with pytest.raises(ValueError, match="rank_by must be one of"):
        EngineConfig(rank_by="newest-first")  # not registered outside the fixture
    assert check_serving_rule("infoflow") == "infoflow" and "given" not in serving_rules()


def test_registering_checks_the_class_and_the_name():
    with pytest.raises(TypeError, match="subclasses CheckLayerRule or BeforeLayersRule"):
        register_rule(object)  # type: ignore[arg-type]

    class Nameless(BeforeLayersRule):
        pass

    with pytest.raises(ValueError, match="needs a name"):
        register_rule(Nameless)

    class Clash(BeforeLayersRule):
        name = "infoflow"

    with pytest.raises(ValueError, match="already InfoFlowRule"):
        register_rule(Clash)
    assert SELECTION_RULES["infoflow"].__name__ == "InfoFlowRule"


def test_every_rule_in_the_table_is_a_rule_class():
    for name, cls in SELECTION_RULES.items():
        assert cls.name == name and cls.summary and issubclass(cls, CheckLayerRule | BeforeLayersRule)
    assert list(SELECTION_RULES)[:7] == ["deviation", "deviation*attention", "attention", "prophet", "infoflow",
                                         "random", "given"]


def test_the_old_name_selection_still_works_and_warns(tiny):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = EngineConfig(selection="prophet")
        engine = LocalEngine(tiny, calibration=False, selection="deviation")
        assert engine.selection == "deviation"
    assert cfg.rank_by == "prophet" and engine.rank_by == "deviation"
    assert sum(issubclass(w.category, DeprecationWarning) for w in caught) == 3
    with pytest.raises(ValueError, match="disagree"), pytest.warns(DeprecationWarning):
        EngineConfig(selection="prophet", rank_by="infoflow")


def test_the_table_and_the_cli_help_import_without_torch():
    code = ("import sys\nfrom ragcache.engine.blend.rules import SELECTION_RULES\nimport ragcache.app.cli\n"
            "assert 'torch' not in sys.modules, 'torch imported'\nprint(len(SELECTION_RULES))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(SELECTION_RULES)


def test_the_command_line_help_lists_every_serving_rule():
    from typer.testing import CliRunner

    from ragcache.app.cli import app

    runner = CliRunner()
    for argv in (["calibrate", "--help"], ["bench", "blend", "--help"]):
        text = " ".join(runner.invoke(app, argv, terminal_width=400).output.split())
        assert all(name in text for name in serving_rules()), (argv, text)
