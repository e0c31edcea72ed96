"""The blend license rule (issue 40) on synthetic records: each of its four conditions alone refuses a
candidate; the bootstrap resamples prompts (not tokens) and is deterministic for a seed; the confidence
is Bonferroni-corrected over the plan's candidates; records of the retired rule license nothing."""

import json

import numpy as np
import pytest

from ragcache.engine.blend.calibration import Calibration
from ragcache.engine.blend.license import (
    RULE_NAME,
    LicenseRule,
    best_f1,
    bootstrap_upper,
    choose,
    decisive_counts,
    judge,
)
from ragcache.engine.blend.setting import SettingsPlan, BlendSetting, licensed_setting, precision_yardstick


def _prompt(i, margins, mismatch=(), f1=0.5, ref_f1=0.5, speed=3.0, bf16=None):
    p = {"prompt": i, "answer_tokens": len(margins), "ref_margin": list(margins), "mismatch": list(mismatch),
         "f1": f1, "ref_f1": ref_f1, "cpu_s": 1.0, "full_cpu_s": speed, "answer_match": not mismatch,
         "top1_agreement": 1 - len(mismatch) / len(margins), "mean_kl": 0.01, "share": 0.25, "exact": False}
    if bf16 is not None:
        p["bf16_mismatch"] = list(bf16)
    return p


def _good(n=40):
    """n prompts of 20 tokens: 16 decisive (8 of them at m >= 3), 4 near ties; no decisive flip."""
    margins = [0.1, 0.2, 0.5, 0.9] + [1.5] * 8 + [4.0] * 8
    return [_prompt(i, margins, mismatch=[0, 1]) for i in range(n)]


RULE = LicenseRule()


def test_a_candidate_that_keeps_every_decisive_token_is_licensed_near_ties_do_not_count():
    lic = judge({"per_prompt": _good()}, RULE, k=3)
    assert lic["licensed"] and lic["failed"] == []
    assert lic["decisive_tokens"] == 40 * 16 and lic["decisive_flips"] == 0
    assert lic["near_tie_tokens"] == 40 * 4 and lic["near_tie_flips"] == 80  # reported, never counted
    assert lic["large_tokens"] == 320 and lic["median_cpu_speedup"] == 3.0


@pytest.mark.parametrize("condition", ["decisive flips", "large-margin flips", "answer F1", "speed-up"])
def test_each_condition_alone_refuses_a_candidate(condition):
    pp = _good()
    if condition == "decisive flips":  # 1.5-margin tokens flipped in 8 prompts: 8 / 640 = 1.25% > 1%
        for p in pp[:8]:
            p["mismatch"] = [0, 1, 4]
    elif condition == "large-margin flips":  # a single flip at m >= 3 (decisive rate stays tiny)
        pp[0]["mismatch"] = [19]
    elif condition == "answer F1":  # 0.03 below full prefill's mean F1
        for p in pp:
            p["f1"] = 0.47
    else:
        for p in pp:
            p["full_cpu_s"] = 1.4
    lic = judge({"per_prompt": pp}, RULE, k=3)
    assert lic["failed"] == [condition] and not lic["licensed"]


def test_too_few_large_margin_tokens_cannot_show_there_is_no_large_flip():
    lic = judge({"per_prompt": _good(n=30)}, RULE, k=1)  # 240 tokens at m >= 3 < 300
    assert lic["failed"] == ["large-margin flips"] and lic["large_flips"] == 0


def test_f1_within_the_allowed_drop_passes():
    pp = _good()
    for p in pp:
        p["f1"] = 0.485
    assert judge({"per_prompt": pp}, RULE, k=3)["licensed"]


def test_bootstrap_is_deterministic_for_a_seed_and_resamples_prompts():
    events, trials = [0, 1, 0, 2, 0, 0, 1, 0], [16] * 8
    a = bootstrap_upper(events, trials, 0.95, resamples=2000, seed=7)
    assert a == bootstrap_upper(events, trials, 0.95, resamples=2000, seed=7)
    assert a != bootstrap_upper(events, trials, 0.95, resamples=2000, seed=8) or a > 0
    # every prompt with the same rate: any resample of prompts has that rate (a token-level
    # bootstrap would spread around it)
    assert bootstrap_upper([1] * 20, [10] * 20, 0.99, resamples=500) == pytest.approx(0.1)
    # all flips in one prompt: the bound is far above the pooled rate (tokens of a prompt move together)
    clustered = bootstrap_upper([8] + [0] * 39, [20] * 40, 0.95, resamples=4000)
    spread = bootstrap_upper([1] * 8 + [0] * 32, [20] * 40, 0.95, resamples=4000)
    assert clustered > spread > 8 / 800


