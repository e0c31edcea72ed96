"""``ragcache bench stemmers``: the guards' light suffix stemmer against nltk's Porter and Snowball.

Issue 22 item 10 asks for the library unless it breaks the hit path. Two measurements, back to back:

* import cost: CPU seconds a fresh process spends importing each stemmer on top of
  ``ragcache.semantic.text`` (which every hit loads anyway, own stemmer included): the price every
  ``ragcache ask`` hit would pay (nltk's package ``__init__`` imports scipy.stats);
* what each stemmer joins, over every single-word WordNet 3.0 lemma (letters only, 3+ long): pairs
  of distinct lemmas given one stem, and how many of those WordNet's morphy does not call forms of
  one lemma (``abandon`` / ``abandonment``: the guards would treat them as the same word); and the
  share of regular inflections (``lemma + s / ed / ing`` that morphy maps back) joined to their lemma.

The guards use the stem to decide that two questions say the same word; joining words that differ
lets a wrong answer through, so fewer false joins is what counts. No plot: a few counts.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HIT_PATH = "import ragcache.semantic.text"  # already loaded by every hit; the own stemmer lives there
IMPORTS = {
    "own (ragcache.semantic.text.stem)": "",
    "nltk SnowballStemmer": "; from nltk.stem.snowball import SnowballStemmer; SnowballStemmer('english')",
    "nltk PorterStemmer": "; from nltk.stem.porter import PorterStemmer; PorterStemmer()",
}


def _cpu(code: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                   cwd=str(Path(__file__).resolve().parents[1]))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _joins(stem: Any, lemmas: list[str], lex: Any) -> dict[str, Any]:
    t = time.perf_counter()
    groups: dict[str, list[str]] = defaultdict(list)
    for w in lemmas:
        groups[stem(w)].append(w)
    per_word_us = 1e6 * (time.perf_counter() - t) / len(lemmas)
    joined = false_joins = 0
    examples: list[list[str]] = []
    for g in groups.values():
        for i, a in enumerate(g):
            for b in g[i + 1 :]:
                joined += 1
                if not set(lex.base_forms(a)) & set(lex.base_forms(b)):
                    false_joins += 1
                    if len(examples) < 5:
                        examples.append([a, b])
    regular = [(w + s, w) for w in lemmas[::50] for s in ("s", "ed", "ing") if w in lex.base_forms(w + s)]
    return {"us_per_word": per_word_us, "distinct_lemma_pairs_joined": joined,
            "joined_but_not_forms_of_one_lemma": false_joins, "examples": examples,
            "regular_inflections_joined": sum(stem(a) == stem(b) for a, b in regular) / len(regular),
            "regular_inflections": len(regular)}


def main(json_path: str | None = "bench/results/stemmers.json", repeats: int = 3) -> dict[str, Any]:
    """Measure, print a table, write JSON.

    Raises:
        ValueError: ``repeats`` < 1.
    """
    from nltk.stem.porter import PorterStemmer
    from nltk.stem.snowball import SnowballStemmer

    from ragcache.semantic.decision.lexicon import Lexicon, wordnet_dir
    from ragcache.semantic.text import stem

    if repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {repeats}")
    base = min(_cpu(HIT_PATH) for _ in range(repeats))
    imports = {name: max(0.0, min(_cpu(HIT_PATH + code) for _ in range(repeats)) - base) if code else 0.0
               for name, code in IMPORTS.items()}
    lex = Lexicon()
    lemmas = sorted({line.split(" ", 1)[0] for pos in ("noun", "verb", "adj", "adv")
                     for line in (wordnet_dir() / f"index.{pos}").read_text(encoding="utf-8", errors="replace")
                     .splitlines() if not line.startswith(" ")})
    lemmas = [w for w in lemmas if w.isalpha() and w.isascii() and len(w) >= 3]
    fns = {"own (ragcache.semantic.text.stem)": stem, "nltk SnowballStemmer": SnowballStemmer("english").stem,
           "nltk PorterStemmer": PorterStemmer().stem}
    joins = {name: _joins(f, lemmas, lex) for name, f in fns.items()}
    load = os.getloadavg()
    print(f"{'stemmer':<36} {'import CPU (s)':>14} {'false joins':>12} {'inflections joined':>19}")
    for name in fns:
        j = joins[name]
        print(f"{name:<36} {imports[name]:>14.3f} {j['joined_but_not_forms_of_one_lemma']:>12} "
              f"{j['regular_inflections_joined']:>18.1%}")
    print(f"{len(lemmas)} WordNet lemmas; import CPU: min of {repeats} fresh processes, on top of {HIT_PATH}; "
          f"load average {load[0]:.2f}")
    result = {"lemmas": len(lemmas), "repeats": repeats, "load_avg": load, "import_cpu_s": imports, "joins": joins}
    if json_path:
        from ragcache.atomic import atomic_write_json

        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(json_path, result)
    return result
