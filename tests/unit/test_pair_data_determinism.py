"""The pair model's made training data is the same in every process (not ordered by the hash seed)."""

from __future__ import annotations

import os
import subprocess
import sys

CODE = """
from ragcache.app.pair_data import synthetic_pairs
qs = ["How do I pay my bill monthly or weekly?", "Can I bring my child to the office in the morning?",
      "Is the report due daily or every hour?", "How do I enable the first backup from Boston to Denver?",
      "Can I send 3 files to Berlin each week?", "Why does the whole team work remotely on the last day?"] * 3
print(repr([(p.a, p.b, p.same, p.kind) for p in synthetic_pairs(qs, per_question=1.0)]))
"""


def test_made_pairs_do_not_depend_on_the_hash_seed():
    outs = []
    for seed in ("0", "1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "HF_HUB_OFFLINE": "1"}
        r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1] == outs[2] and "scope" in outs[0]
