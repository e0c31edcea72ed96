"""Scripts, languages and what the hit decision reads (pure helpers of issue 39's coverage gate)."""

from __future__ import annotations

import pytest

from ragcache.semantic.decision.coverage import CoverageGate, Reading
from ragcache.semantic.decision.meaning_guards import ScriptGuard, unread_text
from ragcache.semantic.scripts import check_languages, latin_language, script_of, script_words
from ragcache.semantic.embedding import QuestionEmbedder
from ragcache.semantic.text import fold_text, normalize_question, numbers
from ragcache.testing import HashingEmbedder


@pytest.mark.parametrize(("ch", "script"), [("a", "Latin"), ("ü", "Latin"), ("α", "Greek"), ("д", "Cyrillic"),
                                            ("ب", "Arabic"), ("ש", "Hebrew"), ("क", "Devanagari"), ("店", "Han"),
                                            ("は", "Kana"), ("カ", "Kana"), ("가", "Hangul"), ("ก", "Thai"),
                                            ("ა", "Georgian"), ("ℓ", "symbol"), ("3", None), ("?", None), ("€", None)])
def test_script_of(ch, script):
    assert script_of(ch) == script


def test_script_words_split_runs_by_script_and_count_unspaced_scripts_in_characters():
    ws = script_words("How many μm in 商店开门?")
    assert [(w.text, w.script, w.size) for w in ws] == [("How", "Latin", 1), ("many", "Latin", 1), ("μ", "Greek", 1),
                                                        ("m", "Latin", 1), ("in", "Latin", 1), ("商店开门", "Han", 4)]
    assert [w.text for w in script_words("दरवाज़ा क्यों")] == ["दरवाज़ा", "क्यों"]  # vowel signs stay in the word


@pytest.mark.parametrize(("text", "lang"), [
    ("Wie kann ich mein Passwort nicht zurucksetzen?", "de"),
    ("Est-ce que le magasin est ouvert le dimanche?", "fr"),
    ("Donde esta la estacion de tren?", "es"),
    ("Hoe kan ik mijn wachtwoord wijzigen?", "nl"),
    ("Como posso mudar minha senha?", "pt"),
    ("What are the best hotels in Los Angeles and Las Vegas?", "en"),
    ("How many emails per day come in?", "en"),
    ("What is the de facto standard for DOS and OS images?", "en"),
])
def test_latin_language(text, lang):
    assert latin_language(text) == lang


def test_check_languages():
    assert check_languages(["EN", "de", "en"]) == ("en", "de")
    assert check_languages("any") == ("*",)
    with pytest.raises(ValueError, match="unknown language codes"):
        check_languages(("en", "xx"))
    with pytest.raises(ValueError):
        check_languages(())
    with pytest.raises(TypeError):
        check_languages("en")


def _Emb(unknown=(0, 0)) -> QuestionEmbedder:
    """A multilingual embedder whose tokenizer finds ``unknown`` (unknown pieces, pieces) in any text."""
    return QuestionEmbedder(HashingEmbedder(16).encode, name="a-multilingual-model", fingerprint="multilingual",
                            count_unknown=lambda text: unknown)


def test_reading_names_what_is_not_read():
    gate = CoverageGate(_Emb())
    assert gate.reading("이 가게는 지금 열려 있나요?").why_not() == "5 words in Hangul"
    assert gate.reading("商店开门了吗").why_not() == "6 characters in Han"
    assert gate.reading("What is the capital of საქართველო?").why_not() == "1 word in Georgian"
    assert gate.reading("Where is Zürich?").why_not() == "1 word in Latin letters outside English"
    assert gate.reading("Wie kann ich mein Passwort nicht zurucksetzen?").why_not() == "7 words in German"
    assert gate.reading("What is the value of π?").why_not() is None  # a lone letter is a symbol
    assert gate.reading("How do I reset my password?").why_not() is None
    assert CoverageGate(_Emb((2, 9))).reading("What does 🔥 mean?").why_not() == \
        "2 of 9 word pieces unknown to the embedder"
    assert Reading(unknown=1, pieces=10).why_not(0.9) is None and Reading(unknown=2, pieces=10).why_not(0.9)


def test_the_gate_passes_exact_repeats_and_names_the_cached_question():
    gate = CoverageGate(_Emb())
    assert gate.check("商店开门了吗", "商店开门了吗") is None
    v = gate.check("How do I open the shop?", "商店开门了吗")
    assert v.reason == "coverage" and v.detail == "not read in the cached question: 6 characters in Han"
    ru = CoverageGate(_Emb(), ("en", "ru"))
    assert ru.check("Почему дверь открывается?", "Почему дверь не открывается?") is None
    assert ru.check("商店开门了吗", "商店关门了吗").reason == "coverage"
    de = CoverageGate(_Emb(), ("de",))
    assert de.check("Wo ist der Laden?", "Wo ist der Bahnhof?") is None
    assert de.check("Where is the shop?", "Where is the station?").detail == "not read: 4 words in English"
    with pytest.raises(ValueError, match="min_represented"):
        CoverageGate(_Emb(), min_represented=0)


@pytest.mark.parametrize(("a", "b"), [
    ("What is the capital of საქართველო?", "What is the capital of საფრანგეთი?"),
    ("Какая столица Франции?", "Какая столица Германии?"),
    ("What is the value of π?", "What is the value of λ?"),
    ("How much is it in €?", "How much is it in £?"),
    ("Is ≤ the same as <?", "Is ≥ the same as <?"),
])
def test_the_script_guard_compares_what_the_word_guards_cannot_read(a, b):
    assert ScriptGuard().check(a, b) is not None and ScriptGuard().check(b, a) is not None
    assert ScriptGuard().check(a, a) is None


def test_unread_text_of_plain_english_is_empty_and_japanese_is_one_script():
    assert unread_text("How do I reset my password?") == []
    assert unread_text("店は開いていますか") == []
    assert unread_text("Почему дверь не открывается?") == []  # a capital that starts the sentence


@pytest.mark.parametrize(("raw", "folded"), [("ＡＢＣ１２３", "ABC123"), ("ﬁle", "file"), ("µm", "μm"), ("a…b", "a...b"),
                                             ("ｶﾞ", "ガ"), ("3²", "3²"), ("H₂O", "H₂O"), ("½", "½"), ("①", "①"),
                                             ("㎡", "㎡"), ("e\u0301", "é"), ("a\u200bb", "ab")])
def test_fold_text_keeps_every_number(raw, folded):
    assert fold_text(raw) == folded


def test_numbers_of_every_script():
    assert numbers("٣ days") == ["3"] and numbers("३ days") == ["3"]
    assert numbers(normalize_question("What is 3²?")) == ["3", "²"]
    assert numbers("What is 32?") == ["32"]
