"""Issue 50, item 5: a read-only, already populated ``$RAGCACHE_HOME`` serves what it holds and says it
cannot store, instead of failing with ``[Errno 30] Read-only file system: .../index.lock``.

The home is made read-only for the child process by a read-only bind mount in a private mount
namespace (``unshare -rm``, as a container's read-only volume is), so the test runs as root as well
(a root process ignores a folder's write permission, never a read-only file system)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cli_doubles import fixed_answer, home, tiny_dir, write_notes  # noqa: F401 - fixtures
from ragcache.app.cli import app


def _read_only_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "-rm", "sh", "-c", "mount --bind -o ro / /mnt 2>/dev/null || "
                        "mount --bind -o ro /tmp /tmp"], capture_output=True)
    return r.returncode == 0


pytestmark = pytest.mark.skipif(not _read_only_works(), reason="needs unshare -rm and a bind mount (user namespaces)")


def _ask_read_only(folder, *args):
    """``ragcache ask *args`` in a child that sees ``folder`` (the home) read-only."""
    cmd = ["unshare", "-rm", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(folder),
           sys.executable, "-m", "ragcache.app.entry", "ask", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=os.environ.copy())


def _tree(folder):
    """Every file under ``folder`` with the sha256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("stored", [["When do backups run?"], ["When do backups run?", "When do deploys go out?"]])
def test_a_read_only_home_serves_what_it_holds_and_says_it_cannot_store(home, tmp_path, tiny_dir, monkeypatch, stored):
    notes = write_notes(tmp_path / "notes")
    base = ["--docs", str(notes), "--model", str(tiny_dir), "--max-new-tokens", "4"]
    fixed_answer(monkeypatch, "From the notes.")
    for q in stored:
        r = CliRunner().invoke(app, ["ask", *base, q], catch_exceptions=False)
        assert r.exit_code == 0, r.output
    before = _tree(home)
    for q in stored:  # every stored question is served from the read-only home
        r = _ask_read_only(home, *base, "--json", q)
        assert r.returncode == 0, r.stderr[-2000:]
        out = json.loads(r.stdout)
        assert (out["layer"], out["answer"], out["model_loaded"]) == ("semantic", "From the notes.", False)
        assert out["home_read_only"] is True and "Errno" not in r.stderr
        r = _ask_read_only(home, *base, q)  # the plain output says why nothing is stored
        assert r.returncode == 0 and "served by semantic cache" in r.stdout, r.stderr[-2000:]
        assert "is read-only: answering from what it holds" in r.stderr and "Errno" not in r.stderr
    r = _ask_read_only(home, *base, "Who approves a release?")  # a miss: the model answers, nothing is stored
    assert r.returncode == 0, r.stderr[-2000:]
    assert "served by model" in r.stdout and "cache miss:" in r.stdout
    assert "storing no index, answer or chunk KV" in r.stderr and "Errno" not in r.stderr
    assert _tree(home) == before  # not a byte written


def test_a_new_document_in_a_read_only_home_is_indexed_in_memory(home, tmp_path, tiny_dir, monkeypatch):
    notes = write_notes(tmp_path / "notes")
    base = ["--docs", str(notes), "--model", str(tiny_dir), "--max-new-tokens", "4"]
    fixed_answer(monkeypatch, "From the notes.")
    assert CliRunner().invoke(app, ["ask", *base, "When do backups run?"], catch_exceptions=False).exit_code == 0
    (notes / "oncall.md").write_text("The on-call rota changes every Monday at 09:00.\n")
    before = _tree(home)
    r = _ask_read_only(home, *base, "--json", "When does the on-call rota change?")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["home_read_only"] is True and out["chunks_embedded"] >= 1 and any(s["id"].startswith("oncall.md") for s in out["sources"])
    assert _tree(home) == before
