"""Stable-first prompt layout: byte stability, canonical document order, the volatile-text lint."""

import copy
import json

import pytest

from ragcache.prompt.layout import (
    PromptLayout,
    Segment,
    render_document,
)
from ragcache.app.lint import run_lint as lint_cli
from ragcache.prompt.volatile import find_volatile, first_divergence, move_volatile

DOCS = [
    {"id": "b", "text": "Bees make honey.", "metadata": {"source": "wiki", "lang": "en"}},
    {"id": "a", "text": "Ants live in colonies.", "metadata": {"lang": "en", "source": "book"}},
    "An untitled note about wasps.",
]


def test_segment_order_is_stable_first():
    lay = PromptLayout.build(question="Q?", system="Sys.", tools=[{"name": "t", "input_schema": {}}],
                             documents=DOCS, history=[{"role": "user", "content": "hi"},
                                                      {"role": "assistant", "content": "hello"}],
                             volatile="It is 10:00.", lint="off")
    kinds = [s.kind for s in lay.segments]
    assert [s.stability for s in lay.segments[:3]] == ["static", "static", "append-only"]
    assert [s.stable for s in lay.segments[-3:]] == [True, False, False]
    assert kinds == ["system", "tools", "history", "history", "document", "document", "document", "volatile", "question"]
    msgs = lay.to_messages()
    assert msgs[0] == {"role": "system", "content": "Sys."}
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    last = msgs[-1]["content"]
    assert [b["ragcache_kind"] for b in last] == ["document", "document", "document", "volatile", "question"]
    first = min((d for d in lay.documents), key=lambda d: (d.content_hash, d.render_hash))  # by content, not id
    assert last[-1]["text"] == "Q?" and last[0]["id"] == (first.id or first.content_hash[:16])


def test_time_of_day_moved_out_gives_identical_prefix():
    renders = []
    for clock in ("07:02", "19:45"):
        sys_text = f"You are a support assistant for Acme.\nCurrent time: {clock}. Answer briefly."
        lay = PromptLayout.build(question="How do I reset?", system=sys_text, documents=DOCS, lint="move")
        assert clock in lay.volatile and clock not in lay.system_text
        renders.append(lay)
    a, b = renders
    assert a.stable_text().encode() == b.stable_text().encode()
    assert a.system_text == "You are a support assistant for Acme.\nAnswer briefly."
    assert a.render() != b.render()  # the volatile segment still differs, after the stable prefix
    assert first_divergence(a.render(), b.render()) >= len(a.stable_text())


def test_without_move_the_time_breaks_the_prefix_and_warns():
    with pytest.warns(UserWarning, match="time"):
        a = PromptLayout.build(question="q", system="Now: 07:02", lint="warn")
    b = PromptLayout.build(question="q", system="Now: 07:03", lint="off")
    assert a.stable_text() != b.stable_text()
    with pytest.raises(ValueError, match="lint='move'"):
        PromptLayout.build(question="q", system="Today is Monday.", lint="raise")


def test_document_order_and_metadata_key_order_do_not_matter():
    shuffled = [DOCS[2], DOCS[0], DOCS[1]]
    reordered_meta = copy.deepcopy(DOCS)
    reordered_meta[0]["metadata"] = {"lang": "en", "source": "wiki"}
    base = PromptLayout.build(question="q", documents=DOCS, lint="off").stable_text().encode()
    assert PromptLayout.build(question="q", documents=shuffled, lint="off").stable_text().encode() == base
    assert PromptLayout.build(question="q", documents=reordered_meta, lint="off").stable_text().encode() == base
    given = PromptLayout.build(question="q", documents=shuffled, doc_order="given", lint="off")
    assert [d.text for d in given.documents] == [shuffled[0], "Bees make honey.", "Ants live in colonies."]


def test_render_document_bytes_and_hash():
    s1 = Segment("document", "Ants\r\nlive.  ", id="x", metadata={"z": 1, "a": "q\"r"})
    s2 = Segment("document", "Ants\nlive.", id="x", metadata={"a": "q\"r", "z": 1})
    assert render_document(s1) == render_document(s2) == '<document a="q&quot;r" z="1">\nAnts\nlive.\n</document>'
    assert render_document(s1) == render_document(Segment("document", "Ants\nlive.", id="y", metadata=s1.metadata))
    assert s1.content_hash == s2.content_hash
    assert s1.content_hash != Segment("document", "Ants live.", id="x").content_hash


