"""Generate the evaluation pages from the benchmark data at build time (mkdocs-gen-files).

One page per study file ``bench/results/<name>.json``: headed by the command that produced it, the
commit that last wrote the file, the machine and its load (as recorded in the JSON; "not recorded"
where the JSON has none), then the study's plot (``bench/results/<name>.png``, copied into the site
next to the page) and every table the JSON holds. ``evaluation/index.md`` leads with the headline
figures (``HEADLINES``), which the README quotes, each under its study's link and plot; a test checks
that the README's figures equal these, so a number cannot go stale silently. The index then lists the
current studies (``CURRENT``) by topic; every other study (calibration plans and their inputs, item
ranges merged into a record, earlier releases) is listed on ``evaluation/archive.md``.

Importable without mkdocs (the tests call ``headline_values``, ``study_page``, ``index_page``,
``archive_page``).
"""

from __future__ import annotations

import json
import math
import runpy
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
# benchmark docstrings quoted from the JSON (a study's "rule") keep their Sphinx roles: shown as code spans
plain_roles = runpy.run_path(str(ROOT / "docs" / "hooks" / "roles.py"))["plain_roles"]
BLEND = ("ragcache bench blend --data ../shared/data/musique_s.json --start 50 --end 150 --rules cacheblend,infoflow "
         "--ratios 0.05,0.10,0.15,0.20,0.30 --threads 1")


@dataclass(frozen=True)
class Study:
    """A study file: its page title, topic, and the command that produced it when the JSON does not
    record one (from the release notes of the run)."""

    title: str
    topic: str
    command: str


