"""Chat templates that read the clock (issue 11, item 9): the template's date is pinned by
default, so prompts rendered on different days share their prefix."""

import copy
import functools
import logging
from datetime import date, datetime

import pytest
from transformers import AutoTokenizer
from transformers.utils import chat_template_utils

from ragcache.engine import prompt as prompt_mod
from ragcache.engine.engine import LocalEngine
from ragcache.engine.prompt import DEFAULT_TEMPLATE_DATE, render_messages, resolve_template_date
from ragcache.models import LoadedModel, embedded_model_dir
from ragcache.prompt.volatile import first_divergence

# Llama 3.x style: "Cutting Knowledge Date / Today Date" in the system header, even without a
# system message; date_string from strftime_now when the caller gives none (3.2 and later).
LLAMA_STYLE = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}"""

# Granite 3.x style: strftime_now called directly inside the default system message.
GRANITE_STYLE = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = "Knowledge Cutoff Date: April 2024.\\nToday's Date: " + strftime_now('%B %d, %Y') + ".\\nYou are Granite, developed by IBM." %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- '<|start_of_role|>system<|end_of_role|>' + system_message + '<|end_of_text|>\\n' }}
{%- for message in loop_messages %}
    {{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}"""

PLAIN = """{%- for message in messages %}{{ message['role'] + ': ' + message['content'] + '\\n' }}{%- endfor %}
{%- if add_generation_prompt %}assistant: {% endif %}"""

SYSTEM = "You answer questions about the Python standard library from the given documents only. " * 6
DAYS = (datetime(2026, 3, 9, 23, 59), datetime(2026, 3, 10, 0, 1))


class _Clock:
    """Stands in for the ``datetime`` class transformers' ``strftime_now`` reads."""

    day = DAYS[0]

    @classmethod
    def now(cls, tz=None):
        return cls.day


@pytest.fixture()
def clock(monkeypatch):
    monkeypatch.setattr(chat_template_utils, "datetime", _Clock)
    monkeypatch.setattr(prompt_mod, "_warned", set())
    return _Clock


@functools.lru_cache(maxsize=1)
def _base_tokenizer():
    return AutoTokenizer.from_pretrained(str(embedded_model_dir()))


def tokenizer(template):
    tok = copy.deepcopy(_base_tokenizer())
    tok.chat_template = template
    return tok


def msgs(question, system=True):
    user = {"role": "user", "content": [{"type": "text", "text": "csv.reader yields rows as lists."},
                                        {"type": "text", "text": question}]}
    return [{"role": "system", "content": SYSTEM}, user] if system else [user]


def on_day(clock, day, tok, messages, **kw):
    clock.day = day
    return render_messages(tok, messages, **kw)


@pytest.mark.parametrize("template,expected,system", [
    (LLAMA_STYLE, "Today Date: 26 Jul 2024", True),
    (LLAMA_STYLE, "Today Date: 26 Jul 2024", False),
    (GRANITE_STYLE, "Today's Date: July 26, 2024.", False),  # Granite dates only its default system message
], ids=["llama-system", "llama-no-system", "granite"])
def test_two_days_render_identically_by_default(clock, template, expected, system):
    tok = tokenizer(template)
    a = on_day(clock, DAYS[0], tok, msgs("What does csv.reader yield?", system))
    b = on_day(clock, DAYS[1], tok, msgs("What does csv.reader yield?", system))
    assert a.input_ids == b.input_ids
    assert expected in a.text


@pytest.mark.parametrize("template,day0,day1", [
    (LLAMA_STYLE, "Today Date: 09 Mar 2026", "Today Date: 10 Mar 2026"),
    (GRANITE_STYLE, "Today's Date: March 09, 2026.", "Today's Date: March 10, 2026."),
], ids=["llama", "granite"])
def test_live_clock_diverges_at_the_date_line(clock, template, day0, day1):
    tok = tokenizer(template)
    a = on_day(clock, DAYS[0], tok, msgs("Q?", system=False), template_date="live")
    b = on_day(clock, DAYS[1], tok, msgs("Q?", system=False), template_date="live")
    assert day0 in a.text and day1 in b.text
    cut = first_divergence(a.input_ids, b.input_ids)
    assert cut is not None and cut < len(tok.encode(a.text[:a.text.index(day0) + len(day0)],
                                                    add_special_tokens=False))


@pytest.mark.parametrize("pin,llama,granite", [
    (date(2025, 1, 31), "Today Date: 31 Jan 2025", "Today's Date: January 31, 2025."),
    ("2023-12-05", "Today Date: 05 Dec 2023", "Today's Date: December 05, 2023."),
    (datetime(2024, 2, 29, 13, 30), "Today Date: 29 Feb 2024", "Today's Date: February 29, 2024."),
])
def test_pinned_date_is_configurable(clock, pin, llama, granite):
    for template, want in ((LLAMA_STYLE, llama), (GRANITE_STYLE, granite)):
        tok = tokenizer(template)
        a = on_day(clock, DAYS[0], tok, msgs("Q?", system=False), template_date=pin)
        b = on_day(clock, DAYS[1], tok, msgs("Q?", system=False), template_date=pin)
        assert want in a.text and a.input_ids == b.input_ids


