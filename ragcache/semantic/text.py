"""Question text helpers: normalisation, word tokens, content words, typo distance.

The semantic cache embeds the question alone, after :func:`normalize_question`
(Unicode NFC plus the folds of :func:`fold_text` that keep meaning, whitespace collapsed, runs of ``?!.`` collapsed, a leading
greeting such as "Hi team," and a trailing "Thanks!" dropped). The guards in
:mod:`ragcache.semantic.decision.guards` compare questions word by word with the
helpers here; everything is pure and deterministic.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

from rapidfuzz.distance import OSA

from ragcache.text_checks import checked_question

_WS = re.compile(r"\s+")
_GREETING = re.compile(
    r"^\s*(?:hi|hello|hey|dear|good\s+(?:morning|afternoon|evening)|greetings|excuse\s+me)\b[^,.!?]{0,40}[,!.]\s*",
    re.IGNORECASE,
)
_THANKS = re.compile(r"(?<=[.?!,])\s*(?:many\s+)?(?:thanks|thank\s+you|thx|cheers)(?:\s+\w+)?[\s.!]*$", re.IGNORECASE)
# Words: letters/digits with inner hyphens, dots (versions, file names) or underscores.
_WORD = re.compile(r"[a-z0-9]+(?:[._+#-][a-z0-9]+)*[+#]*")
# A number, scientific notation included ("1e3", "1.5e-4", "2e+10" are one number each, never "1"):
# the exponent needs its digits, so "3 eggs" and "3e" stay plain 3.
_NUMBER = re.compile(r"(?<![a-z0-9.])\$?\d+(?:[.,]\d+)*(?:e[+-]?\d+)?%?")
_EXPONENT = re.compile(r"e\+?(-?)0*(?=\d)")

STOPWORDS: frozenset[str] = frozenset(
    ["a", "an", "the", "i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "you", "your", "yours", "he", "him", "his", "she", "her", "it", "its", "they", "them", "their", "is", "am", "are", "was", "were", "be", "been", "being", "do", "does", "did", "doing", "done", "have", "has", "had", "having", "can", "could", "would", "should", "will", "shall", "may", "might", "must", "to", "of", "in", "on", "at", "for", "from", "with", "by", "about", "as", "into", "onto", "than", "that", "this", "these", "those", "there", "here", "and", "or", "but", "if", "so", "then", "also", "just", "still", "only", "very", "really", "please", "kindly", "hi", "hello", "hey", "dear", "thanks", "thank", "sorry", "how", "what", "whats", "why", "when", "where", "which", "who", "whom", "whose", "whether", "way", "ways", "any", "anything", "something", "someone", "like", "know", "tell", "explain", "let", "help", "understand", "appreciate", "wondering", "wonder", "able", "possible", "bother", "excuse", "need", "want", "get", "got", "go", "going", "some", "im", "ive", "youre", "lets"]
)
"""Function words and courtesy words ignored when comparing content words."""

NEGATIONS: frozenset[str] = frozenset(
    ["not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "cannot", "cant", "dont", "doesnt", "didnt", "isnt", "arent", "wasnt", "werent", "wont", "wouldnt", "shouldnt", "couldnt", "hasnt", "havent", "hadnt", "mustnt", "neednt", "aint"]
)
"""Negation cues after apostrophes are removed ("don't" -> "dont")."""


_INVISIBLE = re.compile("[\u00ad\u200b-\u200f\u2060-\u2064\ufeff]")
"""Characters that print as nothing (soft hyphen, zero-width space / joiners, direction marks, word
joiner, byte-order mark): a question pasted with one is the same question."""

_PICTOGRAPHIC = re.compile("[\u00a9\u00ae\u203c\u2049\u2122\u2139\u2194-\u21aa\u231a-\u23ff\u24c2\u25aa-\u25fe"
                           "\u2600-\u27bf\u2934\u2935\u2b05-\u2b55\u3030\u303d\u3297\u3299"
                           "\U0001f000-\U0001faff\U0001fc00-\U0001fffd]")
"""A superset of Unicode's Extended_Pictographic (emoji and the symbols that take emoji style): a zero-width
joiner between two of these glues one emoji ("🏳️‍🌈" is the rainbow flag, "🏳️🌈" a white flag and a rainbow)."""
_EMOJI_TRAIL = frozenset("\ufe0e\ufe0f\U0001f3fb\U0001f3fc\U0001f3fd\U0001f3fe\U0001f3ff")
"""What may stand between an emoji and its joiner: variation selectors and skin-tone modifiers."""
_QUOTED = re.compile("\"[^\"\n]*\"|\u201c[^\u201d\n]*\u201d|`[^`\n]*`"
                     "|(?<!\\w)'[^'\n]*'(?!\\w)|(?<!\\w)\u2018[^\u2019\n]*\u2019(?!\\w)")
"""A quoted span ("...", “...”, `...`, '...', ‘...’; a single quote opens and closes only away from
letters, so the apostrophes of "what's" and "Bob's" quote nothing)."""


def _joins_emoji(text: str, i: int) -> bool:
    """True when the zero-width joiner at ``text[i]`` stands between two pictographic characters
    (a variation selector or skin-tone modifier may come between the first and the joiner)."""
    j = i - 1
    while j >= 0 and i - j <= 3 and text[j] in _EMOJI_TRAIL:
        j -= 1
    return (j >= 0 and _PICTOGRAPHIC.match(text, j) is not None and i + 1 < len(text)
            and _PICTOGRAPHIC.match(text, i + 1) is not None)


def _drop_invisible(text: str) -> str:
    """``text`` without the characters of :data:`_INVISIBLE`, except those that are content: a joiner
    inside an emoji sequence (:func:`_joins_emoji`) and any of them inside a quoted span (``"a\u200bb"``
    is three characters, a question about it is not one about ``"ab"``)."""
    if not _INVISIBLE.search(text):
        return text
    quoted = [m.span() for m in _QUOTED.finditer(text)]
    out, last = [], 0
    for m in _INVISIBLE.finditer(text):
        i = m.start()
        if any(a < i < b - 1 for a, b in quoted) or (text[i] == "\u200d" and _joins_emoji(text, i)):
            continue
        out.append(text[last:i])
        last = i + 1
    out.append(text[last:])
    return "".join(out)


def _fold_table() -> dict[int, str]:
    """The compatibility folds that never change what a question asks (each one NFKC's own mapping):
    fullwidth and halfwidth forms (``ＡＢＣ１２３`` -> ``ABC123``, halfwidth katakana, ``￥``), the
    ideographic space, Latin and Armenian ligatures (``ﬁ`` -> ``fi``, ``ĳ`` -> ``ij``), the micro sign
    (-> Greek mu) and the ellipsis (-> ``...``). NFKC's other folds are left out on purpose: it turns
    superscripts, subscripts, vulgar fractions, circled and parenthesised digits and squared unit
    signs into plain digits ("3²" -> "32", "½" -> "1⁄2", "①" -> "1", "㎡" -> "m2"), which changes a number."""
    cps = [*range(0xFF01, 0xFF5F), *range(0xFF61, 0xFFDD), *range(0xFFE0, 0xFFEF), *range(0xFB00, 0xFB07),
           *range(0xFB13, 0xFB18), 0x0132, 0x0133, 0x00B5, 0x2026, 0x3000]
    table = {}
    for cp in cps:
        ch = chr(cp)
        folded = unicodedata.normalize("NFKC", ch)
        if folded != ch and unicodedata.category(ch) != "Cn":
            table[cp] = folded
    return table


_FOLDS = _fold_table()


def fold_text(text: str) -> str:
    """``text`` in Unicode NFC with the meaning-keeping compatibility folds of :func:`_fold_table`
    (width, ligatures) and the characters that print as nothing dropped, except where they are content:
    a zero-width joiner that glues an emoji sequence ("🏳️‍🌈", "👨‍👩‍👧") and any of them inside a quoted
    span (``"a\u200bb"``). Unlike NFKC it keeps every
    character that changes a number or a symbol: "3²" / "32", "H₂O" / "H2O", "½" / "1/2" and "①" / "1"
    stay different text."""
    return _drop_invisible(unicodedata.normalize("NFC", text.translate(_FOLDS)))


def normalize_question(text: str) -> str:
    """Normalise a question for embedding and exact matching.

    NFC with the meaning-keeping folds of :func:`fold_text` (width, ligatures; never a fold that
    changes a number: "3²", "H₂O", "½" and "①" stay as written), characters that print as nothing
    dropped (zero-width space, soft hyphen ...), collapsed whitespace, a leading greeting clause and a trailing thanks removed. Case and
    symbols are kept, runs of them included ("5!!" is a double factorial, "1..5" a range, neither
    "5!" nor "1.5"); the closing ``? ! .`` are dropped only from what is embedded (:func:`embed_form`).

    Raises:
        ValueError: if ``text`` is not a string or is empty after normalisation.
    """
    checked_question(text, hint="pass the last user turn as a non-empty string")
    t = fold_text(text)
    t = t.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    t = _WS.sub(" ", t).strip()
    stripped = _GREETING.sub("", t, count=1)
    stripped = _THANKS.sub("", stripped).strip().rstrip(",").strip()
    if len(stripped) >= 3:
        t = stripped
    if not t:
        raise ValueError("question is empty; pass the last user turn as a non-empty string")
    return t


_CONTRACTION = re.compile(r"\b(what|where|who|how|when|why|that|there|it|here)'s\b", re.IGNORECASE)
_TRAILING = re.compile(r"[\s?!.]+$")
_FACTORIAL_BEFORE = re.compile(r"[0-9)]$")


_YOU = r"(?:could|can|would|will)\s+you\s+(?:please\s+|kindly\s+)?(?:be\s+able\s+to\s+)?"
_ME = r"(?:me|us)(?:\s*,\s*please\s*,)?\s+"  # "tell me, please, how ..."
_REQUEST = re.compile(
    r"^\s*(?:"
    + _YOU + r"(?:tell|show|let)\s+" + _ME + r"(?:know\s+)?"
    + r"|" + _YOU + r"explain(?:\s+to\s+(?:me|us))?\s+"
    + r"|(?:can|could)\s+(?:someone|anyone|somebody)\s+(?:please\s+)?(?:tell|show|explain\s+to)\s+(?:me|us)\s+"
    + r"|(?:i|we)(?:\s+would|'d)\s+(?:like|love)\s+to\s+(?:know|understand|learn|find\s+out)\s+"
    + r"|(?:i|we)(?:'m|'re|\s+am|\s+are|\s+was|\s+were)\s+wondering\s+"
    + r"|(?:i|we)(?:\s+would|'d)\s+appreciate\s+it\s+if\s+you\s+(?:could|can|would)\s+(?:tell|show|let)\s+(?:me|us)\s+(?:know\s+)?"
    + r"|(?:i|we)(?:\s+would|'d)\s+appreciate\s+it\s+if\s+you\s+(?:could|can|would)\s+explain(?:\s+to\s+(?:me|us))?\s+"
    + r"|please\s+(?:tell|show|let)\s+(?:me|us)\s+(?:know\s+)?|please\s+explain(?:\s+to\s+(?:me|us))?\s+"
    + r"|(?:do|does)\s+(?:you|anyone|anybody)\s+(?:happen\s+to\s+)?know\s+"
    + r")",
    re.IGNORECASE,
)
_PLEASE_END = re.compile(r"(?:,\s*|\s+)please(?=\s*[?!.]*\s*$)", re.IGNORECASE)
_GREETING = re.compile(  # "Hi team, ...", "Good morning! ...", "Dear support, ...", "Excuse me, ..."
    r"^\s*(?:(?:hi|hello|hey|greetings|good\s+(?:morning|afternoon|evening|day))"
    r"(?:\s+(?:there|all|everyone|everybody|folks|team|guys|support|again))?"
    r"|dear\s+(?:support|team|sir|madam|sir\s+or\s+madam|all|colleagues|[a-z]+\s+team)|excuse\s+me"
    r"|thanks|thank\s+you)\s*[,!.:;-]+\s+(?!world\b)",
    re.IGNORECASE,
)
_THANKS_END = re.compile(  # "... ? Thanks!", "..., thank you in advance."
    r"(?<=[?!.])\s*(?:thanks|thank\s+you|many\s+thanks|cheers)(?:\s+(?:so\s+much|a\s+lot|in\s+advance))?"
    r"\s*[!.]*\s*$",
    re.IGNORECASE,
)


def request_core(text: str) -> str:
    """The question inside a request wrapper, for matching only (embedding and the guards; never the
    stored text, the exact form or the single-flight key): "Could you tell me what X is?" -> "what X
    is?", "I'd like to know how to X" -> "how to X", "Do you know why X?" -> "why X?", and a closing
    "please" dropped. The wrapper asks the same thing politely; it never changes what a correct answer
    is. A yes / no about ability or possibility ("Can I ...", "Is it possible to ...") is not a wrapper
    and stays. A greeting before the request ("Hi team,", "Good morning!", "Dear support,", "Excuse me,")
    and thanks after it ("... ? Thanks!") are dropped the same way. Kept whole when fewer than two words
    would remain."""
    core = _THANKS_END.sub("", _GREETING.sub("", text, count=1))
    m = _REQUEST.match(core)
    core = core[m.end():] if m else core
    core = _PLEASE_END.sub("", core)
    return core if len(core.split()) >= 2 else text


def embed_form(text: str) -> str:
    """The form of a normalised question that is embedded: its :func:`request_core`, "what's" -> "what is" (wh-words, it,
    that, there, here) and the closing ``? ! .`` dropped. all-MiniLM-L6-v2 scores "What is the
    capital of France?" against "what is the capital of france" at only 0.906, the question
    mark alone making the difference; guards and exact matching still see the normalised text.
    A ``!`` run right after a digit or ``)`` is kept: "What is 5!?" asks for a factorial, not "What is 5?",
    and "5!!" for a double factorial."""
    t = _CONTRACTION.sub(lambda m: m.group(1) + " is", request_core(text))
    m = _TRAILING.search(t)
    if m and m.group(0).startswith("!") and _FACTORIAL_BEFORE.search(t[:m.start()]):
        bangs = len(m.group(0)) - len(m.group(0).lstrip("!"))
        return t[:m.start()] + "!" * bangs  # "5!", "5!!", "(n+1)!": a factorial, not an exclamation
    return _TRAILING.sub("", t) or text


def exact_form(text: str) -> str:
    """The form two questions must share to be "the same words" (an exact repeat: ``threshold=1.0``,
    the entry always among the candidates, the replaced entry on store, the single-flight key).

    Only Unicode (NFC and the meaning-keeping folds of :func:`fold_text`, invisible characters dropped)
    and whitespace normalisation: case and symbols are kept, because they change the question ("%Y" /
    "%y", "-v" / "-V", "MB" / "Mb", "10 / 2" / "10 * 2", "a[1:]" / "a[:1]"), and so are superscripts,
    subscripts, fractions and circled digits ("3²" / "32", "x₁" / "x1", "½" / "1/2", "①" / "1").
    """
    return " ".join(fold_text(text).split())


@lru_cache(maxsize=65536)
def _words_cached(text: str) -> tuple[str, ...]:
    t = fold_text(text).lower().replace("\u2019", "'").replace("'", "")
    return tuple(_WORD.findall(t))


def words(text: str) -> list[str]:
    """Lower-cased word tokens; apostrophes dropped ("what's" -> "whats"), inner ``-._`` kept."""
    return list(_words_cached(text))


def split_words(text: str) -> list[str]:
    """Like :func:`words` but hyphenated words are split ("check-in" -> "check", "in")."""
    out: list[str] = []
    for w in _words_cached(text):
        if "-" in w and not any(c.isdigit() for c in w):
            out.extend(p for p in w.split("-") if p)
        else:
            out.append(w)
    return out


def stem(word: str) -> str:
    """A light suffix stripper so "messages" ~ "message" and "installed" ~ "install"."""
    w = word
    for suf, min_len in (("ies", 5), ("es", 5), ("s", 4), ("ed", 6), ("ing", 6), ("ly", 6)):
        if w.endswith(suf) and len(w) >= min_len and not w.endswith("ss"):
            base = w[: -len(suf)]
            if suf == "ies":
                base += "y"
            return base
    return w


def content_words(text: str) -> list[str]:
    """Words of ``text`` that are not stop words or negation cues, in order (not stemmed)."""
    return [w for w in split_words(text) if w not in STOPWORDS and w not in NEGATIONS]


_CARDINALS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
              "sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred "
              "thousand million billion").split()
_CARDINAL = "(?:" + "|".join(sorted(_CARDINALS, key=len, reverse=True)) + ")"
_CARDINAL_RUN = re.compile(rf"\b{_CARDINAL}(?:(?:[\s-]+and)?[\s-]+{_CARDINAL})*\b")
_SINGLE = {w: str(i) for i, w in enumerate(_CARDINALS[:20])}
_SINGLE.update({"twenty": "20", "thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70",
                "eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000", "million": "1000000",
                "billion": "1000000000"})
_COUNT_WORDS = {"dozen": "12", "couple": "2", "pair": "2"}  # counts text2num does not read


def _spelled(run: str) -> list[str]:
    """The value of one run of English cardinal words ("twenty-one" -> 21, "three hundred thousand" ->
    300000) by text2num (``text_to_num.text2num``); a run that is not one number ("one one",
    "twenty twenty") counts word by word. A lone "one" is skipped: it mostly reads as "a"."""
    from text_to_num import text2num

    if run == "one":
        return []
    try:
        return [str(text2num(run, "en"))]
    except ValueError:
        return [_SINGLE[w] for w in re.findall(r"[a-z]+", run) if w in _SINGLE and w != "one"]


def numbers(text: str) -> list[str]:
    """Numbers in ``text`` as canonical strings, sorted ("$300,000" -> "$300000", "24.04" kept).

    Spelled-out cardinals count too, as one value per run of number words, parsed by the text2num
    library ("twenty-one" -> "21", not "20"; "three hundred thousand" -> "300000"), plus "dozen",
    "couple" and "pair"; a lone "one" does not (it mostly reads as "a": "for a month" vs "one
    month") and belongs to the scope guard. Spelled ordinals ("fifth") are not numbers here ("5th"
    is: its digits are). Digits of any script count as their value; superscripts, subscripts,
    fractions and circled digits as written (:func:`numbers_in_order`). A digit and a
    multiplier word stay two numbers ("2 million" -> "2", "1000000"; "two million" -> "2000000").
    """
    return sorted(v for _, v in numbers_in_order(text))


def _ascii_digits(number: str) -> str:
    """Decimal digits of any script as ASCII digits ("٣" and "३" -> "3"): one number in any script."""
    if number.isascii():
        return number
    return "".join(str(d) if (d := unicodedata.decimal(c, None)) is not None else c for c in number)


def numbers_in_order(text: str) -> list[tuple[int, str]]:
    """``(character offset, canonical number)`` for each number of :func:`numbers`, in reading order.

    Decimal digits of every script count, as ASCII ("٣" -> "3"); a numeral that is not a plain digit
    (superscript, subscript, vulgar fraction, circled digit, Roman numeral sign) is its own number,
    kept as written: "3²" has the numbers 3 and ², never 32."""
    out = []
    low = text.lower()
    for m in _NUMBER.finditer(low):
        out.append((m.start(), _ascii_digits(_EXPONENT.sub(r"e\1", re.sub(r"(?<=\d),(?=\d{3}\b)", "", m.group(0))))))
    if not low.isascii():  # superscripts, subscripts, fractions, circled digits, Roman numerals: as written
        out.extend((i, ch) for i, ch in enumerate(low) if unicodedata.category(ch) in ("No", "Nl"))
    for m in _CARDINAL_RUN.finditer(low):
        out.extend((m.start(), v) for v in _spelled(re.sub(r"[\s-]+", " ", m.group(0))))
    out.extend((m.start(), _COUNT_WORDS[m.group(0)]) for m in re.finditer(r"[a-z]+", low) if m.group(0) in _COUNT_WORDS)
    return sorted(out)


def spelled_as_digits(text: str) -> str:
    """``text`` with each run of English cardinal words replaced by its digits, as :func:`numbers`
    reads it ("thirty days" -> "30 days", "twenty-one" -> "21"; a lone "one" stays, it mostly reads
    as "a"), lower-cased. The word guards compare this form, so a number written in words equals
    the same number in digits."""
    low = text.lower()

    def sub(m: re.Match[str]) -> str:
        vals = _spelled(re.sub(r"[\s-]+", " ", m.group(0)))
        return " ".join(vals) if vals else m.group(0)

    return _CARDINAL_RUN.sub(sub, low)


def damerau(a: str, b: str, limit: int = 3) -> int:
    """Optimal string alignment distance (insert, delete, substitute, swap adjacent), by rapidfuzz.

    Returns ``limit + 1`` when the distance exceeds ``limit``.
    """
    d = OSA.distance(a, b, score_cutoff=limit)
    return d if d <= limit else limit + 1


def typo_variant(a: str, b: str) -> bool:
    """True when two different words are plausibly one word misspelt.

    Distance 1 for words of 4+ characters, 2 for 9+; never for words with digits
    (numbers are compared exactly) or shorter words.
    """
    if a == b:
        return True
    if any(c.isdigit() for c in a + b):
        return False
    n = min(len(a), len(b))
    if n < 4:
        return False
    return damerau(a, b, 2) <= (2 if n >= 9 else 1)


def abbreviation(a: str, b: str) -> bool:
    """"info" ~ "information": the shorter (4+ characters) starts the longer, 3+ characters longer."""
    s, lng = (a, b) if len(a) <= len(b) else (b, a)
    return len(s) >= 4 and len(lng) >= len(s) + 3 and lng.startswith(s) and not any(c.isdigit() for c in lng)


def tokens_match(a: str, b: str) -> bool:
    """Same word up to the light stem or a typo."""
    return a == b or stem(a) == stem(b) or typo_variant(a, b)


def contains_fuzzy(needle: str, haystack: Iterable[str]) -> bool:
    """Whether ``needle`` occurs in ``haystack`` up to case, stem or typo."""
    return any(tokens_match(needle, h) for h in haystack)


def deletes1(word: str) -> set[str]:
    """The word and all its one-character deletions (SymSpell candidate keys, Garbe 2012)."""
    return {word} | {word[:i] + word[i + 1 :] for i in range(len(word))}


def join_words(ws: Sequence[str]) -> str:
    return " ".join(ws)
