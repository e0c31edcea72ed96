"""The calibration record packaged with ragcache: read when $RAGCACHE_HOME has none for the model,
never over a home record, never for another model; the embedded model's record is in the package
and decided by the confidence rule it records."""

import json

import pytest

from ragcache.home import Home
from ragcache.engine.blend import calibration as calmod
from ragcache.engine.blend.calibration import (
    Calibration,
    agreement_lower_bound,
    calibration_path,
    load_calibration,
)
from ragcache.engine.engine import LocalEngine


def _record(fp, r, allowed):
    return Calibration(fingerprint=fp, model="tiny", recompute_ratio=r, blend_allowed=allowed, min_agreement=0.95,
                       max_ratio=0.5, rule={"name": "decisive-flips-v1"})


@pytest.fixture
def packaged(tmp_path, monkeypatch):
    folder = tmp_path / "packaged"
    folder.mkdir()
    monkeypatch.setattr(calmod, "PACKAGED_DIR", folder)
    monkeypatch.setattr(Home, "default", classmethod(lambda cls: cls(tmp_path / "home")))  # the library's default home
    return folder


@pytest.mark.parametrize(("r", "allowed"), [(0.3, True), (None, False)])
def test_packaged_record_is_read_when_home_has_none(tiny, packaged, r, allowed):
    fp = tiny.fingerprint.weights_digest  # records measure the weights: keyed without the chat template
    (packaged / f"{fp}.json").write_text(json.dumps(_record(fp, r, allowed).to_dict()))
    got = load_calibration(tiny.fingerprint)
    assert got is not None and got.recompute_ratio == r and got.blend_allowed is allowed
    engine = LocalEngine(tiny)
    assert engine.calibration == got and engine.recompute_ratio == r
    assert load_calibration(tiny.fingerprint, packaged=False) is None
    assert LocalEngine(tiny, calibration=False).calibration is None


def test_a_home_record_wins_over_the_packaged_one(tiny, packaged):
    fp = tiny.fingerprint.weights_digest  # records measure the weights: keyed without the chat template
    (packaged / f"{fp}.json").write_text(json.dumps(_record(fp, 0.3, True).to_dict()))
    home = calibration_path(tiny.fingerprint)
    home.parent.mkdir(parents=True)
    home.write_text(json.dumps(_record(fp, None, False).to_dict()))
    assert load_calibration(tiny.fingerprint).blend_allowed is False
    home.write_text("{not json")  # a broken home record: exact prefill, not the packaged record's blend
    assert load_calibration(tiny.fingerprint) is None


def test_a_packaged_record_of_another_model_is_ignored(tiny, packaged):
    fp = tiny.fingerprint.weights_digest  # records measure the weights: keyed without the chat template
    (packaged / f"{fp}.json").write_text(json.dumps(_record("0" * 64, 0.3, True).to_dict()))
    assert load_calibration(tiny.fingerprint) is None


def test_the_embedded_models_record_ships_and_follows_its_own_rule():
    files = sorted(calmod.PACKAGED_DIR.glob("*.json"))
    assert files, "the embedded model's calibration record is missing from the package"
    for f in files:
        cal = Calibration.from_dict(json.loads(f.read_text()))
        assert f.stem == cal.fingerprint
        if cal.rule is not None:  # the license rule (issue 40): re-decided here from the per-prompt data it ships
            from ragcache.engine.blend.license import RULE_NAME, LicenseRule, choose, judge

            rule = LicenseRule.from_dict(cal.rule)
            assert cal.rule["name"] == RULE_NAME
            rows = [{**row, "license": judge(row, rule, k=len(cal.settings))} for row in cal.settings]
            for row, shipped in zip(rows, cal.settings):
                assert row["license"] == shipped["license"]  # floats round-trip JSON exactly
            chosen = choose(rows)
            assert cal.setting == (chosen["setting"] if chosen else None) and cal.blend_allowed == bool(chosen)
            assert all(row["license"]["decisive_tokens"] >= 1500 for row in rows)  # the plan's floor
            assert cal.yardstick is not None and cal.yardstick["prompts"] == cal.prompts
            continue
        assert cal.confidence > 0
        if cal.settings:  # a record of named blend settings (issue 31): the rule picks its setting
            from ragcache.engine.blend.setting import choose_setting

            chosen = choose_setting(cal.settings, cal.min_agreement, cal.max_mean_share)
            assert cal.setting == (chosen["setting"] if chosen else None) and cal.blend_allowed == bool(chosen)
            assert all(row["answer_tokens"] >= 100 for row in cal.settings)
            continue
        ok = [row["r"] for row in cal.ratios if row["r"] <= cal.max_ratio and
              agreement_lower_bound(row["pooled_top1_agreement"], row["answer_tokens"], cal.confidence)
              >= cal.min_agreement]
        assert cal.recompute_ratio == (min(ok) if ok else None) and cal.blend_allowed == bool(ok)
        assert sum(row["answer_tokens"] for row in cal.ratios[:1]) >= 100  # enough tokens to decide


