"""Every calibration path decides by the license rule (ragcache issue 40): ``ragcache calibrate`` builds a
plan from its options, writes it before measuring anything, and runs it as ``--plan`` does; the retired
pooled-agreement options are refused, naming what replaced them; ``LocalEngine.calibrate`` records the
rule too. On a tiny random Llama (``tiny_dir`` / ``tiny``) and a MuSiQue-shaped sample of 3 items."""

from __future__ import annotations

import json
import re

import pytest
import torch
from typer.testing import CliRunner

from cli_doubles import home, tiny_dir  # noqa: F401 - fixtures
from ragcache.app.calibrate_settings import read_plan
from ragcache.app.cli import app
from ragcache.engine.blend.calibration import calibration_path, load_calibration
from ragcache.engine.blend.license import RULE_NAME, LicenseRule
from ragcache.engine.blend.setting import BlendSetting, candidate_settings
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.engine import LocalEngine

runner = CliRunner()
WORDS = ("river", "mountain", "harbour", "forest", "valley", "bridge", "castle", "market")


def musique(path, n=3, passages=5):
    """A MuSiQue-shaped sample: ``n`` items, ``passages`` passages each, the gold answer in passage 2."""
    items = []
    for i in range(n):
        gold = f"{WORDS[i]} town"
        ctxs = [{"title": f"t{j}", "text": f"Passage {j} of item {i} talks about the {WORDS[(i + j) % 8]}."}
                for j in range(passages)]
        ctxs[2]["text"] = f"The answer to question {i} is {gold}, by the {WORDS[i]}."
        items.append({"question": f"Which town is question {i} about?", "answers": [gold], "ctxs": ctxs})
    path.write_text(json.dumps(items))
    return path


LENIENT = ["--max-decisive-flip-rate", "0.99", "--min-large-tokens", "0", "--max-f1-drop", "1", "--min-speedup", "0.001"]


def cli(*args):
    """Exit result and the output with all white space removed (Rich wraps long paths and titles)."""
    res = runner.invoke(app, ["calibrate", *args])
    return res, squash(res.output + (res.stderr if res.stderr_bytes is not None else ""))


def squash(text) -> str:
    return "".join(str(text).split())


def test_the_plan_is_written_before_anything_is_measured(home, tmp_path):  # noqa: F811
    plan = tmp_path / "plan.json"
    res, out = cli("--data", str(tmp_path / "missing.json"), "--model", str(tmp_path / "no-model"), "--plan-out",
                   str(plan), "--ratios", "0.3,0.1", "--selection", "prophet", "--variants", "3", "--seed", "7",
                   "--docs", "4", "--answer-tokens", "8", "--max-decisive-flip-rate", "0.02", "--min-speedup", "2")
    assert res.exit_code == 2 and "Traceback" not in out, out
    assert "missing.jsonnotfound" in out and squash(f"plan written to {plan}") in out
    assert out.index("planwritten") < out.index("notfound")
    sp = read_plan(plan)  # the plan the run would have measured, readable as --plan reads it
    assert sp.settings == candidate_settings([0.1, 0.3], rank_by="prophet", chunk_context="prefix")
    assert [s.recompute_ratio for s in sp.settings] == [0.1, 0.3]
    assert sp.rule == LicenseRule(max_decisive_flip_rate=0.02, min_speedup=2.0)
    assert sp.prompts == {"variants": 3, "seed": 7, "docs": 4} and sp.answer_tokens == 8 and sp.yardstick_every == 1
    assert json.loads(plan.read_text())["rule"]["name"] == RULE_NAME
    res, out = cli("--data", str(tmp_path / "missing.json"), "--plan-out", str(plan))  # never overwritten
    assert res.exit_code == 2 and "exists" in out and read_plan(plan).rule.min_speedup == 2.0


def test_the_default_plan_goes_under_the_home(home, tmp_path):  # noqa: F811
    res, out = cli("--data", str(tmp_path / "missing.json"))
    assert res.exit_code == 2, out
    plans = sorted((home / "calibration" / "plans").glob("plan-*.json"))
    assert len(plans) == 1 and squash(f"plan written to {plans[0]}") in out
    sp = read_plan(plans[0])
    assert sp.settings == candidate_settings() and sp.rule == LicenseRule()
    assert [s.name for s in sp.settings] == [f"infoflow r={r} prefix-conditioned" for r in ("0.15", "0.2", "0.3")]
    assert sp.prompts == {"variants": 2, "seed": 40, "docs": 6}
    cli("--data", str(tmp_path / "missing.json"))  # a second plan in the same second gets its own file
    assert len(list((home / "calibration" / "plans").glob("plan-*.json"))) == 2