STUDIES: dict[str, Study] = {
    "prefix": Study("Prefix cache: TTFT after a hit", "Local engine", "ragcache bench prefix"),
    "prefix_hits": Study("Prefix cache: attention after a hit", "Local engine", "ragcache bench prefix-hits"),
    "workload": Study("Chunk reuse on request streams: novel, Zipf and demo workloads", "Local engine",
                      "ragcache bench workload"),
    "blend": Study("Chunk reuse (CacheBlend / query-aware), evaluation items 50-109", "Local engine",
                   BLEND + "  (three runs merged: items 50-57, 58-83, 84-109)"),
    "blend_items50-57": Study("Chunk reuse, evaluation items 50-57 (part)", "Local engine", BLEND),
    "blend_items58-83": Study("Chunk reuse, evaluation items 58-83 (part)", "Local engine", BLEND),
    "blend_items84-109": Study("Chunk reuse, evaluation items 84-109 (part)", "Local engine", BLEND),
    "blend_cacheblend_v1": Study("Chunk reuse, CacheBlend's rule only (previous release), items 50-121",
                                 "Local engine", "ragcache bench blend --start 50 --end 150 --threads 2"),
    "blend_dev": Study("Chunk reuse, development runs", "Local engine", "ragcache bench blend (development items)"),
    "blend_items30-39": Study("Chunk reuse, development items 30-39", "Local engine", "ragcache bench blend --start 30 --end 40"),
    "blend_peer": Study("Chunk reuse against kvboost", "Local engine", "ragcache bench blend-peer"),
    "blend_variants_dev": Study("Selection study (query-aware rules), development items 0-1", "Local engine",
                                "ragcache bench blend-variants"),
    "blend_variants_cacheblend_dev": Study("Selection study (CacheBlend variants), development items 0-2",
                                           "Local engine", "ragcache bench blend-variants"),
    "blend_variants_attention_dev": Study("Selection study (attention-weighted deviation), development items 0-7",
                                          "Local engine", "ragcache bench blend-variants"),
    "blend_variants_check_dev": Study("Selection study (check layer), development items 0-7", "Local engine",
                                      "ragcache bench blend-variants"),
    "calibration_smollm2": Study("Calibration record of the embedded model by ratio, items 4-19 (shipped before the "
                                 "settings record)", "Local engine",
                                 "ragcache calibrate --start 4 --end 20 --ratios 0.15,0.30,0.50 --selection infoflow "
                                 "--threads 1"),
    "calibration_settings_0-24": Study("Calibration of the planned settings, items 0-24 (partial run: items 0-3)",
                                       "Local engine", "ragcache calibrate --plan bench/results/calibration_plan_settings.json "
                                       "--start 0 --end 25 --threads 1 --json bench/results/calibration_settings_0-24.json"),
    "calibration_settings_25-49": Study("Calibration of the planned settings, items 25-49 (partial run: items 25-28)",
                                        "Local engine", "ragcache calibrate --plan bench/results/calibration_plan_settings.json "
                                        "--start 25 --end 50 --threads 1 --json bench/results/calibration_settings_25-49.json"),
    "calibration_settings_4-24": Study("Calibration of the planned settings, items 4-24 (resumes 0-24)", "Local engine",
                                       "ragcache calibrate --plan bench/results/calibration_plan_settings.json "
                                       "--start 4 --end 25 --threads 1 --no-save "
                                       "--json bench/results/calibration_settings_4-24.json"),
    "calibration_settings_29-49": Study("Calibration of the planned settings, items 29-49 (resumes 25-49)",
                                        "Local engine", "ragcache calibrate --plan bench/results/calibration_plan_settings.json "
                                        "--start 29 --end 50 --threads 1 --no-save "
                                        "--json bench/results/calibration_settings_29-49.json"),
    "calibration_settings_smollm2": Study("Calibration of the planned settings, all 50 development items (licenses "
                                          "nothing; shipped until plan 2)",
                                          "Local engine", "python -c \"from ragcache.app.calibrate_settings import merge; "
                                          "merge('bench/results/calibration_plan_settings.json', "
                                          "['bench/results/calibration_settings_0-24.json', "
                                          "'bench/results/calibration_settings_4-24.json', "
                                          "'bench/results/calibration_settings_25-49.json', "
                                          "'bench/results/calibration_settings_29-49.json'], "
                                          "json_path='bench/results/calibration_settings_smollm2.json')\""),
    "eval_settings_plan": Study("Blend settings on evaluation items 110-131: the settings (input)", "Local engine",
                                "ragcache calibrate --plan bench/results/eval_settings_plan.json --no-save"),
    "eval_settings_110-120": Study("Blend settings against full prefill, evaluation items 110-120", "Local engine",
                                   "ragcache calibrate --plan bench/results/eval_settings_plan.json --start 110 --end 121 "
                                   "--threads 1 --no-save --json bench/results/eval_settings_110-120.json"),
    "eval_settings_110-131": Study("Blend settings against full prefill, evaluation items 110-131 (merged)",
                                   "Local engine", "python -c \"from ragcache.app.calibrate_settings import merge; "
                                   "merge('bench/results/eval_settings_plan.json', "
                                   "['bench/results/eval_settings_110-120.json', "
                                   "'bench/results/eval_settings_121-131.json'], "
                                   "json_path='bench/results/eval_settings_110-131.json')\" && "
                                   "python -m benchmarks.settings_plot bench/results/eval_settings_110-131.json"),
    "eval_settings_plan_50-109": Study("Blend settings on evaluation items 50-109: the settings (input)", "Local engine",
                                       "ragcache calibrate --plan bench/results/eval_settings_plan_50-109.json --no-save"),
    "eval_settings_50-79": Study("Blend settings against full prefill, evaluation items 50-79", "Local engine",
                                 "ragcache calibrate --plan bench/results/eval_settings_plan_50-109.json --start 50 "
                                 "--end 80 --threads 1 --no-save --json bench/results/eval_settings_50-79.json"),
    "eval_settings_80-109": Study("Blend settings against full prefill, evaluation items 80-109", "Local engine",
                                  "ragcache calibrate --plan bench/results/eval_settings_plan_50-109.json --start 80 "
                                  "--end 110 --threads 1 --no-save --json bench/results/eval_settings_80-109.json"),
    "eval_settings_50-109": Study("Blend settings against full prefill, evaluation items 50-109 (merged)",
                                  "Local engine", "python -c \"from ragcache.app.calibrate_settings import merge; "
                                  "merge('bench/results/eval_settings_plan_50-109.json', "
                                  "['bench/results/eval_settings_50-79.json', 'bench/results/eval_settings_80-109.json'], "
                                  "json_path='bench/results/eval_settings_50-109.json')\" && "
                                  "python -m benchmarks.settings_plot bench/results/eval_settings_50-109.json"),
    "eval_settings_121-131": Study("Blend settings against full prefill, evaluation items 121-131", "Local engine",
                                   "ragcache calibrate --plan bench/results/eval_settings_plan.json --start 121 --end 132 "
                                   "--threads 1 --no-save --json bench/results/eval_settings_121-131.json"),
    "calibration_plan_decisive_settings": Study("Calibration plan 3 (the decisive-token license rule): rule, prompt "
                                                "procedure and candidates, fixed before the run (input)", "Local engine",
                                                "ragcache calibrate --plan bench/results/calibration_plan_decisive_settings.json"),
    "calibration_plan_decisive_floor": Study("Calibration plan 3, decisive-token floor: variant 2 of the development "
                                             "questions (input)", "Local engine", "ragcache calibrate --plan bench/results/calibration_plan_decisive_floor.json"),
    "calibration_decisive_0-24": Study("Calibration plan 3, questions 0-24 (two fresh prompts each)", "Local engine",
                                       "ragcache calibrate --plan bench/results/calibration_plan_decisive_settings.json --start 0 --end 25 --threads 1 --no-save "
                                       "--json bench/results/calibration_decisive_0-24.json"),
    "calibration_decisive_25-49": Study("Calibration plan 3, questions 25-49 (two fresh prompts each)", "Local engine",
                                        "ragcache calibrate --plan bench/results/calibration_plan_decisive_settings.json --start 25 --end 50 --threads 1 --no-save "
                                        "--json bench/results/calibration_decisive_25-49.json"),
    "calibration_decisive_floor_0-4": Study("Calibration plan 3, decisive-token floor: variant 2 of questions 0-4",
                                            "Local engine", "ragcache calibrate --plan bench/results/calibration_plan_decisive_floor.json --start 0 --end 5 "
                                            "--threads 1 --no-save --json bench/results/calibration_decisive_floor_0-4.json"),
    "calibration_decisive_floor_5-9": Study("Calibration plan 3, decisive-token floor: variant 2 of questions 5-9",
                                            "Local engine", "ragcache calibrate --plan bench/results/calibration_plan_decisive_floor.json --start 5 --end 10 "
                                            "--threads 1 --no-save --json bench/results/calibration_decisive_floor_5-9.json"),
    "calibration_decisive_floor_10-14": Study("Calibration plan 3, decisive-token floor: variant 2 of questions 10-14",
                                            "Local engine", "ragcache calibrate --plan bench/results/calibration_plan_decisive_floor.json --start 10 --end 15 "
                                            "--threads 1 --no-save --json bench/results/calibration_decisive_floor_10-14.json"),
    "calibration_decisive_floor_15-19": Study("Calibration plan 3, decisive-token floor: variant 2 of questions 15-19",
                                            "Local engine", "ragcache calibrate --plan bench/results/calibration_plan_decisive_floor.json --start 15 --end 20 "
                                            "--threads 1 --no-save --json bench/results/calibration_decisive_floor_15-19.json"),
    "calibration_decisive_smollm2": Study("Calibration plan 3, every prompt merged: the shipped record", "Local engine",
                                          "python -m benchmarks.license_record merge"),
    "eval_decisive_plan": Study("License evaluation on items 50-131: the setting (input)", "Local engine",
                                "ragcache calibrate --plan bench/results/eval_decisive_plan.json --no-save"),
    "eval_decisive_50-90": Study("License evaluation, items 50-90", "Local engine",
                                 "ragcache calibrate --plan bench/results/eval_decisive_plan.json --start 50 --end 91 --threads 1 --no-save "
                                 "--json bench/results/eval_decisive_50-90.json"),
    "eval_decisive_91-131": Study("License evaluation, items 91-131", "Local engine",
                                  "ragcache calibrate --plan bench/results/eval_decisive_plan.json --start 91 --end 132 --threads 1 --no-save "
                                  "--json bench/results/eval_decisive_91-131.json"),
    "eval_decisive_50-131": Study("License evaluation: the shipped setting against full prefill, items 50-131 "
                                  "(merged)", "Local engine", "python -m benchmarks.license_record evaluate"),
    "calibration_plan_r40-50_settings": Study("Calibration plan 2 (r = 0.4 / 0.5): the settings, fixed before the run "
                                              "(input)", "Local engine",
                                              "ragcache calibrate --plan bench/results/calibration_plan_r40-50_settings.json"),
    "calibration_r40-50_0-24": Study("Calibration plan 2, items 0-24", "Local engine",
                                     "ragcache calibrate --plan bench/results/calibration_plan_r40-50_settings.json "
                                     "--start 0 --end 25 --threads 1 --no-save "
                                     "--json bench/results/calibration_r40-50_0-24.json"),
    "calibration_r40-50_25-49": Study("Calibration plan 2, items 25-49", "Local engine",
                                      "ragcache calibrate --plan bench/results/calibration_plan_r40-50_settings.json "
                                      "--start 25 --end 50 --threads 1 --no-save "
                                      "--json bench/results/calibration_r40-50_25-49.json"),
    "calibration_r40-50_smollm2": Study("Calibration plan 2, all 50 development items (the shipped record)",
                                        "Local engine", "python -c \"from ragcache.app.calibrate_settings import merge; "
                                        "merge('bench/results/calibration_plan_r40-50_settings.json', "
                                        "['bench/results/calibration_r40-50_0-24.json', "
                                        "'bench/results/calibration_r40-50_25-49.json'], "
                                        "json_path='bench/results/calibration_r40-50_smollm2.json')\" && "
                                        "python -m benchmarks.settings_plot bench/results/calibration_r40-50_smollm2.json"),
    "eval_settings_plan_r40-50": Study("Plan 2's settings on evaluation items 110-131: the settings (input)",
                                       "Local engine",
                                       "ragcache calibrate --plan bench/results/eval_settings_plan_r40-50.json --no-save"),
    "blend_ties_dev": Study("Where the blend's disagreements fall: agreement by the reference's top-1 margin, "
                            "all 50 development items (merged)", "Local engine",
                            "python -m benchmarks.blend_ties merge bench/results/blend_ties_dev.json "
                            "bench/results/blend_ties_dev_0-24.json bench/results/blend_ties_dev_25-49.json"),
    "blend_ties_dev_0-24": Study("Where the blend's disagreements fall, development items 0-24 (part)", "Local engine",
                                 "ragcache bench blend-ties --start 0 --end 25 --ratios 0.3,0.5,0.8 --threads 1"),
    "blend_ties_dev_25-49": Study("Where the blend's disagreements fall, development items 25-49 (part)",
                                  "Local engine", "ragcache bench blend-ties --start 25 --end 50 --ratios 0.3,0.5,0.8 "
                                  "--threads 1 --json bench/results/blend_ties_dev_25-49.json"),
    "eval_r40-50_110-120": Study("Plan 2's settings against full prefill, evaluation items 110-120", "Local engine",
                                 "ragcache calibrate --plan bench/results/eval_settings_plan_r40-50.json --start 110 "
                                 "--end 121 --threads 1 --no-save --json bench/results/eval_r40-50_110-120.json"),
    "eval_r40-50_121-131": Study("Plan 2's settings against full prefill, evaluation items 121-131", "Local engine",
                                 "ragcache calibrate --plan bench/results/eval_settings_plan_r40-50.json --start 121 "
                                 "--end 132 --threads 1 --no-save --json bench/results/eval_r40-50_121-131.json"),
    "eval_r40-50_110-131": Study("Plan 2's settings against full prefill, evaluation items 110-131 (merged)",
                                 "Local engine", "python -c \"from ragcache.app.calibrate_settings import merge; "
                                 "merge('bench/results/eval_settings_plan_r40-50.json', "
                                 "['bench/results/eval_r40-50_110-120.json', 'bench/results/eval_r40-50_121-131.json'], "
                                 "json_path='bench/results/eval_r40-50_110-131.json')\" && "
                                 "python -m benchmarks.settings_plot bench/results/eval_r40-50_110-131.json"),
    "calibration_plan_settings": Study("Calibration plan: the settings, fixed before the run (input)", "Local engine",
                                       "ragcache calibrate --plan bench/results/calibration_plan_settings.json"),
    "calibration_smollm2_cacheblend": Study("Calibration with CacheBlend's rule", "Local engine",
                                            "ragcache calibrate --selection deviation"),
    "calibration_smollm2_dev0-3": Study("Calibration on development items 0-3 only", "Local engine",
                                        "ragcache calibrate --start 0 --end 4"),
    "kvquant": Study("Quantized chunk KV (fp16 / int8 / int4)", "Quantized KV", "ragcache bench kvquant"),
    "kvquant_items3-5": Study("Quantized chunk KV, items 3-5", "Quantized KV", "ragcache bench kvquant --start 3 --end 6"),
    "decode_check": Study("Quantized decode cache fidelity", "Quantized KV", "ragcache bench decode-check"),
    "semantic": Study("Semantic cache: hard pairs and QQP held-out", "Semantic cache", "ragcache bench semantic"),
    "semantic_hard": Study("Semantic cache: hard pairs (rerun)", "Semantic cache", "ragcache bench semantic"),
    "semantic_qqp": Study("Semantic cache: QQP pairs (previous release)", "Semantic cache", "ragcache bench semantic"),
    "semantic_pair_model_kb2_first_look": Study("Semantic cache: the default decision on the knowledge-base sets "
                                                "of ten domains, first look (before the two role checks)",
                                                "Semantic cache", "ragcache bench pair-model"),
    "semantic_pair_model": Study("Semantic cache: the default decision (pair model) against the guards alone, the verifier and plain cosine, held out",
                                 "Semantic cache", "ragcache bench pair-model"),
    "semantic_default_decider": Study("Semantic cache: guards alone, the verifier, and guards-or-verifier (not shipped)",
                                      "Semantic cache", "python -m benchmarks.semantic_decider"),
    "semantic_split": Study("Semantic cache: tuning and held-out parts of the hard pairs (split by kind, seed 32)",
                            "Semantic cache", "python -m benchmarks.semantic_split"),
    "semantic_pairs_baseline": Study("Semantic cache: per-pair decisions before the kind-by-kind changes (baseline)",
                                     "Semantic cache", "python -m benchmarks.semantic_split --baseline"),
    "semantic_qqp900_before_after": Study("Semantic cache: QQP held-out sample (900 pairs), before / after the guard changes",
                                          "Semantic cache",
                                          "a one-off run recorded in the JSON's `what` field (no script): "
                                          "SemanticCache() defaults and guards='verifier' on ragcache.app.verifier_data.qqp_splits"),
    "semantic_stream": Study("Semantic cache: QQP question stream, max_error", "Semantic cache",
                             "ragcache bench semantic --stream"),
    "verifier_ablation": Study("Learned verifier: guard ablation", "Semantic cache",
                               "python -m ragcache.app.fit_verifier --data ../shared/data --ablation "
                               "bench/results/verifier_ablation.json"),
    "verifier_interactions": Study("Learned verifier: interaction features", "Semantic cache",
                                   "python -m ragcache.app.verifier_interactions"),
    "lexicon": Study("WordNet lookup cost", "Semantic cache", "ragcache bench lexicon"),
    "stemmers": Study("Stemmers: own against nltk", "Semantic cache", "ragcache bench stemmers"),
    "provider": Study("Anthropic prompt caching: layout and breakpoints", "Providers", "ragcache bench provider"),
    "lint": Study("Volatile-text lint on real system prompts", "Providers", "ragcache bench lint"),
    "shared": Study("Shared stores: PostgreSQL + pgvector, Valkey", "Scaling out", "ragcache bench shared"),
    "ask_latency": Study("Repeated `ragcache ask`", "Command line", "ragcache bench ask"),
    "ask_rewordings": Study("`ragcache ask`: rewordings and near misses with real retrieval, own partition only "
                            "against the stored questions' retrieval", "Command line", "ragcache bench ask-rewordings"),
}
TOPICS = ("Local engine", "Quantized KV", "Semantic cache", "Providers", "Scaling out", "Command line")

