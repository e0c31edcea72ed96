"""The README and the docs site stay true to the code and the data (issue 30).

The code blocks themselves are run by Sybil (the repository's root ``conftest.py``); these tests check
what the blocks cannot: the README's size and Quick start, its measured figures against the benchmark
JSON, and the generated reference and evaluation pages.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def gen_eval():
    return runpy.run_path(str(ROOT / "docs" / "gen_eval.py"), run_name="gen_eval")


@pytest.fixture(scope="module")
def gen_reference():
    return runpy.run_path(str(ROOT / "docs" / "gen_reference.py"), run_name="gen_reference")


def test_readme_is_a_landing_page():
    assert len(README.splitlines()) <= 150
    assert "mkdocs serve" in README


def test_quick_start_second_command_is_what_ci_runs():
    """.ci/run runs the README's second Quick start command verbatim; both commands keep their form."""
    commands = [line for line in README.splitlines() if line.startswith("pip install torch==")]
    assert len(commands) == 2
    assert commands[0].endswith("&& ragcache demo") and '".[all]"' in commands[0]
    assert commands[1].endswith("&& python -m pytest") and '".[dev]"' in commands[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci.splitlines()
    assert "mkdocs build --strict" in ci


def test_readme_figures_are_the_measured_ones(gen_eval):
    """Every headline figure in the README's table is the value in its study's JSON, today."""
    values = gen_eval["headline_values"]()
    assert len(values) >= 6
    for label, study, value in values:
        row = f"| {label} | {value} | [{study}](bench/results/{study}.json) |"
        assert row in README, f"README's figure for {label!r} is not {value} (bench/results/{study}.json): update it"


def test_readme_links_exist():
    for target in re.findall(r"\]\(((?!https?://)[^)#]+)(?:#[^)]*)?\)", README):
        assert (ROOT / target).exists(), f"README links to missing {target}"


def test_every_study_has_a_page_with_its_provenance(gen_eval):
    names = sorted(p.stem for p in (ROOT / "bench" / "results").glob("*.json"))
    assert names
    unregistered = [n for n in names if n not in gen_eval["STUDIES"]]
    assert not unregistered, f"add these studies to docs/gen_eval.py STUDIES (title, topic, command): {unregistered}"
    for name in names:
        page = gen_eval["study_page"](name)
        for field in ("| command | `", "| commit |", "| machine |", "| load average |"):
            assert field in page, (name, field)
    listed = gen_eval["index_page"]() + gen_eval["archive_page"]()  # current studies, then the archive
    assert all(f"]({n}.md)" in listed for n in names)


def test_missing_provenance_says_not_recorded(gen_eval):
    page = gen_eval["study_page"]("verifier_ablation")  # records neither machine nor load
    assert "| machine | not recorded |" in page and "| load average | not recorded |" in page


def test_cli_reference_has_every_command_and_ask_flag(gen_reference):
    import typer

    from ragcache.app.cli import app

    page = gen_reference["cli_page"]()
    root = typer.main.get_command(app)
    for name in root.list_commands(root.context_class(root)):
        assert f"`ragcache {name}`" in page
    for flag in ("--docs", "--json", "--refresh", "--no-cache", "--threshold", "--system", "--max-new-tokens",
                 "--top-k", "--cache-truncated"):
        assert flag in page.split("`ragcache ask`", 1)[1].split("`ragcache serve`", 1)[0], flag


def test_api_reference_names_every_public_name(gen_reference):
    import ragcache

    page = gen_reference["api_page"]()
    for name, module in ragcache._EXPORTS.items():
        if not name.isupper():
            assert f"::: {module}.{name}" in page


def _resolve(dotted: str):
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def test_every_dotted_name_the_docs_cite_exists():
    """A `ragcache.x.y` / `langchain_ragcache.x` name in the README or a docs page (the "which function
    decides each fact" table among them) is a real module or attribute, so a rename cannot leave a
    page pointing at nothing."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    missing = []
    for page in pages:
        for name in set(re.findall(r"`((?:langchain_)?ragcache(?:\.[A-Za-z_]\w*)+)", page.read_text(encoding="utf-8"))):
            try:
                _resolve(name)
            except (ImportError, AttributeError):
                missing.append(f"{page.relative_to(ROOT)}: {name}")
    assert not missing, missing