def test_a_record_says_what_it_measured_and_licenses():
    rows = [{"name": "infoflow r=0.3", "pooled_top1_agreement": 0.9485, "agreement_lower_bound": 0.9357,
             "answer_tokens": 991},
            {"name": "infoflow r=0.1 doc_top=1", "pooled_top1_agreement": 0.9435, "agreement_lower_bound": 0.9302,
             "answer_tokens": 991}]
    no = Calibration(fingerprint="f", model="m", recompute_ratio=None, blend_allowed=False, min_agreement=0.95,
                     max_ratio=0.3, prompts=50, created="2026-12-02T08:48:26+00:00", settings=rows)
    assert no.verdict() == ("calibration record (50 prompts, 991 answer tokens, 2026-12-02, retired pooled-agreement "
                            "rule): no setting licensed; "
                            "best infoflow r=0.3, pooled top-1 agreement 0.949, lower bound 0.936 < 0.95")
    yes = Calibration(fingerprint="f", model="m", recompute_ratio=0.3, blend_allowed=True, rule={"name": "decisive-flips-v1"}, min_agreement=0.95,
                      max_ratio=0.3, prompts=50, settings=rows, setting={"name": "infoflow r=0.3"})
    assert yes.verdict() == ("calibration record (50 prompts, 991 answer tokens, undated): licenses infoflow r=0.3 "
                             "(pooled top-1 agreement 0.949, lower bound 0.936 >= 0.95)")
    capped = Calibration(fingerprint="f", model="m", recompute_ratio=None, blend_allowed=False, min_agreement=0.95,
                         max_ratio=0.5, prompts=50, max_mean_share=0.5,
                         settings=[{"name": "infoflow r=0.5", "pooled_top1_agreement": 0.96367,
                                    "agreement_lower_bound": 0.95012, "mean_share": 0.50006, "answer_tokens": 991}])
    assert capped.verdict().endswith("no setting licensed; best infoflow r=0.5, pooled top-1 agreement 0.964, lower "
                                     "bound 0.9501 >= 0.95 but mean recomputed share 0.50006 > 0.5")
    close = Calibration(fingerprint="f", model="m", recompute_ratio=None, blend_allowed=False, min_agreement=0.95,
                        max_ratio=0.5, prompts=50, max_mean_share=0.5,
                        settings=[{"name": "r=0.5", "pooled_top1_agreement": 0.963, "agreement_lower_bound": 0.9497,
                                   "mean_share": 0.5, "answer_tokens": 991}])
    assert close.verdict().endswith("lower bound 0.9497 < 0.95")
    bare = Calibration(fingerprint="f", model="m", recompute_ratio=0.3, blend_allowed=True, rule={"name": "decisive-flips-v1"}, min_agreement=0.95,
                       max_ratio=0.3, prompts=50, settings=rows, setting={"name": "a setting not in the table"})
    assert bare.verdict().endswith("licenses a setting not in the table")
    ratios = Calibration(fingerprint="f", model="m", recompute_ratio=None, blend_allowed=False, min_agreement=0.95,
                         max_ratio=0.5, prompts=16, rank_by="infoflow",
                         ratios=[{"r": 0.5, "pooled_top1_agreement": 0.968, "agreement_lower_bound": 0.948,
                                  "answer_tokens": 340}])
    assert ratios.verdict().endswith("no ratio licensed; best r=0.5 (infoflow), pooled top-1 agreement 0.968, "
                                     "lower bound 0.948 < 0.95")
