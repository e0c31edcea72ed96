"""Text the hit decision cannot read is matched exactly (issue 39, section 1).

The packaged all-MiniLM-L6-v2 maps most Han, Thai and Georgian (and much Hangul) to ``[UNK]``,
and the word guards read English ``[a-z0-9]`` words only: two questions in another script that
differ by a negation, an antonym, a unit, a place or a direction were served each other's answer.
The coverage gate (:mod:`ragcache.semantic.decision.coverage`) serves such questions only as exact
repeats, for ten scripts and English frames around names in other scripts, through the default
guards, the learned verifier and ``max_error``, with the real embedder at the defaults. A language is
matched by similarity only when declared (``languages=``), and then the script-agnostic guards
compare digits, symbols and names.
"""

from __future__ import annotations

import re

import pytest

from guard_cases import both
from ragcache.semantic import SemanticCache, partition_key
from ragcache.semantic.decision.coverage import CoverageGate
from ragcache.semantic.embedding import resolve_embedder
from ragcache.semantic.text import normalize_question
from ragcache.testing import HashingEmbedder

# script -> [(kind, question, a different question)]
SCRIPTS: dict[str, list[tuple[str, str, str]]] = {
    "Greek": [
        ("negation", "Είναι ανοιχτό το κατάστημα;", "Δεν είναι ανοιχτό το κατάστημα;"),
        ("antonym", "Πώς ανοίγω την πόρτα;", "Πώς κλείνω την πόρτα;"),
        ("unit", "Πόσα χιλιόμετρα είναι η διαδρομή;", "Πόσα μίλια είναι η διαδρομή;"),
        ("place", "Ποια είναι η πρωτεύουσα της Ελλάδας;", "Ποια είναι η πρωτεύουσα της Κύπρου;"),
        ("direction", "Πόσο κοστίζει το εισιτήριο από την Αθήνα στη Θεσσαλονίκη;",
         "Πόσο κοστίζει το εισιτήριο από τη Θεσσαλονίκη στην Αθήνα;"),
    ],
    "Cyrillic": [
        ("negation", "Почему дверь открывается?", "Почему дверь не открывается?"),
        ("antonym", "Как включить уведомления?", "Как выключить уведомления?"),
        ("unit", "Сколько килограммов в тонне?", "Сколько граммов в тонне?"),
        ("place", "Какая столица Франции?", "Какая столица Германии?"),
        ("direction", "Сколько стоит билет из Москвы в Казань?", "Сколько стоит билет из Казани в Москву?"),
    ],
    "Arabic": [
        ("negation", "هل المتجر مفتوح؟", "هل المتجر غير مفتوح؟"),
        ("antonym", "كيف أفتح الباب؟", "كيف أغلق الباب؟"),
        ("unit", "كم كيلومترا إلى المطار؟", "كم ميلا إلى المطار؟"),
        ("place", "ما هي عاصمة مصر؟", "ما هي عاصمة المغرب؟"),
        ("direction", "كم ثمن التذكرة من القاهرة إلى دبي؟", "كم ثمن التذكرة من دبي إلى القاهرة؟"),
    ],
    "Hebrew": [
        ("negation", "למה הדלת נפתחת?", "למה הדלת לא נפתחת?"),
        ("antonym", "איך מפעילים את ההתראות?", "איך מכבים את ההתראות?"),
        ("unit", "כמה קילומטרים עד העיר?", "כמה מטרים עד העיר?"),
        ("place", "מה בירת צרפת?", "מה בירת איטליה?"),
        ("direction", "כמה עולה טיסה מתל אביב לאילת?", "כמה עולה טיסה מאילת לתל אביב?"),
    ],
    "Devanagari": [
        ("negation", "दरवाज़ा क्यों खुलता है?", "दरवाज़ा क्यों नहीं खुलता है?"),
        ("antonym", "दुकान कब खुलती है?", "दुकान कब बंद होती है?"),
        ("unit", "शहर कितने किलोमीटर दूर है?", "शहर कितने मील दूर है?"),
        ("place", "भारत की राजधानी क्या है?", "नेपाल की राजधानी क्या है?"),
        ("direction", "दिल्ली से मुंबई का किराया कितना है?", "मुंबई से दिल्ली का किराया कितना है?"),
    ],
    "Han": [
        ("negation", "商店开门了吗", "商店没开门吗"),
        ("antonym", "商店开门了吗", "商店关门了吗"),
        ("unit", "到机场有多少公里", "到机场有多少英里"),
        ("place", "法国的首都是哪里", "德国的首都是哪里"),
        ("direction", "从北京到上海的票多少钱", "从上海到北京的票多少钱"),
    ],
    "Hangul": [
        ("negation", "가게가 열려 있나요?", "가게가 열려 있지 않나요?"),
        ("antonym", "문을 어떻게 여나요?", "문을 어떻게 닫나요?"),
        ("unit", "공항까지 몇 킬로미터인가요?", "공항까지 몇 마일인가요?"),
        ("place", "프랑스의 수도는 어디인가요?", "독일의 수도는 어디인가요?"),
        ("direction", "서울에서 부산까지 기차표는 얼마인가요?", "부산에서 서울까지 기차표는 얼마인가요?"),
    ],
    "Kana": [
        ("negation", "みせはあいていますか", "みせはあいていませんか"),
        ("antonym", "ドアをどうやってあけますか", "ドアをどうやってしめますか"),
        ("unit", "くうこうまでなんキロですか", "くうこうまでなんマイルですか"),
        ("place", "フランスのしゅとはどこですか", "ドイツのしゅとはどこですか"),
        ("direction", "とうきょうからおおさかまでいくらですか", "おおさかからとうきょうまでいくらですか"),
    ],
    "Thai": [
        ("negation", "ร้านเปิดอยู่ไหม", "ร้านไม่เปิดอยู่ไหม"),
        ("antonym", "เปิดประตูอย่างไร", "ปิดประตูอย่างไร"),
        ("unit", "สนามบินอยู่ห่างกี่กิโลเมตร", "สนามบินอยู่ห่างกี่ไมล์"),
        ("place", "เมืองหลวงของฝรั่งเศสคืออะไร", "เมืองหลวงของเยอรมนีคืออะไร"),
        ("direction", "ตั๋วจากกรุงเทพไปเชียงใหม่ราคาเท่าไร", "ตั๋วจากเชียงใหม่ไปกรุงเทพราคาเท่าไร"),
    ],
    "Georgian": [
        ("negation", "მაღაზია ღიაა?", "მაღაზია არ არის ღია?"),
        ("antonym", "როგორ გავხსნა კარი?", "როგორ დავხურო კარი?"),
        ("unit", "რამდენი კილომეტრია აეროპორტამდე?", "რამდენი მილია აეროპორტამდე?"),
        ("place", "რა არის საფრანგეთის დედაქალაქი?", "რა არის გერმანიის დედაქალაქი?"),
        ("direction", "რა ღირს ბილეთი თბილისიდან ბათუმამდე?", "რა ღირს ბილეთი ბათუმიდან თბილისამდე?"),
    ],
}

