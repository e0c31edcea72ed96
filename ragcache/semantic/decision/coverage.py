"""The coverage gate: text the hit decision cannot read is matched exactly.

A semantic hit rests on two readers: the embedder's vector and the word guards. The packaged
all-MiniLM-L6-v2 is an English model whose tokenizer maps most of Han, Thai, Georgian and much
of Hangul to ``[UNK]`` (two Chinese questions that differ only in "open" / "closed" embed to
cosine 1.000), and the guards read English words written as ``[a-z0-9]``: two Greek, Russian or
Arabic questions that differ by a negation, an antonym or a place score 0.95-1.00 and no guard
sees a word of them. So before any guard or verifier runs, :class:`CoverageGate` reads both
questions (:meth:`CoverageGate.reading`):

- the share of the question's word pieces the embedder represents (not its unknown token;
  :meth:`~ragcache.semantic.embedding.QuestionEmbedder.unknown_pieces`) must reach ``min_represented``
  (default 1.0: no ``[UNK]`` at all);
- every word must be in a script and language the cache declares (``languages``, default
  :data:`GUARD_LANGUAGES`, English: Latin letters without diacritics, and not a question in German,
  French, Spanish, Italian, Portuguese or Dutch by its function words,
  :func:`~ragcache.semantic.scripts.latin_language`). A lone letter of another alphabet ("π", "μm")
  is a symbol, not a word: the ``script`` guard compares it as text.

Where either question fails, only an exact repeat (the same text after
:func:`~ragcache.semantic.text.exact_form`) is served, and the refusal's reason is ``"coverage"``
with a detail that names why ("not read: 4 words in Hangul"). The gate is part of the one hit
decision (:class:`~ragcache.semantic.decision.policy.SemanticPolicy`): the guards, the learned
verifier and ``max_error`` all decide behind it.

Declaring another language (``languages=("en", "de")``) enables similarity matching for it; it is
refused for the packaged English embedder. What protects such a language is the embedder itself,
the script-agnostic guards (digits of every script, symbols, names in another script or capitalised
in a cased one: ``number`` and ``script``) and, for the Latin-script languages, the English word
guards where words coincide. The docs' semantic cache guide has the table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ragcache.semantic.decision.guards import GuardVerdict
from ragcache.semantic.scripts import (
    LANGUAGE_NAMES,
    LANGUAGE_SCRIPTS,
    UNSPACED,
    check_languages,
    latin_language,
    script_words,
)
from ragcache.semantic.text import exact_form

if TYPE_CHECKING:
    from ragcache.semantic.embedding import QuestionEmbedder

GUARD_LANGUAGES: tuple[str, ...] = ("en",)
"""The languages the word guards read (and a cache matches by similarity unless told otherwise)."""

COVERAGE_REASON = "coverage"
"""The rejection reason of :class:`CoverageGate` (counted in ``stats.rejections`` like a guard's)."""

LATIN_OUTSIDE_ENGLISH = "Latin letters outside English"
"""How :class:`Reading` names words in Latin letters with diacritics ("Zürich", "façade")."""

ENGLISH_EMBEDDERS: tuple[str, ...] = ("all-minilm-l6-v2",)
"""Embedders (names, lower case, matched at the end) trained on English only: a cache with one of them
refuses to declare another language."""


@dataclass(frozen=True, slots=True)
class Reading:
    """What the hit decision can read of one question.

    Attributes:
        unread: ``(what, count, unit)`` per script or language the cache does not read, e.g.
            ``("Hangul", 4, "words")``, ``("Han", 6, "characters")``, ``("German", 7, "words")``.
        unknown: word pieces the embedder maps to its unknown token; pieces: all its word pieces
            (both 0 when the embedder's tokenizer is not known).
    """

    unread: tuple[tuple[str, int, str], ...] = ()
    unknown: int = 0
    pieces: int = 0

    @property
    def represented(self) -> float:
        """Share of the word pieces the embedder represents, in [0, 1] (1.0 when unknown)."""
        return 1.0 - self.unknown / self.pieces if self.pieces else 1.0

    def why_not(self, min_represented: float = 1.0) -> str | None:
        """``None`` when the decision reads the whole question, else why not ("4 words in Hangul")."""
        parts = [f"{n} {unit[:-1] if n == 1 else unit} in {what}" for what, n, unit in self.unread]
        if self.represented < min_represented:
            parts.append(f"{self.unknown} of {self.pieces} word pieces unknown to the embedder")
        return ", ".join(parts) or None


class CoverageGate:
    """Serves only exact repeats of questions the decision cannot read (see the module).

    Args:
        embedder: the cache's :class:`~ragcache.semantic.embedding.QuestionEmbedder` (its
            ``unknown_pieces``; ``name`` for the English-only check).
        languages: ISO 639-1 codes the cache matches by similarity (default ``("en",)``;
            :data:`~ragcache.semantic.scripts.LANGUAGE_SCRIPTS` lists the known ones), or ``"any"``
            (every script and language; the embedder's unknown pieces are still checked).
        min_represented: the share of word pieces the embedder must represent, in (0, 1].

    Raises:
        TypeError, ValueError: an unknown language code or a bad share; ValueError: a language other
            than English declared for an English-only embedder (:data:`ENGLISH_EMBEDDERS`).
    """

    def __init__(self, embedder: QuestionEmbedder, languages: Iterable[str] | str = GUARD_LANGUAGES,
                 min_represented: float = 1.0) -> None:
        self.languages = check_languages(languages)
        if isinstance(min_represented, bool) or not isinstance(min_represented, int | float) \
                or not 0 < min_represented <= 1:
            raise ValueError(f"min_represented must be a share in (0, 1], got {min_represented!r:.40}")
        self.min_represented = float(min_represented)
        name = embedder.name.lower()
        if self.languages != GUARD_LANGUAGES and name.endswith(ENGLISH_EMBEDDERS):
            raise ValueError(f"languages={languages!r} needs a multilingual embedder: {name} reads English only "
                             "(two questions in another language that differ by a negation or a place embed alike); "
                             "pass embedder= a multilingual sentence-transformers model, or keep languages=('en',)")
        self.embedder = embedder
        self._any = self.languages == ("*",)
        self._scripts = frozenset(s for x in self.languages if x != "*" for s in LANGUAGE_SCRIPTS[x])
        self._accents = self._any or any(x != "en" and "Latin" in LANGUAGE_SCRIPTS[x] for x in self.languages)
        self.reading = lru_cache(maxsize=8192)(self._reading)

    def _reading(self, text: str) -> Reading:
        """What of ``text`` (a normalised question) the decision reads (memoised per text)."""
        unread: Counter[str] = Counter()
        unit: dict[str, str] = {}
        latin = False
        for w in script_words(text):
            if w.script == "symbol":
                continue  # ℓ, 𝑥, a modifier letter: compared as text by the script guard
            if w.script == "Latin":
                latin = True
                if w.text.isascii() or self._accents:
                    if self._any or "Latin" in self._scripts:
                        continue
                    what = "Latin"
                else:
                    what = LATIN_OUTSIDE_ENGLISH
            elif self._any or w.script in self._scripts:
                continue
            elif len(w.text) == 1 and w.script not in UNSPACED and w.script != "Hangul":
                continue  # a lone letter of an alphabet ("π", "μm"): a symbol, compared by the script guard
            else:
                what = w.script
            unread[what] += w.size
            unit[what] = "characters" if w.script in UNSPACED else "words"
        if latin and not self._any and "Latin" in self._scripts:
            lang = latin_language(text)
            if lang not in self.languages:
                n = sum(1 for w in script_words(text) if w.script == "Latin")
                unread[LANGUAGE_NAMES[lang]] += n
                unit[LANGUAGE_NAMES[lang]] = "words"
        counted = self.embedder.unknown_pieces(text)
        unknown, pieces = counted if counted is not None else (0, 0)
        return Reading(tuple((k, n, unit[k]) for k, n in unread.most_common()), unknown, pieces)

    def check(self, query: str, candidate: str) -> GuardVerdict | None:
        """``None`` when both (normalised) questions are read whole or are the same text; else the
        ``"coverage"`` verdict naming what is not read (the query's first, then the cached question's)."""
        if exact_form(query) == exact_form(candidate):
            return None
        for text, whose in ((query, ""), (candidate, " in the cached question")):
            why = self.reading(text).why_not(self.min_represented)
            if why is not None:
                return GuardVerdict(COVERAGE_REASON, f"not read{whose}: {why}")
        return None


class GatedDecider:
    """A decider (``check(query, candidate, similarity) -> GuardVerdict``: the guards, the learned
    verifier) behind a :class:`CoverageGate`: the gate's refusal first, else the decider's verdict."""

    def __init__(self, gate: CoverageGate, decider: Any) -> None:
        self.gate = gate
        self.decider = decider

    def check(self, query: str, candidate: str, similarity: float | None = None) -> GuardVerdict:
        refused = self.gate.check(query, candidate)
        return refused if refused is not None else self.decider.check(query, candidate, similarity)


__all__ = ["COVERAGE_REASON", "ENGLISH_EMBEDDERS", "GUARD_LANGUAGES", "LATIN_OUTSIDE_ENGLISH", "CoverageGate",
           "GatedDecider", "Reading"]
