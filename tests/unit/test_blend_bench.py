"""Scoring helpers of the CacheBlend benchmark (no model needed)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks.blend import (
    summarize_methods,
    best_f1,
    kl_divergence,
    normalize_answer,
    token_f1,
)


def test_normalize_answer_follows_cacheblend():
    assert normalize_answer("The  Exeter College.\nsecond line") == "exeter college"
    assert normalize_answer("An apple, a pear!") == "apple pear"


def test_token_f1_and_best_of_golds():
    assert token_f1("Exeter College", "exeter college") == 1.0
    assert token_f1("at Exeter", "Exeter College") == pytest.approx(0.5)
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0 and token_f1("cat", "dog") == 0.0
    assert best_f1("Oxford", ["Exeter College", "Oxford"]) == 1.0


def test_kl_divergence():
    a = torch.tensor([1.0, 2.0, 3.0])
    assert kl_divergence(a, a) == pytest.approx(0.0, abs=1e-7)
    b = torch.tensor([3.0, 2.0, 1.0])
    p, q = torch.softmax(a, 0), torch.softmax(b, 0)
    assert kl_divergence(a, b) == pytest.approx(float((p * (p / q).log()).sum()), rel=1e-5)


def test_summary_ratios():
    def m(ttft, eq, r=None, agree=1.0, n=4):
        return {"ttft_s": ttft, "first_token_equal": eq, "f1_vs_full": float(eq), "kl_first_token": 0.1,
                "f1_gold": 0.5, "tokens_computed": 10, "recompute_ratio": r, "tf_mean_kl": 0.2 * (1 - agree),
                "tf_top1_agreement": agree, "greedy_match_len": 1, "answer_tokens": n}

    rows = [{"methods": {"full prefill": m(4.0, True), "cacheblend r=0.15": m(1.0, True, 0.15, 1.0, 2)}},
            {"methods": {"full prefill": m(2.0, True), "cacheblend r=0.15": m(1.0, False, 0.15, 0.5, 6)}}]
    s = summarize_methods(rows)
    assert s["cacheblend r=0.15"]["tf_top1_agreement"] == pytest.approx(0.75)
    assert s["cacheblend r=0.15"]["tf_top1_agreement_pooled"] == pytest.approx((2 + 3) / 8)
    assert s["cacheblend r=0.15"]["tf_mean_kl"] == pytest.approx(0.05)
    assert s["cacheblend r=0.15"]["ttft_speedup_vs_full"] == pytest.approx(3.0)
    assert s["cacheblend r=0.15"]["first_token_agreement"] == 0.5
    assert math.isclose(s["full prefill"]["mean_ttft_s"], 3.0)
    assert s["cacheblend r=0.15"]["median_item_speedup"] == pytest.approx(3.0)  # per item: 4x and 2x
    assert s["cacheblend r=0.15"]["items_slower_than_full"] == 0 and "mean_cpu_s" not in s["full prefill"]
    rows.append({"methods": {"full prefill": m(3.0, True), "cacheblend r=0.15": m(30.0, True, 0.15)}})  # an outlier
    for row, (f, b) in zip(rows, [(8.0, 2.0), (4.0, 2.0), (6.0, 60.0)]):
        row["methods"]["full prefill"]["cpu_s"], row["methods"]["cacheblend r=0.15"]["cpu_s"] = f, b
    s = summarize_methods(rows)
    assert s["cacheblend r=0.15"]["median_item_speedup"] == pytest.approx(2.0)  # not dragged to the mean's 0.28x
    assert s["cacheblend r=0.15"]["ttft_speedup_vs_full"] == pytest.approx(3.0 / 32 * 3)
    assert s["cacheblend r=0.15"]["items_slower_than_full"] == 1
    assert s["cacheblend r=0.15"]["median_item_cpu_speedup"] == pytest.approx(2.0)
    assert s["cacheblend r=0.15"]["mean_cpu_s"] == pytest.approx(64 / 3)


def test_missing_data_names_the_expected_file(tmp_path):
    from benchmarks.blend import main

    with pytest.raises(FileNotFoundError, match="/work/shared/data/musique_s.json"):
        main(str(tmp_path / "nope.json"), 0, 1, json_path=str(tmp_path / "x.json"))


def test_unknown_blend_option_raises():
    from benchmarks.blend import _blend_options

    assert _blend_options({"check_layer": 2})["check_layer"] == 2
    with pytest.raises(ValueError, match="unknown blend option"):
        _blend_options({"chek_layer": 2})


def test_variant_study_refuses_evaluation_items(tmp_path):
    from benchmarks.blend_variants import main

    with pytest.raises(ValueError, match="development items only"):
        main(str(tmp_path / "nope.json"), 45, 55)


def test_merge_runs(tmp_path):
    from benchmarks.blend_merge import merge

    def m(ttft, agree, r=None):
        return {"ttft_s": ttft, "first_token_equal": True, "f1_vs_full": 1.0, "kl_first_token": 0.1,
                "f1_gold": 0.5, "tokens_computed": 10, "recompute_ratio": r, "tf_mean_kl": 1 - agree,
                "tf_top1_agreement": agree, "greedy_match_len": 1, "answer_tokens": 4}

    def run(path, start, agrees):
        rows = [{"prompt_tokens": 100, "methods": {"full prefill": m(2.0, 1.0), "prefix cache": m(2.0, 1.0),
                                                    "cacheblend r=0.15": m(1.0, a, 0.15)}} for a in agrees]
        payload = {"items": [start, start + len(rows)], "per_item": rows, "ratios": [0.15], "machine": "m",
                   "load_avg_start": [1.0, 1.0, 1.0], "load_avg_end": [2.0, 2.0, 2.0], "model": "x"}
        path.write_text(json.dumps(payload))
        return str(path)

    a, b = run(tmp_path / "a.json", 50, [1.0, 0.5]), run(tmp_path / "b.json", 53, [0.75])
    out = merge([b, a], str(tmp_path / "m.json"))
    assert out["item_ids"] == [50, 51, 53] and out["items"] == [50, 54]
    assert out["summary"]["cacheblend r=0.15"]["tf_top1_agreement"] == pytest.approx(0.75)
    assert json.loads((tmp_path / "m.json").read_text())["item_ids"] == [50, 51, 53]
    with pytest.raises(ValueError, match="more than one run"):
        merge([a, a], str(tmp_path / "n.json"))


def test_variant_summary_gap_share_and_random_multiple():
    from benchmarks.blend_variants import summarize

    variants = {"r0": ("bos", 0.0, {}), "rule": ("bos", 0.15, {"rank_by": "infoflow"}),
                "rand a": ("bos", 0.15, {"rank_by": "random", "seed": 0}),
                "rand b": ("bos", 0.15, {"rank_by": "random", "seed": 1})}

    def m(agree, kl):
        return {"mean_kl": kl, "top1_agreement": agree, "first_token_kl": 0.0, "first_token_equal": True,
                "greedy_match_len": 1, "answer_len": 10, "blend_s": 0.1, "tokens_recomputed": 5}

    rows = [{"variants": {"r0": m(0.9, 0.2), "rule": m(0.96, 0.08), "rand a": m(0.91, 0.18), "rand b": m(0.93, 0.18)}}]
    s = summarize(rows, variants)
    assert abs(s["rule"]["gap_closed_agreement"] - 0.6) < 1e-9 and abs(s["rule"]["gap_closed_kl"] - 0.6) < 1e-9
    assert abs(s["rule"]["random_gap_closed_agreement"] - 0.2) < 1e-9  # mean of 0.1 and 0.3
    assert abs(s["rule"]["gap_closed_agreement_x_random"] - 3.0) < 1e-9
    assert s["r0"]["gap_closed_agreement"] == 0.0 and s["r0"]["random_gap_closed_agreement"] is None