# English frames around names in other scripts: (script of the name, question, another name)
NAMES = [
    ("Georgian", "What is the capital of საქართველო?", "What is the capital of საფრანგეთი?"),
    ("Georgian", "How far is თბილისი from the coast?", "How far is ქუთაისი from the coast?"),
    ("Thai", "Who founded ไทยแอร์เอเชีย?", "Who founded การบินไทย?"),
    ("Thai", "What is the population of เชียงใหม่?", "What is the population of ภูเก็ต?"),
    ("Han", "How far is 東京 from here?", "How far is 大阪 from here?"),
    ("Hangul", "What is the population of 서울?", "What is the population of 부산?"),
    ("Greek", "When was Αθήνα founded?", "When was Σπάρτη founded?"),
    ("Cyrillic", "What is the weather in Москва today?", "What is the weather in Киев today?"),
    ("Arabic", "How do I get to القاهرة?", "How do I get to الإسكندرية?"),
    ("Hebrew", "Where is ירושלים?", "Where is חיפה?"),
    ("Devanagari", "What is the best food in मुंबई?", "What is the best food in दिल्ली?"),
]

CASES = [(script, kind, a, b) for script, ps in SCRIPTS.items() for kind, x, y in ps for a, b in both([(x, y)])]
NAME_CASES = [(script, a, b) for script, x, y in NAMES for a, b in both([(x, y)])]


