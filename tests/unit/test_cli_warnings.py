"""The CLI prints ragcache's own warnings as one ``warning:`` line, without the source path and code line
Python's default format adds (the user of a command did not write that code); others keep Python's."""

import warnings

import pytest
from typer.testing import CliRunner

from cli_doubles import fixed_answer, home, tiny_dir, write_notes  # noqa: F401 - fixtures
from ragcache.app.cli import app
from ragcache.app.output import show_own_warnings
from ragcache.providers.anthropic import PromptCacheWarning
from ragcache.semantic.decision.checks import LowThresholdWarning


def test_a_low_threshold_warning_is_one_line_through_ask(home, tmp_path, tiny_dir, monkeypatch):
    fixed_answer(monkeypatch, "Nightly.")
    notes = write_notes(tmp_path / "notes")
    r = CliRunner().invoke(app, ["ask", "--docs", str(notes), "--model", str(tiny_dir), "--threshold", "0.3", "--allow-low-threshold",
                                 "When do backups run?"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    lines = [x for x in r.output.splitlines() if "0.3" in x and "threshold" in x]
    assert lines and all(x.startswith("warning: ") for x in lines), r.output
    assert ".py:" not in r.output and "warn_at_caller" not in r.output and "LowThresholdWarning" not in r.output


@pytest.mark.parametrize("category,own", [(PromptCacheWarning, True), (LowThresholdWarning, True),
                                          (UserWarning, False), (DeprecationWarning, False)])
def test_own_categories_only(capsys, category, own):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        show_own_warnings()
        show_own_warnings()  # installed once
        warnings.warn_explicit("the prefix is 800 tokens, below the 1,024-token minimum", category, "/x/y.py", 7)
    err = capsys.readouterr().err
    if own:
        assert err == "warning: the prefix is 800 tokens, below the 1,024-token minimum\n"
    else:
        assert "warning: the prefix" not in err  # left to the handler before (here pytest's record)
