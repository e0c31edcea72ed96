"""Every guard's refusal reason is the same in every process: it names pairs in a fixed order, not in the order of
a set, which Python salts per process (``PYTHONHASHSEED``). A reason that changes between runs makes logs,
``--json`` output and the miss explanations differ for the same two questions."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PAIRS = [("What do fathers get for parental leave?", "What do mothers get for parental leave?"),
         ("How do I enable the nightly exports quickly?", "How do I disable the nightly imports quickly?"),
         ("Which regions allow early withdrawals?", "Which regions forbid late deposits?"),
         ("Does strftime %Y differ from %M in Python?", "Does strftime %y differ from %m in Python?"),
         ("Who is the customer's account manager's boss?", "Who is the account manager's customer's boss?")]

SCRIPT = """
import json, sys
from ragcache.semantic.decision.guards import GUARDS
guards = [k.guard() for k in GUARDS if k.name != "verifier"]
pairs = json.loads(sys.argv[1])
print(json.dumps([[g.name, g.check(q, c)] for q, c in pairs for g in guards]))
"""


@pytest.mark.parametrize("q,c", PAIRS)
def test_every_guards_reason_is_the_same_under_every_hash_seed(q, c):
    import json

    seen = set()
    for seed in ("0", "1", "2", "17", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps([[q, c]])], env=env, capture_output=True,
                             text=True, check=True, timeout=120)
        seen.add(out.stdout.strip())
    assert len(seen) == 1, seen
    assert any(reason for _, reason in json.loads(seen.pop()))  # the pair is refused, by one named reason