CURRENT: tuple[str, ...] = (
    "prefix", "prefix_hits", "eval_decisive_50-131", "calibration_decisive_smollm2", "blend", "blend_peer",
    "kvquant", "decode_check",
    "semantic_pair_model", "semantic_default_decider", "semantic_split", "semantic_qqp900_before_after", "semantic",
    "semantic_stream",
    "verifier_ablation", "verifier_interactions", "lexicon", "stemmers",
    "provider", "lint", "shared", "ask_latency", "ask_rewordings", "workload",
)
"""The studies listed on the evaluation landing page: the shipped records and what the guides quote.
Every other study is development history (calibration plans and their inputs, item ranges merged into
a record, earlier releases) and is listed on the archive page."""


# --------------------------------------------------------------------------------------- headlines
def _license(name: str) -> dict:
    """The license figures of the first setting of a license record (:mod:`ragcache.engine.blend.license`)."""
    return _load(name)["settings"][0]["license"]


def _blend_row(rule: str) -> dict:
    return _load("blend")["summary"][rule]


def _kl_share(rule: str) -> float:
    s = _load("blend")["summary"]
    return s[rule]["tf_mean_kl"] / s["full reuse (r=0)"]["tf_mean_kl"]


def _pair(system: str, part: str, what: str) -> str:
    r = _load("semantic_pair_model")["sets"][part][system]
    if what == "precision":
        return f"{r['precision']:.3f}, {r['true_hits']} / {r['wrong_hits']}"
    return f"{r['recall']:.2f} recall, {r['wrong_hits']} wrong hits"


