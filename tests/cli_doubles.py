"""Fixtures and doubles shared by the CLI tests that run `ragcache ask` through typer's runner:
a tiny model folder, a fresh `$RAGCACHE_HOME`, a notes folder and a fixed model answer.
Import the fixtures into a test module (`from cli_doubles import home, tiny_dir  # noqa: F401`).
Every test that sends Ctrl-C to a child process does it through :func:`interrupt_cli`, or starts the
child with ``preexec_fn=sigint_default`` (:func:`sigint_default`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragcache.backend import BackendResult, CacheUsage

_runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tiny_wide):
    """The tiny random Llama ``tiny_wide`` saved as a model folder (config.json, safetensors, tokenizer)."""
    lm = tiny_wide
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


# Six short notes where a question and its rewording retrieve different second documents at --top-k 2
NOTES = {
    "backups.md": "# Backups\n\nBackups run nightly at 02:30 UTC and are kept for 30 days.\n",
    "restore.md": "# Restoring\n\nTo restore a backup, open a ticket with the infrastructure team; restores take about an hour.\n",
    "storage.md": "# Storage\n\nSnapshots of the database are written to the storage bucket every night.\n",
    "deploy.txt": "Deploys go out on Tuesdays after the change review meeting.\n",
    "oncall.md": "# On-call\n\nThe on-call engineer is paged when a nightly job fails.\n",
    "cleanup.md": "# Cleanup\n\nOld log files are deleted every Sunday at midnight.\n",
}
STORED = "When do backups run?"  # retrieves backups.md and storage.md at --top-k 2
REWORDED = "When is the backup job run?"  # retrieves backups.md and restore.md


def fixed_answer(monkeypatch, text: str = "A fixed answer.", finish: str = "stop") -> list:
    """Make the local backend answer ``text`` (``finish_reason`` ``finish``) without running a model;
    returns the list of layouts it was asked with."""
    calls = []

    def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
        calls.append(layout)
        return BackendResult(text, "model", CacheUsage.local(prompt_tokens=10), ttft_s=0.01, finish_reason=finish)

    monkeypatch.setattr("ragcache.engine.backend.LocalBackend.generate", generate)
    return calls


def cli(*args: str):
    """``ragcache *args`` through typer's runner; asserts exit code 0 and returns the result."""
    from ragcache.app.cli import app

    r = _runner.invoke(app, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r


def ask_two_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loaded) -> list[str]:
    """Fill the stores the settings point at through ``ragcache ask``, as the ``ragcache cache`` tests read
    them: one real ask of the tiny random model ``loaded`` (``tiny_seed1``), saved under ``tmp_path / "tiny"``,
    over two notes (``tmp_path / "notes"``: ``backups.md``, ``deploy.md``) that stores their chunk KV and
    no answer; then, the local backend answering ``answer to [<question>]``, one ask of each note's
    question (two answers stored). Returns the ``ask`` arguments (notes, model, ``--top-k 1``)."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "backups.md").write_text("Backups run nightly at 02:30 UTC and are kept for 30 days.")
    (notes / "deploy.md").write_text("Deploys go out on Tuesdays after the change review.")
    model = tmp_path / "tiny"
    loaded.model.save_pretrained(model)
    loaded.tokenizer.save_pretrained(model)
    base = ["ask", "--docs", str(notes), "--model", str(model), "--top-k", "1"]
    monkeypatch.setenv("RAGCACHE_CHUNK_ADMISSION", "1")  # store at the first miss (the default waits for a second)
    cli(*base, "--no-cache", "--max-new-tokens", "2", "When do backups run?")  # the real engine: chunk KV stored

    def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
        return BackendResult(f"answer to [{layout.question}]", "model", CacheUsage.local(prompt_tokens=5))

    monkeypatch.setattr("ragcache.engine.backend.LocalBackend.generate", generate)
    cli(*base, "When do backups run?")
    cli(*base, "When do deploys go out?")
    return base


def sigint_default() -> None:
    """``preexec_fn`` of a child process that a test sends Ctrl-C (``SIGINT``): the child's SIGINT back
    to the default action, so Python installs its ``KeyboardInterrupt`` handler there. A non-interactive
    shell starts a background job (``pytest ... &``, ``nohup``) with SIGINT ignored, an ignored signal
    stays ignored across ``exec``, and Python leaves an ignored SIGINT alone: without this the child
    would never see the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


_STARTED = "ragcache-test: main() starts"
_CHILD = ("import sys; from ragcache.app.entry import main; "
          f"sys.stderr.write({_STARTED!r} + '\\n'); sys.stderr.flush(); main()")


def interrupt_cli(args: list[str], home: Path, delay_s: float) -> tuple[int, str]:
    """Run ``ragcache *args`` in a child process (``$RAGCACHE_HOME`` ``home``, one thread), send it Ctrl-C
    ``delay_s`` seconds after its ``main()`` starts, and return its exit code and stderr.

    The child's SIGINT is the default (:func:`sigint_default`), and the delay counts from the line the
    child writes just before ``main()``, not from the spawn: on a loaded machine Python's own start-up
    can take longer than ``delay_s``, and an interrupt there is Python's, not ragcache's to report."""
    env = {**os.environ, "RAGCACHE_HOME": str(home), "RAGCACHE_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-c", _CHILD, *args], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    first = p.stderr.readline()  # blocks until main() is about to run (or the child ended)
    time.sleep(delay_s)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    return p.returncode, (first if first.strip() != _STARTED else "") + err
