"""Breakpoints that only ever write (issue 39, section 2): a breakpoint class whose cache writes are
never read stops being placed (a net cost, said in the notes and the diagnosis), is re-probed, and
comes back when its prefix repeats; workloads that repeat documents keep their saving.

Cost is the project's own accounting (:class:`~ragcache.providers.anthropic.usage.CacheStats`, list
prices) over the usage that Anthropic's caching rules (:class:`~ragcache.server.cache_rules.ProviderPromptCache`,
what the local server applies) report: deterministic token counts, one token per character."""

from __future__ import annotations

import pytest

from ragcache.prompt.layout import PromptLayout
from ragcache.providers.anthropic.backend import AnthropicCaching
from ragcache.providers.anthropic.ledger import WriteLedger
from ragcache.server.cache_rules import ProviderPromptCache

MODEL = "claude-sonnet-4-5"
CHARS = len
SYSTEM = "Answer from the notes."


class Clock:
    t = 0.0

    def __call__(self):
        return self.t


def note(i: int) -> dict:
    return {"id": f"note-{i:03d}", "text": f"Note {i}: the heron was seen near marker {i * 7}. " * 12}


def run(workload, *, n=20, unread_writes=2, probe_every=8, system=SYSTEM, scope=lambda k: ""):
    """Answer ``n`` requests (``workload(k) -> documents``) through the caching rules; the caching object
    and each request's (placed, skipped, usage record)."""
    clock = Clock()
    rules = ProviderPromptCache(clock=clock, min_tokens=256)
    caching = AnthropicCaching(MODEL, token_counter=CHARS, min_tokens=256, warn=False, clock=clock,
                               unread_writes=unread_writes, probe_every=probe_every)
    out = []
    for k in range(n):
        lay = PromptLayout.build(question=f"Where was the heron seen, question {k}?", system=system,
                                 documents=workload(k), lint="off")
        req = caching.build(lay, max_tokens=8, scope=scope(k))
        outcome = rules.apply(MODEL, req.blocks, req.block_tokens, req.hashes)
        rec = caching.record(req, outcome.usage(8))
        out.append((req, rec))
        clock.t += 10
    return caching, out


def different(k):
    return [note(3 * k + j) for j in range(3)]


def same(k):
    return [note(j) for j in range(3)]


def test_different_documents_every_time_cost_no_more_than_five_percent_over_uncached():
    before, _ = run(different, unread_writes=None)
    assert before.stats.cache_read_tokens == 0 and before.stats.cost_ratio > 1.2  # the report: 1.24x
    caching, reqs = run(different)
    ratio = caching.stats.cost_ratio
    assert ratio <= 1.05, ratio
    placed = [bool(r.placed) for r, _ in reqs]
    assert placed[:2] == [True, True] and placed[2:9] == [False] * 7  # two unread writes, then not placed
    assert sum(placed) == 3  # and one probe among the 20 (then every 16)
    skipped = [s for r, _ in reqs for s in r.skipped if s.reason == "write-only"]
    assert skipped and "net cost" in skipped[0].detail and "net cost" in " ".join(reqs[2][0].notes)
    diagnosis = [d for _, rec in reqs for d in rec.diagnosis if "net cost" in d]
    assert len(diagnosis) == 1 and "wrote the cache 2 times" in diagnosis[0]
    print(f"different documents x20: {before.stats.cost_ratio:.3f}x uncached before, {ratio:.3f}x with the ledger")


@pytest.mark.parametrize("docs", [same, lambda k: [note(j % 2 * 100 + i) for i, j in [(0, k), (1, k), (2, k)]]],
                         ids=["same-documents", "two-sets-alternating"])
def test_workloads_that_repeat_documents_keep_their_saving(docs):
    before, _ = run(docs, unread_writes=None)
    after, reqs = run(docs)
    assert after.stats.cost_usd == pytest.approx(before.stats.cost_usd)  # nothing given up
    assert after.stats.cost_ratio < 0.5 and all(r.placed for r, _ in reqs)
    assert not any(s.reason == "write-only" for r, _ in reqs for s in r.skipped)
    print(f"{docs.__name__}: {after.stats.cost_ratio:.3f}x uncached")


def test_a_class_that_stopped_comes_back_when_its_prefix_repeats():
    seq = [different(k) for k in range(4)] + [different(3)] * 3  # four new sets, then the fourth again
    caching, reqs = run(lambda k: seq[k], n=len(seq))
    placed = [bool(r.placed) for r, _ in reqs]
    assert placed == [True, True, False, False, True, True, True]  # the repeat is placed at once...
    assert [rec.cache_read_tokens > 0 for _, rec in reqs[5:]] == [True, True]  # ...and read from then on
    assert caching.ledger.classes[("", "last-stable")].unread == 0


def test_probes_double_their_interval_and_scopes_learn_apart():
    caching, reqs = run(different, n=40, probe_every=4)
    placed = [k for k, (r, _) in enumerate(reqs) if r.placed]
    assert placed == [0, 1, 5, 13, 29]  # probes after 4, 8, 16 skipped requests
    # two tenants: one's unread writes never stop the other's breakpoints
    caching, reqs = run(lambda k: different(k) if k % 2 else same(k), n=12, scope=lambda k: f"t{k % 2}")
    assert all(r.placed for k, (r, _) in enumerate(reqs) if k % 2 == 0)
    assert not all(r.placed for k, (r, _) in enumerate(reqs) if k % 2 == 1)


def test_caller_markers_are_never_judged_and_bad_settings_are_refused():
    ledger = WriteLedger(stop_after=1)
    assert ledger.skip("last-stable", "h1") is None
    with pytest.raises(ValueError, match=">= 1"):
        WriteLedger(stop_after=0)
    with pytest.raises(ValueError, match=">= 1"):
        AnthropicCaching(MODEL, unread_writes=0)
    caching = AnthropicCaching(MODEL, token_counter=CHARS, min_tokens=256, warn=False)
    rules = ProviderPromptCache(min_tokens=256)
    for k in range(6):
        docs = different(k)
        body = {"model": MODEL, "max_tokens": 8, "system": SYSTEM, "messages": [{"role": "user", "content": [
            *({"type": "text", "text": d["text"]} for d in docs[:-1]),
            {"type": "text", "text": docs[-1]["text"], "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Where?"}]}]}
        req = caching.prepare(body, stable_end=0)  # the caller's marker on the last document
        rec = caching.record(req, rules.apply(MODEL, req.blocks, req.block_tokens, req.hashes).usage(8))
        assert [p.origin for p in req.placed] == ["caller"] and rec.cache_write_tokens > 0