def test_confidence_is_bonferroni_over_the_plans_candidates():
    pp = _good()
    for p in pp[:3]:
        p["mismatch"] = [0, 1, 4]
    one, three = judge({"per_prompt": pp}, RULE, k=1), judge({"per_prompt": pp}, RULE, k=3)
    assert one["confidence"] == pytest.approx(0.95) and three["confidence"] == pytest.approx(1 - 0.05 / 3)
    assert three["decisive_flip_upper"] >= one["decisive_flip_upper"]


def test_bad_inputs_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="ref_margin"):
        decisive_counts([{"prompt": 0, "mismatch": []}], 1.0)
    with pytest.raises(ValueError, match="gold"):
        judge({"per_prompt": [{k: v for k, v in _good(1)[0].items() if k != "f1"}]}, RULE, k=1)
    with pytest.raises(ValueError, match="k >= 1"):
        judge({"per_prompt": _good(2)}, RULE, k=0)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_upper([0], [1], 1.0)
    with pytest.raises(ValueError, match="max_decisive_flip_rate"):
        LicenseRule(max_decisive_flip_rate=1.5)
    assert LicenseRule.from_dict(LicenseRule(min_speedup=2.0).to_dict()) == LicenseRule(min_speedup=2.0)


def test_the_fastest_licensed_candidate_ships():
    rows = [{"name": "slow", "license": {"licensed": True, "median_cpu_speedup": 2.0}},
            {"name": "fast", "license": {"licensed": True, "median_cpu_speedup": 2.7}},
            {"name": "fastest but refused", "license": {"licensed": False, "median_cpu_speedup": 3.1}}]
    assert choose(rows)["name"] == "fast"
    assert choose(rows[2:]) is None


def test_gold_f1_is_cacheblends_scoring():
    assert best_f1("The Exeter College.\nmore", ["Exeter College"]) == 1.0
    assert best_f1("Oxford", ["Exeter College", "Oxford"]) == 1.0
    assert best_f1("Exeter", ["Exeter College"]) == pytest.approx(2 / 3)
    assert best_f1("x", []) == 0.0


def test_record_under_the_rule_licenses_the_fastest_and_names_the_four_figures(tiny):
    from ragcache.engine.blend.setting import record_settings
    from ragcache.engine.engine import LocalEngine

    engine = LocalEngine(tiny, calibration=False)
    a, b = BlendSetting(recompute_ratio=0.2), BlendSetting(recompute_ratio=0.3)
    fast = _good()
    for p in fast:
        p["full_cpu_s"] = 2.6
    measured = [{"setting": a.to_dict(), "per_prompt": [_prompt(i, p["ref_margin"], p["mismatch"], bf16=[2]) for i, p
                                                        in enumerate(fast)]},
                {"setting": b.to_dict(), "per_prompt": fast}]
    for p in measured[0]["per_prompt"]:
        p["f1"] = 0.4  # the faster one loses answer quality
    plan = SettingsPlan(settings=[a, b], rule=RULE)
    cal = record_settings(engine, measured, plan, n_prompts=40, save=False)
    assert cal.blend_allowed and cal.setting["name"] == b.name and cal.rule["name"] == RULE_NAME
    v = cal.verdict()
    assert f"rule {RULE_NAME}: licenses {b.name}" in v
    for figure in ("decisive flips 0/640", "m >= 3: 0 flips of 320", "F1 0.500 vs full 0.500", "2.60x"):
        assert figure in v
    assert cal.yardstick == {"prompts": 40, "tokens": 800, "flips": 40, "flip_rate": 0.05, "decisive_tokens": 640,
                             "decisive_flips": 0, "decisive_flip_rate": 0.0}
    back = Calibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert licensed_setting(back) == b
    for p in measured[1]["per_prompt"]:
        p["full_cpu_s"] = 1.2
    none = record_settings(engine, measured, plan, n_prompts=40, save=False)
    assert not none.blend_allowed and "no setting licensed" in none.verdict() and "fails" in none.verdict()


def test_a_record_of_the_retired_rule_loads_and_licenses_nothing():
    old = {"fingerprint": "f", "model": "m", "recompute_ratio": 0.3, "blend_allowed": True, "min_agreement": 0.95,
           "max_ratio": 0.5, "setting": BlendSetting(recompute_ratio=0.3).to_dict()}
    cal = Calibration.from_dict(old)
    assert not cal.blend_allowed and licensed_setting(cal) is None and "retired" in cal.note
    other = Calibration.from_dict({**old, "rule": {"name": "pooled-agreement"}})
    assert licensed_setting(other) is None
    now = Calibration.from_dict({**old, "rule": {"name": RULE_NAME}})
    assert licensed_setting(now) == BlendSetting(recompute_ratio=0.3)


def test_no_yardstick_without_bfloat16_runs():
    assert precision_yardstick([{"per_prompt": _good(3)}]) is None
    assert np.isclose(precision_yardstick([{"per_prompt": [_prompt(0, [2.0, 0.5], bf16=[1])]}])["flip_rate"], 0.5)
