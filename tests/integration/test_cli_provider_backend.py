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
    monkeypatch.setenv(key, "k")
    r = _ask("--docs", str(notes), "--backend", kind, "When do backups run?")
    assert r.exit_code == 2 and f"--backend {kind} needs --model" in r.output
