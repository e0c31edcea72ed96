"""Bad inputs to the calibration gate (ragcache.engine.blend.calibration): a confidence below 0.5 would
loosen the gate it tightens, and every bad option is named before any model or data is loaded."""

from __future__ import annotations

import math

import numpy as np
import pytest
from typer.testing import CliRunner

from ragcache.engine.blend.calibration import agreement_lower_bound, calibrate, check_options

GOOD = dict(ratios=[0.15], min_agreement=0.95, max_ratio=0.5, answer_tokens=8, confidence=0.95)


@pytest.mark.parametrize("confidence", [0.01, 0.3, 0.4999, -0.1, 1.0, 1.5, math.nan, math.inf, "0.95", None, True])
def test_confidence_outside_0_or_half_to_one_is_refused(confidence):
    with pytest.raises(ValueError, match=r"confidence must be in \[0.5, 1\) .*or 0"):
        agreement_lower_bound(0.9, 100, confidence)
    with pytest.raises(ValueError, match="confidence must be"):
        check_options(**{**GOOD, "confidence": confidence})


@pytest.mark.parametrize("confidence", [0, 0.0, 0.5, 0.8, 0.95, 0.999])
def test_accepted_confidences_never_raise_the_observed_share(confidence):
    for p, n in ((0.9, 100), (0.94, 1000), (1.0, 12), (0.0, 5)):
        assert agreement_lower_bound(p, n, confidence) <= p
    assert agreement_lower_bound(0.9, np.int64(100), confidence) <= 0.9


@pytest.mark.parametrize("agreement", [1.5, -0.1, math.nan, "0.9", None])
def test_agreement_outside_0_1_is_refused(agreement):
    with pytest.raises(ValueError, match=r"agreement must be a share in \[0, 1\]"):
        agreement_lower_bound(agreement, 10)


@pytest.mark.parametrize("n", [-1, 10.5, math.nan, "10", None])
def test_trials_that_are_not_a_count_are_refused(n):
    with pytest.raises(ValueError, match="n must be a count of trials"):
        agreement_lower_bound(0.9, n)


@pytest.mark.parametrize("bad, match", [
    (dict(max_ratio=math.nan), "max_ratio must be in"), (dict(max_ratio=-0.1), "max_ratio must be in"),
    (dict(max_ratio=1.5), "max_ratio must be in"), (dict(min_agreement=math.nan), "min_agreement must be in"),
    (dict(min_agreement=0), "min_agreement must be in"), (dict(answer_tokens=2.5), "answer_tokens must be"),
    (dict(answer_tokens=0), "answer_tokens must be"), (dict(ratios=["x"]), "ratios must be numbers"),
    (dict(ratios=[math.nan]), "ratios must be in"), (dict(ratios=[]), "ratios must be in"),
])
def test_bad_options_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        check_options(**{**GOOD, **bad})


def test_calibrate_refuses_before_any_work():
    class NoEngine:  # any attribute access would be work; the options are checked first
        def __getattr__(self, name):
            raise AssertionError(f"engine.{name} used before the options were checked")

    with pytest.raises(ValueError, match="confidence must be"):
        calibrate(NoEngine(), ["prompt"], confidence=0.3, save=False)
    with pytest.raises(ValueError, match="max_ratio must be"):
        calibrate(NoEngine(), ["prompt"], max_ratio=math.nan, save=False)


@pytest.mark.parametrize("args, match", [
    (["--confidence", "0.3"], r"confidence must be in \[0.5, 1\)"),
    (["--ratios", "0.1,abc"], "ratios must be numbers"),
    (["--ratios", "0.1,2"], r"ratios must be in \(0, 1\]"),
])
def test_cli_names_bad_options_before_loading_data_or_model(tmp_path, args, match):
    from ragcache.app.cli import app

    res = CliRunner().invoke(app, ["calibrate", "--data", str(tmp_path / "missing.json"), "--model",
                                   str(tmp_path / "no-model"), *args])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert __import__("re").search(match, res.output.replace("\n", " ")), res.output