def _rewordings(split: str) -> str:
    s = _load("ask_rewordings")["summary"]
    p, n = s[f"{split}/paraphrase"], s[f"{split}/near_miss"]
    wrong = n["default"]["served"] + n["partition only"]["served"]
    return f"{p['default']['served']} / {p['partition only']['served']} of {p['directions']}, {wrong} wrong hits"


@dataclass(frozen=True)
class Headline:
    """One measured figure the README and the index quote: a label, the study, how to read it from
    the JSON, and its printed form."""

    label: str
    study: str
    value: Callable[[], Any]
    fmt: str


HEADLINES: tuple[Headline, ...] = (
    Headline("prefix-cache hit, 2,000 cached + 64 new tokens: TTFT speed-up", "prefix",
             lambda: _load("prefix")["ttft_ratio"], "{:.1f}x"),
    Headline("chunk reuse at the defaults (r = 0.3, licensed on the calibration prompts): CPU speed-up, "
             "held-out items 50-131 (median)",
             "eval_decisive_50-131", lambda: _license("eval_decisive_50-131")["median_cpu_speedup"], "{:.2f}x"),
    Headline("chunk reuse at the defaults: flips on decisive tokens, held-out items 50-131", "eval_decisive_50-131",
             lambda: "{decisive_flips} / {decisive_tokens}".format(**_license("eval_decisive_50-131")), "{}"),
    Headline("chunk reuse at the defaults: answer F1, blended / full prefill", "eval_decisive_50-131",
             lambda: "{f1:.3f} / {ref_f1:.3f}".format(**_license("eval_decisive_50-131")), "{}"),
    Headline("semantic cache at the defaults (the pair model behind the hard vetoes): held-out paraphrases over ten "
             "knowledge bases (90 pairs, both directions; 74 near misses, 12 in other languages; 8 wrong hits at the first "
             "look, before the two role checks)", "semantic_pair_model",
             lambda: _pair("default", "kb2_heldout", "recall"), "{}"),
    Headline("semantic cache, the guards alone (guards=\"rules\", the default before): the same pairs",
             "semantic_pair_model", lambda: _pair("rules", "kb2_heldout", "recall"), "{}"),
    Headline("semantic cache at the defaults: held-out hard pairs, both directions", "semantic_pair_model",
             lambda: _pair("default", "hard_heldout", "recall"), "{}"),
    Headline("semantic cache at the defaults: QQP held-out precision, true / wrong hits (noisy labels; the guards "
             "alone in brackets)", "semantic_pair_model",
             lambda: f"{_pair('default', 'qqp_heldout', 'precision')} ({_pair('rules', 'qqp_heldout', 'precision')})",
             "{}"),
    Headline("Anthropic layout + breakpoints: cost against uncached", "provider",
             lambda: _load("provider")["configs"]["ragcache"]["cost_ratio"], "{:.2f}x"),
    Headline("4 replicas, shared PostgreSQL + Valkey: answer hit rate", "shared",
             lambda: 100 * _load("shared")["replicas"]["shared"]["answer_hit_rate"], "{:.1f}%"),
    Headline("`ragcache ask` over a 30-note wiki, real retrieval: held-out rewordings served with the stored "
             "questions' retrieval / own partition only (30 pairs, both directions; 30 near-miss pairs, 5 in other languages)",
             "ask_rewordings", lambda: _rewordings("heldout"), "{}"),
    Headline("repeated `ragcache ask` (semantic hit), CPU seconds", "ask_latency",
             lambda: _load("ask_latency")["runs"]["ask repeat"]["cpu_s_median"], "{:.2f} s"),
)


