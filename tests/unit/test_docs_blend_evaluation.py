"""Issue 50, item 7: the evaluation page of the shipped blend setting says the license is decided on the
calibration prompts and shows its own figures as a check with its own verdict wording; the README puts
decisive beside decisive (bfloat16's decisive flips, not its all-token rate) with numbers read from the JSON,
and gives the demo's time as a range with its load."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen_eval():
    return runpy.run_path(str(ROOT / "docs" / "gen_eval.py"), run_name="gen_eval")


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("name", ["eval_decisive_50-131", "eval_decisive_50-90", "eval_decisive_91-131"])
def test_an_evaluation_page_is_a_check_not_a_license(gen_eval, name):
    page = gen_eval["study_page"](name)
    assert "A license is decided on the calibration prompts" in page
    assert "| check |" in page and "| licensed |" not in page and "| no: " not in page
    data = json.loads((ROOT / "bench" / "results" / f"{name}.json").read_text())
    for r in (r for r in data["settings"] if "license" in r):
        want = "within the rule" if r["license"]["licensed"] else "outside the rule: "
        assert want in page


@pytest.mark.parametrize("name", ["calibration_decisive_smollm2", "calibration_decisive_0-24"])
def test_a_calibration_page_still_licenses(gen_eval, name):
    page = gen_eval["study_page"](name)
    assert "| licensed |" in page and "A license is decided on the calibration prompts" not in page


def test_the_readme_compares_decisive_with_decisive_from_the_json():
    readme = _flat((ROOT / "README.md").read_text())
    ev = json.loads((ROOT / "bench" / "results" / "eval_decisive_50-131.json").read_text())
    cal = json.loads((ROOT / "bench" / "results" / "calibration_decisive_smollm2.json").read_text())
    shipped = next(r["license"] for r in ev["settings"] if "license" in r)
    licensed = next(r["license"] for r in cal["settings"] if r.get("license", {}).get("licensed"))
    y = ev["yardstick"]
    assert f"flipped {shipped['decisive_flips']} of {shipped['decisive_tokens']:,} decisive tokens" in readme
    assert f"{100 * shipped['decisive_flip_upper']:.2f}%, outside the rule's 1%" in readme
    assert f"{licensed['decisive_flips']} of {licensed['decisive_tokens']:,} decisive tokens flipped" in readme
    assert f"{100 * licensed['decisive_flip_upper']:.2f}%" in readme
    assert (f"bfloat16 against float32 flipped {y['decisive_flips']} of the same {y['decisive_tokens']:,} decisive tokens"
            f" ({y['flips']} of all {y['tokens']:,}, {100 * y['flip_rate']:.1f}%)") in readme
    assert "where bfloat16 flips 1.9% of all tokens" not in readme


def test_the_demo_time_is_a_range_with_its_load():
    for text in (_flat((ROOT / "README.md").read_text()), _flat((ROOT / "docs/getting-started/demo.md").read_text())):
        assert re.search(r"took \d+-\d+ s\b", text) and re.search(r"load average [\d.]+-[\d.]+", text), \
            "the demo's time is given as a range with its load"