@pytest.fixture(scope="module")
def embedder():
    from ragcache.semantic.embedding import resolve_embedder

    return resolve_embedder(None)


@pytest.fixture(scope="module")
def caches(embedder):
    """The default cache, the guards at a low threshold (the gate, not the cosine, refuses), the
    learned verifier, and ``max_error``."""
    with SemanticCache(embedder=embedder) as d, SemanticCache(embedder=embedder, threshold=0.5) as low, \
            SemanticCache(embedder=embedder, guards="verifier") as v, \
            SemanticCache(embedder=embedder, max_error=0.05) as bounded:
        yield {"default": d, "guards at 0.5": low, "verifier": v, "max_error": bounded}


def _refused_and_repeats_served(caches, script: str, stored: str, asked: str, tag: str,
                                names: tuple[str, ...] = ("default",)) -> None:
    for name in names:  # the refusal is the gate's, whatever the cosine: see candidates_for below
        c = caches[name]
        pk = partition_key(namespace=f"{tag}-{name}-{hash((stored, asked)) & 0xffffff}", model="m")
        c.store(stored, "the stored answer", partition=pk)
        assert c.lookup(asked, partition=pk) is None, (name, [(x.similarity, x.verdict) for x in
                                                              c.candidates_for(asked, partition=pk)])
        best = c.candidates_for(asked, partition=pk, threshold=0.0)[0]
        assert best.verdict.reason == "coverage" and script in best.verdict.detail, (name, best)
        assert best.verdict.detail.startswith("not read"), best.verdict.detail
        for again in (stored, f" {stored.replace(' ', chr(0xa0))} "):  # an exact repeat is served
            hit = c.lookup(again, partition=pk)
            assert hit is not None and hit.answer == "the stored answer", (name, again)


@pytest.mark.parametrize(("script", "kind", "stored", "asked"), CASES)
def test_another_question_in_another_script_is_refused_and_repeats_served(caches, script, kind, stored, asked):
    _refused_and_repeats_served(caches, script, stored, asked, f"{script}-{kind}")


@pytest.mark.parametrize(("script", "stored", "asked"), NAME_CASES)
def test_an_english_frame_around_a_name_in_another_script(caches, script, stored, asked):
    _refused_and_repeats_served(caches, script, stored, asked, f"name-{script}")


BEHIND = [*((script, a, b) for script, ps in SCRIPTS.items() for a, b in both([ps[0][1:]])),  # negation
          *((script, ps[3][1], ps[3][2]) for script, ps in SCRIPTS.items()),  # place
          *NAMES[::3]]


@pytest.mark.parametrize(("script", "stored", "asked"), BEHIND)
def test_the_verifier_and_max_error_decide_behind_the_gate(caches, script, stored, asked):
    """The same refusals through the learned verifier and ``max_error`` (a negation in both directions
    and a place per script, and English frames around names)."""
    _refused_and_repeats_served(caches, script, stored, asked, f"behind-{script}", ("verifier", "max_error"))