def test_llama_31_default_is_unchanged_by_the_pin(clock):
    """Llama 3.1's template falls back to "26 Jul 2024" itself; the default pin renders the same."""
    tok = tokenizer(LLAMA_STYLE.replace('strftime_now is defined', 'false'))
    ours = render_messages(tok, [{"role": "user", "content": "hi"}]).text
    theirs = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert ours == theirs and "Today Date: 26 Jul 2024" in ours


def test_warns_once_per_clock_reading_template(clock, caplog):
    with caplog.at_level(logging.WARNING, logger="ragcache.engine.prompt"):
        for _ in range(3):
            render_messages(tokenizer(LLAMA_STYLE), msgs("Q?"))
        assert len([r for r in caplog.records if "reads the clock" in r.getMessage()]) == 1
        assert "pins its date to 2024-07-26" in caplog.text and "template_date=" in caplog.text
        render_messages(tokenizer(GRANITE_STYLE), msgs("Q?", system=False))
        render_messages(tokenizer(GRANITE_STYLE), msgs("Q?", system=False))
        assert len([r for r in caplog.records if "reads the clock" in r.getMessage()]) == 2
        caplog.clear()
        render_messages(tokenizer(PLAIN), msgs("Q?"))
        assert not caplog.records


def test_template_without_clock_renders_as_before(clock):
    tok = tokenizer(PLAIN)
    m = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    assert render_messages(tok, m).text == tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True)


@pytest.mark.parametrize("bad", ["yesterday", "31/01/2025", "now"])
def test_bad_template_date_names_the_fix(tiny, bad):
    with pytest.raises(ValueError, match="template_date must be"):
        LocalEngine(tiny, template_date=bad)


def test_resolve_template_date():
    assert resolve_template_date(None) == DEFAULT_TEMPLATE_DATE
    assert resolve_template_date("live") is None
    assert resolve_template_date(date(2025, 5, 1)) == datetime(2025, 5, 1)


@pytest.mark.parametrize("template_date,reuses_system", [(None, True), ("live", False)])
def test_engine_prefix_reuse_across_days(clock, tiny, template_date, reuses_system):
    """Day two reuses the whole system prefix when the date is pinned; with the live clock
    reuse stops before the date line (the issue's 32-of-3,500 tokens)."""
    tok = tokenizer(LLAMA_STYLE)
    engine = LocalEngine(LoadedModel(tiny.model, tok, tiny.fingerprint), block_size=16,
                         template_date=template_date)
    clock.day = DAYS[0]
    engine.generate(msgs("What does csv.reader yield?"), max_new_tokens=1)
    clock.day = DAYS[1]
    second = engine.build_prompt(msgs("What does csv.writer do?"))
    hit = engine.generate(second, max_new_tokens=1)
    ref = engine.generate(second, max_new_tokens=1, use_prefix_cache=False)
    system_end = len(tok.encode(second.text[:second.text.index(SYSTEM.strip()) + len(SYSTEM.strip())],
                                add_special_tokens=False))
    date_pos = len(tok.encode(second.text[:second.text.index("Today Date")], add_special_tokens=False))
    if reuses_system:
        assert hit.stats.prefix_tokens_reused >= system_end - 16
    else:
        assert hit.stats.prefix_tokens_reused <= date_pos + 16
    assert (hit.first_logits - ref.first_logits).abs().max() < 1e-4


@pytest.mark.parametrize("call,want", [
    ("strftime_now('%Y-%m-%d')", '"2024-07-26"'),
    ('strftime_now( "%A, %d %B" )', '"Friday, 26 July"'),
    ("strftime_now('%H:%M')", '"00:00"'),
])
def test_pin_template_clock_replaces_literal_calls(call, want):
    out, complete = prompt_mod.pin_template_clock("{{- 'Today: ' + " + call + " }}", DEFAULT_TEMPLATE_DATE)
    assert complete and want in out and "strftime_now" not in out


def test_computed_format_cannot_be_pinned_and_says_so(clock, caplog):
    tok = tokenizer("{%- set f = '%d %b %Y' %}{{ 'Today: ' + strftime_now(f) + '\\n' }}"
                    "{%- for m in messages %}{{ m['content'] }}{% endfor %}")
    with caplog.at_level(logging.WARNING, logger="ragcache.engine.prompt"):
        a = on_day(clock, DAYS[0], tok, [{"role": "user", "content": "hi"}])
    assert "cannot pin" in caplog.text
    assert "Today: 09 Mar 2026" in a.text  # rendered as the template says, not silently changed