@pytest.mark.parametrize("args, match", [
    (["--min-agreement", "0.9"], "--min-agreement belonged to the retired pooled-agreement rule"),
    (["--confidence", "0.95"], "--confidence belonged to the retired"),
    (["--max-ratio", "0.5"], "--max-ratio belonged to the retired"),
    (["--ratios", "0.1,abc"], "ratios must be numbers"),
    (["--ratios", "0.1,2"], r"recompute_ratio must be in \[0, 1\]"),
    (["--ratios", "0.1,0.1"], "ratios must differ"),
    (["--selection", "vibes"], "rank_by must be one of"),
    (["--chunk-context", "middle"], "chunk_context must be one of"),
    (["--min-speedup", "0"], "min_speedup"),
    (["--large-margin", "0.5"], "large_margin"),
    (["--plan", "p.json", "--ratios", "0.1", "--min-speedup", "2"], "--ratios, --min-speedup build a plan"),
])
def test_bad_and_retired_options_stop_before_a_plan_or_a_model(home, tmp_path, args, match):  # noqa: F811
    res, out = cli("--data", str(tmp_path / "missing.json"), "--model", str(tmp_path / "no-model"), *args)
    assert res.exit_code == 2 and "Traceback" not in out, out
    assert re.search(squash(match), out), out
    assert not (home / "calibration" / "plans").exists()
    if "retired" in match:  # the message names what replaced it
        assert "--max-decisive-flip-rate" in out and "--min-speedup" in out


def test_the_cli_path_records_the_rule_and_runs_as_plan_does(home, tmp_path, tiny_dir):  # noqa: F811
    data = musique(tmp_path / "musique.json")
    plan, measured = tmp_path / "plan.json", tmp_path / "measured.json"
    res, out = cli("--model", str(tiny_dir), "--data", str(data), "--end", "2", "--variants", "1", "--docs", "3",
                   "--answer-tokens", "4", "--ratios", "1.0,0.0", "--plan-out", str(plan), "--json", str(measured),
                   *LENIENT)
    assert res.exit_code == 0, out
    assert out.index("planwritten") < out.index("prompt0") < out.index(squash(f"blend license ({RULE_NAME})"))
    assert "yardstick:bfloat16vsfloat32" in out and squash(f"rule {RULE_NAME}") in out  # the table, the verdict
    engine = LocalEngine.from_pretrained(str(tiny_dir), calibration=False)
    cal = load_calibration(engine.fingerprint, home, packaged=False)
    assert calibration_path(engine.fingerprint, home).exists() and cal.rule["name"] == RULE_NAME
    assert cal.rule == LicenseRule(max_decisive_flip_rate=0.99, min_large_tokens=0, max_f1_drop=1.0,
                                   min_speedup=0.001).to_dict()
    assert [row["name"] for row in cal.settings] == [s.name for s in read_plan(plan).settings]
    assert all("license" in row for row in cal.settings) and cal.prompts == 2
    assert cal.blend_allowed and cal.setting["name"] in {s.name for s in read_plan(plan).settings}
    assert json.loads(measured.read_text())["complete"] and cal.yardstick["prompts"] == 2
    again, out2 = cli("--model", str(tiny_dir), "--data", str(data), "--end", "2", "--no-save", "--plan", str(plan))
    assert again.exit_code == 0, out2  # the written plan runs as any plan does, the same candidates
    for row in cal.settings:
        assert squash(row["name"]) in out2


# -- the library path --------------------------------------------------------------------------
DOCS = ["The cat sat on the mat and looked at the garden for a long while.",
        "Paris is the capital of France; the Seine flows through it to the sea.",
        "Rivers carry water from mountains to the ocean, shaping valleys on the way."]


def messages(question):
    blocks = [{"type": "text", "text": d, "ragcache_kind": "document"} for d in DOCS]
    blocks.append({"type": "text", "text": question, "ragcache_kind": "question"})
    return [{"role": "system", "content": "Answer from the passages."}, {"role": "user", "content": blocks}]


