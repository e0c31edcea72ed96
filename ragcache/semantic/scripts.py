"""Which script and language a question is written in, as the hit decision needs to know it.

The word guards read English words written as ``[a-z0-9]``; an embedder reads what its tokenizer
does not map to ``[UNK]``. :func:`script_words` splits a question into runs of letters of one
script (Unicode character names: "CYRILLIC SMALL LETTER A" is Cyrillic, "CJK UNIFIED IDEOGRAPH-5E97"
Han, hiragana and katakana together Kana), :func:`latin_language` tells an English question in
Latin letters from one in German, French, Spanish, Italian, Portuguese or Dutch by its function
words, and :data:`LANGUAGE_SCRIPTS` says which scripts a declared language is written in. All pure.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from ragcache.semantic.text import STOPWORDS

LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    "en": ("Latin",), "de": ("Latin",), "fr": ("Latin",), "es": ("Latin",), "it": ("Latin",), "pt": ("Latin",),
    "nl": ("Latin",), "sv": ("Latin",), "da": ("Latin",), "no": ("Latin",), "fi": ("Latin",), "pl": ("Latin",),
    "cs": ("Latin",), "ro": ("Latin",), "hu": ("Latin",), "tr": ("Latin",), "vi": ("Latin",), "id": ("Latin",),
    "el": ("Greek",), "ru": ("Cyrillic",), "uk": ("Cyrillic",), "bg": ("Cyrillic",), "sr": ("Cyrillic", "Latin"),
    "ar": ("Arabic",), "fa": ("Arabic",), "ur": ("Arabic",), "he": ("Hebrew",), "hi": ("Devanagari",),
    "mr": ("Devanagari",), "ne": ("Devanagari",), "bn": ("Bengali",), "ta": ("Tamil",), "te": ("Telugu",),
    "zh": ("Han",), "ja": ("Han", "Kana"), "ko": ("Hangul", "Han"), "th": ("Thai",), "ka": ("Georgian",),
    "hy": ("Armenian",),
}
"""The scripts each language a cache may declare (``languages=``) is written in (ISO 639-1 codes)."""

LANGUAGE_NAMES: dict[str, str] = {"en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian",
                                  "pt": "Portuguese", "nl": "Dutch"}
"""Names of the Latin-script languages :func:`latin_language` recognises."""

UNSPACED: frozenset[str] = frozenset({"Han", "Kana", "Thai", "Lao", "Khmer", "Myanmar", "Tibetan"})
"""Scripts written without spaces between words: a run of them is counted in characters."""

_SCRIPT_WORDS = {"CJK": "Han", "HIRAGANA": "Kana", "KATAKANA": "Kana", "IDEOGRAPHIC": "Han"}
_NOT_A_SCRIPT = frozenset({"MODIFIER", "MATHEMATICAL", "SCRIPT", "DOUBLE-STRUCK", "BLACK-LETTER", "PLANCK",
                           "ESTIMATED", "INFORMATION", "FEMININE", "MASCULINE", "TURNED", "ROMAN", "SMALL",
                           "CIRCLED", "PARENTHESIZED", "SQUARED", "NEGATIVE", "COMBINING"})

# Function words of other languages written in Latin letters, none of them an English word (so an
# English question never counts them): two or more, and at least as many as its English function
# words, make a question that language's.
_FUNCTION_WORDS: dict[str, frozenset[str]] = {
    lang: frozenset(ws.split()) - STOPWORDS for lang, ws in {
        "de": "ist nicht ich wie der das und ein eine einen kann mein meine sie wir auf von wird sind oder kein "
              "keine warum wo wann welche welcher gibt muss",
        "fr": "est le les une du pas je nous vous il elle et sur dans avec que qui quoi pourquoi ou quand mon ma "
              "mes ce cette peut puis faut sont",
        "es": "el los las es esta que como por para una mis se donde cuando puedo porque cual cuanto cuantos tengo",
        "it": "il gli che perche quando della dei una mio mia sono posso questo questa quanto",
        "pt": "nao que como onde quando da das para uma meu minha posso esta sao porque quanto voce",
        "nl": "de het een niet ik hoe waarom waar wanneer voor mijn kan zijn wat welke hebben heb",
    }.items()
}


def script_of(ch: str) -> str | None:
    """The script of one letter or mark ("Latin", "Greek", "Han", "Kana", "Hangul" ...), ``"symbol"``
    for a letterlike symbol without one (``ℓ``, ``𝑥``, a modifier letter), ``None`` for anything that is
    not a letter or mark."""
    cat = unicodedata.category(ch)
    if cat[0] not in "LM":
        return None
    if ch.isascii():
        return "Latin"
    name = unicodedata.name(ch, "")
    first = name.split(" ", 1)[0]
    if first in ("HALFWIDTH", "FULLWIDTH") and " " in name:
        first = name.split(" ")[1]
    if not first or first in _NOT_A_SCRIPT:
        return "symbol"
    return _SCRIPT_WORDS.get(first, first.title())


@dataclass(frozen=True, slots=True)
class ScriptWord:
    """One run of letters of one script: ``text`` (case kept), ``script``, ``start`` (character offset)."""

    text: str
    script: str
    start: int

    @property
    def size(self) -> int:
        """Characters for a script written without spaces (:data:`UNSPACED`), else 1 (a word)."""
        return sum(unicodedata.category(c)[0] != "M" for c in self.text) if self.script in UNSPACED else 1


@lru_cache(maxsize=65536)
def script_words(text: str) -> tuple[ScriptWord, ...]:
    """The runs of letters of one script in ``text``, in order. A combining mark continues the run
    it follows; digits, spaces, punctuation and symbols end a run, and so does a change of script
    ("μm" is Greek "μ" then Latin "m")."""
    out: list[ScriptWord] = []
    start, script = -1, None
    for i, ch in enumerate(text):
        s = script_of(ch)
        if s is not None and unicodedata.category(ch)[0] == "M" and script is not None:
            continue  # a mark belongs to the letter before it
        if s != script:
            if script is not None:
                out.append(ScriptWord(text[start:i], script, start))
            start, script = i, s
    if script is not None:
        out.append(ScriptWord(text[start:], script, start))
    return tuple(w for w in out if w.script is not None)


_ASCII_WORD = re.compile(r"[a-z]+")


def latin_language(text: str) -> str:
    """``"en"``, or the code of the language (``"de"``, ``"fr"``, ``"es"``, ``"it"``, ``"pt"``, ``"nl"``) whose
    function words ``text`` uses: two or more of them, and at least as many as English function words
    (:data:`~ragcache.semantic.text.STOPWORDS`). Accents are ignored ("für" counts as "fur")."""
    plain = unicodedata.normalize("NFD", text.lower())
    ws = _ASCII_WORD.findall("".join(c for c in plain if unicodedata.category(c) != "Mn"))
    english = sum(w in STOPWORDS for w in ws)
    best, hits = "en", 1
    for lang, fw in _FUNCTION_WORDS.items():
        n = sum(w in fw for w in ws)
        if n > hits and n >= english:
            best, hits = lang, n
    return best


def check_languages(languages: object) -> tuple[str, ...]:
    """``languages`` as a tuple of known codes (:data:`LANGUAGE_SCRIPTS`), or ``("*",)`` for ``"any"``.

    Raises:
        TypeError: neither a sequence of str nor ``"any"``. ValueError: empty, or an unknown code.
    """
    if languages == "any":
        return ("*",)
    if isinstance(languages, str) or not isinstance(languages, (list, tuple, set, frozenset)):
        raise TypeError(f"languages must be a tuple of language codes such as ('en', 'de'), or 'any'; got "
                        f"{type(languages).__name__} {languages!r:.40}")
    out = tuple(dict.fromkeys(str(x).lower() for x in languages))
    unknown = [x for x in out if x not in LANGUAGE_SCRIPTS]
    if not out or unknown:
        raise ValueError(f"unknown language codes {unknown or list(languages)}; choose from "
                         f"{sorted(LANGUAGE_SCRIPTS)} (ISO 639-1), or 'any'")
    return out


__all__ = ["LANGUAGE_NAMES", "LANGUAGE_SCRIPTS", "UNSPACED", "ScriptWord", "check_languages", "latin_language",
           "script_of", "script_words"]