def test_volatile_metadata_moved_and_duplicates_dropped():
    docs = [{"id": "a", "text": "t", "metadata": {"score": 0.91}}, {"id": "a", "text": "t", "metadata": {"score": 0.5}}]
    lay = PromptLayout.build(question="q", documents=docs, lint="move")
    assert len(lay.documents) == 1 and dict(lay.documents[0].metadata) == {}
    assert any(f.kind == "metadata" for f in lay.findings)


def test_tools_key_order_canonical_and_inputs_not_mutated():
    tools = [{"name": "search", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
              "description": "Search."}]
    swapped = [{"description": "Search.", "input_schema": {"properties": {"q": {"type": "string"}}, "type": "object"},
                "name": "search"}]
    history = [{"role": "user", "content": "hi"}]
    before = copy.deepcopy((tools, history, DOCS))
    a = PromptLayout.build(question="q", tools=tools, history=history, documents=DOCS, lint="off")
    b = PromptLayout.build(question="q", tools=swapped, history=history, documents=DOCS, lint="off")
    assert json.dumps(a.tools) == json.dumps(b.tools)
    assert (tools, history, DOCS) == before
    a.tools[0]["name"] = "changed"
    a.history[0]["content"] = "changed"
    assert a.tools[0]["name"] == "search" and a.history[0]["content"] == "hi"


@pytest.mark.parametrize("text,kind", [
    ("on 2026-11-29T07:02:00Z", "datetime"), ("at 7:45 pm", "time"),
    ("Friday", "weekday"), ("id 123e4567-e89b-12d3-a456-426614174000", "uuid"), ("request_id: abc123", "request-id"),
    ("turn #12", "counter"), ("ts 1764400000", "epoch"), ("March 3, 2025", "date"),
])
def test_find_volatile_kinds(text, kind):
    assert [f.kind for f in find_volatile(text)] == [kind]


def test_find_volatile_ignores_stable_text():
    assert find_volatile("You answer questions about Python 3.11 modules. Be concise; cite documents.") == []


def test_move_volatile_keeps_other_sentences():
    stable, moved, found = move_volatile("Be brief. The date is 2026-11-29. Cite sources.\nNo chit-chat.")
    assert stable == "Be brief. Cite sources.\nNo chit-chat."
    assert moved == "The date is 2026-11-29." and found


def test_build_rejects_bad_input():
    with pytest.raises(ValueError, match="question"):
        PromptLayout.build(question="  ")
    with pytest.raises(ValueError, match="text"):
        PromptLayout.build(question="q", documents=[{"id": 1}])
    with pytest.raises(ValueError, match="history"):
        PromptLayout.build(question="q", history=[{"role": "system", "content": "x"}])
    with pytest.raises(ValueError, match="doc_order"):
        PromptLayout.build(question="q", doc_order="score")


def test_lint_cli_reports_divergence_token(tmp_path, capsys):
    def req(t):
        return {"system": f"Help users. Current time: {t}.",
                "messages": [{"role": "user", "content": [{"type": "text", "text": "doc"}, {"type": "text", "text": "q"}]}]}
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(req("07:02")))
    b.write_text(json.dumps(req("08:15")))
    clean = req("x")
    clean["system"] = "Help users."
    c.write_text(json.dumps(clean))
    assert lint_cli(str(a), str(b)) == 1
    out = capsys.readouterr().out
    assert "first divergence at token" in out and "system[0]" in out and "07:02" in out
    assert lint_cli(str(c), None) == 0
    d = tmp_path / "d.json"
    other_q = copy.deepcopy(clean)
    other_q["messages"][0]["content"][1]["text"] = "another question"
    d.write_text(json.dumps(other_q))
    assert lint_cli(str(c), str(d)) == 0  # only the question differs
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert lint_cli(str(bad), None) == 2
