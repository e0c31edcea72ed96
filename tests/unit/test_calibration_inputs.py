"""Bad inputs to the Wilson bound (ragcache.engine.blend.calibration.agreement_lower_bound, still the decode
cache check's gate): a confidence below 0.5 would loosen the gate it tightens. The blend calibration's own
options are checked in test_calibrate_license_path.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragcache.engine.blend.calibration import agreement_lower_bound, check_confidence


@pytest.mark.parametrize("confidence", [0.01, 0.3, 0.4999, -0.1, 1.0, 1.5, math.nan, math.inf, "0.95", None, True])
def test_confidence_outside_0_or_half_to_one_is_refused(confidence):
    with pytest.raises(ValueError, match=r"confidence must be in \[0.5, 1\) .*or 0"):
        agreement_lower_bound(0.9, 100, confidence)
    with pytest.raises(ValueError, match="confidence must be"):
        check_confidence(confidence)


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