def headline_values() -> list[tuple[str, str, str]]:
    """``(label, study, printed value)`` of every headline, read from the JSON now."""
    return [(h.label, h.study, h.fmt.format(h.value())) for h in HEADLINES]


# --------------------------------------------------------------------------------------- rendering
def _load(name: str) -> Any:
    return json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))


def _commit(path: Path) -> str:
    """The commit that last wrote ``path`` (``git log``), or "not recorded" outside a checkout."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%h (%cs)", "--", str(path)], cwd=ROOT,
                             capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return f"`{out.split()[0]}` {' '.join(out.split()[1:])}" if out else "not recorded"


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v).lower() if v is not None else "-"
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v):
        s = ", ".join(_fmt(x) for x in v)
        return s if len(s) <= 60 else f"{len(v)} values"
    return plain_roles(str(v)).replace("|", "/").replace("\n", " ")  # whole: the table cell wraps


def _flat(d: dict, prefix: str = "", depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and depth < 1 and all(not isinstance(x, (dict, list)) or isinstance(x, list)
                                                     for x in v.values()):
            out.update(_flat(v, key + ".", depth + 1))
        elif not isinstance(v, (dict,)) and not (isinstance(v, list) and v and isinstance(v[0], (dict, list))):
            out[key] = v
    return out


def _table(rows: list[tuple[str, dict]], first: str, max_cols: int = 24) -> list[str]:
    cols: list[str] = []
    for _, r in rows:
        cols += [c for c in r if c not in cols]
    cols = cols[:max_cols]
    if not cols:
        return []
    lines = [f"| {first} | " + " | ".join(c.replace("_", " ") for c in cols) + " |",
             "|---" * (len(cols) + 1) + "|"]
    lines += [f"| {_fmt(name)} | " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for name, r in rows]
    return lines + [""]


def _section(title: str, value: Any, level: int = 2) -> list[str]:
    """Markdown for one top-level value of a study: a table where the JSON holds one."""
    h = "#" * level
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        if len(value) > 40:
            return [f"{h} {title}", "", f"{len(value)} rows in the JSON (per item; not shown).", ""]
        return [f"{h} {title}", ""] + _table([(str(i), _flat(x)) for i, x in enumerate(value)], "#")
    if isinstance(value, dict) and value and all(isinstance(x, dict) for x in value.values()):
        flat = [(k, _flat(v)) for k, v in value.items()]
        if any(flat_row for _, flat_row in flat) and len(flat) <= 60:
            out = [f"{h} {title}", ""] + _table(flat, "")
            for k, v in value.items():  # one level deeper: dicts of dicts inside (e.g. sets -> guards -> threshold)
                for kk, vv in v.items():
                    if isinstance(vv, dict) and vv and all(isinstance(x, dict) for x in vv.values()) and level < 4:
                        out += _section(f"{title}: {k}: {kk}", vv, level + 1)
            return out
    if isinstance(value, dict) and value:
        flat = _flat(value)
        if flat:
            return [f"{h} {title}", "", "| field | value |", "|---|---|"] + [
                f"| {k} | {_fmt(v)} |" for k, v in flat.items()] + [""]
    return []


def _machine_and_load(d: dict) -> tuple[str, str]:
    machine = d.get("machine")
    if isinstance(machine, dict):
        m = ", ".join(f"{k} {_fmt(v)}" for k, v in machine.items() if "load" not in k)
    else:
        m = _fmt(machine) if machine else "not recorded"
    loads = {k: v for k, v in d.items() if "load" in k.lower()}
    if isinstance(machine, dict):
        loads.update({f"machine.{k}": v for k, v in machine.items() if "load" in k.lower()})
    runs = d.get("runs")
    if isinstance(runs, dict):
        loads.update({f"{k}: {kk}": vv for k, r in runs.items() if isinstance(r, dict)
                      for kk, vv in r.items() if "load" in kk.lower()})
    load = "; ".join(f"{k.replace('_', ' ')} {_fmt(v)}" for k, v in loads.items()) or "not recorded"
    return m, load


def _md(header: list[str], rows: list[list[Any]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
            + ["| " + " | ".join(_fmt(c) if not isinstance(c, str) else c for c in r) + " |" for r in rows] + [""])


def _blend_summary(d: dict) -> list[str]:
    s = d.get("summary") or {}
    r0 = s.get("full reuse (r=0)", {}).get("tf_mean_kl")
    rows = [[k, v.get("mean_cpu_s"), v.get("median_item_cpu_speedup"), v.get("mean_tokens_computed"),
             v.get("tf_top1_agreement"), v.get("tf_mean_kl"),
             (v["tf_mean_kl"] / r0) if r0 and v.get("tf_mean_kl") is not None else None]
            for k, v in s.items() if isinstance(v, dict)]
    return _md(["method", "CPU s (mean)", "CPU speed-up (median item)", "tokens computed", "teacher-forced top-1",
                "teacher-forced mean KL", "KL / full reuse's"], rows)


def _semantic_summary(d: dict) -> list[str]:
    out: list[str] = []
    for set_name, st in (d.get("sets") or {}).items():
        rows = [[f"plain cosine >= {t}", r["precision"], r["recall"]] for t, r in (st.get("plain_cosine") or {}).items()]
        rows += [[f"guards, cos >= {t}" + (" (default)" if t == "0.94" else ""), r["precision"], r["recall"]]
                 for t, r in (st.get("guards") or {}).items()]
        v = st.get("verifier") or {}
        if "precision" in v:
            rows.append([f"learned verifier, gate {v.get('gate')}, score >= {v.get('threshold')}", v["precision"],
                         v["recall"]])
        for k, r in ((st.get("gptcache") or {}).get("results") or {}).items():
            rows.append([f"GPTCache {k}", r["precision"], r["recall"]])
        out += [f"### {set_name} ({st.get('n')} pairs, {st.get('same')} labelled same)", ""]
        out += _md(["system", "precision", "recall"], rows)
    return out


def _provider_summary(d: dict) -> list[str]:
    rows = [[k, v.get("read_share"), v.get("write_share"), v.get("uncached_share"), v.get("read_share_from_request_2"),
             v.get("cost_ratio")] for k, v in (d.get("configs") or {}).items()]
    return _md(["config", "read", "written", "uncached", "read from request 2 on", "cost vs uncached"], rows)


CHECK_INTRO = ("A license is decided on the calibration prompts, as the rule says "
               "([the record](calibration_decisive_smollm2.md), [the plan](calibration_plan_decisive_settings.md)); "
               "this page is a check of the licensed setting on held-out items, never used to choose. Its last "
               "column is the check's verdict by the same four figures: within the rule, or where it falls "
               "outside it. The plot, drawn by the benchmark, labels a setting outside the rule \"refused\": on "
               "this page that is the check's verdict, not the license.")
"""What an evaluation page (``eval_*``) says before its table."""


def _check_verdict(lic: dict) -> str:
    """An evaluation's verdict on one setting: ``within the rule`` or ``outside the rule: <figures>``."""
    if lic["licensed"]:
        return "within the rule"
    return "outside the rule: " + ", ".join(lic["failed"]) + (
        f" (upper bound {100 * lic['decisive_flip_upper']:.2f}%)" if "decisive flips" in lic["failed"] else "")


