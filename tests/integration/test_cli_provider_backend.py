"""Issue 50, item 4: ``ragcache ask --backend anthropic|openai --model M`` answers a miss with the provider's
API (key and base URL from the usual variables), against ragcache's own Anthropic- and OpenAI-compatible
servers over a tiny model: the same layers (a repeat is a semantic hit, no call), labels and stats."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner

from cli_doubles import home, write_notes  # noqa: F401 - fixtures
from ragcache.app.cli import app
from ragcache.server.app import running_server

pytest.importorskip("openai")
pytest.importorskip("anthropic")

runner = CliRunner()
pytestmark = pytest.mark.engine({"seed": 1, "initializer_range": 0.2}, calibration=False)  # greedy tokens vary: a non-blank answer
ENV = {"anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", ""), "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1")}


@pytest.fixture(scope="module")
def base_url(engine):
    with running_server(engine, min_tokens=64) as url:
        yield url


@pytest.fixture(scope="module")
def served_model(base_url):
    return httpx.get(f"{base_url}/v1/models").json()["data"][0]["id"]


def _ask(*args):
    return runner.invoke(app, ["ask", *args], catch_exceptions=False)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_ask_answers_with_a_provider_backend_and_hits_on_a_repeat(home, tmp_path, monkeypatch, base_url,
                                                                  served_model, kind):
    key, url, suffix = ENV[kind]
    monkeypatch.setenv(key, "local")
    monkeypatch.setenv(url, base_url + suffix)
    notes = write_notes(tmp_path / "notes")
    args = ["--docs", str(notes), "--backend", kind, "--model", served_model, "--max-new-tokens", "8"]
    first = _ask(*args, "--json", "When do backups run?")
    assert first.exit_code == 0, first.output
    a = json.loads(first.stdout)
    assert a["layer"] in ("provider", "provider-cache") and a["model_loaded"] is False
    assert a["usage"]["prompt_tokens"] > 0 and a["finish_reason"] in ("stop", "length")
    again = _ask(*args, "--json", "When do backups run?")
    b = json.loads(again.stdout)
    assert (b["layer"], b["answer"], b["usage"]["prompt_tokens"]) == ("semantic", a["answer"], 0)
    plain = _ask(*args, "When do deploys go out?")  # the plain output: the layer and why it missed
    assert plain.exit_code == 0 and "served by provider" in plain.stdout and "cache miss:" in plain.stdout
    local = _ask("--docs", str(notes), "--max-new-tokens", "4", "--json", "--no-cache", "--model", "x",
                 "--backend", "nope", "When do backups run?")
    assert local.exit_code == 2 and "--backend must be one of local, anthropic, openai" in local.output


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_provider_backend_names_what_it_misses(home, tmp_path, monkeypatch, kind):
    key, url, _ = ENV[kind]
    monkeypatch.delenv(key, raising=False)
    notes = write_notes(tmp_path / "notes")
    r = _ask("--docs", str(notes), "--backend", kind, "--model", "m", "When do backups run?")
    assert r.exit_code == 2 and f"reads its API key from {key}, which is not set" in r.output
    from ragcache.config import Config

    port = Config.__dataclass_fields__["port"].default
    serve = f"http://127.0.0.1:{port}{'/v1' if kind == 'openai' else ''} for `ragcache serve`"
    assert serve in " ".join(r.output.split()), r.output  # the port `ragcache serve` really listens on
    monkeypatch.setenv(key, "k")
    r = _ask("--docs", str(notes), "--backend", kind, "When do backups run?")
    assert r.exit_code == 2 and f"--backend {kind} needs --model" in r.output


@pytest.fixture()
def small_demo(monkeypatch):
    """``ragcache demo`` over four short documents and the hashing embedder (the session's eight questions as
    written); building a local engine fails the test. Returns the list the session's answers land in."""
    from ragcache.app import demo as demo_mod
    from ragcache.app.corpus import Chunk
    from ragcache.testing import HashingEmbedder

    emb = HashingEmbedder()
    chunks = [Chunk("csv#0", "csv.DictReader reads each row of a CSV file into a dict keyed by the header row.", "csv"),
              Chunk("csv#1", "csv.reader returns an iterator over the rows of a CSV file, each a list of strings.", "csv"),
              Chunk("datetime#0", "datetime.strptime(date_string, format) parses a string into a datetime.", "datetime"),
              Chunk("sorted#0", "sorted(iterable, key=None, reverse=False) returns a new sorted list.", "builtins")]
    answers: list = []
    real_session = demo_mod.run_session

    def run_session(*a, **kw):
        answers[:] = real_session(*a, **kw)
        return answers

    def no_engine(*a, **kw):
        raise AssertionError("a provider backend must not load a local model")

    monkeypatch.setattr(demo_mod, "build_engine", no_engine)
    monkeypatch.setattr(demo_mod, "query_embedder", lambda cfg: emb)
    monkeypatch.setattr(demo_mod, "bulk_embedder", lambda cfg: (lambda: emb))
    monkeypatch.setattr(demo_mod, "stdlib_chunks", lambda: chunks)
    monkeypatch.setattr(demo_mod, "run_session", run_session)
    return answers


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_demo_answers_with_a_provider_backend(home, monkeypatch, base_url, served_model, small_demo, kind):
    """``ragcache demo --backend anthropic|openai --model M``: the same provider backend as ``ask``
    (:func:`ragcache.app.runtime.provider_backend`), no local model, the same layers: the exact repeat
    (turn 7 of turn 2) is a semantic hit, every model answer is the provider's with its usage."""
    from ragcache.app.demo import DEMO_SESSION

    key, url, suffix = ENV[kind]
    monkeypatch.setenv(key, "local")
    monkeypatch.setenv(url, base_url + suffix)
    r = runner.invoke(app, ["demo", "--backend", kind, "--model", served_model, "--max-new-tokens", "4",
                            "--top-k", "2"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    answers = small_demo
    assert len(answers) == len(DEMO_SESSION)
    assert answers[6].layer == "semantic" and answers[6].text == answers[1].text
    model = [a for a in answers if a.layer != "semantic"]
    assert model and all(a.layer in ("provider", "provider-cache") and a.usage.prompt_tokens > 0 for a in model)
    assert answers[0].layer != "semantic" and answers[3].layer != "semantic"  # cold; the negated variant of #1
    assert f"model {served_model}" in r.stdout and f"backend {kind}" in r.stdout and "semantic cache hits" in r.stdout


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_demo_with_a_provider_backend_names_what_it_misses(home, monkeypatch, small_demo, kind):
    """The demo's provider backend fails as ``ask``'s does, before any model or index is touched."""
    key, _, _ = ENV[kind]
    monkeypatch.delenv(key, raising=False)
    r = runner.invoke(app, ["demo", "--backend", kind, "--model", "m"], catch_exceptions=False)
    assert r.exit_code == 2 and f"reads its API key from {key}, which is not set" in r.output
    monkeypatch.setenv(key, "k")
    r = runner.invoke(app, ["demo", "--backend", kind], catch_exceptions=False)
    assert r.exit_code == 2 and f"--backend {kind} needs --model" in r.output
    assert small_demo == []
