"""Fixtures and doubles shared by the CLI tests that run `ragcache ask` through typer's runner:
a tiny model folder, a fresh `$RAGCACHE_HOME`, a notes folder and a fixed model answer.
Import the fixtures into a test module (`from cli_doubles import home, tiny_dir  # noqa: F401`).
A child process that a test sends Ctrl-C starts with ``preexec_fn=sigint_default``."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from ragcache.backend import BackendResult, CacheUsage


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random Llama saved as a model folder (config.json, safetensors, tokenizer)."""
    from ragcache.testing import tiny_llama

    lm = tiny_llama(seed=1, initializer_range=0.2)
    d = tmp_path_factory.mktemp("tiny-model")
    lm.model.save_pretrained(d)
    lm.tokenizer.save_pretrained(d)
    return d


@pytest.fixture()
def home(tmp_path, monkeypatch):
    """A fresh `$RAGCACHE_HOME` (one torch thread)."""
    h = tmp_path / "home"
    monkeypatch.setenv("RAGCACHE_HOME", str(h))
    monkeypatch.setenv("RAGCACHE_THREADS", "1")
    return h


def write_notes(folder: Path) -> Path:
    """Two short notes (backups, deploys) in a new ``folder``."""
    folder.mkdir()
    (folder / "backups.md").write_text("# Backups\n\nBackups run nightly at 02:30 UTC and are kept for 30 days.\n")
    (folder / "deploy.txt").write_text("Deploys go out on Tuesdays after the change review meeting.\n")
    return folder


def fixed_answer(monkeypatch, text: str = "A fixed answer.", finish: str = "stop") -> list:
    """Make the local backend answer ``text`` (``finish_reason`` ``finish``) without running a model;
    returns the list of layouts it was asked with."""
    calls = []

    def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
        calls.append(layout)
        return BackendResult(text, "model", CacheUsage.local(prompt_tokens=10), ttft_s=0.01, finish_reason=finish)

    monkeypatch.setattr("ragcache.engine.backend.LocalBackend.generate", generate)
    return calls


def sigint_default() -> None:
    """``preexec_fn`` of a child process that a test sends Ctrl-C (``SIGINT``): the child's SIGINT back
    to the default action, so Python installs its ``KeyboardInterrupt`` handler there. A non-interactive
    shell starts a background job (``pytest ... &``, ``nohup``) with SIGINT ignored, an ignored signal
    stays ignored across ``exec``, and Python leaves an ignored SIGINT alone: without this the child
    would never see the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