def _check_summary(d: dict) -> list[str]:
    """An evaluation of a licensed setting on held-out items: the license rule's figures as a check."""
    return _license_summary(d, check=True)


def _license_summary(d: dict, *, check: bool = False) -> list[str]:
    """The license rule's four figures per setting (records of ``ragcache calibrate --plan`` under the rule);
    ``check``: an evaluation on held-out items, whose last column is the check's verdict, not a license."""
    rows = [r for r in d.get("settings", []) if "license" in r]
    if not rows:
        return []
    verdict = _check_verdict if check else (lambda lic: "yes" if lic["licensed"] else "no: " + ", ".join(lic["failed"]))
    out = ([CHECK_INTRO, ""] if check else []) + _md(
              ["setting", "decisive flips", "upper bound (confidence)", "flips at m >= 3", "F1 blend / full",
               "median CPU speed-up", "all-token agreement", "mean KL", "check" if check else "licensed"],
              [[r["name"], f"{r['license']['decisive_flips']} / {r['license']['decisive_tokens']}",
                f"{100 * r['license']['decisive_flip_upper']:.2f}% ({r['license']['confidence']:.4g})",
                f"{r['license']['large_flips']} / {r['license']['large_tokens']}",
                f"{r['license']['f1']:.3f} / {r['license']['ref_f1']:.3f}",
                f"{r['license']['median_cpu_speedup']:.2f}x", f"{r['pooled_top1_agreement']:.3f}",
                f"{r['mean_kl']:.4f}", verdict(r["license"])]
               for r in rows])
    y = d.get("yardstick")
    if y:
        out += ["", f"Yardstick, bfloat16 against float32 full prefill on {y['prompts']} of these prompts: "
                    f"{y['flips']} of {y['tokens']} answer tokens flip ({100 * y['flip_rate']:.2f}%), "
                    f"{y['decisive_flips']} of {y['decisive_tokens']} decisive ({100 * y['decisive_flip_rate']:.2f}%)."]
    return out + [""]