PROMPTS = [messages("Where is Paris?"), messages("Where did the cat sit?")]
GOLDS = [["France"], ["the mat"]]


def test_engine_calibrate_records_the_rule_and_the_engine_uses_it(tiny, tmp_path):
    engine = LocalEngine(tiny, chunk_cache=ChunkCache(dtype=torch.float32), calibration=False)
    lenient = LicenseRule(decisive_margin=0.0, max_decisive_flip_rate=0.99, min_large_tokens=0, max_f1_drop=1.0,
                          min_speedup=0.001)  # a tiny random model has few decisive tokens: count every one
    settings = [BlendSetting(recompute_ratio=1.0, chunk_context="prefix"), BlendSetting(recompute_ratio=0.0)]
    cal = engine.calibrate(PROMPTS, golds=GOLDS, settings=settings, rule=lenient, answer_tokens=4, home=tmp_path)
    assert cal.rule == lenient.to_dict() and engine.calibration is cal and cal.blend_allowed
    full = next(r for r in cal.settings if r["setting"]["recompute_ratio"] == 1.0)
    assert full["license"]["decisive_flips"] == 0 and full["license"]["large_flips"] == 0
    assert load_calibration(tiny.fingerprint, tmp_path, packaged=False) == cal
    again = LocalEngine(tiny, chunk_cache=ChunkCache(dtype=torch.float32), home=tmp_path)
    assert again.calibration == cal and again.recompute_ratio == cal.recompute_ratio
    assert len(engine.chunk_cache.store) == 0  # nothing stored in the engine's caches


def test_engine_calibrate_at_the_default_rule_needs_evidence(tiny):
    engine = LocalEngine(tiny, chunk_cache=ChunkCache(dtype=torch.float32), calibration=False)
    cal = engine.calibrate(PROMPTS, golds=GOLDS, settings=[BlendSetting(recompute_ratio=1.0)], answer_tokens=4,
                           save=False)
    lic = cal.settings[0]["license"]  # r = 1 flips nothing, but 2 short answers hold no 300 large-margin tokens
    assert cal.rule == LicenseRule().to_dict() and not cal.blend_allowed and "large-margin flips" in lic["failed"]
    assert f"rule {RULE_NAME}" in cal.verdict() and "no setting licensed" in cal.verdict()
    default = engine.calibrate(PROMPTS[:1], golds=GOLDS[:1], answer_tokens=2, save=False)
    assert [r["setting"] for r in default.settings] == [s.to_dict() for s in candidate_settings()]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"golds": GOLDS, "ratios": [0.15]}, TypeError, "ratios belonged to the retired pooled-agreement rule"),
    ({"golds": GOLDS, "min_agreement": 0.9, "max_ratio": 0.5}, TypeError, "min_agreement, max_ratio belonged"),
    ({"golds": GOLDS, "confidence": 0.95}, TypeError, "rule=LicenseRule"),
    ({"golds": GOLDS, "bogus": 1}, TypeError, "unexpected keyword"),
    ({}, ValueError, "pass golds"),
    ({"golds": GOLDS, "rule": {"min_speedup": 2}}, TypeError, "rule must be a LicenseRule"),
    ({"golds": GOLDS, "answer_tokens": 0}, ValueError, "answer_tokens must be"),
    ({"golds": GOLDS[:1]}, ValueError, "golds has 1 entries for 2 prompts"),
])
def test_engine_calibrate_refuses_the_retired_options_and_bad_inputs(tiny, kwargs, error, match):
    engine = LocalEngine(tiny, chunk_cache=ChunkCache(dtype=torch.float32), calibration=False)
    with pytest.raises(error, match=match):
        engine.calibrate(PROMPTS, save=False, **kwargs)
    if not kwargs:
        with pytest.raises(ValueError, match="no document"):
            engine.calibrate(["just a question"], golds=[["x"]], save=False)


def test_the_help_names_the_rules_own_defaults():
    import typer

    from ragcache.app.calibrate_cmd import RULE_OPTIONS, calibrate_app

    params = {p.name: p for p in typer.main.get_group(calibrate_app).params}
    for name in RULE_OPTIONS:  # the options default to None (the rule's own); their help says which value that is
        shown = re.search(r"\(.*default ([0-9.]+)\)", params[name].help).group(1)
        assert float(shown) == getattr(LicenseRule(), name), name
    assert all(params[n].hidden for n in ("min_agreement", "confidence", "max_ratio"))
