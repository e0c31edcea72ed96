"""The generated docs pages (issue 42): each study page shows its plot under a proper metadata table and
whole values; the evaluation landing page leads with the headline figures, each under its study's link
and plot, and the development studies move to the archive; the guards table is made from the guards
and every example in it is refused by its guard. The rendered site is checked in a browser by
``tests/integration/test_docs_site.py``."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


@pytest.fixture(scope="module")
def gen_eval():
    return runpy.run_path(str(ROOT / "docs" / "gen_eval.py"), run_name="gen_eval")


@pytest.fixture()
def gen_guards():  # per test: a test may change its GUARDS
    return runpy.run_path(str(ROOT / "docs" / "gen_guards.py"), run_name="gen_guards")


def _studies() -> list[str]:
    return sorted(p.stem for p in RESULTS.glob("*.json"))


def _links(page: str) -> list[str]:
    """The studies a page links to (not the index or the archive)."""
    return [n for n in re.findall(r"\]\(([^)]+)\.md\)", page) if n not in ("index", "archive")]


# ------------------------------------------------------------------------------------------ study pages
def test_study_page_shows_its_plot_under_a_field_value_table(gen_eval):
    with_plot = [n for n in _studies() if (RESULTS / f"{n}.png").is_file()]
    without = [n for n in _studies() if not (RESULTS / f"{n}.png").is_file()]
    assert with_plot and without
    for name in _studies():
        page = gen_eval["study_page"](name)
        lines = page.splitlines()
        first_table = lines.index("|---|---|") - 1
        assert lines[first_table] == "| field | value |", (name, lines[first_table])
        assert "| | |" not in lines and "Plot: `" not in page
        images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", page)
        assert images == ([f"{name}.png"] if name in with_plot else []), (name, images)


def test_long_values_are_shown_whole(gen_eval):
    """A study's rule (several hundred characters) is in its page whole, not cut with "..."."""
    for name, path in (("semantic_default_decider", ["rule"]), ("semantic_split", ["split", "rule"]),
                       ("semantic_qqp900_before_after", ["what"])):
        value = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
        for key in path:
            value = value[key]
        field = path[-1]
        assert len(value) > 200
        shown = gen_eval["plain_roles"](value)  # roles shown as code spans, the text otherwise whole
        assert "..." not in shown[-4:]
        row = f"| {field} | {shown.replace('|', '/').replace(chr(10), ' ')} |"
        assert row in gen_eval["study_page"](name).splitlines(), name


# ------------------------------------------------------------------------------------------ landing page
def test_landing_page_leads_with_the_headlines_and_their_plots(gen_eval):
    index = gen_eval["index_page"]()
    head, rest = index.split("## Current studies", 1)
    assert "## Headline figures" in head
    for label, study, value in gen_eval["headline_values"]():
        assert f"| {label} | {value} |" in head
        section = head.split(f"]({study}.md)", 1)[1].split("\n### ", 1)[0]
        assert f"| {label} | {value} |" in section, f"{label!r} is not under its study {study}"
        if (RESULTS / f"{study}.png").is_file():
            assert f"]({study}.png){{ .eval-thumb }}]({study}.md)" in section, f"{study}: no linked plot"


def test_development_studies_are_in_the_archive_only(gen_eval):
    current = set(gen_eval["CURRENT"])
    assert current <= set(_studies()), f"CURRENT names studies without data: {sorted(current - set(_studies()))}"
    headline_studies = {s for _, s, _ in gen_eval["headline_values"]()}
    assert headline_studies <= current
    index, archive = gen_eval["index_page"](), gen_eval["archive_page"]()
    listed = index.split("## Current studies", 1)[1]
    assert sorted(_links(listed)) == sorted(current)
    archived = _links(archive)
    assert sorted(archived + _links(listed)) == _studies(), "every study is listed once, current or archived"
    assert len(archived) >= 40
    assert all(n not in current for n in archived)
    assert {"calibration_plan_settings", "calibration_settings_0-24", "eval_settings_50-79"} <= set(archived)
    assert "](archive.md)" in index


# ------------------------------------------------------------------------------------------ guards table
def test_guards_table_has_every_guard_in_order_with_its_own_verdict(gen_guards):
    from ragcache.semantic.decision.guards import DIFFERENT_QUESTION, GUARD_REASONS, GuardSet

    table = gen_guards["guards_table"]()
    rows = [r for r in table.splitlines() if r.startswith('| <code class="guard-name">')]
    names = [re.search(r">(\w+)</code>", r).group(1) for r in rows]
    assert names == list(GUARD_REASONS)
    for name, row in zip(names, rows):
        assert row.endswith("| yes |" if name in DIFFERENT_QUESTION else "| no |"), row
        example = gen_guards["GUARDS"][name].example
        if example is not None:
            verdict = GuardSet.default().check(*example)
            assert verdict.reason == name
            assert f"`{verdict.detail.replace('|', chr(92) + '|')}`" in row


def test_an_example_its_guard_does_not_refuse_fails_the_table(gen_guards):
    doc = gen_guards["GUARDS"]["negation"]
    gen_guards["GUARDS"]["negation"] = type(doc)(doc.compares, ("Is the API rate limited?", "Is the API rate limited?"))
    with pytest.raises(ValueError, match="'negation' example is not refused by the 'negation' guard"):
        gen_guards["check_examples"]()


def test_a_guard_without_a_row_fails_the_table(gen_guards):
    del gen_guards["GUARDS"]["scope"]
    with pytest.raises(ValueError, match="must name exactly the guards"):
        gen_guards["guards_table"]()


def test_the_guide_holds_the_table_marker_once(gen_guards):
    guide = (ROOT / "docs" / gen_guards["PAGE"]).read_text(encoding="utf-8")
    filled = gen_guards["fill"](guide)
    assert gen_guards["MARKER"] not in filled and gen_guards["guards_table"]() in filled
    with pytest.raises(ValueError, match="exactly once"):
        gen_guards["fill"](guide.replace(gen_guards["MARKER"], ""))