def test_the_refusal_names_what_is_not_read(caches):
    c = caches["guards at 0.5"]
    pk = partition_key(namespace="names-why", model="m")
    c.store("이 가게는 지금 열려 있나요?", "A", partition=pk)
    why = c.candidates_for("이 가게는 지금 닫혀 있나요?", partition=pk, threshold=0.0)[0].verdict
    assert why.reason == "coverage" and re.match(r"not read: 5 words in Hangul", why.detail), why
    c.store("商店开门了吗", "A", partition=pk)
    why = c.candidates_for("商店关门了吗", partition=pk, threshold=0.0)[0].verdict
    assert why.detail.startswith("not read: 6 characters in Han") and "word pieces unknown to the embedder" in why.detail
    before = c.stats.rejections.get("coverage", 0)
    assert c.lookup("商店关门了吗", partition=pk) is None
    assert c.stats.rejections["coverage"] == before + 1


def test_an_english_question_with_an_emoji_the_embedder_cannot_read(caches):
    """An emoji is ``[UNK]`` to MiniLM: two questions that differ only there embed alike."""
    c = caches["guards at 0.5"]
    pk = partition_key(namespace="emoji", model="m")
    c.store("What does the 🔥 reaction mean?", "A", partition=pk)
    assert c.lookup("What does the 🤡 reaction mean?", partition=pk) is None
    assert c.lookup("What does the 🔥 reaction mean?", partition=pk).answer == "A"


def test_latin_letters_outside_english_and_other_languages_in_latin_letters(caches):
    c = caches["guards at 0.5"]
    pk = partition_key(namespace="latin", model="m")
    for stored, asked, what in [
        ("Wie kann ich mein Passwort nicht zurucksetzen?", "Wie kann ich mein Passwort zurucksetzen?", "German"),
        ("Est-ce que le magasin est ouvert le dimanche?", "Est-ce que le magasin est ferme le dimanche?", "French"),
        ("What is the population of Zürich?", "What is the population of Genève?", "Latin letters outside English"),
    ]:
        c.store(stored, "A", partition=pk)
        v = c.candidates_for(asked, partition=pk, threshold=0.0)[0].verdict
        assert v.reason == "coverage" and what in v.detail, (asked, v)
        assert c.lookup(asked, partition=pk) is None
        assert c.lookup(stored, partition=pk).answer == "A"


def test_english_paraphrases_still_hit(caches):
    for name in ("default", "verifier"):
        c = caches[name]
        pk = partition_key(namespace=f"en-{name}", model="m")
        c.store("How do I reset my password?", "A", partition=pk)
        assert c.lookup("How can I reset my password?", partition=pk).answer == "A"
        assert c.lookup("How can I reset my password?", partition=pk).answer == "A"


def test_a_lone_greek_letter_is_a_symbol_compared_as_text(caches):
    """"π" in an English question is not a Greek word: the question is read, and the ``script`` guard
    compares the letter as text."""
    c = caches["guards at 0.5"]
    pk = partition_key(namespace="pi", model="m")
    c.store("What is the value of π to five places?", "A", partition=pk)
    v = c.candidates_for("What is the value of λ to five places?", partition=pk, threshold=0.0)[0].verdict
    assert v.reason == "script", v
    assert c.lookup("What's the value of π to five places?", partition=pk).answer == "A"


# ------------------------------------------------------------------ language as configuration

def test_declaring_a_language_needs_a_multilingual_embedder(embedder):
    with pytest.raises(ValueError, match="multilingual embedder"):
        SemanticCache(embedder=embedder, languages=("en", "ru"))
    with pytest.raises(ValueError, match="unknown language codes"):
        SemanticCache(embedder=HashingEmbedder(), languages=("en", "klingon"))
    with pytest.raises(TypeError, match="tuple of language codes"):
        SemanticCache(embedder=HashingEmbedder(), languages="en")
    assert SemanticCache(embedder=embedder, languages=["en"]).coverage.languages == ("en",)


