"""``ragcache bench lexicon``: the first WordNet lookup of a process, lazy reads against a full parse.

The guards ask WordNet (:mod:`ragcache.semantic.decision.lexicon`) about a handful of words per candidate.
The lexicon used to parse the whole database on first use; it now binary-searches the sorted
``index.<pos>`` files and reads only the ``data.<pos>`` lines of the synsets asked about. Each
method runs in a fresh Python process (the cost a CLI hit pays once), ``repeats`` times, back to
back: ``lazy`` times the first lookups of :data:`PAIRS` through :class:`Lexicon`; ``full_parse``
times :func:`full_parse` (the former loader, kept as the reference for the tests). Times exclude
the interpreter's start and the imports (the same for both), which ``ragcache bench ask`` covers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

# word pairs a paraphrase check asks about (synonyms and antonyms, inflected forms included)
PAIRS = [("enable", "disable"), ("bought", "purchase"), ("children", "kids"), ("cheap", "expensive"),
         ("rotate", "change"), ("keys", "credentials"), ("running", "run"), ("larger", "small")]
_POS_CHAR = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}


@dataclass(slots=True)
class FullParse:
    """The whole database in memory: ``index`` lemma -> pos -> synset offsets (every sense, most
    frequent first); ``synsets`` (pos, offset) -> lemmas; ``antonyms`` lemma -> lemmas (closed under
    symmetry); ``exc`` pos -> irregular form -> base forms."""

    index: dict[str, dict[str, tuple[int, ...]]]
    synsets: dict[tuple[str, int], tuple[str, ...]]
    antonyms: dict[str, set[str]]
    exc: dict[str, dict[str, tuple[str, ...]]]


def full_parse(d: Path) -> FullParse:
    """Parse every line of the WordNet database under ``d`` (``wndb(5WN)``; about 2 s)."""
    out = FullParse({}, {}, {}, {})
    pend: list[tuple[str, str, int, int]] = []
    for pos in ("noun", "verb", "adj", "adv"):
        with open(d / f"index.{pos}", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.startswith(" "):
                    p = line.split()
                    n_syn, n_ptr = int(p[2]), int(p[3])
                    out.index.setdefault(p[0], {})[pos] = tuple(int(x) for x in p[6 + n_ptr : 6 + n_ptr + n_syn])
        with open(d / f"data.{pos}", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(" "):
                    continue
                p = line.split(" | ", 1)[0].split()
                n_words = int(p[3], 16)
                lemmas = tuple(p[4 + 2 * k].lower().split("(")[0] for k in range(n_words))
                out.synsets[(pos, int(p[0]))] = lemmas
                i = 4 + 2 * n_words
                for k in range(int(p[i])):
                    sym, tgt, tpos, st = p[i + 1 + 4 * k : i + 5 + 4 * k]
                    if sym == "!" and int(st[:2], 16):
                        pend.append((lemmas[int(st[:2], 16) - 1], _POS_CHAR[tpos], int(tgt), int(st[2:], 16)))
        exc: dict[str, tuple[str, ...]] = {}
        path = d / f"{pos}.exc"
        if path.is_file():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if len(line.split()) >= 2:
                    exc[line.split()[0]] = tuple(line.split()[1:])
        out.exc[pos] = exc
    for src, tpos, off, tnum in pend:
        tgt = out.synsets[(tpos, off)][tnum - 1]
        out.antonyms.setdefault(src, set()).add(tgt)
        out.antonyms.setdefault(tgt, set()).add(src)
    return out


_CHILD = """
import json, sys, time
from ragcache.semantic.decision.lexicon import Lexicon, wordnet_dir
from benchmarks.lexicon import PAIRS, full_parse
t = time.perf_counter()
if sys.argv[1] == "lazy":
    lex = Lexicon()
    first = None
    for a, b in PAIRS:
        lex.synonyms(a, b), lex.antonyms(a, b)
        first = first if first is not None else time.perf_counter() - t
else:
    full_parse(wordnet_dir())
    first = time.perf_counter() - t
print(json.dumps({"first_s": first, "all_s": time.perf_counter() - t}))
"""


def _run(method: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", _CHILD, method], capture_output=True, text=True, env=env, check=False)
    if r.returncode:
        raise RuntimeError(f"bench lexicon: the {method} child failed:\n{r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(json_path: str | None = "bench/results/lexicon.json", plot_path: str | None = None,
         repeats: int = 5) -> dict[str, Any]:
    """Time the first lookups in ``repeats`` fresh processes per method; print, write JSON, plot.

    Raises:
        ValueError: ``repeats`` < 1.
    """
    if repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {repeats}")
    runs: dict[str, list[dict[str, float]]] = {"lazy": [], "full_parse": []}
    for _ in range(repeats):  # interleaved, so load changes hit both methods alike
        for m in runs:
            runs[m].append(_run(m))
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    summary = {m: {"first_lookup_s_median": median(r["first_s"] for r in rs),
                   f"all_{len(PAIRS)}_pairs_s_median": median(r["all_s"] for r in rs),
                   "first_lookup_s": [r["first_s"] for r in rs]} for m, rs in runs.items()}
    print(f"{'method':<12} {'first lookup (ms)':>18} {f'{len(PAIRS)} pairs (ms)':>14}")
    for m, s in summary.items():
        print(f"{m:<12} {1e3 * s['first_lookup_s_median']:>18.1f} {1e3 * s[f'all_{len(PAIRS)}_pairs_s_median']:>14.1f}")
    print(f"load average {load}; {repeats} fresh processes per method, medians")
    result = {"pairs": PAIRS, "repeats": repeats, "load_avg_1_5_15": load, "methods": summary}
    if json_path:
        from ragcache.atomic import atomic_write_json

        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(json_path, result)
    from benchmarks.plotting import draw

    def plot() -> None:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3))
        ax.bar(list(summary), [1e3 * s["first_lookup_s_median"] for s in summary.values()])
        ax.set_ylabel("first lookup (ms)")
        ax.set_yscale("log")
        ax.set_title("WordNet: first lookup in a fresh process")
        fig.tight_layout()
        fig.savefig(plot_path)

    draw(plot, plot_path)
    return result
