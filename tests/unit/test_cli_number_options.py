"""Every bounded float option of the CLI names NaN and out-of-range values for what they are."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ragcache.app.cli import app

runner = CliRunner()

OPTIONS = [
    (["ask", "hi", "--threshold"], "[-1, 1]", "cosine similarity"),
    (["demo", "--recompute-ratio"], "[0, 1]", "share of the prompt's tokens"),
    (["calibrate", "--max-decisive-flip-rate"], "[0, 1]", "share of decisive tokens"),
    (["calibrate", "--max-f1-drop"], "[0, 1]", "an F1 difference"),
    (["calibrate", "--alpha"], "[0, 1]", "a family-wise error rate"),
    (["bench", "blend-peer", "--ratio"], "[0, 1]", "share of the prompt's tokens"),
]


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1.5", "-2"])
@pytest.mark.parametrize(("argv", "span", "what"), OPTIONS)
def test_a_bounded_number_names_its_range(argv, span, what, value):
    r = runner.invoke(app, [*argv, value])
    assert r.exit_code == 2, r.output
    out = r.output + (r.stderr if r.stderr_bytes is not None else "")
    assert f"is not a number in {span}" in out and what in out, out
    assert "less than or equal" not in out and "greater than" not in out


def test_a_value_in_range_passes_the_check():
    from ragcache.app.argv import number_in

    check = number_in(-1.0, 1.0, "a cosine similarity")
    assert check(None) is None and check(-1.0) == -1.0 and check(1.0) == 1.0 and check(0.5) == 0.5