def test_a_declared_language_is_matched_and_its_names_digits_and_symbols_compared():
    """HashingEmbedder stands for a multilingual embedder (its tokenizer unknown: only the scripts
    are checked). Declared, Russian is matched by similarity; the script-agnostic guards still tell
    names, digits of another script and symbols apart."""
    emb = HashingEmbedder(64)
    with SemanticCache(embedder=emb, threshold=0.5, languages=("en", "ru")) as ru, \
            SemanticCache(embedder=emb, threshold=0.5) as en:
        pk = partition_key(namespace="ru", model="m")
        for c in (ru, en):
            c.store("Какая столица Франции?", "Париж", partition=pk)
        assert ru.lookup("Какая столица Франции?!", partition=pk).answer == "Париж"  # similarity, not exact
        assert en.lookup("Какая столица Франции?!", partition=pk) is None  # not declared: exact only
        assert en.lookup("Какая столица Франции?", partition=pk).answer == "Париж"
        v = ru.candidates_for("Какая столица Германии?", partition=pk, threshold=0.0)[0].verdict
        assert v.reason == "script", v  # a capitalised Cyrillic word after the first: a name
        for stored, asked, reason in [
            ("What is the weather in Москва today?", "What is the weather in Киев today?", "script"),
            ("Сколько стоит билет за ٣ дня?", "Сколько стоит билет за ٤ дня?", "number"),
            ("Сколько стоит билет за 3 дня?", "Сколько стоит билет за ٤ дня?", "number"),
            ("Сколько стоит билет в €?", "Сколько стоит билет в £?", "symbol"),  # symbols of any script
            ("Какой знак ≤?", "Какой знак ≥?", "symbol"),
        ]:
            ru.store(stored, "A", partition=pk)
            assert ru.candidates_for(asked, partition=pk, threshold=0.0)[0].verdict.reason == reason, (stored, asked)
        ru.store("Сколько стоит билет за 3 дня?", "A", partition=pk)
        assert ru.lookup("Сколько стоит билет за ٣ дня?", partition=pk).answer == "A"  # one number, two scripts


def test_languages_any_reads_every_script_but_not_unknown_pieces(embedder):
    gate = CoverageGate(resolve_embedder(HashingEmbedder()), "any")  # no tokenizer: no unknown pieces
    assert gate.check(normalize_question("商店开门了吗"), normalize_question("商店关门了吗")) is None
    with pytest.raises(ValueError, match="multilingual"):
        CoverageGate(embedder, "any")


def test_the_verifier_path_refuses_through_the_gate(caches, embedder):
    """The learned verifier is behind the gate too (its own exact-repeat rule is unchanged)."""
    v = caches["verifier"]
    assert type(v.guards).__name__ == "LearnedVerifier"
    pk = partition_key(namespace="verifier-gate", model="m")
    v.store("Почему дверь открывается?", "A", partition=pk)
    assert v.candidates_for("Почему дверь не открывается?", partition=pk, threshold=0.0)[0].verdict.reason == "coverage"


def test_postgresql_cache_has_the_same_gate(pg_server):
    pytest.importorskip("psycopg")
    from ragcache.semantic.pg_cache import PgSemanticCache

    c = PgSemanticCache(pg_server.url, embedder=HashingEmbedder(64), schema="t_coverage_gate", threshold=0.5)
    try:
        pk = partition_key(namespace="pg-gate", model="m")
        c.store("商店开门了吗", "A", partition=pk)
        assert c.lookup("商店关门了吗", partition=pk) is None
        assert c.candidates_for("商店关门了吗", partition=pk, threshold=0.0)[0].verdict.reason == "coverage"
        assert c.lookup("商店开门了吗", partition=pk).answer == "A"
        with pytest.raises(ValueError, match="unknown language"):
            PgSemanticCache(pg_server.url, embedder=HashingEmbedder(64), schema="t_coverage_gate", languages=("xx",))
    finally:
        c.clear()
        c.close()