def _workload_summary(d: dict) -> list[str]:
    """Per regime and configuration: CPU, latency, reuse and what the chunk store held (``ragcache bench workload``)."""
    rows = [[regime, config, m.get("total_cpu_s"), m.get("ttft_p50_s"), m.get("ttft_p95_s"), m.get("e2e_p50_s"),
             m.get("e2e_p95_s"), m.get("prefill_reused_share"), m.get("chunks_stored"), m.get("chunks_read_again")]
            for regime, r in (d.get("regimes") or {}).items() for config, m in (r.get("configs") or {}).items()]
    out = _md(["regime", "configuration", "CPU s", "TTFT p50 s", "TTFT p95 s", "end-to-end p50 s", "end-to-end p95 s",
               "prefill reused", "chunks stored", "chunks read again"], rows)
    for key, v in (d.get("targets") or {}).items():
        out += [f"- target {key.replace('_', ' ')}: " + ", ".join(f"{k.replace('_', ' ')} {_fmt(x)}" for k, x in v.items())]
    return out + [""]


SUMMARIES: dict[str, Callable[[dict], list[str]]] = {
    **{n: _license_summary for n in ("calibration_decisive_smollm2", "calibration_decisive_0-24",
                                     "calibration_decisive_25-49")},
    **{n: _check_summary for n in ("eval_decisive_50-131", "eval_decisive_50-90", "eval_decisive_91-131")},
    **{n: _blend_summary for n in ("blend", "blend_items50-57", "blend_items58-83", "blend_items84-109",
                                   "blend_cacheblend_v1", "blend_dev", "blend_items30-39")},
    "semantic": _semantic_summary, "semantic_hard": _semantic_summary, "provider": _provider_summary,
    "workload": _workload_summary,
}
"""Hand-picked columns shown first for the studies the guides quote; the full data follows."""


