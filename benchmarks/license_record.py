"""Plan 3's record and evaluation (issue 40): merge the calibration parts, ship the record, merge the evaluation.

    python -m benchmarks.license_record merge      # calibration parts -> calibration_decisive_smollm2.json + package
    python -m benchmarks.license_record evaluate   # evaluation parts -> eval_decisive_50-131.json

``merge`` follows ``bench/results/calibration_plan_decisive.md``: the 100 prompts of the two main parts, then the
floor parts (variant 2 of the development questions, 10 items at a time, in order) only while the prompts merged
so far hold fewer than 1,500 decisive tokens (counted on the full prefill's margins alone); a part that was run but
is not needed is left out and named. The merged record is written to
``bench/results/calibration_decisive_smollm2.json`` and to the package
(``ragcache/engine/data/calibration/<fingerprint>.json``), whatever it licenses. Both commands draw the PNG
(:mod:`benchmarks.settings_plot`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from ragcache.atomic import atomic_write_json

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PLAN = RESULTS / "calibration_plan_decisive_settings.json"
MAIN_PARTS = [RESULTS / "calibration_decisive_0-24.json", RESULTS / "calibration_decisive_25-49.json"]
FLOOR = [[RESULTS / f"calibration_decisive_floor_{s}-{s + 4}.json", RESULTS / f"calibration_decisive_floor_{s + 5}-{s + 9}.json"]
         for s in range(0, 50, 10)]  # each batch of 10 questions run as two processes of 5
DECISIVE_FLOOR = 1500
EVAL_PLAN = RESULTS / "eval_decisive_plan.json"
EVAL_PARTS = [RESULTS / "eval_decisive_50-90.json", RESULTS / "eval_decisive_91-131.json"]


def decisive_tokens(part: Path, margin: float = 1.0) -> int:
    """Decisive tokens (full prefill's top-1 leads top-2 by >= ``margin``) over a part's prompts."""
    d = json.loads(part.read_text())
    rows = d.get("measured") or d.get("settings")
    return sum(sum(1 for m in p["ref_margin"] if m >= margin) for p in rows[0]["per_prompt"])


def parts_to_merge() -> tuple[list[Path], list[str]]:
    """The parts plan 3 merges, and notes on what was left out.

    Raises:
        ValueError: a main part missing or incomplete, or the floor not reached by the floor parts present.
    """
    for p in MAIN_PARTS:
        if not p.exists() or not json.loads(p.read_text()).get("complete"):
            raise ValueError(f"{p.name} is missing or partial: a partial run licenses nothing")
    parts, total, notes = list(MAIN_PARTS), sum(decisive_tokens(p) for p in MAIN_PARTS), []
    for batch in FLOOR:
        if total >= DECISIVE_FLOOR:
            notes += [f"{p.name} not merged: the floor was already met ({total} decisive tokens)" for p in batch
                      if p.exists()]
            continue
        for p in batch:
            if not p.exists() or not json.loads(p.read_text()).get("complete"):
                raise ValueError(f"{total} decisive tokens < {DECISIVE_FLOOR} and {p.name} is missing or partial")
        parts += batch
        total += sum(decisive_tokens(p) for p in batch)
    return parts, notes + [f"{total} decisive tokens merged"]


def merge_record() -> Path:
    from ragcache.app.calibrate_settings import merge
    from ragcache.engine.blend.calibration import PACKAGED_DIR

    from benchmarks.settings_plot import main as draw

    parts, notes = parts_to_merge()
    out = RESULTS / "calibration_decisive_smollm2.json"
    cal = merge(PLAN, parts, json_path=out, console=Console(width=200))
    cal.note += "; " + "; ".join(notes)
    atomic_write_json(out, cal.to_dict(), indent=1)
    packaged = PACKAGED_DIR / f"{cal.fingerprint}.json"
    for old in PACKAGED_DIR.glob("*.json"):  # one record per model: this plan's replaces the last
        if old != packaged and json.loads(old.read_text()).get("fingerprint") == cal.fingerprint:
            old.unlink()
    atomic_write_json(packaged, cal.to_dict())
    draw(str(out))
    print(cal.verdict())
    return out


def evaluate() -> Path:
    from ragcache.app.calibrate_settings import merge

    from benchmarks.settings_plot import main as draw

    out = RESULTS / "eval_decisive_50-131.json"
    cal = merge(EVAL_PLAN, EVAL_PARTS, json_path=out, console=Console(width=200))
    draw(str(out))
    return out


if __name__ == "__main__":  # pragma: no cover
    {"merge": merge_record, "evaluate": evaluate}[sys.argv[1]]()
