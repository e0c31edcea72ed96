"""The default-decision benchmark's scoring and its threshold rule (no model)."""

from benchmarks.semantic_decider import MARGIN, choose, scores

ROWS = [{"same": True}, {"same": True}, {"same": False}, {"same": False}]
GOT = [(True, 0.0, 0.99, 0.0), (False, 0.9, 0.8, 0.9), (False, 0.85, 0.8, 0.85), (False, 0.0, 0.5, 0.95)]


def test_scores_count_the_union_at_a_threshold():
    assert scores(ROWS, GOT, [0, 1, 2, 3], None)["true_hits"] == 1  # the guards alone
    u = scores(ROWS, GOT, [0, 1, 2, 3], 0.8)
    assert (u["true_hits"], u["wrong_hits"], u["precision"], u["recall"]) == (2, 1, 2 / 3, 1.0)
    assert scores(ROWS, GOT, [0, 1, 2, 3], 0.88)["wrong_hits"] == 0
    alone = scores(ROWS, GOT, [0, 1, 2, 3], 0.88, alone=True)  # the verifier's own score, guards ignored
    assert (alone["true_hits"], alone["wrong_hits"]) == (1, 1)


def _grid(precisions, wrong=None):
    wrong = wrong or {}
    return {f"{t:.2f}": {"qqp_choose": {"precision": p}, "hard_tuning": {"wrong_hits": wrong.get(t, 0)}}
            for t, p in precisions.items()}


def test_the_rule_takes_the_lowest_threshold_that_holds_from_there_up():
    base = {"guards": {"qqp_choose": {"precision": 0.90}}}
    ok = 0.90 + MARGIN
    assert choose({**base, "grid": _grid({0.80: ok, 0.81: ok - 0.02, 0.82: ok, 0.83: ok + 0.01})}) == 0.82
    assert choose({**base, "grid": _grid({0.80: ok, 0.81: ok})}) == 0.80
    assert choose({**base, "grid": _grid({0.80: ok, 0.81: ok}, wrong={0.80: 1})}) == 0.81  # a hard wrong hit
    assert choose({**base, "grid": _grid({0.80: ok, 0.81: ok - 0.02})}) is None