def study_page(name: str) -> str:
    """The Markdown page of study ``name`` (``bench/results/<name>.json``)."""
    d = _load(name)
    study = STUDIES.get(name, Study(name.replace("_", " "), "Other", "not recorded"))
    path = RESULTS / f"{name}.json"
    command = d.get("command") if isinstance(d, dict) and isinstance(d.get("command"), str) else study.command
    machine, load = _machine_and_load(d) if isinstance(d, dict) else ("not recorded", "not recorded")
    out = [f"# {study.title}", "",
           "Generated from the data at build time; do not edit (docs/gen_eval.py).", "",
           "| field | value |", "|---|---|",
           f"| command | `{command}` |",
           f"| data file | `bench/results/{name}.json` |",
           f"| commit | {_commit(path)} |",
           f"| machine | {machine} |",
           f"| load average | {load} |", ""]
    if plot_of(name):
        out += [f"![Plot of {_alt(study.title)}]({name}.png)", "",
                f"The plot `bench/results/{name}.png`, drawn by the benchmark from this data.", ""]
    if not isinstance(d, dict):
        return "\n".join(out + _section("Data", d))
    if name in SUMMARIES:
        out += ["## Summary", ""] + SUMMARIES[name](d)
    notes = [f"{k}: {v}" for k, v in d.items() if k in ("note", "notes") and isinstance(v, str)]
    out += [f"> {n}" for n in notes] + ([""] if notes else [])
    scalars = {k: v for k, v in d.items() if not isinstance(v, (dict, list)) or
               (isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v))}
    scalars = {k: v for k, v in scalars.items() if k not in ("machine", "command", "note") and "load" not in k.lower()}
    if scalars:
        out += ["## Settings", "", "| field | value |", "|---|---|"]
        out += [f"| {k} | {_fmt(v)} |" for k, v in scalars.items()] + [""]
    for k, v in d.items():
        if k == "machine":
            continue
        if isinstance(v, (dict, list)) and k not in scalars:
            out += _section(k.replace("_", " "), v)
    return "\n".join(out)


def plot_of(name: str) -> Path | None:
    """The study's plot ``bench/results/<name>.png``, or None when the benchmark drew none."""
    png = RESULTS / f"{name}.png"
    return png if png.is_file() else None


def _alt(title: str) -> str:
    return title.replace("`", "").replace("[", "(").replace("]", ")")


def _studies() -> list[str]:
    return sorted(p.stem for p in RESULTS.glob("*.json"))


def _title(name: str) -> str:
    return STUDIES[name].title if name in STUDIES else name


def _by_topic(names: list[str], level: str, order: tuple[str, ...]) -> list[str]:
    """A list of links per topic, each topic's studies in ``order`` (unknown names last, by name)."""
    out: list[str] = []
    rank = {n: i for i, n in enumerate(order)}
    names = sorted(names, key=lambda n: (rank.get(n, len(rank)), n))
    for topic in (*TOPICS, "Other"):
        members = [n for n in names if STUDIES.get(n, Study("", "Other", "")).topic == topic]
        if members:
            out += [f"{level} {topic}", ""] + [f"- [{_title(n)}]({n}.md)" + (" (plot)" if plot_of(n) else "")
                                           for n in members] + [""]
    return out


def index_page() -> str:
    """``evaluation/index.md``: the headline figures, each under its study's link and plot, then the
    current studies by topic and a pointer to the archive."""
    out = ["# Evaluation", "",
           "Every page here is generated at build time from a benchmark's JSON under `bench/results/`,",
           "headed by the command that produced it, the commit that last wrote it, and the machine and its",
           "load as recorded. Benchmarks are scripts (`ragcache bench NAME`): each prints a table, writes",
           "the JSON and draws a PNG, shown on the study's page. Timings on the project's shared 2-core CPU",
           "are indicative; the load average is part of every result.", "",
           "## Headline figures", "",
           "The figures the README quotes, read from the data at build time, under the study that measured them.", ""]
    values = headline_values()
    for study in dict.fromkeys(s for _, s, _ in values):
        out += [f"### [{_title(study)}]({study}.md)", "", "| measured | value |", "|---|---|"]
        out += [f"| {label} | {value} |" for label, s, value in values if s == study] + [""]
        if plot_of(study):
            out += [f"[![Plot of {_alt(_title(study))}]({study}.png){{ .eval-thumb }}]({study}.md)", ""]
    current = [n for n in _studies() if n in CURRENT]
    archived = [n for n in _studies() if n not in CURRENT]
    out += ["## Current studies", "",
            "The shipped records and the studies the guides quote; \"(plot)\" marks a page with a plot.", ""]
    out += _by_topic(current, "###", CURRENT)
    out += ["## Development archive", "",
            f"{len(archived)} more studies record how the settings were reached: calibration plans and their",
            "inputs, runs over item ranges that were merged into the records above, and earlier releases.",
            "They are listed in the [development archive](archive.md).", ""]
    return "\n".join(out)


def archive_page() -> str:
    """``evaluation/archive.md``: every study not in ``CURRENT``, by topic."""
    archived = [n for n in _studies() if n not in CURRENT]
    out = ["# Development archive", "",
           "How the shipped settings were reached: calibration plans fixed before a run (inputs), runs over",
           "item ranges merged into a record, development-item studies and earlier releases. Each page is",
           "generated from its JSON like the [current studies](index.md); the shipped records are there.", ""]
    return "\n".join(out + _by_topic(archived, "##", tuple(STUDIES)))


def main() -> None:
    import mkdocs_gen_files

    with mkdocs_gen_files.open("evaluation/index.md", "w") as f:
        f.write(index_page())
    with mkdocs_gen_files.open("evaluation/archive.md", "w") as f:
        f.write(archive_page())
    for name in _studies():
        with mkdocs_gen_files.open(f"evaluation/{name}.md", "w") as f:
            f.write(study_page(name))
        png = plot_of(name)
        if png:  # into the site next to the page, so the page shows it
            with mkdocs_gen_files.open(f"evaluation/{png.name}", "wb") as f:
                f.write(png.read_bytes())


if __name__ == "<run_path>":  # run by mkdocs-gen-files at build time only
    main()
